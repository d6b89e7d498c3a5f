# Sourced by the bench scripts (from the repository root).
#
# bench_stamp NAME...: prints <UTC date>-<HHMM>-<short commit>[-dirty] (e.g. 2026-12-01-1530-abc1234),
#   with -2, -3, ... appended if bench/results/NAME-<stamp>.* already exists for any NAME, so every
#   run keeps its own files: a rerun never overwrites an earlier result (date-only names did).
#   "-dirty": the tree had uncommitted changes; "nogit": no git checkout (e.g. a copied tree).
bench_stamp() {
  local base commit stamp n=1
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo nogit)
  if [ "$commit" != nogit ] && ! git diff --quiet HEAD -- 2>/dev/null; then commit+=-dirty; fi
  base=$(date -u +%Y-%m-%d-%H%M)-$commit
  stamp=$base
  while bench_taken "$stamp" "$@"; do
    n=$((n + 1))
    stamp=$base-$n
  done
  echo "$stamp"
}

# bench_taken STAMP NAME...: whether some bench/results/NAME-STAMP.* exists.
bench_taken() {
  local stamp=$1 name
  shift
  for name in "$@"; do
    if compgen -G "bench/results/$name-$stamp.*" >/dev/null; then return 0; fi
  done
  return 1
}

# bench_setup NAME sets:
#   weft      the binary: $WEFT, or build/release/bin/weft
#   stamp     bench_stamp NAME; out_json / out_md: bench/results/NAME-<stamp>.{json,md}
#   mpirun    the launcher with the tests' flags (cmake/WeftMpi.cmake): shared-memory transport,
#             oversubscription allowed, and root allowed when running as root
bench_setup() {
  weft=${WEFT:-build/release/bin/weft}
  stamp=$(bench_stamp "$1")
  out_json=bench/results/$1-$stamp.json
  out_md=bench/results/$1-$stamp.md
  mpirun=(mpirun --mca btl self,vader --oversubscribe)
  if [ "$(id -u)" -eq 0 ]; then mpirun+=(--allow-run-as-root); fi
}
