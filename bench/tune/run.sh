#!/usr/bin/env bash
# weft tune benchmark (issue 16): `mpirun -n 4 weft tune` on a small GPT (L=4, C=256, 4 heads,
# V=4096, T=64, global batch 8) with its default budget, then the grid over the same candidates
# (`weft tune --grid --passes 4`: every one of the first round's layouts once per pass, at the
# halving's final trial length). The grid's first pass is the grid the halving is compared with:
# its trials and steps against the halving's, and whether both found the same winner. Its four
# passes give each layout's figure (the median of its steps over the passes: the machine's phases
# last seconds, so one trial can sit in one phase from its first step to its last), which the
# planner is validated against, before and after the refit, and the halving's winner measured
# against.
#
# Data: the Austen demo's dataset (data/austen, from scripts/demo.sh) when it is there, else a
# synthetic llm.c token file of the same vocabulary (the step time does not depend on the tokens).
# Writes bench/results/tune-<stamp>.{json,md}: the search against the grid, and the planner's
# step-time error per layout before the refit (the preset as it is) and after it (refitted from
# that table's own trials: compute_scale, weight_passes, step_overhead, tp_collective_overhead;
# docs/planner.md §9).
# The grid's refit is from the figures of its four passes; the halving's from its own trials.
#
# Usage: bench/tune/run.sh [RANKS] [--update-calibration]   (default 4 ranks)
#   --update-calibration: the grid's refit (16 layouts x the final trial length) rewrites
#   configs/clusters/this-machine.toml, as `weft tune --update-calibration` does; the halving
#   before it still prices with the preset as it was.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup tune
ranks=${1:-4}
update=()
if [ "${2:-}" = --update-calibration ]; then update=(--update-calibration); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -s data/austen.idx ]; then
  data=data/austen
  data_note="the Austen demo's dataset (data/austen, scripts/demo.sh)"
else
  data=$work/synthetic.bin
  data_note="a synthetic llm.c token file (no data/austen: run scripts/demo.sh for the real one)"
  /usr/bin/python3 bench/synthetic_tokens.py "$data" 4096 200000 --random 1
fi
cat >"$work/run.toml" <<EOF
[model]
name = "tune-4l"
n_layer = 4
n_embd = 256
n_head = 4
vocab_size = 4096
pad_vocab_to = 128
max_seq_len = 64

[data]
train = "$data"
tokenizer = "none"

[train]
seq_len = 64
micro_batch = 2
global_batch = 8
steps = 100
threads = 1

[run]
out_dir = "$work/run"
EOF

echo "== weft tune (successive halving, default budget) on $ranks ranks" >&2
start=$(date +%s.%N)
OMP_NUM_THREADS=1 "${mpirun[@]}" -n "$ranks" "$weft" tune "$work/run.toml" --out "$work/halving" \
  | tee "$work/halving.log"
end=$(date +%s.%N)
passes=4
echo "== weft tune --grid --passes $passes on $ranks ranks" >&2
OMP_NUM_THREADS=1 "${mpirun[@]}" -n "$ranks" "$weft" tune "$work/run.toml" --grid \
  --passes "$passes" --budget-minutes 30 --out "$work/grid" "${update[@]}" | tee "$work/grid.log"

/usr/bin/python3 - "$work" "$out_json" "$out_md" "$start" "$end" "$data_note" \
  "$ranks" "$passes" "${update[@]}" <<'PY'
