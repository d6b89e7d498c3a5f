#!/usr/bin/env bash
# Before/after benchmark of a runtime change, in ONE run on this machine: the same `weft bench step`
# commands with two binaries, alternating (before, after, after, before, ...) over ROUNDS rounds, so
# the drift of a shared machine's speed falls on both; a row's figure is the median over the rounds.
# ROWS (a regular expression over the row names) runs some rows only.
#   serial  GPT-2 124M, B=4 x T=64 and B=8 x T=256, 2 threads (`make bench`'s weft rows)
#   pp=2    pipe-8l (L=8, C=256), B=2 x T=128, 8 and 64 microbatches, gpipe / 1f1b /
#           interleaved (vp 2) / zb-h1, 2 ranks x 1 thread (bench/pipeline's rows, and 8x m)
#   pp=4    pipe-8l, 1f1b and interleaved (vp 2), 8 microbatches, 4 ranks x 1 thread (on 2 cores:
#           oversubscribed, as bench/pipeline's pp=4 rows)
# Per row: the median step (ms) and the busiest rank's peak memory (resident above the start, MiB)
# before and after, and after / before. Writes bench/results/ab-<stamp>.{json,md}.
#
# Usage: bench/ab/run.sh BEFORE_WEFT [ROUNDS] [LABEL_BEFORE] [LABEL_AFTER]
#   BEFORE_WEFT: the baseline binary (e.g. built from an older commit in a worktree);
#   the "after" binary is $WEFT or build/release/bin/weft. ROUNDS defaults to 3.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup ab
before=$1
rounds=${2:-3}
label_before=${3:-before}
label_after=${4:-after}
after=$weft
[ -x "$before" ] || { echo "bench/ab: no baseline binary $before" >&2; exit 1; }

rows=(
  "serial-4x64|1|2|--model configs/models/gpt2-124m.toml --batch 4 --seq 64 --steps 5"
  "serial-8x256|1|2|--model configs/models/gpt2-124m.toml --batch 8 --seq 256 --steps 3"
  "pp2-gpipe-m8|2|1|--model configs/models/pipe-8l.toml --batch 2 --seq 128 --microbatches 8 --pp 2 --schedule gpipe --steps 3"
  "pp2-1f1b-m8|2|1|--model configs/models/pipe-8l.toml --batch 2 --seq 128 --microbatches 8 --pp 2 --schedule 1f1b --steps 3"
  "pp2-interleaved-m8|2|1|--model configs/models/pipe-8l.toml --batch 2 --seq 128 --microbatches 8 --pp 2 --vp 2 --schedule interleaved --steps 3"
  "pp2-zb-h1-m8|2|1|--model configs/models/pipe-8l.toml --batch 2 --seq 128 --microbatches 8 --pp 2 --schedule zb-h1 --steps 3"
  "pp2-1f1b-m64|2|1|--model configs/models/pipe-8l.toml --batch 2 --seq 128 --microbatches 64 --pp 2 --schedule 1f1b --steps 2"
  "pp2-interleaved-m64|2|1|--model configs/models/pipe-8l.toml --batch 2 --seq 128 --microbatches 64 --pp 2 --vp 2 --schedule interleaved --steps 2"
  "pp4-1f1b-m8|4|1|--model configs/models/pipe-8l.toml --batch 2 --seq 128 --microbatches 8 --pp 4 --schedule 1f1b --steps 3"
  "pp4-interleaved-m8|4|1|--model configs/models/pipe-8l.toml --batch 2 --seq 128 --microbatches 8 --pp 4 --vp 2 --schedule interleaved --steps 3"
)

if [ -n "${ROWS:-}" ]; then
  kept=()
  for row in "${rows[@]}"; do [[ ${row%%|*} =~ $ROWS ]] && kept+=("$row"); done
  rows=("${kept[@]}")
fi

: >"$out_json"
run() {  # binary label row round
  local bin=$1 label=$2 row=$3 round=$4 name ranks threads args
  IFS='|' read -r name ranks threads args <<<"$row"
  echo "== $name $label round $round" >&2
  local cmd=("$bin" bench step $args --threads "$threads" --warmup 1 --json)
  if [ "$ranks" -gt 1 ]; then cmd=("${mpirun[@]}" -n "$ranks" "${cmd[@]}"); fi
  OMP_NUM_THREADS=$threads "${cmd[@]}" |
    /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin); r.update(row=sys.argv[1], side=sys.argv[2], round=int(sys.argv[3])); print(json.dumps(r))' \
      "$name" "$label" "$round" >>"$out_json"
}
# The order alternates by round (before first in odd rounds, after first in even ones): the second
# of two runs in a row measured up to 8% slower than the first on this machine, whichever it was.
for round in $(seq "$rounds"); do
  for row in "${rows[@]}"; do
    if [ $((round % 2)) -eq 1 ]; then
      run "$before" "$label_before" "$row" "$round"
      run "$after" "$label_after" "$row" "$round"
    else
      run "$after" "$label_after" "$row" "$round"
      run "$before" "$label_before" "$row" "$round"
    fi
  done
done

/usr/bin/python3 - "$out_json" "$out_md" "$label_before" "$label_after" "$rounds" <<'PY'
import json, platform, statistics, subprocess, sys, datetime
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
before, after, rounds = sys.argv[3], sys.argv[4], int(sys.argv[5])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
names = list(dict.fromkeys(r["row"] for r in runs))
def pick(name, side, key):
    return statistics.median(r[key] for r in runs if r["row"] == name and r["side"] == side)
md = [f"# Before/after: `weft bench step`, {before} vs {after}", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}",
      f"- machine: {cpu}, {platform.platform()}; Open MPI 4.1 (btl self,vader)",
      f"- `bench/ab/run.sh`: the two binaries alternating, {rounds} rounds (before first in odd rounds, after first in even ones); each figure the median over"
      " the rounds of the run's median step, and of the busiest rank's peak memory (resident above"
      " the start); of the GEMM ceiling: each run's model FLOP/s over the GEMM ceiling it measured"
      " between its own steps, so the machine's drift during the run divides out", "",
      f"| row | ms {before} | ms {after} | {after} / {before} | of the GEMM ceiling {before} |"
      f" of the GEMM ceiling {after} | MiB {before} | MiB {after} | {after} / {before} |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
for n in names:
    mb, ma = pick(n, before, "ms_median"), pick(n, after, "ms_median")
    cb, ca = pick(n, before, "ratio_to_gemm_ceiling"), pick(n, after, "ratio_to_gemm_ceiling")
    gb, ga = pick(n, before, "mem_measured_mib"), pick(n, after, "mem_measured_mib")
    md.append(f"| {n} | {mb:.0f} | {ma:.0f} | {ma / mb:.3f} | {cb:.1%} | {ca:.1%} | {gb:.1f} |"
              f" {ga:.1f} | {ga / gb:.3f} |")
md += ["", "Per round (ms, before / after): " + "; ".join(
    f"{n}: " + ", ".join(f"{r1['ms_median']:.0f}/{r2['ms_median']:.0f}" for r1, r2 in zip(
        [r for r in runs if r['row'] == n and r['side'] == before],
        [r for r in runs if r['row'] == n and r['side'] == after])) for n in names)]
open(sys.argv[2], "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
