#!/usr/bin/env bash
# ZeRO benchmark (issue #6): the 8-layer C=256 GPT (configs/models/pipe-8l.toml), B=1 x T=64, 4
# microbatches per replica, in ONE run on this machine:
#   dp=4 (4 ranks x 1 thread on the 2 cores, oversubscribed), ZeRO 0, 1, 2, 3
#   dp=2 (2 ranks x 1 thread, a core each), ZeRO 0, 1, 2, 3, in ROUNDS interleaved rounds (0 1 2 3
#   0 1 2 3 ...): this machine's speed drifts by 10-50% within minutes, so a stage is compared
#   with the ZeRO-0 run of its own round, and the rows give the median over the rounds
# Figures per run: peak memory per rank measured (resident above the start) against
# model::estimate_rank_memory, and the gradient reductions' time left exposed per step (rank 0
# blocked waiting for them) against the same reductions run alone: the share hidden under
# backward. Writes bench/results/zero-<stamp>.{json,md}.
#
# Usage: bench/zero/run.sh [STEPS [ROUNDS]]   (default 4 steps, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup zero
steps=${1:-4}
rounds=${2:-3}
model=configs/models/pipe-8l.toml
common=(bench step --model "$model" --batch 1 --seq 64 --microbatches 4 --steps "$steps" --warmup 1
        --threads 1 --json)

: >"$out_json"
run() {  # dp zero round
  echo "== dp=$1 zero=$2 round $3" >&2
  OMP_NUM_THREADS=1 "${mpirun[@]}" -n "$1" "$weft" "${common[@]}" --dp "$1" --zero "$2" |
    /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin); r["round"] = int(sys.argv[1]); print(json.dumps(r))' "$3" |
    tee -a "$out_json"
}
for zero in 0 1 2 3; do run 4 "$zero" 1; done
for round in $(seq "$rounds"); do
  for zero in 0 1 2 3; do run 2 "$zero" "$round"; done
done

# The planner's prediction of the dp=2 rows (a core per rank), on this machine's preset
# (configs/clusters/this-machine.toml: `weft calibrate`, refitted by `weft tune
# --update-calibration`); the dp=4 rows oversubscribe the cores and the preset has 2 devices.
cluster=configs/clusters/this-machine.toml
work_dir=$(mktemp -d)
trap 'rm -rf "$work_dir"' EXIT
: >"$work_dir/predicted.txt"
for zero in 0 1 2 3; do
  ms=$("$weft" simulate --model "$model" --cluster "$cluster" --gpus 2 --global-batch 8 --seq 64 \
        --precision fp32 --config "tp=1,pp=1,dp=2,mb=1,schedule=1f1b,recompute=none,zero=$zero" \
        --trace "" --svg "" | awk '/^step time/ {print $3 * 1000}')
  echo "$zero $ms" >>"$work_dir/predicted.txt"
done

/usr/bin/python3 - "$out_json" "$out_md" "$work_dir/predicted.txt" <<'PY'
import json, platform, subprocess, sys, datetime
import statistics
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
predicted = {int(z): float(ms) for z, ms in (l.split() for l in open(sys.argv[3]) if l.strip())}
# Each run against the ZeRO-0 run of its round; a row per (dp, ZeRO): the run of the median step
# time, with the median of the rounds' ratios.
base = {(r["dp"], r["round"]): r["ms_median"] for r in runs if r["zero"] == 0}
for r in runs:
    r["step_over_zero0"] = r["ms_median"] / base[(r["dp"], r["round"])]
rows = []
for dp in (4, 2):
    for zero in range(4):
        group = sorted((r for r in runs if r["dp"] == dp and r["zero"] == zero), key=lambda r: r["ms_median"])
        row = dict(group[(len(group) - 1) // 2])
        row["rounds"] = len(group)
        row["step_over_zero0"] = statistics.median(r["step_over_zero0"] for r in group)
        row["step_over_zero0_rounds"] = [round(r["step_over_zero0"], 3) for r in runs if r["dp"] == dp and r["zero"] == zero]
        # The fastest step of any round, beside the median step the planner predicts (weft tune's
        # figure, the median of a layout's steps: docs/planner.md §12).
        row["ms_fastest"] = min(r["ms_min"] for r in group)
        worst = max(group, key=lambda r: r["mem_measured_over_predicted"])  # memory: the worst round
        for key in ("mem_measured_mib", "mem_measured_over_predicted"):
            row[key] = worst[key]
        rows.append(row)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = ["# ZeRO benchmark: pipe-8l (L=8, C=256, V=4096), B=1, T=64, 4 microbatches per replica", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}",
      f"- machine: {cpu}, {platform.platform()}; Open MPI 4.1 (btl self,vader); {len(runs)} runs",
      "- `bench/zero/run.sh`: `weft bench step --dp N --zero Z --json`",
      "- memory: each rank's peak resident memory above its start against model::estimate_rank_memory "
      "(the planner's weft_rank_memory); the largest ratio over the ranks and the rounds",
      "- reductions: rank 0's seconds blocked waiting for its gradient reductions per step (exposed), "
      "against the same reductions run alone and blocking after the timed steps (median of 3); "
      "hidden = 1 - exposed / alone. Exposed time also holds waiting for a slower replica: with "
      "4 ranks on 2 cores the ranks take turns on the cores, so the dp=4 rows understate the "
      "overlap; the dp=2 rows have a core per rank", "",
      "- step predicted: `weft simulate` of the dp=2 layout on configs/clusters/this-machine.toml, "
      "against the row's median step (error = predicted / step - 1: the preset is refitted to "
      "each layout's median step, as `weft tune` measures it); / ZeRO 0: the median "
      "step against the same dp's ZeRO-0 step of the same round (dp=2: the median over the rounds, "
      "each round's in brackets; dp=4: one round); step ms and the rest of a row: the run of the "
      "median step time among its rounds", "",
      "| dp | ZeRO | step ms | / ZeRO 0 | fastest step ms | step predicted ms | error | memory predicted MiB | measured MiB | measured / predicted | reductions exposed ms | alone ms | hidden |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    pred = predicted.get(r["zero"]) if r["dp"] == 2 else None
    r["step_predicted_ms"] = pred
    cells = (f"{pred:.0f} | {100 * (pred / r['ms_median'] - 1):+.0f}%" if pred else "- | -")
    each = ", ".join(f"{x:.2f}" for x in r["step_over_zero0_rounds"]) if r["rounds"] > 1 else ""
    md.append(f"| {r['dp']} | {r['zero']} | {r['ms_median']:.0f} | {r['step_over_zero0']:.2f}"
              f"{' (' + each + ')' if each else ''} | {r['ms_fastest']:.0f} | "
              f"{cells} | {r['mem_predicted_mib']:.1f} | "
              f"{r['mem_measured_mib']:.1f} | {r['mem_measured_over_predicted']:.3f} | "
              f"{r['dp_reduction_exposed_ms']:.1f} | {r['dp_reduction_alone_ms']:.1f} | "
              f"{100 * r['dp_reduction_hidden']:.0f}% |")
open(sys.argv[2], "w").write("\n".join(md) + "\n")
with open(sys.argv[1], "w") as f:
    for r in runs:
        f.write(json.dumps(r) + "\n")
print("\n".join(md))
PY
