#!/usr/bin/env bash
# The CUDA backend's GPU check (docs/cuda.md, "Running on a GPU"): the `cuda` tests, then the
# kernel microbenchmark (bench/gpu/kernels_bench.cc). Meant to finish in a few minutes on one
# H200, inside a single call of the device tool.
#
#   bash bench/gpu/run.sh --pack   here, without a GPU: builds the CUDA tests and the benchmark
#                                  for sm_90a (WEFT_CUDA=ON, no -march=native, so the programs run
#                                  on the device's CPU) and packs them into build/gpu-bundle
#   bash bench/gpu/run.sh          on the GPU machine, with build/gpu-bundle carried:
#     1. programs: the bundle's, if they start there; else the release tree built with CMake, if
#        this machine has weft's dependencies; else the CUDA targets built directly with nvcc
#        (the device image has nvcc but not oneDNN, fmt, MPI...; googletest's sources travel in
#        the bundle for this case)
#     2. ctest -L cuda --output-on-failure
#     3. kernels_bench; the table goes to $OUT and bench/results/gpu-kernels-<date>.md
#
# Environment: OUT (where results go; default bench/results/gpu-out), BUILD (the build tree for
# --pack; default build/h8-gpu), WEFT_CUDA_ARCHS (default 90a), WEFT_GPU_BUILD (bundle, cmake or
# direct: force one way of getting the programs, to try the fallbacks).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUNDLE=$ROOT/build/gpu-bundle
ARCHS=${WEFT_CUDA_ARCHS:-90a}
SKIP_RE='weft-cuda-skip: no CUDA device visible'

log() { printf '[run.sh %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# ---- --pack (here) ------------------------------------------------------------------------------
if [[ "${1:-}" == "--pack" ]]; then
  set -e
  BUILD=${BUILD:-build/h8-gpu}
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  log "configuring $BUILD (WEFT_CUDA=ON, archs $ARCHS, WEFT_NATIVE=OFF)"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON \
    -DWEFT_CUDA_ARCHS="$ARCHS" -DCMAKE_CUDA_COMPILER="$NVCC" -DWEFT_NATIVE=OFF >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target kernels_cuda_test weft_kernels_bench
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin"
  cp "$BUILD/tests/kernels/kernels_cuda_test" "$BUILD/bin/weft_kernels_bench" "$BUNDLE/bin/"
  if [[ -d /usr/src/googletest/googletest ]]; then  # for a build on the device, if needed
    cp -r /usr/src/googletest/googletest "$BUNDLE/googletest"
  fi
  {
    echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), archs $ARCHS"
    "$NVCC" --version | tail -2
    ldd "$BUNDLE/bin/kernels_cuda_test"
  } >"$BUNDLE/PACKED.txt"
  du -sh "$BUNDLE"
  log "carry build/gpu-bundle in the device call and run: bash bench/gpu/run.sh"
  exit 0
fi

# ---- on the GPU machine -----------------------------------------------------------------------
OUT=${OUT:-$ROOT/bench/results/gpu-out}
mkdir -p "$OUT"
START=$(date +%s)

main() {  # (not indented: the whole run, piped through tee into $OUT/run.log below)
log "start in $ROOT"

NVCC=$(command -v nvcc || true)
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n) $(uname -m), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv 2>&1
  [[ -n "$NVCC" ]] && "$NVCC" --version | tail -2
  command -v cmake ctest g++ ninja 2>&1
  [[ -f "$BUNDLE/PACKED.txt" ]] && head -3 "$BUNDLE/PACKED.txt"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# Where cuBLASLt and the CUDA runtime live here (the toolkit, or the pip wheels PyTorch uses).
find_lib() {
  local name=$1 dir
  for dir in ${CUDA_HOME:-} /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -n "$dir" && -e "$dir/$name" ]] && { echo "$dir"; return; }
  done
  find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -1 | xargs -r dirname
}
CUBLASLT_DIR=$(find_lib libcublasLt.so.13)
CUDART_DIR=$(find_lib libcudart.so.13)
export LD_LIBRARY_PATH="${CUBLASLT_DIR:+$CUBLASLT_DIR:}${CUDART_DIR:+$CUDART_DIR:}${LD_LIBRARY_PATH:-}"
log "libcublasLt.so.13 in ${CUBLASLT_DIR:-?}, libcudart.so.13 in ${CUDART_DIR:-?}"