import json, platform, subprocess, sys, datetime
work, out_json, out_md, t0, t1, data_note, ranks, passes = sys.argv[1:9]
updated = len(sys.argv) > 9
wall = float(t1) - float(t0)
h = json.load(open(f"{work}/halving/tune.json"))
g = json.load(open(f"{work}/grid/tune.json"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
def ok(t):
    return t["ok"] and not t["stopped"]
# The grid's first pass alone: the grid at the halving's final trial length, what the halving saves
# trials against. Each layout's first trial is its trial of that pass.
first = [(l, l["trials"][0]) for l in g["layouts"] if l["trials"]]
pass1 = {"trials": len(first), "steps": sum(g["warmup"] + t["steps"] for _, t in first),
         "seconds": sum(t["wall_s"] for _, t in first)}
pass1_best = min(((l, t) for l, t in first if ok(t)), key=lambda x: x[1]["step_ms"])[0]
pass1["winner"], pass1["winner_planner_rank"] = pass1_best["layout"], pass1_best["planner_rank"]
# Each layout's figure over the passes (measured_ms: the median of its timed steps, pooled).
grid_fastest = min((l for l in g["layouts"] if l["measured_ms"] is not None),
                   key=lambda l: l["measured_ms"])
gw_of_h = next((l for l in g["layouts"] if l["layout"] == h["winner"]), None)
result = {
    "date": f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC", "commit": commit, "cpu": cpu,
    "ranks": int(ranks), "data": data_note, "model": h["model"],
    "halving": {k: h[k] for k in ("candidates", "infeasible", "feasible", "initial", "trials",
                                  "steps", "rounds", "seconds", "budget_minutes", "budget_spent",
                                  "winner", "winner_planner_rank", "refit")},
    "halving_wall_s": float(wall),
    "grid_first_pass": pass1,
    "grid": {k: g[k] for k in ("initial", "passes", "trials", "steps", "seconds", "winner",
                               "winner_planner_rank")},
    "same_winner": h["winner"] == pass1["winner"],
    "same_winner_over_passes": h["winner"] == g["winner"],
    "halving_winner_grid_ms": gw_of_h["measured_ms"] if gw_of_h else None,
    "grid_fastest_ms": grid_fastest["measured_ms"],
    "halving_layouts": h["layouts"], "grid_layouts": g["layouts"],
    "grid_refit": g.get("refit"), "grid_refit_wrote_preset": updated,
}
json.dump(result, open(out_json, "w"), indent=2)
ratio = (result["halving_winner_grid_ms"] / result["grid_fastest_ms"]
         if result["halving_winner_grid_ms"] else float("nan"))
refit = h.get("refit") or {}
md = [f"# weft tune: {h['model']} (L=4, C=256, V=4096), T=64, global batch 8, {ranks} ranks", "",
      f"- date: {result['date']}; commit {commit}",
      f"- machine: {cpu}, {platform.platform()}; {ranks} ranks x 1 thread (oversubscribed where "
      "the machine has fewer cores), shared with other jobs",
      f"- data: {data_note}",
      f"- `bench/tune/run.sh {ranks}`: `mpirun -n {ranks} weft tune RUN.toml` (default budget), then "
      f"`weft tune --grid --passes {passes}` over the same first-round layouts at the halving's "
      "final trial length; its first pass is the grid the halving is compared with",
      "",
      "| | layouts tried | trials | steps (warm-up + timed) | wall s | winner | planner rank |",
      "|---|---:|---:|---:|---:|---|---:|",
      f"| successive halving | {h['initial']} | {h['trials']} | {h['steps']} | {float(wall):.0f} | "
      f"`{h['winner']}` | {h['winner_planner_rank']} |",
      f"| grid (first pass) | {g['initial']} | {pass1['trials']} | {pass1['steps']} | "
      f"{pass1['seconds']:.0f} | `{pass1['winner']}` | {pass1['winner_planner_rank']} |",
      f"| grid ({g['passes']} passes: figure = median step) | {g['initial']} | {g['trials']} | "
      f"{g['steps']} | {g['seconds']:.0f} | `{g['winner']}` | {g['winner_planner_rank']} |",
      "",
      f"- layouts: {h['candidates']} enumerated, {h['infeasible']} infeasible, {h['feasible']} "
      "feasible; only feasible ones are tried",
      f"- halving ended: {'the budget' if h['budget_spent'] else 'one layout left'} "
      f"({h['budget_minutes']:.3g} minutes budget); the whole command took {float(wall):.0f} s",
      f"- steps saved by the halving: {pass1['steps'] - h['steps']} of the grid's {pass1['steps']} "
      f"({100 * (1 - h['steps'] / pass1['steps']):.0f}%)",
      f"- same winner as the grid's first pass: {'yes' if result['same_winner'] else 'no'}; as "
      f"its {g['passes']} passes: {'yes' if result['same_winner_over_passes'] else 'no'}; the "
      f"halving's winner measured {ratio:.3f}x the grid's fastest (figures over the passes)",
      f"- planner step-time error (mean |predicted/measured - 1|, weighted by timed steps) on the halving's layouts: "
      f"{100 * refit.get('mean_abs_error_before', float('nan')):.1f}% before the refit, "
      + (f"{100 * refit['mean_abs_error_after']:.1f}% after" if "errors_after" in refit
         else f"no refit ({refit.get('refused', 'none')})"),
      ""]
# The planner against measurement per layout: the preset as it is (before) and refitted from the
# same table's trials (after), for the halving (its trials of 3-24 timed steps) and the grid (the
# median of its passes' steps, 4 trials of 24).
grid_refit = g.get("refit") or {}
def within(errors):
    return sum(abs(e) <= 0.10 for e in errors)
md += ["## Step time: the planner against measurement, before and after the refit", "",
       "Error = predicted / measured - 1; measured = the layout's figure, the median of its "
       "trials' timed steps (each step the slowest rank's). Before: the preset as committed (configs/clusters/"
       "this-machine.toml); after: refitted from that table's own trials (docs/planner.md §9).",
       ""]
for name, r, t in (("halving", refit, h), (f"grid ({g['passes']} passes)", grid_refit, g)):
    if not r:
        continue
    if "errors_after" not in r:
        md.append(f"- {name}: {within(r['errors_before'])} of {len(r['errors_before'])} layouts "
                  f"within 10%; mean {100 * r['mean_abs_error_before']:.1f}%; refit refused: "
                  f"{r.get('refused', '?')}")
        continue
    md.append(f"- {name}: {within(r['errors_before'])} of {len(r['errors_before'])} layouts "
              f"within 10% before, {within(r['errors_after'])} after; mean "
              f"{100 * r['mean_abs_error_before']:.1f}% -> {100 * r['mean_abs_error_after']:.1f}%; "
              f"refit: {r.get('note', '?')}")
# The GEMM speed probes (Cluster::gemm_speed): the run's speed against the preset's, and whether
# a trial's probe (just before it) tells how slow the trial runs against its layout's figure
# (Pearson correlation over the grid's trials: near -1, the probe tracks the machine's speed;
# near 0, it does not).
def speed_text(t):
    s = t.get("gemm_speed") or {}
    return (f"{s.get('fastest', float('nan')):.3f}x the GEMM model over {s.get('probes', 0)} "
            f"probes; before the search (3 probes) {s.get('relative', float('nan')):.3f}x the preset's "
            f"{s.get('preset', 0):.3f}{' (warned: another machine?)' if s.get('foreign') else ''}")
pairs = [(x["gemm_speed"], x["step_ms"] / l["measured_ms"]) for l in g["layouts"]
         if l["measured_ms"] for x in l["trials"] if ok(x) and x.get("gemm_speed")]
def pearson(p):
    n = len(p)
    if n < 3:
        return float("nan")
    mx, my = sum(a for a, _ in p) / n, sum(b for _, b in p) / n
    sxy = sum((a - mx) * (b - my) for a, b in p)
    sxx, syy = sum((a - mx) ** 2 for a, _ in p), sum((b - my) ** 2 for _, b in p)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")
result["grid_speed_step_correlation"] = pearson(pairs)
json.dump(result, open(out_json, "w"), indent=2)
md.append(f"- GEMM speed: halving {speed_text(h)}; grid {speed_text(g)}; over the grid's "
          f"{len(pairs)} trials, the probe before a trial against its step over the layout's "
          f"figure: correlation {result['grid_speed_step_correlation']:+.2f}")
if updated:
    md.append("- the grid's refit was written to configs/clusters/this-machine.toml "
              "(`--update-calibration`)")
md += ["", "| layout | halving: timed steps | measured ms | before | after "
       "| grid: passes' trials ms | measured ms | before | after |",
       "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
def row_of(r, t):
    out = {}
    if not r:
        return out
    by_layout = {l["layout"]: l for l in t["layouts"]}
    after = r.get("errors_after") or [float("nan")] * len(r["errors_before"])
    for name, eb, ea in zip(r["layouts"], r["errors_before"], after):
        l = by_layout[name]
        trials = " ".join(f"{x['step_ms']:.1f}" for x in l["trials"] if ok(x))
        out[name] = (l["short"], l["timed_steps"], l["measured_ms"], eb, ea, trials)
    return out
def pct(x):
    return "-" if x != x else f"{100 * x:+.1f}%"  # no refit (refused): no error after
hr, gr = row_of(refit, h), row_of(grid_refit, g)
for name in list(hr) + [n for n in gr if n not in hr]:
    a, b = hr.get(name), gr.get(name)
    short = (a or b)[0]
    cells = [f"{a[1]} | {a[2]:.3f} | {pct(a[3])} | {pct(a[4])}" if a else " | | |",
             f"{b[5]} | {b[2]:.3f} | {pct(b[3])} | {pct(b[4])}" if b else " | | |"]
    md.append(f"| {short} | " + " | ".join(cells) + " |")
md += ["", "## The halving's table", "",
      open(f"{work}/halving/tune.md").read().split("\n", 2)[2],
      "## The grid's table", "",
      open(f"{work}/grid/tune.md").read().split("\n", 2)[2]]
open(out_md, "w").write("\n".join(md) + "\n")
print("\n".join(md[:22]))
PY
echo "wrote $out_json $out_md" >&2
