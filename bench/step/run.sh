#!/usr/bin/env bash
# Training-step benchmark (issue #2): in ONE run, weft's step, the GEMM ceiling on the model's own
# shapes (measured inside `weft bench step`), and the PyTorch baseline (../shared/bench/torch_gpt.py
# with Debian's python3-torch) at the same config and thread count. weft runs in fp32 (with and
# without recomputation) and once with --precision bf16 (bf16 GEMM inputs, fp32 accumulation; the
# fp32 ceiling stays the reference column, the bf16 ceiling is in the JSON). Writes
# bench/results/step-<stamp>.{json,md} (bench/common.sh: date, time and commit; no run overwrites
# another).
#
# Usage: bench/step/run.sh [THREADS]   (default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-2}
source bench/common.sh
bench_setup step
model=configs/models/gpt2-124m.toml
torch_script=${TORCH_GPT:-../shared/bench/torch_gpt.py}
# The baseline may run with the BLAS core type this CPU really has (issue #2 allows it here only).
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
torch_baseline_setup "$threads"  # OpenBLAS for PyTorch's linear layers, or no ratio at all

configs=("4 64" "8 256")
: >"$out_json"
for c in "${configs[@]}"; do
  read -r B T <<<"$c"
  echo "== B=$B T=$T: weft" >&2
  OMP_NUM_THREADS=$threads "$weft" bench step --model "$model" --batch "$B" --seq "$T" \
    --threads "$threads" --steps 5 --warmup 1 --json | tee -a "$out_json"
  for r in selective full; do
    OMP_NUM_THREADS=$threads "$weft" bench step --model "$model" --batch "$B" --seq "$T" \
      --threads "$threads" --steps 3 --warmup 1 --recompute $r --json | tee -a "$out_json"
  done
  OMP_NUM_THREADS=$threads "$weft" bench step --model "$model" --batch "$B" --seq "$T" \
    --threads "$threads" --steps 5 --warmup 1 --precision bf16 --json | tee -a "$out_json"
  echo "== B=$B T=$T: pytorch" >&2
  "${torch_env[@]}" /usr/bin/python3 "$torch_script" --device cpu --layers 12 --hidden 768 \
    --heads 12 --vocab 50304 --batch "$B" --seq "$T" --threads "$threads" --steps 3 --warmup 1 \
    | tee -a "$out_json"
done

/usr/bin/python3 - "$out_json" "$out_md" "$threads" "$torch_blas" <<'PY'
import json, platform, subprocess, sys, datetime
blas = json.loads(sys.argv[4])
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = open("/proc/cpuinfo").read()
isa = "AVX-512" + (" + avx512_bf16" if "avx512_bf16" in flags else "") if "avx512f" in flags else "AVX2"
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = [f"# Training-step benchmark, GPT-2 124M (L=12, C=768, NH=12, Vp=50304)", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}",
      f"- machine: {cpu} ({isa}), {sys.argv[3]} threads; {platform.platform()}",
      "- weft: `weft bench step --json`, median of 5 steps (recompute runs: 3); PyTorch: "
      "`torch_gpt.py --device cpu` (Debian python3-torch, fp32), median of 3 steps",
      f"- PyTorch {blas['torch']} ran its linear layers on {blas['blas_kind']} "
      f"({blas['blas']}), {blas['torch_threads']} threads (bench/torch_blas.py, read from the "
      "process's own memory map)",
      "- precision bf16: the linear layers' GEMM inputs rounded to bf16, fp32 accumulation, fp32 "
      "weights and optimizer state (`--precision bf16`); GEMM ceiling = the fp32 one, bf16 ceiling "
      "in the JSON (`gemm_ceiling_bf16_gflops`)",
      "- model FLOPs per step: 72 B T L C^2 (1 + T/6C + V/12LC) (no recomputation counted)", "",
      "| B x T | recompute | precision | weft tok/s | weft GFLOP/s | GEMM ceiling GFLOP/s | weft / ceiling | PyTorch tok/s | weft / PyTorch | mem measured / predicted (MiB) |",
      "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
torch = {(r["B"], r["T"]): r for r in rows if r["name"] == "pytorch"}
for r in rows:
    if r["name"] != "weft":
        continue
    t = torch.get((r["B"], r["T"]))
    md.append(f"| {r['B']} x {r['T']} | {r['recompute']} | {r.get('precision', 'f32')} | "
              f"{r['tokens_per_s']:.1f} | {r['model_gflops']:.1f} | "
              f"{r['gemm_ceiling_gflops']:.1f} | {100 * r['ratio_to_gemm_ceiling']:.1f}% | "
              f"{t['tokens_per_s'] if t else float('nan'):.1f} | "
              f"{r['tokens_per_s'] / t['tokens_per_s'] if t else float('nan'):.2f}x | "
              f"{r['mem_measured_mib']:.0f} / {r['mem_predicted_mib']:.0f} ({100 * r['mem_measured_over_predicted']:.1f}%) |")
open(sys.argv[2], "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
