#!/usr/bin/env bash
# Background checkpoints (issue 38, train.async_checkpoint): how much a save every few steps costs
# training, in ONE run on this machine, for
#   gpt2-124m  GPT-2 124M (configs/models/gpt2-124m.toml), 1 process x 2 threads, B=4 T=64
#   gpt2-124m-1t  the same on 1 thread: a core left to the writer, as a GPU node's host has
#   pipe-8l    configs/models/pipe-8l.toml, pp=2 (1f1b, 8 microbatches) on 2 ranks x 1 thread
# each without saves (train.save_every=0), with a save every K steps in the foreground
# (train.async_checkpoint=false) and in the background (true), the three modes taking turns,
# ROUNDS times. A step's time is what it held training: step_ms + checkpoint_ms from metrics.jsonl
# (the save started after it, its snapshot in the background, or a commit). Figures, over the
# steps after the first two and before the last (whose save is always written at once):
#   per-save-interval median: the median over the save intervals (K steps each) of their mean
#     step time: the step time a run sees, its saves included (the issue's figure);
#   per-step median: the median over single steps (a save every K > 2 steps moves it little).
# The data is synthetic (a token file written here): a save's cost does not depend on the text.
# Writes bench/results/checkpoint-async-<stamp>.{json,md}. Needs ~5 GB free under $TMPDIR.
#
# Usage: [ROWS=<regex>] [WEFT=<binary>] bench/checkpoint/async.sh [ROUNDS [STEPS]]   (default 2 26)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup checkpoint-async
rounds=${1:-2}
steps=${2:-26}
export OMP_NUM_THREADS=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-async-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cut -d' ' -f1-3 /proc/loadavg >"$tmp/loadavg"

# Synthetic llm.c token files with their sidecars: 200k ids below each vocabulary.
/usr/bin/python3 bench/synthetic_tokens.py "$tmp/v50257.bin" 50257 200000
/usr/bin/python3 bench/synthetic_tokens.py "$tmp/v4096.bin" 4096 200000

# row: NAME|RANKS|SAVE_EVERY|MODEL|DATA|weft train --set args
rows=(
  "gpt2-124m|1|8|configs/models/gpt2-124m.toml|v50257|train.threads=2 train.micro_batch=4 train.global_batch=4 train.seq_len=64"
  "gpt2-124m-1t|1|8|configs/models/gpt2-124m.toml|v50257|train.threads=1 train.micro_batch=4 train.global_batch=4 train.seq_len=64"
  "pipe-8l|2|4|configs/models/pipe-8l.toml|v4096|train.threads=1 parallel.pp=2 parallel.schedule=1f1b train.micro_batch=2 train.global_batch=16 train.seq_len=128"
)
# ROWS=<regex>: only the rows whose name matches (e.g. ROWS=gpt2-124m$ for one A/B of two binaries,
# WEFT=<binary> naming the other).
if [ -n "${ROWS:-}" ]; then
  kept=()
  for row in "${rows[@]}"; do [[ ${row%%|*} =~ $ROWS ]] && kept+=("$row"); done
  rows=("${kept[@]}")
fi
modes=("none|train.save_every=0" "foreground|train.async_checkpoint=false" "background|train.async_checkpoint=true")

: >"$tmp/runs.jsonl"
for round in $(seq "$rounds"); do
  for row in "${rows[@]}"; do
    IFS='|' read -r name ranks every model data sets <<<"$row"
    for mode in "${modes[@]}"; do
      label=${mode%%|*}
      out="$tmp/$name-$label-$round"
      cat >"$tmp/run.toml" <<EOF
