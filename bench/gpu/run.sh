#!/usr/bin/env bash
# The GPU check (docs/cuda.md, "Running on a GPU"), in issue #15's order: the cheap, decisive checks
# first, so that one failure costs little and the run still says as much as it can:
#   1. environment: GPU, driver, clocks, toolkit, compute-sanitizer, cuDNN;
#   2. kernels_cuda_test, kernels_mixed_cuda_test, comm_cuda_test, one program at a time with
#      CUDA_LAUNCH_BLOCKING=1 (45 s each); after a failure, each test of that program in its own
#      process, and the first failing test under compute-sanitizer --tool memcheck;
#   3. gpu_trainer_test and gpu_equivalence_test (the trainer against the fp32 CPU trainer; tp, pp,
#      dp with the ranks as threads on the one GPU);
#   4. bench/gpu/train_smoke.sh: `weft train --device cuda` on real text, stopped and resumed,
#      against the same 60 steps on the CPU; bench/gpu/hang_smoke.sh: a rank of 4 on the GPU
#      stopped (SIGSTOP) and named, under the bundle's Open MPI; then `weft tune --device cuda` on
#      GPT-2 124M;
#   5. end to end per shape, GPT-2 124M (B=32), 350M (B=16), 1.5B (B=8) and the Llama-style
#      llama-1b (B=8; configs/models/llama-1b.toml) at T=1024: `weft bench step --device cuda
#      --profile`, then ../shared/bench/torch_gpt.py, or bench/gpu/torch_llama.py for llama-1b
#      (torch.compile, bf16 autocast), at the same shape in the same run; PyTorch compiles each shape in the background
#      during 2-4, so its timed runs start from warm caches;
#   6. kernels_bench with the time that is left;
#   7. one compact table: verdict per program, tokens/s, weft/PyTorch and MFU per size, the top
#      ops of weft's profile, flash attention's rates.
#
#   bash bench/gpu/run.sh --pack   here, without a GPU: builds the CUDA tests, the benchmark and the
#                                  weft CLI for sm_90a (WEFT_CUDA=ON, no -march=native, so the
#                                  programs run on the device's CPU) with -lineinfo (sanitizer
#                                  reports name the line) and packs them, with the shared libraries
#                                  the device lacks (lib.tar.gz), each kernel's registers, shared
#                                  memory and spills (resources.txt, ptxas) and the PyTorch
#                                  baseline script, into build/gpu-bundle
#   bash bench/gpu/run.sh          on the GPU machine, with build/gpu-bundle carried: the programs
#                                  are the bundle's if they start there; else the release tree
#                                  built with CMake; else the kernels alone built with nvcc
#
# $OUT gets at most 8 files (what the device tool brings back): run.log, env.txt, tests.log,
# e2e.jsonl, e2e.md, kernels_bench.json, kernels_bench.md and logs.tgz (every command's own log).
#
# Environment: OUT (where results go; default bench/results/gpu-out), BUILD (the build tree for
# --pack; default build/h8-gpu), WEFT_CUDA_ARCHS (default 90a), WEFT_GPU_BUILD (bundle, cmake or
# direct: force one way of getting the programs), WEFT_GPU_BUDGET (seconds the whole run may take;
# default 430), WEFT_E2E_SIZES (default "124m 350m 1.5b llama-1b"; empty: none), WEFT_GPU_TESTS (the
# test programs to run; default all; "none": none), WEFT_GPU_SMOKE=0, WEFT_GPU_KBENCH=0 and
# WEFT_TORCH_PREWARM=0 (skip train_smoke, kernels_bench, PyTorch's background compilation),
# WEFT_GPU_TUNE=0 (skip the tune), WEFT_GPU_TUNE_CAP (its seconds, default 110), WEFT_TORCH_ARGS
# (extra torch_gpt.py options).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUNDLE=$ROOT/build/gpu-bundle
ARCHS=${WEFT_CUDA_ARCHS:-90a}
SKIP_RE='weft-cuda-skip: no CUDA device visible'
# The device tool carries at most 64 MiB; the rest of the working tree needs a little of it.
BUNDLE_LIMIT_MIB=60

