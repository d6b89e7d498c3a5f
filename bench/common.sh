# Sourced by the bench scripts (from the repository root). bench_setup NAME sets:
#   weft      the binary: $WEFT, or build/release/bin/weft
#   date      today (UTC), out_json / out_md: bench/results/NAME-<date>.{json,md}
#   mpirun    the launcher with the tests' flags (cmake/WeftMpi.cmake): shared-memory transport,
#             oversubscription allowed, and root allowed when running as root
bench_setup() {
  weft=${WEFT:-build/release/bin/weft}
  date=$(date -u +%Y-%m-%d)
  out_json=bench/results/$1-$date.json
  out_md=bench/results/$1-$date.md
  mpirun=(mpirun --mca btl self,vader --oversubscribe)
  if [ "$(id -u)" -eq 0 ]; then mpirun+=(--allow-run-as-root); fi
}