[model]
config = "$PWD/$model"
[data]
train = "$tmp/$data.bin"
val_fraction = 0.02
tokenizer = "none"
[train]
steps = $steps
eval_every = 0
save_every = $every
keep_last = 2
log_every = 1
[run]
out_dir = "$out"
EOF
      args=()
      for s in $sets ${mode#*|}; do args+=(--set "$s"); done
      cmd=("$weft" train "$tmp/run.toml" "${args[@]}")
      [ "$ranks" -gt 1 ] && cmd=("${mpirun[@]}" -n "$ranks" "${cmd[@]}")
      echo "== $name $label round $round" >&2
      "${cmd[@]}" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
      /usr/bin/python3 - "$out/metrics.jsonl" "$name" "$label" "$round" "$every" "$ranks" \
        "$out.log" >>"$tmp/runs.jsonl" <<'PY'
import json, re, sys
path, name, label, rnd, every, ranks, log = sys.argv[1:8]
lines = [json.loads(l) for l in open(path) if l.strip()]
saves = [l for l in open(log) if "weft train: checkpoint " in l]
print(json.dumps({"row": name, "mode": label, "round": int(rnd), "save_every": int(every),
                  "ranks": int(ranks),
                  "steps": [{"step": l["step"], "step_ms": l["step_ms"],
                             "checkpoint_ms": l.get("checkpoint_ms", 0.0)} for l in lines],
                  "saves": [s.strip() for s in saves]}))
PY
      rm -rf "$out"
    done
  done
done
cut -d' ' -f1-3 /proc/loadavg >>"$tmp/loadavg"

/usr/bin/python3 - "$tmp" "$out_json" "$out_md" "$steps" "$rounds" <<'PY'
import datetime, json, os, platform, statistics, subprocess, sys
tmp, out_json, out_md, steps, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
runs = [json.loads(l) for l in open(f"{tmp}/runs.jsonl")]
load = [l.strip() for l in open(f"{tmp}/loadavg")]

def figures(run):
    k = run["save_every"]
    held = {s["step"]: s["step_ms"] + s["checkpoint_ms"] for s in run["steps"]}
    kept = [held[s] for s in sorted(held) if 2 < s < steps]
    # save intervals (steps (j-1)k+1 .. jk) that lie inside the kept steps
    periods = [statistics.mean(held[s] for s in range(j - k + 1, j + 1))
               for j in range(k, steps, k) if j - k + 1 > 2]
    return statistics.median(kept), statistics.mean(kept), statistics.median(periods)

rows = []
for r in runs:
    per_step, mean, per_period = figures(r)
    rows.append(dict(row=r["row"], mode=r["mode"], round=r["round"], ranks=r["ranks"],
                     save_every=r["save_every"], per_step_median_ms=per_step, mean_ms=mean,
                     per_interval_median_ms=per_period, saves=r["saves"], steps=r["steps"]))
with open(out_json, "w") as f:
    for r in rows:
        f.write(json.dumps(r, sort_keys=True) + "\n")

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = ["# Background checkpoints: what a save every few steps costs training", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}",
      f"- machine: {cpu} ({os.cpu_count()} cores), {platform.platform()}; load average (1/5/15 min) "
      f"{load[0]} at the start, {load[-1]} at the end (the machine is shared with other builds)",
      f"- `bench/checkpoint/async.sh {rounds} {steps}`: `weft train`, {steps} steps, synthetic tokens; "
      "gpt2-124m: 1 process x 2 threads (-1t: 1 thread), B=4 T=64, a save every 8 steps; pipe-8l: pp=2 1f1b on 2 "
      "ranks x 1 thread, 8 microbatches of B=2 T=128, a save every 4 steps. Modes take turns, "
      f"{rounds} rounds. A step's time = step_ms + checkpoint_ms (what the save after it held "
      "training), over steps 3..N-1",
      "- baseline: the same run without saves (`train.save_every=0`), in the same rounds; and the "
      "foreground save (`train.async_checkpoint=false`) beside it", "",
      "| row | mode | per-save-interval median ms | vs no saves | per-step median ms | vs no saves | mean ms |",
      "|---|---|---:|---:|---:|---:|---:|"]
for name in dict.fromkeys(r["row"] for r in rows):
    mine = [r for r in rows if r["row"] == name]
    agg = {}
    for mode in ("none", "foreground", "background"):
        sel = [r for r in mine if r["mode"] == mode]
        agg[mode] = {key: statistics.median(r[key] for r in sel)
                     for key in ("per_interval_median_ms", "per_step_median_ms", "mean_ms")}
    base = agg["none"]
    for mode, a in agg.items():
        md.append(f"| {name} | {mode} | {a['per_interval_median_ms']:.1f} | "
                  f"{a['per_interval_median_ms'] / base['per_interval_median_ms']:.3f}x | "
                  f"{a['per_step_median_ms']:.1f} | "
                  f"{a['per_step_median_ms'] / base['per_step_median_ms']:.3f}x | {a['mean_ms']:.1f} |")
md += ["", "Each figure is the median over the rounds. The saves each run logged (rank 0), first round:", ""]
for r in rows:
    if r["round"] == 1 and r["saves"]:
        md.append(f"- {r['row']} {r['mode']}: " + "; ".join(
            s.split("checkpoint ", 1)[1] for s in r["saves"][:3]))
open(out_md, "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