log() { printf '[run.sh %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# ---- --pack (here) ------------------------------------------------------------------------------
if [[ "${1:-}" == "--pack" ]]; then
  set -e
  BUILD=${BUILD:-build/h8-gpu}
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  log "configuring $BUILD (WEFT_CUDA=ON, archs $ARCHS, WEFT_NATIVE=OFF)"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON \
    -DWEFT_CUDA_ARCHS="$ARCHS" -DCMAKE_CUDA_COMPILER="$NVCC" -DWEFT_NATIVE=OFF >/dev/null
  targets=(kernels_cuda_test kernels_mixed_cuda_test comm_cuda_test weft_kernels_bench weft)
  # The GPU trainer's test, where the tree has it. (The list is read whole first: grep -q closing
  # the pipe early would make cmake fail on SIGPIPE.)
  target_list=$(cmake --build "$BUILD" --target help)
  for t in gpu_trainer_test gpu_equivalence_test; do
    grep -q "^$t:" <<<"$target_list" && targets+=("$t")
  done
  log "building ${targets[*]}"
  cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}"
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
  cp "$BUILD/tests/kernels/kernels_cuda_test" "$BUILD/tests/kernels/kernels_mixed_cuda_test" \
    "$BUILD/tests/comm/comm_cuda_test" "$BUILD/bin/weft_kernels_bench" "$BUILD/bin/weft" \
    "$BUNDLE/bin/"
  for t in gpu_trainer_test gpu_equivalence_test; do
    if [[ " ${targets[*]} " == *" $t "* ]]; then
      cp "$(find "$BUILD/tests" -name "$t" -type f -perm -u+x | head -1)" "$BUNDLE/bin/"
    fi
  done
  # Open MPI's launcher for several ranks on the device's one GPU (bench/gpu/hang_smoke.sh): the
  # device has no MPI. Its directories are relative to its prefix, so OPAL_PREFIX moves it (run
  # below); mpirun with its components and help files, and PMIx's (seen working here with the
  # system's copies hidden by bind mounts: a 2-rank pp=2 run trained).
  multiarch=$(gcc -print-multiarch)
  ompi_lib=/usr/lib/$multiarch
  if [[ -x /usr/bin/orterun && -d $ompi_lib/openmpi/lib && -d $ompi_lib/pmix2 ]]; then
    ompi=$(mktemp -d)
    mkdir -p "$ompi/bin" "$ompi/lib/$multiarch" "$ompi/share"
    cp /usr/bin/orterun "$ompi/bin/mpirun"
    cp -a "$ompi_lib/openmpi" "$ompi_lib/pmix2" "$ompi/lib/$multiarch/"
    rm -rf "$ompi/lib/$multiarch/openmpi/include"
    cp -a /usr/share/openmpi "$ompi/share/"
    tar -czf "$BUNDLE/ompi.tar.gz" -C "$ompi" .
    ldd "$ompi/bin/mpirun" >"$BUNDLE/mpirun.ldd"
    rm -rf "$ompi"
  else
    log "no Debian Open MPI (orterun, $ompi_lib/openmpi, pmix2) to pack: no multi-rank GPU runs"
  fi
  # Every shared library the programs load that is not in a base system: oneDNN, fmt, toml++, Open
  # MPI and its dependencies (hwloc, libevent, pmix...), libgomp... The C/C++ runtime stays out
  # (the device's is newer, and two copies in one process break), and so do the CUDA libraries,
  # which the device has in the version its driver matches.
  skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so'
  skip+='|libcudart|libcublasLt|libcublas\.so|libnccl|libcuda\.so)'
  { for bin in "$BUNDLE"/bin/*; do ldd "$bin"; done
    cat "$BUNDLE/mpirun.ldd" 2>/dev/null; } | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    sort -u | while read -r name path; do
      [[ "$name" =~ $skip ]] || cp -L "$path" "$BUNDLE/lib/$name"
    done
  # Each kernel's registers, shared memory, stack and spills, read here (the device's time is
  # scarce): ptxas's report for the two .cu files, one line per kernel, names demangled.
  for cu in src/weft/kernels/cuda/ops.cu src/weft/kernels/cuda/flash_attention.cu; do
    "$NVCC" -std=c++20 -O3 -DNDEBUG -Isrc -gencode=arch=compute_${ARCHS},code=sm_${ARCHS} \
      --resource-usage -c "$cu" -o /dev/null 2>&1
  done | awk '/Compiling entry function/ {split($0, a, "\x27"); name = a[2]}
    /stack frame/ {frame = $0}
    /Used [0-9]+ registers/ {print name "\t" $0 "\t" frame}' |
    sed -E 's/ptxas info *: //; s/ +/ /g' | c++filt | sed -E 's/weft::kernels::cuda::(detail::)?//g;
      s/\(anonymous namespace\):://g' >"$BUNDLE/resources.txt"
  log "$(wc -l <"$BUNDLE/resources.txt") kernels' resources in build/gpu-bundle/resources.txt"
  # libdnnl alone is about 40 MB: compressed, the libraries take a third of that (unpacked on
  # the device in a second).
  tar -czf "$BUNDLE/lib.tar.gz" -C "$BUNDLE" lib
  rm -f "$BUNDLE/mpirun.ldd"
  lib_list=$(ls "$BUNDLE/lib")
  rm -rf "${BUNDLE:?}/lib"
  # The PyTorch baseline: ../shared beside the checkout does not travel to the device.
  cp "$ROOT/../shared/bench/torch_gpt.py" "$BUNDLE/" 2>/dev/null ||
    log "no ../shared/bench/torch_gpt.py here: the device run looks for it under shared/"
  if [[ -d /usr/src/googletest/googletest ]]; then  # for a build on the device, if needed
    cp -r /usr/src/googletest/googletest "$BUNDLE/googletest"
  fi
  if (($(du -sm "$BUNDLE" | cut -f1) > BUNDLE_LIMIT_MIB)); then
    log "over ${BUNDLE_LIMIT_MIB} MiB: stripping the programs' symbols"
    strip "$BUNDLE"/bin/*
  fi
  {
    echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), archs $ARCHS"
    "$NVCC" --version | tail -2
    echo "programs: $(ls "$BUNDLE/bin" | tr '\n' ' ')"
    echo "libraries (lib.tar.gz): $(echo "$lib_list" | tr '\n' ' ')"
    for bin in "$BUNDLE"/bin/*; do
      echo "== ldd $(basename "$bin")"
      ldd "$bin"
    done
  } >"$BUNDLE/PACKED.txt"
  du -sh "$BUNDLE"/*
  du -sh "$BUNDLE"
  size=$(du -sm "$BUNDLE" | cut -f1)
  if ((size > BUNDLE_LIMIT_MIB)); then
    log "the bundle is ${size} MiB, over the ${BUNDLE_LIMIT_MIB} MiB the device call can carry"
    exit 1
  fi
  log "carry build/gpu-bundle in the device call and run: bash bench/gpu/run.sh"
  exit 0
fi

# ---- on the GPU machine -----------------------------------------------------------------------
# Issue #15's order: the cheap, decisive checks first, so that a failure costs little and the
# run still says as much as it can when something breaks:
#   env -> kernel tests (one program at a time, CUDA_LAUNCH_BLOCKING=1; a failing program's tests
#   again one per process, the first failing test under compute-sanitizer) -> end to end at 124M,
#   weft then PyTorch -> the trainer and equivalence tests -> train_smoke -> 350M and 1.5B ->
#   kernels_bench with the time left -> one compact table.
OUT=${OUT:-$ROOT/bench/results/gpu-out}
mkdir -p "$OUT"
START=$(date +%s)
DEADLINE=$((START + ${WEFT_GPU_BUDGET:-430}))
# Each command's full output; tarred into $OUT/logs.tgz at the end ($OUT brings back 8 files:
# run.log, env.txt, tests.log, e2e.jsonl, e2e.md, kernels_bench.json, kernels_bench.md, logs.tgz).
LOGS=$ROOT/build/gpu-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
VERDICTS=$LOGS/verdicts.tsv  # program, verdict, seconds, detail (the final table's first part)
: >"$VERDICTS"

left() { echo $((DEADLINE - $(date +%s))); }
# A command's time limit: its own cap, or what is left of the run's budget if that is less.
budget() {
  local cap=$1 rest
  rest=$(left)
  echo $((rest < cap ? rest : cap))
}

main() {  # (not indented: the whole run, piped through tee into $OUT/run.log below)
log "start in $ROOT"

NVCC=$(command -v nvcc || true)
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n) $(uname -m), $(nproc) cores, kernel $(uname -r)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit \
    --format=csv 2>&1
  [[ -n "$NVCC" ]] && "$NVCC" --version | tail -2
  echo "compute-sanitizer: ${SANITIZER:-none}"
  command -v cmake ctest g++ ninja python3 cuobjdump 2>&1
  echo "cuDNN: $(find / -name 'libcudnn.so*' -not -path '/proc/*' 2>/dev/null | head -3 | tr '\n' ' ')"
  [[ -f "$BUNDLE/PACKED.txt" ]] && head -4 "$BUNDLE/PACKED.txt"
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
ORIG_LD=${LD_LIBRARY_PATH:-}  # PyTorch runs with the machine's own (its wheels bring their CUDA)
CUBLASLT_DIR=$(find_lib libcublasLt.so.13)
CUDART_DIR=$(find_lib libcudart.so.13)
# NCCL (the CLI's device communicator): too large to carry (over 200 MB); the machine has it,
# at least in PyTorch's wheels.
NCCL_DIR=$(find_lib libnccl.so.2)
# path_join DIR...: the non-empty directories, once each, joined by ':' (an empty entry in
# LD_LIBRARY_PATH would mean the current directory).
path_join() {
  local d out=""
  for d in "$@"; do
    [[ -n "$d" && ":$out:" != *":$d:"* ]] && out=${out:+$out:}$d
  done
  echo "$out"
}
export LD_LIBRARY_PATH
LD_LIBRARY_PATH=$(path_join "$CUBLASLT_DIR" "$CUDART_DIR" "$NCCL_DIR" ${ORIG_LD//:/ })
log "libcublasLt.so.13 in ${CUBLASLT_DIR:-?}, libcudart.so.13 in ${CUDART_DIR:-?}, libnccl.so.2 in ${NCCL_DIR:-?}"

# The bundle's libraries, after the CUDA directories. Only weft's own programs get them
# (WEFT_LD): they are Debian's builds (zlib, libudev...) and could shadow newer copies that
# python3 or nvidia-smi here need.
# Unpacked beside the bundle, not into it, so that a bundle run here once still fits the carry.
BUNDLE_LIB=$ROOT/build/gpu-lib
rm -rf "$BUNDLE_LIB"
if [[ -f "$BUNDLE/lib.tar.gz" ]]; then
  mkdir -p "$BUNDLE_LIB"
  tar -xzf "$BUNDLE/lib.tar.gz" -C "$BUNDLE_LIB" --strip-components=1 ||
    log "could not unpack the bundle's libraries"
fi
WEFT_LD="$LD_LIBRARY_PATH"
[[ -d "$BUNDLE_LIB" ]] && WEFT_LD=$(path_join ${WEFT_LD//:/ } "$BUNDLE_LIB")
wrun() { LD_LIBRARY_PATH="$WEFT_LD" "$@"; }
works() { wrun "$1" --gtest_list_tests >/dev/null 2>&1; }

# 1. The programs: TESTS maps a test program's name to its path; WEFT_BIN is the CLI (none on
# the direct-nvcc way).
declare -A TESTS=()
BENCH_BIN=""
WEFT_BIN=""
ALL_TESTS="kernels_cuda_test kernels_mixed_cuda_test comm_cuda_test gpu_trainer_test gpu_equivalence_test"
WAY=${WEFT_GPU_BUILD:-auto}
if [[ "$WAY" == bundle || ("$WAY" == auto && -x "$BUNDLE/bin/kernels_cuda_test") ]] &&
  works "$BUNDLE/bin/kernels_cuda_test"; then
  log "using the carried bundle (build/gpu-bundle)"
  for t in $ALL_TESTS; do
    [[ -x "$BUNDLE/bin/$t" ]] && TESTS[$t]=$BUNDLE/bin/$t
  done
  BENCH_BIN=$BUNDLE/bin/weft_kernels_bench
  [[ -x "$BUNDLE/bin/weft" ]] && WEFT_BIN=$BUNDLE/bin/weft
else
  [[ -x "$BUNDLE/bin/kernels_cuda_test" ]] && {
    log "the bundle's test does not start here:"
    wrun "$BUNDLE/bin/kernels_cuda_test" --gtest_list_tests 2>&1 | head -5
  }
  WEFT_LD="$LD_LIBRARY_PATH"  # the bundle's libraries are of no use to programs built here
  if [[ "$WAY" != direct ]] && cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON \
      -DWEFT_CUDA_ARCHS="$ARCHS" ${NVCC:+-DCMAKE_CUDA_COMPILER=$NVCC} >"$LOGS/configure.log" 2>&1; then
    log "building the release tree's CUDA targets and the CLI with CMake (build/gpu)"
    targets=(kernels_cuda_test kernels_mixed_cuda_test comm_cuda_test weft_kernels_bench weft)
    target_list=$(cmake --build build/gpu --target help)
    for t in gpu_trainer_test gpu_equivalence_test; do
      grep -q "^$t:" <<<"$target_list" && targets+=("$t")
    done
    cmake --build build/gpu -j "$(nproc)" --target "${targets[@]}" || return 1
    BENCH_BIN=$ROOT/build/gpu/bin/weft_kernels_bench
    WEFT_BIN=$ROOT/build/gpu/bin/weft
    for t in $ALL_TESTS; do
      p=$(find build/gpu/tests -name "$t" -type f -perm -u+x | head -1)
      [[ -n "$p" ]] && TESTS[$t]=$ROOT/$p
    done
  else
    log "no CMake build here (configure.log: $(grep -m1 -i 'error\|could not' "$LOGS/configure.log"))"
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
    TESTS[kernels_cuda_test]=$D/bin/kernels_cuda_test
    BENCH_BIN=$D/bin/weft_kernels_bench
  fi
fi
log "programs ready after $(($(date +%s) - START)) s: tests $(for t in $ALL_TESTS; do
  [[ -n "${TESTS[$t]:-}" ]] && printf '%s ' "$t"; done); CLI ${WEFT_BIN:-none}"
if [[ -n "$WEFT_BIN" ]] && ! wrun "$WEFT_BIN" --help >/dev/null 2>&1; then
  log "the CLI does not start here: $(wrun "$WEFT_BIN" --help 2>&1 | head -3 | tr '\n' ' ')"
fi

# ---- test programs ----
SANITIZED=0  # compute-sanitizer runs once per call, on the first failing test
# isolate NAME: after NAME failed, each of its tests in its own process (a kernel fault poisons
# the CUDA context for every later test of the process, so only isolated runs say which fail),
# within 75 s; the first failing one also under compute-sanitizer (memcheck), once per run.
isolate() {
  local t=$1 bin=${TESTS[$1]} name first until=$(($(date +%s) + 75))
  log "$t: each test in its own process"
  while read -r name; do
    if (($(date +%s) > until || $(left) < 20)); then echo "STOP: isolation time spent"; break; fi
    if wrun env CUDA_LAUNCH_BLOCKING=1 timeout 40 "$bin" --gtest_filter="$name" >"$LOGS/one.log" 2>&1; then
      echo "  PASS $name"
    else
      echo "  FAIL $name: $(grep -m3 -E 'Failure|error|Expected|rel_error|which is|what\(\)' "$LOGS/one.log" | tr '\n' ' ' | cut -c1-400)"
      cat "$LOGS/one.log" >>"$LOGS/isolated-$t-$name.log"
    fi
  done < <(wrun "$bin" --gtest_list_tests | awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}') |
    tee -a "$LOGS/isolated.txt"
  first=$(grep -m1 '^  FAIL' "$LOGS/isolated.txt" | awk '{print $2}' | tr -d ':')
  if [[ -n "$first" && -n "$SANITIZER" && $SANITIZED -eq 0 ]] && (($(left) > 60)); then
    SANITIZED=1
    log "$t: $first under compute-sanitizer --tool memcheck"
    wrun timeout 90 "$SANITIZER" --tool memcheck --print-limit 20 "$bin" --gtest_filter="$first" \
      >"$LOGS/sanitizer.log" 2>&1
    grep -E '=========|Failure' "$LOGS/sanitizer.log" | head -40
  fi
}
# test_prog NAME CAP [blocking]: one test program, its output appended to $OUT/tests.log, its
# verdict to the table; a failure is isolated (above).
test_prog() {
  local t=$1 cap=$2 blocking=${3:-} bin=${TESTS[$1]:-} T rc t0 verdict detail
  if [[ -z "$bin" ]]; then
    printf '%s\tnot built\t0\t\n' "$t" >>"$VERDICTS"
    return
  fi
  T=$(budget "$cap")
  if ((T < 10)); then
    printf '%s\tskipped (budget)\t0\t\n' "$t" >>"$VERDICTS"
    return
  fi
  log "$t (at most $T s${blocking:+, CUDA_LAUNCH_BLOCKING=1})"
  t0=$(date +%s)
  {
    echo "==== $t"
    wrun env ${blocking:+CUDA_LAUNCH_BLOCKING=1} timeout -k 5 "$T" "$bin" --gtest_color=no 2>&1
  } >"$LOGS/$t.log"
  rc=$?
  rc=$(grep -q '^\[  PASSED  \]' "$LOGS/$t.log" && ! grep -q '^\[  FAILED  \]' "$LOGS/$t.log" && echo 0 || echo 1)
  cat "$LOGS/$t.log" >>"$OUT/tests.log"
  detail=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$LOGS/$t.log" | tr '\n' ' ')
  if grep -q 'weft-cuda-skip' "$LOGS/$t.log"; then verdict="skipped (no GPU seen)"
  elif [[ $rc -eq 0 ]]; then verdict=pass
  else verdict=FAIL
  fi
  log "$t: $verdict after $(($(date +%s) - t0)) s: $detail"
  printf '%s\t%s\t%s\t%s\n' "$t" "$verdict" "$(($(date +%s) - t0))" "$detail" >>"$VERDICTS"
  if [[ "$verdict" == FAIL ]]; then
    grep -E '^\[  FAILED  \] [A-Z]|Failure|rel_error|seed|what\(\)' "$LOGS/$t.log" | head -30
    isolate "$t"
  fi
}

# ---- end to end ----
# Date, time and commit (bench/common.sh), so no run overwrites another's results.
source bench/common.sh
STAMP=$(bench_stamp gpu-e2e gpu-kernels)
TORCH_GPT=""
for f in "$ROOT/../shared/bench/torch_gpt.py" "$ROOT/shared/bench/torch_gpt.py" "$BUNDLE/torch_gpt.py"; do
  [[ -f "$f" ]] && { TORCH_GPT=$f; break; }
done
TORCH_LLAMA=""
for f in "$ROOT/bench/gpu/torch_llama.py" "$BUNDLE/torch_llama.py"; do
  [[ -f "$f" ]] && { TORCH_LLAMA=$f; break; }
done
log "PyTorch baselines: ${TORCH_GPT:-GPT-2 not found}, ${TORCH_LLAMA:-Llama not found}"
: >"$OUT/e2e.jsonl"
E2E_FAILED=0
# e2e SIZE NAME CAP COMMAND...: runs COMMAND under min(CAP, time left) and appends the last JSON
# line it printed, with "size" and "exit" added, to e2e.jsonl; or a line with "error".
e2e() {
  local size=$1 name=$2 cap=$3
  shift 3
  local t rc line t0 base=$LOGS/e2e-$size-$name
  t=$(budget "$cap")
  if ((t < 20)); then
    log "$name $size: skipped, $(left) s left"
    line='{"error": "skipped: the run budget was spent"}'
    rc=-1
  else
    log "$name $size (at most $t s): $*"
    t0=$(date +%s)
    timeout -k 10 "$t" "$@" >"$base.out" 2>"$base.err"
    rc=$?
    line=$(grep '^{' "$base.out" | tail -1)
    log "$name $size: exit $rc after $(($(date +%s) - t0)) s: $(cut -c1-400 <<<"${line:-no JSON line}")"
    if [[ -z "$line" ]]; then
      tail -n 5 "$base.err" "$base.out"
      local why="exit $rc"
      [[ $rc -eq 124 || $rc -eq 137 ]] && why="timed out after $t s"
      line=$({ echo "$why"; tail -c 400 "$base.err"; } |
        python3 -c 'import json,sys; print(json.dumps({"error": sys.stdin.read().strip()}))')
    fi
  fi
  [[ $rc -ne 0 || "$line" == *'"error"'* ]] && E2E_FAILED=$((E2E_FAILED + 1))
  python3 -c 'import json,sys
d = json.loads(sys.argv[1]); d.setdefault("name", sys.argv[2])
d.update(size=sys.argv[3], exit=int(sys.argv[4]))
print(json.dumps(d))' "$line" "$name" "$size" "$rc" >>"$OUT/e2e.jsonl" ||
    echo "{\"name\": \"$name\", \"size\": \"$size\", \"exit\": $rc, \"error\": \"bad JSON line\"}" >>"$OUT/e2e.jsonl"
}
toml() { awk -F' *= *' -v k="$2" '$1 == k {print $2}' "$1"; }  # toml FILE KEY (a plain number)
# A size's model config: GPT-2's (124m, 350m, 1.5b) or a Llama-style one (llama-1b).
size_model() { [[ $1 == llama-* ]] && echo "configs/models/$1.toml" || echo "configs/models/gpt2-$1.toml"; }
# Its PyTorch baseline at the same architecture: torch_gpt.py (GPT-2) or torch_llama.py.
size_baseline() {
  if [[ $1 == llama-* ]]; then
    echo "${TORCH_LLAMA:-}"
  else
    echo "${TORCH_GPT:-}"
  fi
}
# The baseline's shape options from a model config.
torch_shape() {
  local m=$1
  printf -- '--layers %s --hidden %s --heads %s' "$(toml "$m" n_layer)" "$(toml "$m" n_embd)" \
    "$(toml "$m" n_head)"
  if grep -q '^mlp = "swiglu"' "$m"; then
    printf -- ' --kv-heads %s --ffn %s --vocab %s --theta %s' "$(toml "$m" n_kv_head)" \
      "$(toml "$m" ffn_hidden_size)" "$(toml "$m" vocab_size)" "$(toml "$m" rope_theta)"
  fi
}
# e2e_size SIZE: weft's step, then PyTorch's at the same shape, in this run.
e2e_size() {
  local size=$1 B CAP model baseline
  case $size in  # batch and time cap per command (the larger models compile and init longer)
    124m) B=32 CAP=120 ;;
    350m) B=16 CAP=120 ;;
    1.5b) B=8 CAP=150 ;;
    llama-1b) B=8 CAP=150 ;;
    *) log "unknown size $size"; return ;;
  esac
  model=$(size_model "$size")
  if [[ -n "$WEFT_BIN" ]]; then
    e2e "$size" weft "$CAP" env LD_LIBRARY_PATH="$WEFT_LD" "$WEFT_BIN" bench step --device cuda \
      --model "$model" --batch "$B" --seq 1024 --steps 10 --warmup 3 --json --profile \
      --peak-tflops 989.4  # the H100/H200 SXM dense bf16 peak (configs/clusters/h200.toml)
  else
    log "weft $size: no CLI on this way of building"
  fi
  baseline=$(size_baseline "$size")
  if [[ -n "$baseline" ]]; then
    # shellcheck disable=SC2086,SC2046  # WEFT_TORCH_ARGS and the shape are lists of options
    e2e "$size" pytorch "$CAP" env LD_LIBRARY_PATH="$ORIG_LD" PYTHONUNBUFFERED=1 python3 "$baseline" --device cuda \
      $(torch_shape "$model") --batch "$B" --seq 1024 --steps 10 --warmup 3 ${WEFT_TORCH_ARGS:-}
  fi
}

# PyTorch's compilation (torch.compile: 60-90 s a model here, over 118 s for 1.5B on 2026-12-04)
# is CPU work that can run while weft's tests use the GPU: a short run of each shape now fills
# Inductor's on-disk caches, and the timed run later compiles from them. Nothing of these runs
# is timed; the timed runs start after they end (prewarm_wait).
PREWARM_PIDS=()
prewarm_torch() {
  [[ "${WEFT_TORCH_PREWARM:-1}" == 1 ]] || return
  local size B model baseline
  for size in $SIZES; do
    case $size in 124m) B=32 ;; 350m) B=16 ;; 1.5b | llama-1b) B=8 ;; *) continue ;; esac
    model=$(size_model "$size")
    baseline=$(size_baseline "$size")
    [[ -n "$baseline" ]] || continue
    # shellcheck disable=SC2086,SC2046
    LD_LIBRARY_PATH="$ORIG_LD" timeout -k 5 "$(budget 240)" python3 "$baseline" --device cuda \
      $(torch_shape "$model") --batch "$B" --seq 1024 --steps 1 --warmup 1 \
      ${WEFT_TORCH_ARGS:-} >"$LOGS/prewarm-$size.log" 2>&1 &
    PREWARM_PIDS+=($!)
  done
  log "PyTorch compiling ${SIZES} in the background (pids ${PREWARM_PIDS[*]})"
}
prewarm_wait() {
  ((${#PREWARM_PIDS[@]})) || return
  local t0=$(date +%s) pid
  for pid in "${PREWARM_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  log "PyTorch's background compilation done (waited $(($(date +%s) - t0)) s): $(for s in $SIZES; do
    printf '%s %s; ' "$s" "$(grep -c '^{' "$LOGS/prewarm-$s.log" 2>/dev/null) line(s)"; done)"
  PREWARM_PIDS=()
}

# ---- the run ----
: >"$OUT/tests.log"
SIZES=${WEFT_E2E_SIZES-124m 350m 1.5b llama-1b}  # set and empty: no end-to-end runs
prewarm_torch
# 2. The kernels, then the communicators at size 1 (launches blocking: an error names its kernel).
for t in kernels_cuda_test kernels_mixed_cuda_test comm_cuda_test; do
  [[ " ${WEFT_GPU_TESTS:-$ALL_TESTS} " == *" $t "* ]] && test_prog "$t" 45 blocking
done
# 3. The trainer against the fp32 CPU trainer; the rank-thread equivalence tests on the one GPU.
for t in gpu_trainer_test gpu_equivalence_test; do
  [[ " ${WEFT_GPU_TESTS:-$ALL_TESTS} " == *" $t "* ]] && test_prog "$t" 120
done
# A smoke script (steps 4 and 4a) under its time limit: the end of its output shown, its verdict
# recorded.
run_smoke() {  # name, time limit, lines shown, command...
  local name=$1 limit=$2 lines=$3 rc
  shift 3
  timeout -k 5 "$limit" "$@" 2>&1 | tail -"$lines"
  rc=${PIPESTATUS[0]}
  log "${name/_/ }: exit $rc after $(($(date +%s) - START)) s"
  printf '%s\t%s\t-\t\n' "$name" "$([[ $rc -eq 0 ]] && echo pass || echo "FAIL (exit $rc)")" >>"$VERDICTS"
}
skip_smoke() {  # name, why
  log "${1/_/ }: skipped ($2)"
  printf '%s\tskipped\t-\t\n' "$1" >>"$VERDICTS"
}
# 4. `weft train --device cuda` on real text against the same run on the CPU, stopped and resumed.
T_SMOKE=$(budget 90)
if [[ -n "$WEFT_BIN" && "${WEFT_GPU_SMOKE:-1}" == 1 ]] && ((T_SMOKE >= 30)); then
  run_smoke train_smoke "$T_SMOKE" 12 env WEFT_LD="$WEFT_LD" bash bench/gpu/train_smoke.sh \
    "$WEFT_BIN" "$LOGS/train-smoke"
else
  skip_smoke train_smoke "${WEFT_BIN:-no weft binary}, $T_SMOKE s left"
fi
# 4a. A hung rank on the GPU path (issue 38): four ranks sharing the GPU (staged communicators),
# world rank 3 stopped; named, the job ended, the resume with the same losses. Under the bundle's
# Open MPI, moved to build/gpu-ompi by OPAL_PREFIX (the device has no MPI of its own), or an
# mpirun found here.
HANG_MPIRUN=""
if [[ -f "$BUNDLE/ompi.tar.gz" ]]; then
  OMPI=$ROOT/build/gpu-ompi
  rm -rf "$OMPI" && mkdir -p "$OMPI" && tar -xzf "$BUNDLE/ompi.tar.gz" -C "$OMPI"
  ma=$(ls "$OMPI/lib")
  HANG_MPIRUN="env OPAL_PREFIX=$OMPI PMIX_INSTALL_PREFIX=$OMPI/lib/$ma/pmix2"
  HANG_MPIRUN+=" PMIX_MCA_mca_base_component_path=$OMPI/lib/$ma/pmix2/lib/pmix"
  HANG_MPIRUN+=" OMPI_MCA_mca_base_component_show_load_errors=0"
  HANG_MPIRUN+=" LD_LIBRARY_PATH=$(path_join "$OMPI/lib/$ma/openmpi/lib" "$OMPI/lib/$ma/pmix2/lib" ${WEFT_LD//:/ })"
  HANG_MPIRUN+=" $OMPI/bin/mpirun"
elif command -v mpirun >/dev/null; then
  HANG_MPIRUN="env LD_LIBRARY_PATH=$WEFT_LD mpirun"
fi
HANG_MPIRUN+=" --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader"
HANG_MPIRUN+=" --mca btl_vader_single_copy_mechanism none"
T_HANG=$(budget 75)
if [[ -n "$WEFT_BIN" && "$HANG_MPIRUN" == env* ]] && ((T_HANG >= 45)) &&
  $HANG_MPIRUN -n 1 "$WEFT_BIN" --version >"$LOGS/mpirun-check.log" 2>&1; then
  run_smoke hang_smoke "$T_HANG" 14 env WEFT_MPIRUN="$HANG_MPIRUN" bash bench/gpu/hang_smoke.sh \
    "$WEFT_BIN" "$LOGS/hang-smoke"
else
  skip_smoke hang_smoke "${WEFT_BIN:-no weft binary}, $T_HANG s left, mpirun: ${HANG_MPIRUN%% --allow*}"
  head -5 "$LOGS/mpirun-check.log" 2>/dev/null
fi
# 4b. `weft tune --device cuda` (issue #16 on the GPU): the planner's best layouts of GPT-2 124M at
# T=1024, global batch 32, on one GPU (micro-batch x recomputation; tp, pp and dp are 1 on one
# device), priced with configs/clusters/h200.toml and measured by short trials of the engine
# `weft train --device cuda` builds; tune.{json,md,svg} and the preset refitted from the trials
# land in logs.tgz (tune/).
T_TUNE=$(budget "${WEFT_GPU_TUNE_CAP:-110}")
if [[ -n "$WEFT_BIN" && "${WEFT_GPU_TUNE:-1}" == 1 ]] && ((T_TUNE >= 40)); then
  mkdir -p "$LOGS/tune"
  # Random GPT-2 ids in an llm.c token file (a step's time does not depend on the tokens).
  python3 bench/synthetic_tokens.py "$LOGS/tune/tokens.bin" 50257 $((1 << 20)) --random 1
  { sed -n '/^\[model\]/,$p' configs/models/gpt2-124m.toml
    printf '[data]\ntrain = "%s"\ntokenizer = "none"\n' "$LOGS/tune/tokens.bin"
    printf '[train]\nseq_len = 1024\nmicro_batch = 8\nglobal_batch = 32\nsteps = 100\n'
    printf '[run]\nout_dir = "%s"\n' "$LOGS/tune/run"; } >"$LOGS/tune/run.toml"
  log "weft tune --device cuda (at most $T_TUNE s)"
  t0=$(date +%s)
  wrun timeout -k 5 "$T_TUNE" "$WEFT_BIN" tune "$LOGS/tune/run.toml" --device cuda \
    --cluster configs/clusters/h200.toml --budget-minutes "$(awk -v t="$T_TUNE" 'BEGIN {printf "%.2f", (t - 25) / 60}')" \
    --out "$LOGS/tune" --calibrate-out "$LOGS/tune/h200-refit.toml" >"$LOGS/tune/tune.log" 2>&1
  TUNE_RC=$?
  rm -f "$LOGS/tune/tokens.bin"
  if [[ -f "$LOGS/tune/tune.md" ]]; then  # the committed result: bench/results/tune-cuda-<stamp>.md
    { echo "# weft tune --device cuda: GPT-2 124M, T=1024, global batch 32, one GPU ($STAMP)"
      echo
      echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
      echo "- \`weft tune RUN.toml --device cuda --cluster configs/clusters/h200.toml\`" \
        "(bench/gpu/run.sh step 4b; random GPT-2 ids; the default 2 warm-up + 3 timed steps first)"
      echo "- the baseline: the planner's prediction on the h200 preset; memory is the engine's" \
        "allocation from its backend"
      echo
      sed 1d "$LOGS/tune/tune.md"
      echo
      grep -E '^refit:|refitted from' "$LOGS/tune/tune.log"
    } >"$LOGS/tune/result.md"
    mkdir -p bench/results
    cp "$LOGS/tune/result.md" "bench/results/tune-cuda-$STAMP.md"
  fi
  sed -n '/^| planner rank/,/^$/p' "$LOGS/tune/tune.log" | head -20
  grep -iE 'winner|error|refit|budget|layouts' "$LOGS/tune/tune.log" | head -12
  log "weft tune --device cuda: exit $TUNE_RC after $(($(date +%s) - t0)) s"
  printf 'tune_cuda\t%s\t%s\t\n' "$([[ $TUNE_RC -eq 0 ]] && echo pass || echo "FAIL (exit $TUNE_RC)")" \
    "$(($(date +%s) - t0))" >>"$VERDICTS"
fi
# 5. End to end, weft then PyTorch per size, once the background compilation is done.
prewarm_wait
for size in $SIZES; do e2e_size "$size"; done
# The table: one row per size, weft's line beside PyTorch's.
python3 - "$OUT/e2e.jsonl" "$STAMP" >"$OUT/e2e.md" <<'EOF'
import json, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def pick(size, name):
    return next((r for r in rows if r.get("size") == size and r.get("name") == name), {})
def num(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) else "-"
def pct(x):  # a fraction
    return "-" if not isinstance(x, (int, float)) else f"{100 * x:.1f}%"
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except OSError:
    gpu = "?"
torch_line = next((r for r in rows if r.get("name") == "pytorch" and "torch" in r), {})
print(f"# GPU end to end: weft vs PyTorch, one training step ({sys.argv[2]})\n")
print(f"GPU: {gpu}; PyTorch {torch_line.get('torch', '?')} (torch.compile: "
      f"{torch_line.get('compiled', '?')}, bf16 autocast, fused AdamW, SDPA). T=1024, random tokens, "
      "10 timed steps after 3 warm-up, median. `bash bench/gpu/run.sh` (e2e.jsonl holds the full lines).\n")
print("| model | B | weft tokens/s | PyTorch tokens/s | weft / PyTorch | weft ms | PyTorch ms "
      "| weft MFU (989 TFLOP/s) | weft MFU (GEMM ceiling) | weft mem MiB (pred.) | PyTorch peak GiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for size in dict.fromkeys(r.get("size") for r in rows):
    w, t = pick(size, "weft"), pick(size, "pytorch")
    b = w.get("B", t.get("B", "-"))
    wt, tt = w.get("tokens_per_s"), t.get("tokens_per_s")
    ratio = wt / tt if isinstance(wt, (int, float)) and isinstance(tt, (int, float)) and tt else None
    # an error's first line (exit status or timeout) and its last (the exception, say)
    note = lambda r: (" (" + " / ".join(dict.fromkeys(
        l.strip()[:80] for l in (r["error"].splitlines()[:1] + r["error"].splitlines()[-1:])))
        .replace("|", "\\|") + ")") if "error" in r else ""
    mem = (f"{num(w.get('mem_allocated_mib'), '.0f')} ({num(w.get('mem_predicted_mib'), '.0f')})"
           if w.get("mem_allocated_mib") else "-")
    print(f"| gpt2-{size} | {b} | {num(wt, ',.0f')}{note(w)} | {num(tt, ',.0f')}{note(t)} "
          f"| {num(ratio, '.3f')} | {num(w.get('ms_median'), '.1f')} | {num(t.get('ms_median'), '.1f')} "
          f"| {pct(w.get('mfu_spec'))} | {pct(w.get('mfu_gemm'))} | {mem} | {num(t.get('peak_mem_gib'), '.1f')} |")
# Where weft's step goes (--profile: one more step, each op timed alone), the largest ops first.
for size in dict.fromkeys(r.get("size") for r in rows):
    prof = pick(size, "weft").get("profile")
    if not prof:
        continue
    print(f"\n**gpt2-{size}, weft's step by op** ({prof['step_ms']:.1f} ms with each op timed alone; "
          f"host waits per step {pick(size, 'weft').get('host_waits_per_step', '?')}):\n")
    print("| op | calls | ms | share |")
    print("|---|---:|---:|---:|")
    for op in sorted(prof["ops"], key=lambda o: -o["ms"])[:8]:
        print(f"| {op['op']} | {op['calls']} | {op['ms']:.2f} | {100 * op['ms'] / prof['step_ms']:.1f}% |")
EOF
if grep -q '"tokens_per_s"' "$OUT/e2e.jsonl"; then  # a measured figure, not only errors
  mkdir -p bench/results
  cp "$OUT/e2e.md" "bench/results/gpu-e2e-$STAMP.md"
fi
log "end to end: $E2E_FAILED command(s) without a result, after $(($(date +%s) - START)) s"

# 6. The kernel benchmark with the time that is left. It prints each line as it is measured,
# flash attention last, so a cut loses only the end.
T_BENCH=$(budget 150)
BENCH_RC=0
if ((T_BENCH >= 30)) && [[ -n "$BENCH_BIN" && "${WEFT_GPU_KBENCH:-1}" == 1 ]]; then
  wrun timeout -k 5 "$T_BENCH" "$BENCH_BIN" --json "$OUT/kernels_bench.json" \
    --md "$OUT/kernels_bench.md" >"$LOGS/kernels_bench.log" 2>&1
  BENCH_RC=$?
  tail -5 "$LOGS/kernels_bench.log"
else
  log "kernels_bench: skipped, $T_BENCH s left"
fi
[[ -f "$OUT/kernels_bench.md" ]] && cp "$OUT/kernels_bench.md" "bench/results/gpu-kernels-$STAMP.md"

# 7. The compact table: verdicts, the end-to-end rows, the top ops, flash attention's rates.
echo
echo "==== summary ($(($(date +%s) - START)) s)"
echo "| program | verdict | s | gtest |"
echo "|---|---|---:|---|"
awk -F'\t' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}' "$VERDICTS"
echo
cat "$OUT/e2e.md"
if [[ -f "$OUT/kernels_bench.md" ]]; then
  echo
  grep -iE 'ceiling|copy|gemm 8192|flash' "$OUT/kernels_bench.md" | head -12
fi
[[ -f "$LOGS/isolated.txt" ]] && { echo; grep FAIL "$LOGS/isolated.txt" | cut -c1-300 | head -20; }
log "done in $(($(date +%s) - START)) s: test failures $(grep -c FAIL "$VERDICTS"), e2e without result $E2E_FAILED, bench exit $BENCH_RC"
return $(($(grep -c FAIL "$VERDICTS") != 0 || E2E_FAILED != 0 || BENCH_RC != 0))
}

main 2>&1 | tee "$OUT/run.log"
RC=${PIPESTATUS[0]}
rm -f "$LOGS/one.log"
# Not the smoke run's datasets and checkpoints (logs.tgz must stay under the tool's 16 MB a file).
tar -czf "$OUT/logs.tgz" --exclude=checkpoints --exclude='*.bin' --exclude='*.idx' -C "$LOGS" . \
  2>/dev/null
exit "$RC"