works() { "$1" --gtest_list_tests >/dev/null 2>&1; }

# 1. The programs.
TEST_BIN=""
BENCH_BIN=""
WAY=${WEFT_GPU_BUILD:-auto}
if [[ "$WAY" == bundle || ("$WAY" == auto && -x "$BUNDLE/bin/kernels_cuda_test") ]] &&
  works "$BUNDLE/bin/kernels_cuda_test"; then
  log "using the carried bundle (build/gpu-bundle)"
  TEST_BIN=$BUNDLE/bin/kernels_cuda_test
  BENCH_BIN=$BUNDLE/bin/weft_kernels_bench
  TEST_DIR=$BUNDLE
else
  [[ -x "$BUNDLE/bin/kernels_cuda_test" ]] && {
    log "the bundle's test does not start here:"
    "$BUNDLE/bin/kernels_cuda_test" --gtest_list_tests 2>&1 | head -5
  }
  if [[ "$WAY" != direct ]] && cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON \
      -DWEFT_CUDA_ARCHS="$ARCHS" ${NVCC:+-DCMAKE_CUDA_COMPILER=$NVCC} >"$OUT/configure.log" 2>&1; then
    log "building the release tree's CUDA targets with CMake (build/gpu)"
    cmake --build build/gpu -j "$(nproc)" --target kernels_cuda_test weft_kernels_bench || return 1
    TEST_BIN=$ROOT/build/gpu/tests/kernels/kernels_cuda_test
    BENCH_BIN=$ROOT/build/gpu/bin/weft_kernels_bench
    TEST_DIR=$ROOT/build/gpu
  else
    log "no CMake build here (configure.log: $(grep -m1 -i 'error\|could not' "$OUT/configure.log"))"
    log "building the CUDA targets directly with nvcc (build/gpu-direct)"
    [[ -n "$NVCC" ]] || { log "no nvcc"; return 1; }
    CUDA_INC=$(dirname "$(dirname "$NVCC")")/include
    CUBLAS_INC=$(dirname "$(find /usr/local /opt /usr/include -name cublasLt.h 2>/dev/null | head -1)")
    GTEST=$BUNDLE/googletest
    [[ -d "$GTEST" ]] || GTEST=/usr/src/googletest/googletest
    D=$ROOT/build/gpu-direct
    mkdir -p "$D/obj" "$D/bin"
    CXXFLAGS="-O3 -std=c++20 -DNDEBUG -I$ROOT/src -isystem $CUDA_INC -isystem $CUBLAS_INC"
    NVFLAGS="-O3 -std=c++20 -DNDEBUG -I$ROOT/src -lineinfo -gencode=arch=compute_${ARCHS},code=sm_${ARCHS}"
    pids=()
    "$NVCC" $NVFLAGS -c src/weft/kernels/cuda/ops.cu -o "$D/obj/ops.o" & pids+=($!)
    "$NVCC" $NVFLAGS -c src/weft/kernels/cuda/flash_attention.cu -o "$D/obj/flash.o" & pids+=($!)
    for f in arena linear; do
      g++ $CXXFLAGS -c "src/weft/kernels/cuda/$f.cc" -o "$D/obj/$f.o" & pids+=($!)
    done
    g++ -O2 -std=c++20 -I"$GTEST/include" -I"$GTEST" -c "$GTEST/src/gtest-all.cc" -o "$D/obj/gtest.o" & pids+=($!)
    g++ -O2 -std=c++20 -I"$GTEST/include" -c "$GTEST/src/gtest_main.cc" -o "$D/obj/gtest_main.o" & pids+=($!)
    g++ $CXXFLAGS -I"$GTEST/include" -c tests/kernels/cuda_kernels_test.cc -o "$D/obj/test.o" & pids+=($!)
    g++ $CXXFLAGS -c bench/gpu/kernels_bench.cc -o "$D/obj/bench.o" & pids+=($!)
    for p in "${pids[@]}"; do wait "$p" || { log "compile failed"; return 1; }; done
    LIBS="-L$CUBLASLT_DIR -L$CUDART_DIR -l:libcublasLt.so.13 -l:libcudart.so.13 -lpthread"
    K="$D/obj/ops.o $D/obj/flash.o $D/obj/arena.o $D/obj/linear.o"
    g++ -o "$D/bin/kernels_cuda_test" "$D/obj/test.o" $K "$D/obj/gtest.o" "$D/obj/gtest_main.o" $LIBS || return 1
    g++ -o "$D/bin/weft_kernels_bench" "$D/obj/bench.o" $K $LIBS || return 1
    TEST_BIN=$D/bin/kernels_cuda_test
    BENCH_BIN=$D/bin/weft_kernels_bench
    TEST_DIR=$D
  fi
