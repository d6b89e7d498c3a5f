#!/usr/bin/env bash
# The fuzz tests of ctest (label `fuzz`; tests/fuzz/CMakeLists.txt registers them).
#
#   run_fuzz.sh build SOURCE_DIR FUZZ_BUILD_DIR
#       configures tests/fuzz/targets with clang++ into FUZZ_BUILD_DIR (once; later runs only
#       rebuild what changed) and builds the fuzz targets.
#   run_fuzz.sh run FUZZ_BUILD_DIR TARGET SECONDS [-dict=FILE] SEED_DIR...
#       runs libFuzzer target TARGET for SECONDS on the seeds, keeping what it learns in
#       FUZZ_BUILD_DIR/corpus/TARGET for the next run. A crash, sanitizer report, leak, uncaught
#       exception, timeout (5 s for one input) or memory blow-up (2 GiB) fails the test, and the
#       input is saved as FUZZ_BUILD_DIR/artifacts/TARGET-crash-<sha1>: reproduce it with
#       `FUZZ_BUILD_DIR/TARGET FILE`.
#   run_fuzz.sh replay FUZZ_BUILD_DIR TARGET DIR
#       runs every input of DIR once (a regression check of inputs that once failed).
# Exits 77 (ctest: skipped) when clang or its libFuzzer runtime is missing.
set -euo pipefail

mode=$1
shift
case "$mode" in
  build)
    src=$1 build=$2
    if ! command -v clang++ >/dev/null; then
      echo "fuzz: clang++ not found (scripts/bootstrap.sh installs clang): skipped"
      exit 77
    fi
    if [ ! -f "$build/CMakeCache.txt" ]; then
      probe=$(mktemp -d)
      trap 'rm -rf "$probe"' EXIT
      echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' \
        > "$probe/probe.cc"
      if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" \
          2> "$probe/log"; then
        cat "$probe/log"
        echo "fuzz: clang++ cannot link libFuzzer (Debian: libclang-rt-14-dev): skipped"
        exit 77
      fi
      mkdir -p "$build"
      cmake -S "$src/tests/fuzz/targets" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_BUILD_TYPE= > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
    fi
    cmake --build "$build" -j "${WEFT_FUZZ_JOBS:-2}"
    ;;
  run)
    build=$1 target=$2 seconds=$3
    shift 3
    if [ ! -x "$build/$target" ]; then
      echo "fuzz: $build/$target was not built (see the test fuzz_targets_build): skipped"
      exit 77
    fi
    corpus="$build/corpus/$target"
    mkdir -p "$corpus" "$build/artifacts"
    exec "$build/$target" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -max_len=8192 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" "$corpus" "$@"
    ;;
  replay)
    build=$1 target=$2 dir=$3
    if [ ! -x "$build/$target" ]; then
      echo "fuzz: $build/$target was not built: skipped"
      exit 77
    fi
    exec "$build/$target" -runs=0 "$dir"
    ;;
  *)
    echo "usage: run_fuzz.sh build|run|replay ..." >&2
    exit 2
    ;;
esac
