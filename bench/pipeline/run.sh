#!/usr/bin/env bash
# Pipeline bubble benchmark (issue #5): measured bubble on CPU ranks next to the simulation of the
# same schedule program, for GPipe, 1F1B, interleaved (vp=2) and ZB-H1, m=8 microbatches.
#   pp=2: 2 ranks x 1 thread on this machine's 2 cores (each rank has a core)
#   pp=4: 4 ranks x 1 thread on 2 cores (oversubscribed: waiting ranks yield their core, so the
#         measured bubble mixes schedule idle time with time-sharing; reported for completeness)
# Measured bubble = sum over ranks of time blocked in receives / sum of the rest (Narayanan et
# al.'s idle/busy); simulated = schedule::simulate with stages priced by their FLOPs per token,
# backward = 2 x forward, free messages. Writes bench/results/pipeline-<stamp>.{json,md}.
#
# Usage: bench/pipeline/run.sh [STEPS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup pipeline
steps=${1:-3}
model=configs/models/pipe-8l.toml

: >"$out_json"
for pp in 2 4; do
  for kind in gpipe 1f1b "interleaved 2" zb-h1; do
    read -r schedule vp <<<"$kind"
    vp=${vp:-1}
    echo "== pp=$pp $schedule vp=$vp" >&2
    OMP_NUM_THREADS=1 "${mpirun[@]}" -n "$pp" "$weft" bench step --model "$model" --batch 2 \
      --seq 128 --microbatches 8 --pp "$pp" --vp "$vp" --schedule "$schedule" --threads 1 \
      --steps "$steps" --warmup 1 --json | tee -a "$out_json"
  done
done

/usr/bin/python3 - "$out_json" "$out_md" <<'PY'
import json, platform, subprocess, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = ["# Pipeline bubble benchmark: configs/models/pipe-8l.toml (L=8, C=256, V=4096), B=2, T=128, m=8", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}",
      f"- machine: {cpu} (2 cores), {platform.platform()}; Open MPI 4.1 (btl self,vader), 1 thread per rank",
      "- measured: sum over ranks of time blocked in receives / sum of the rest (idle / busy); "
      "simulated: the same program, stages priced by FLOPs per token (24h^2+4sh per layer, 2hV "
      "for the head), B = 2F, free messages; formula: (p-1)/m, interleaved (p-1)/(m vp)",
      "- pp=4 runs 4 ranks on 2 cores: time-sharing inflates the measured waiting", "",
      "| pp | schedule | vp | step ms | bubble measured | bubble simulated | formula | waiting share per rank |",
      "|---:|---|---:|---:|---:|---:|---:|---|"]
for r in rows:
    p, m, vp = r["pp"], r["microbatches"], r["vp"]
    formula = (p - 1) / (m * vp) if r["schedule"] == "interleaved" else (p - 1) / m
    share = " ".join(f"{100*x:.0f}%" for x in r["waiting_share_per_rank"])
    md.append(f"| {p} | {r['schedule']} | {vp} | {r['ms_median']:.0f} | {r['bubble_measured']:.3f} | "
              f"{r['bubble_simulated']:.3f} | {formula:.3f} | {share} |")
open(sys.argv[2], "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