fi
log "programs ready after $(($(date +%s) - START)) s"

# 2. The cuda tests, through ctest (a ctest file naming the program, for the bundle and nvcc cases).
if [[ "$TEST_DIR" != "$ROOT/build/gpu" ]]; then
  cat >"$TEST_DIR/CTestTestfile.cmake" <<EOF
add_test(kernels_cuda_test "$TEST_BIN")
set_tests_properties(kernels_cuda_test PROPERTIES LABELS "cuda" TIMEOUT 180
                     SKIP_REGULAR_EXPRESSION "$SKIP_RE")
EOF
fi
if command -v ctest >/dev/null; then
  # A hung kernel must not eat the call: 180 s for the tests (they take well under a minute).
  (cd "$TEST_DIR" && ctest -L cuda --timeout 180 --output-on-failure --output-log "$OUT/ctest.log")
  TESTS_RC=$?
else
  timeout 180 "$TEST_BIN" >"$OUT/ctest.log" 2>&1
  TESTS_RC=$?
  tail -40 "$OUT/ctest.log"
fi
log "tests: exit $TESTS_RC after $(($(date +%s) - START)) s"
if [[ $TESTS_RC -ne 0 ]]; then
  # The per-test verdicts, for the reply's tail.
  grep -E '^\[  (FAILED|  OK) \]|Failure|rel_error|seed' "$OUT/ctest.log" | tail -40
fi

# 3. The benchmark (also when a test failed: its numbers still say where time goes). It prints
# each line as it is measured, flash attention last, so a hang there loses nothing else.
STAMP=$(date -u +%Y-%m-%d)
timeout 240 "$BENCH_BIN" --json "$OUT/kernels_bench.json" --md "$OUT/kernels_bench.md" 2>&1 |
  tee "$OUT/kernels_bench.log"
BENCH_RC=${PIPESTATUS[0]}

# 4. After a failure, each test alone in its own process: a kernel fault poisons the CUDA context
# for every later test of the same process, so only isolated runs say which tests really fail.
if [[ $TESTS_RC -ne 0 ]]; then
  log "isolating the failures (one process per test)"
  "$TEST_BIN" --gtest_list_tests | awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}' |
    while read -r name; do
      if timeout 60 "$TEST_BIN" --gtest_filter="$name" >"$OUT/one.log" 2>&1; then
        echo "PASS $name"
      else
        echo "FAIL $name: $(grep -m2 -E 'Failure|error|Expected|rel_error|which is' "$OUT/one.log" | tr '\n' ' ' | cut -c1-300)"
      fi
    done | tee "$OUT/isolated.txt"
  rm -f "$OUT/one.log"
fi
mkdir -p bench/results
[[ -f "$OUT/kernels_bench.md" ]] && cp "$OUT/kernels_bench.md" "bench/results/gpu-kernels-$STAMP.md"

if command -v cuobjdump >/dev/null; then  # are the tensor-core instructions there?
  echo "SASS: $(cuobjdump -sass "$TEST_BIN" 2>/dev/null | grep -c HMMA) HMMA instructions" >>"$OUT/env.txt"
fi
log "done in $(($(date +%s) - START)) s: tests exit $TESTS_RC, bench exit $BENCH_RC"
return $((TESTS_RC != 0 || BENCH_RC != 0))
}

main 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
