#!/usr/bin/env bash
# Tensor-parallel step benchmark (issue #4): GPT-2 124M, B=4, T=256, in ONE run on this machine:
#   serial: 1 rank x 2 threads (the baseline)
#   tp=2:   2 ranks x 1 thread under mpirun, without and with sequence parallelism
# The figure is the step-time ratio tp=2 / serial and the share of the tp step spent in the tp
# group's collectives. Writes bench/results/tp-<stamp>.{json,md}.
#
# Usage: bench/tp/run.sh [STEPS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup tp
steps=${1:-5}
model=configs/models/gpt2-124m.toml
common=(bench step --model "$model" --batch 4 --seq 256 --steps "$steps" --warmup 1 --json)

: >"$out_json"
for round in 1 2; do  # two rounds, interleaved, so drift hits every variant alike
  echo "== round $round: serial, 2 threads" >&2
  OMP_NUM_THREADS=2 "$weft" "${common[@]}" --threads 2 | tee -a "$out_json"
  echo "== round $round: tp=2, 2 ranks x 1 thread" >&2
  OMP_NUM_THREADS=1 "${mpirun[@]}" -n 2 "$weft" "${common[@]}" --threads 1 --tp 2 \
    | tee -a "$out_json"
  echo "== round $round: tp=2 + sequence parallelism" >&2
  OMP_NUM_THREADS=1 "${mpirun[@]}" -n 2 "$weft" "${common[@]}" --threads 1 --tp 2 \
    --sequence-parallel | tee -a "$out_json"
done

/usr/bin/python3 - "$out_json" "$out_md" <<'PY'
import json, platform, subprocess, sys, datetime, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
def key(r): return (r["tp"], r["sequence_parallel"])
groups = {}
for r in rows: groups.setdefault(key(r), []).append(r)
serial = statistics.median(r["ms_median"] for r in groups[(1, False)])
md = ["# Tensor-parallel step benchmark, GPT-2 124M (L=12, C=768, NH=12, Vp=50304), B=4, T=256", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}",
      f"- machine: {cpu}, {platform.platform()}; Open MPI 4.1 (btl self,vader)",
      "- `bench/tp/run.sh`: `weft bench step --json`, median of the timed steps per run, two "
      "interleaved rounds per variant (median of the rounds); the step time of a tp run is its "
      "slowest rank's",
      "- communication share: rank 0's time inside the tp group's collectives (from each call "
      "until its wait returned, so waiting for the other rank counts) over the step time", "",
      "| variant | ranks x threads | step ms | tokens/s | tp step / serial step | tp collectives share | mem per rank measured / predicted (MiB) |",
      "|---|---|---:|---:|---:|---:|---|"]
names = {(1, False): "serial", (2, False): "tp=2", (2, True): "tp=2 + sequence parallel"}
for k in [(1, False), (2, False), (2, True)]:
    g = groups.get(k, [])
    if not g: continue
    ms = statistics.median(r["ms_median"] for r in g)
    share = statistics.median(r["comm_share"] for r in g)
    r0 = g[0]
    md.append(f"| {names[k]} | {r0['ranks']} x {r0['threads']} | {ms:.0f} | {r0['B']*r0['T']*1000/ms:.1f} | "
              f"{ms/serial:.2f}x | {'-' if k[0]==1 else f'{100*share:.1f}%'} | "
              f"{r0['mem_measured_mib']:.0f} / {r0['mem_predicted_mib']:.0f} |")
md += ["", "Goal (issue #4): tp=2 costs at most 25% more than the 2-thread serial step on 2 cores."]
open(sys.argv[2], "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
