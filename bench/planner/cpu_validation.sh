#!/usr/bin/env bash
# The planner against weft's own runs on this machine (issue #7): for each layout, `weft bench
# step` measures the step time and every rank's peak memory (and prints the planner's memory
# prediction for its rank: planner::weft_rank_memory), and `weft simulate` with
# configs/clusters/this-machine.toml (measured by `weft calibrate`) predicts the step time.
# GPT-2 124M, B=2 per microbatch, T=256, 4 microbatches (per replica). Layouts with 4 ranks oversubscribe the
# 2 cores: their memory is compared, their time is not (the preset models one core per rank).
# Writes bench/results/planner-cpu-<stamp>.{json,md}.
# ONLY=REGEX runs only the layouts whose name matches (bash regex), e.g. the data-parallel ZeRO
# rows alone after a memory-model change: ONLY='^dp2-zero[123]$' bench/planner/cpu_validation.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup planner-cpu
model=configs/models/gpt2-124m.toml
B=2; T=256; m=4

# name | ranks | dp | bench flags | simulate --config
layouts=(
  "tp2|2|1|--tp 2|tp=2"
  "tp2-sp|2|1|--tp 2 --sequence-parallel|tp=2,sp=1"
  "pp2-1f1b|2|1|--pp 2|pp=2,schedule=1f1b"
  "pp2-gpipe|2|1|--pp 2 --schedule gpipe|pp=2,schedule=gpipe"
  "pp2-interleaved|2|1|--pp 2 --vp 2 --schedule interleaved|pp=2,vp=2,schedule=interleaved"
  "pp2-zb-h1|2|1|--pp 2 --schedule zb-h1|pp=2,schedule=zb-h1"
  "tp2-pp2|4|1|--tp 2 --pp 2|tp=2,pp=2"
  "tp2-sp-pp2-interleaved|4|1|--tp 2 --sequence-parallel --pp 2 --vp 2 --schedule interleaved|tp=2,sp=1,pp=2,vp=2,schedule=interleaved"
  "dp2|2|2|--dp 2|dp=2"
  "dp2-zero1|2|2|--dp 2 --zero 1|dp=2,zero=1"
  "dp2-zero2|2|2|--dp 2 --zero 2|dp=2,zero=2"
  "dp2-zero3|2|2|--dp 2 --zero 3|dp=2,zero=3"
  "tp2-dp2-zero1|4|2|--tp 2 --dp 2 --zero 1|tp=2,dp=2,zero=1"
  "pp2-dp2-zero2|4|2|--pp 2 --dp 2 --zero 2|pp=2,dp=2,zero=2"
  "dp4-zero3|4|4|--dp 4 --zero 3|dp=4,zero=3"
)
: >"$out_json"
for l in "${layouts[@]}"; do
  IFS='|' read -r name ranks dp flags config <<<"$l"
  if [[ -n "${ONLY:-}" && ! "$name" =~ $ONLY ]]; then continue; fi
  echo "== $name" >&2
  # shellcheck disable=SC2086
  run=$(OMP_NUM_THREADS=1 "${mpirun[@]}" -n "$ranks" "$weft" bench step --model "$model" \
    --batch $B --seq $T --microbatches $m --threads 1 --steps 2 --warmup 1 --json $flags)
  sim=$("$weft" simulate --model "$model" --cluster configs/clusters/this-machine.toml \
    --gpus "$ranks" --global-batch $((B * m * dp)) --seq $T --precision fp32 \
    --config "$config,mb=$B" --trace "" --svg "" | grep '^step time' | awk '{print $3}')
  echo "{\"layout\": \"$name\", \"predicted_step_s\": $sim, \"run\": $run}" | tee -a "$out_json"
done

/usr/bin/python3 - "$out_json" "$out_md" <<'PY'
import json, platform, subprocess, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = ["# The planner against weft's runs on this machine: GPT-2 124M, B=2 x 4 microbatches, T=256", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}",
      f"- machine: {cpu} (2 cores), {platform.platform()}; 1 thread per rank",
      "- measured: `weft bench step --json` (median of 2 steps; memory = each rank's peak RSS above "
      "its start, the worst rank); predicted memory: `planner::weft_rank_memory` (the trainer's "
      "exact layout and the schedule's in-flight slots); predicted time: `weft simulate` with "
      "configs/clusters/this-machine.toml (calibrated by `weft calibrate`)",
      "- 4-rank layouts oversubscribe the 2 cores: their time is not comparable with a preset of one "
      "core per rank", "",
      "| layout | ranks | step s measured | step s predicted | time error | memory MiB measured | predicted | memory error |",
      "|---|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    run = r["run"]
    t_meas = run["ms_median"] / 1000
    t_pred = r["predicted_step_s"]
    terr = "-" if run["ranks"] > 2 else f"{100*(t_pred/t_meas-1):+.1f}%"
    md.append(f"| {r['layout']} | {run['ranks']} | {t_meas:.2f} | {t_pred:.2f} | {terr} | "
              f"{run['mem_measured_mib']:.0f} | {run['mem_predicted_mib']:.0f} | "
              f"{100*(run['mem_measured_over_predicted']-1):+.1f}% |")
open(sys.argv[2], "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
