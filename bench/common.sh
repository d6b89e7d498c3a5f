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

# torch_baseline_setup THREADS: the PyTorch baseline at its best on this CPU. Debian's python3-torch
# calls sgemm_ from the system libblas.so.3 for its fp32 linear layers (BLAS=generic), and a fresh
# machine has only the reference BLAS (single-threaded, ~13x slower: a ratio against it measures
# the BLAS, not weft). So: install OpenBLAS (libopenblas0-pthread) when missing, put it first for
# the baseline's process alone (torch_env, no system-wide switch), and probe what PyTorch really
# loads (bench/torch_blas.py) into torch_blas (JSON). Refuses (exit 1) to go on against a
# reference BLAS: no ratio is written against a crippled baseline.
torch_baseline_setup() {
  local threads=$1 lib=/usr/lib/x86_64-linux-gnu/openblas-pthread
  if ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok"; then
    echo "bench: installing libopenblas0-pthread for the PyTorch baseline" >&2
    local sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
      libopenblas0-pthread >/dev/null || true
  fi
  torch_env=(env "OMP_NUM_THREADS=$threads" "OPENBLAS_NUM_THREADS=$threads" "TORCH_THREADS=$threads")
  [ -d "$lib" ] && torch_env+=("LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  torch_blas=$("${torch_env[@]}" /usr/bin/python3 bench/torch_blas.py)
  echo "bench: PyTorch baseline BLAS: $torch_blas" >&2
  if ! grep -q '"optimized": true' <<<"$torch_blas"; then
    echo "bench: refusing to measure a ratio against PyTorch on a reference BLAS ($torch_blas);" \
      "install libopenblas0-pthread (apt-get) and rerun" >&2
    return 1
  fi
}
