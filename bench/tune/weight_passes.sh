#!/usr/bin/env bash
# Measures what the planner's weight passes stand for (docs/planner.md §9, "The weight passes"):
# bench/tune/weight_passes.cc, built against the release build's kernels, on one core. Writes
# bench/results/weight-passes-<stamp>.md.
#
# Usage: bench/tune/weight_passes.sh [REPS]   (steps per micro-batch size, default 12)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup weight-passes
build=${WEFT_BUILD:-build/release}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libs=()
for l in kernels core; do libs+=("$build/src/weft/$l/libweft_$l.a"); done
g++ -std=c++20 -O2 -fopenmp -I src -I "$build/src" bench/tune/weight_passes.cc "${libs[@]}" \
  -lfmt -ldnnl -o "$work/weight_passes"
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
{
  echo "# Where a step's time goes as the micro-batch size changes (bench/tune/weight_passes.sh)"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M') UTC; commit $(git rev-parse --short HEAD)"
  echo "- machine: $cpu; one process, 1 thread (oneDNN sgemm, the trainer's kernels)"
  echo "- bench/tune/run.sh's model (L=4, C=256, 4 heads, Vp=4096, T=64), 8 sequences per step, tp=1"
  OMP_NUM_THREADS=1 "$work/weight_passes" "${1:-12}"
} | tee "$out_md"
echo "wrote $out_md" >&2
