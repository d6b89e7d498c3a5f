#!/usr/bin/env bash
# Checkpoint benchmark (issue: distributed checkpoints): GPT-2 124M (configs/models/gpt2-124m.toml)
# trained with `weft train` on data/austen (B=1 per replica, T=64), in ONE run on this machine:
#   save and load throughput of the full training state (fp32 parameters + AdamW m and v, the
#   bytes of every rank's files) for 1 rank (2 threads) and 4 ranks x 1 thread (oversubscribed on
#   the 2 cores) as dp=4 zero=1 and tp=2 pp=2, and one load under another layout (a tp=2 pp=2
#   checkpoint resumed as dp=4 zero=3);
#   the baseline on the same filesystem: dd writing a new file of the checkpoint's size with fsync
#   (7 times through the run, the median: this virtual disk's write rate swings several-fold),
#   and reading one back (page cache warm, and cold after dropping the page cache, when allowed);
#   the time a crash costs, 4 ranks dp=4 zero=1: save_every=K, WEFT_FAULT=step:N:1 SIGKILLs rank 1
#   as step N begins; (a) kill to the job's exit, (b) `--resume` to training back at step N-1,
#   and the steps redone (N-1-K).
# Save = the collective save on rank 0 ("weft train: checkpoint DIR (MB in s, GB/s)"), in the
# foreground (train.async_checkpoint=false: bench/checkpoint/async.sh measures the background); 2 steps
# with save_every=1, both saves reported (the first also faults in the page cache's pages). Load =
# the "resuming at step N from DIR (MB in s, GB/s)" of a `--resume --stop-after` run. Every run's
# launch to its start line is also kept (startup: data, model init, load, GEMM ceiling). Writes
# bench/results/checkpoint-<stamp>.{json,md}. Needs ~6 GB free under $TMPDIR (/tmp).
#
# Usage: bench/checkpoint/run.sh [CRASH_STEP [SAVE_EVERY]]   (default 7 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_setup checkpoint
crash_step=${1:-7}
save_every=${2:-4}
model=configs/models/gpt2-124m.toml
export OMP_NUM_THREADS=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-ckpt-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
free_gb=$(df -P --block-size=1G "$tmp" | awk 'NR==2 {print $4}')
if [ "$free_gb" -lt 6 ]; then
  echo "bench/checkpoint: $free_gb GB free under $tmp, need 6" >&2
  exit 1
fi
t_script=$(date +%s.%N)
cut -d' ' -f1-3 /proc/loadavg >"$tmp/loadavg"

cat >"$tmp/run.toml" <<EOF
[model]
config = "$model"
[data]
train = "data/austen"
val_fraction = 0.02
tokenizer = "none"
[train]
seq_len = 64
micro_batch = 1
steps = 100
eval_every = 0
save_every = 1
keep_last = 2
async_checkpoint = false
threads = 1
log_every = 1
[run]
out_dir = "$tmp/unused"
EOF

# train TAG RANKS [weft train args...]: the output, each line prefixed by the epoch time it
# arrived, to $tmp/TAG.log (and plain to stderr); the first line is "@launch TIME".
train() {
  local tag=$1 n=$2
  shift 2
  echo "== $tag" >&2
  local cmd=("$weft" train "$tmp/run.toml" "$@")
  [ "$n" -gt 1 ] && cmd=("${mpirun[@]}" -n "$n" "${cmd[@]}")
  echo "@launch $(date +%s.%N)" >"$tmp/$tag.log"
  "${cmd[@]}" 2>&1 | while IFS= read -r line; do
    echo "$(date +%s.%N) $line" >>"$tmp/$tag.log"
    echo "$line" >&2
  done
}
# dd_write TAG: a new file of the checkpoint's size (179 x 8 MiB = 1501.6 MB) written and
# fsynced on the same filesystem, then removed.
dd_write() {
  dd if=/dev/zero of="$tmp/dd-$1.bin" bs=8M count=179 conv=fsync 2>&1 | sed "s/^/write_$1 /" \
    | tee -a "$tmp/dd.log" >&2
  rm -f "$tmp/dd-$1.bin"
}
# Dropping the page cache needs root; without it the cold rows are left out.
drop_caches() { sync && { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; }

# 1. Baseline: dd on the same filesystem. The virtual disk's write rate varies several-fold
# from minute to minute, so writes are also measured next to each save run (below) and the
# baseline is their median.
echo "== dd" >&2
: >"$tmp/dd.log"
dd_write 1
dd_write 2
dd if=/dev/zero of="$tmp/dd.bin" bs=8M count=179 conv=fsync 2>&1 | sed 's/^/write_3 /' \
  | tee -a "$tmp/dd.log" >&2
cat "$tmp/dd.bin" >/dev/null
dd if="$tmp/dd.bin" of=/dev/null bs=8M 2>&1 | sed 's/^/read_warm /' | tee -a "$tmp/dd.log" >&2
if drop_caches; then
  dd if="$tmp/dd.bin" of=/dev/null bs=8M 2>&1 | sed 's/^/read_cold /' | tee -a "$tmp/dd.log" >&2
fi
rm -f "$tmp/dd.bin"

# 2. Save and load, layout by layout: 2 steps with save_every=1, then resumes from step 2.
one=(--set train.threads=2 --set train.global_batch=1)
dpz1=(--set parallel.dp=4 --set parallel.zero=1 --set train.global_batch=4)
tp2pp2=(--set parallel.tp=2 --set parallel.pp=2 --set train.global_batch=2)
dpz3=(--set parallel.dp=4 --set parallel.zero=3 --set train.global_batch=4)

# NAME RANKS DIR ARGS...: 2 steps under ARGS saving each (into DIR), then a resume from step 2.
save_then_load() {
  local name=$1 ranks=$2 dir=$3
  shift 3
  train "save-$name" "$ranks" "$@" --set run.out_dir="$dir" --stop-after 2
  train "load-$name" "$ranks" "$@" --set run.out_dir="$dir-b" \
    --resume "$dir/checkpoints/step_00000002" --stop-after 3
  rm -rf "$dir-b"
}

dd_write 1rank
save_then_load 1rank 1 "$tmp/r1" "${one[@]}"
rm -rf "$tmp/r1"

dd_write dp4-zero1
save_then_load dp4-zero1 4 "$tmp/dpz1" "${dpz1[@]}"
if drop_caches; then
  train load-cold-dp4-zero1 4 "${dpz1[@]}" --set run.out_dir="$tmp/dpz1-c" \
    --resume "$tmp/dpz1/checkpoints/step_00000002" --stop-after 3
fi
rm -rf "$tmp/dpz1" "$tmp/dpz1-c"

dd_write tp2-pp2
save_then_load tp2-pp2 4 "$tmp/tp" "${tp2pp2[@]}"
train load-tp2-pp2-as-dp4-zero3 4 "${dpz3[@]}" --set run.out_dir="$tmp/tp-c" \
  --resume "$tmp/tp/checkpoints/step_00000002" --stop-after 3
rm -rf "$tmp/tp" "$tmp/tp-c"
dd_write last

# 3. The crash: dp=4 zero=1, save_every=K, rank 1 killed as step N begins; relaunch with --resume.
echo "== crash dp=4 zero=1, save_every=$save_every, WEFT_FAULT=step:$crash_step:1" >&2
/usr/bin/python3 - "$tmp" "$crash_step" "$save_every" "$weft" "${mpirun[@]}" <<'PY' >"$tmp/crash.json"
import json, os, subprocess, sys, threading, time
tmp, n, k, weft, mpirun = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
out_dir = f"{tmp}/crash"
metrics = f"{out_dir}/metrics.jsonl"
cmd = mpirun + ["-n", "4", "-x", "WEFT_FAULT", weft, "train", f"{tmp}/run.toml",
                "--set", "parallel.dp=4", "--set", "parallel.zero=1", "--set", "train.global_batch=4",
                "--set", f"train.save_every={k}", "--set", f"run.out_dir={out_dir}"]

def run(args, env, until=None):
    """Runs args; returns (rc, exit time, [(time, line)], time `until` first held (polled 10 ms))."""
    lines, held = [], None
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         bufsize=1)
    def read():
        for line in p.stdout:
            lines.append((time.time(), line.rstrip("\n")))
            print(line, end="", file=sys.stderr)
    reader = threading.Thread(target=read)
    reader.start()
    while p.poll() is None:
        if until is not None and held is None:
            held = until()
        time.sleep(0.01)
    t_exit = time.time()
    reader.join()
    if until is not None and held is None:
        held = until()
    return p.returncode, t_exit, lines, held

def steps_logged():
    try:
        return [json.loads(l) for l in open(metrics) if l.strip()]
    except (OSError, ValueError):
        return []

env = dict(os.environ, WEFT_FAULT=f"step:{n}:1")
t0 = time.time()
rc1, t_exit1, lines1, _ = run(cmd, env)
before = steps_logged()
t_kill = os.stat(metrics).st_mtime  # step N-1's line: the last write before step N began
ckpt = int(open(f"{out_dir}/checkpoints/latest").read().strip().split("_")[-1])

env = dict(os.environ, WEFT_FAULT="")  # empty: no fault
t_relaunch = time.time()
def back():  # metrics.jsonl rewritten by the resumed run and at step N-1 again
    st = steps_logged()
    try:
        mtime = os.stat(metrics).st_mtime
    except OSError:
        return None
    if mtime >= t_relaunch and st and st[-1]["step"] == n - 1:
        return mtime
    return None
rc2, t_exit2, lines2, t_back = run(cmd + ["--resume", "--stop-after", str(n - 1)], env, back)
after = steps_logged()
t_start = next((t for t, l in lines2 if "resuming at step" in l), None)
start_line = next((l for t, l in lines2 if "resuming at step" in l), "")
t_start1 = next((t for t, l in lines1 if "GEMM ceiling" in l), None)
plain = sorted(s["step_ms"] for s in before if s["step"] >= 2)
redone = [s["step_ms"] for s in after if s["step"] > ckpt]
print(json.dumps({
    "kind": "crash", "layout": "dp=4 zero=1", "ranks": 4, "fault": f"step:{n}:1",
    "save_every": k, "checkpoint_step": ckpt, "steps_done_before_kill": len(before),
    "steps_redone": n - 1 - ckpt, "crashed_rc": rc1,
    "crashed_tail": [l for _, l in lines1[-6:]],
    "kill_to_exit_s": t_exit1 - t_kill, "run_to_kill_s": t_kill - t0,
    "fresh_launch_to_start_line_s": (t_start1 - t0) if t_start1 else None,
    "relaunch_to_start_line_s": (t_start - t_relaunch) if t_start else None,
    "start_line_to_back_s": (t_back - t_start) if t_start and t_back else None,
    "relaunch_to_back_s": (t_back - t_relaunch) if t_back else None,
    "resumed_rc": rc2, "resume_line": start_line,
    "plain_step_ms_median": plain[len(plain) // 2] if plain else None,
    "plain_step_ms": [s["step_ms"] for s in before],
    "redone_step_ms": redone,
}))
PY
rm -rf "$tmp/crash"
cut -d' ' -f1-3 /proc/loadavg >>"$tmp/loadavg"
script_s=$(awk -v a="$t_script" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')

/usr/bin/python3 - "$tmp" "$out_json" "$out_md" "$script_s" <<'PY'
import json, os, platform, re, statistics, subprocess, sys, datetime
tmp, out_json, out_md, script_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
load_avg = [l.strip() for l in open(f"{tmp}/loadavg")]
io = r"\(([\d.]+) MB in ([\d.]+) s, ([\d.]+) GB/s\)"
runs = [("1rank", "1 rank, 2 threads", 1), ("dp4-zero1", "dp=4 zero=1", 4),
        ("tp2-pp2", "tp=2 pp=2", 4), ("tp2-pp2-as-dp4-zero3", "tp=2 pp=2 -> dp=4 zero=3", 4)]
rows = []
for line in open(f"{tmp}/dd.log"):
    m = re.match(r"(\w+?)_(\S+) (\d+) bytes .* copied, ([\d.e+-]+) s", line)
    if m:
        b, s = int(m.group(3)), float(m.group(4))
        rows.append({"kind": "dd_" + m.group(1), "tag": m.group(2), "bytes": b, "seconds": s,
                     "gbps": b / s / 1e9})

def read_log(tag):
    """[(time, line)] of a train() log and its launch time, or None when the run was skipped."""
    path = f"{tmp}/{tag}.log"
    if not os.path.exists(path):
        return None, None
    lines = [l.rstrip("\n").split(" ", 1) for l in open(path)]
    launch = float(lines[0][1])
    return launch, [(float(t), l) for t, l in lines[1:]]

for key, name, ranks in runs:
    for kind, cache, tag in [("save", None, f"save-{key}"), ("load", "warm", f"load-{key}"),
                             ("load", "cold", f"load-cold-{key}")]:
        launch, lines = read_log(tag)
        if lines is None:
            continue
        base = {"kind": kind, "layout": name, "ranks": ranks, "run": tag,
                "warnings": [l for _, l in lines if "warning" in l.lower()]}
        start = next((t for t, l in lines if "GEMM ceiling" in l), None)
        base["launch_to_start_line_s"] = start - launch if start else None
        if kind == "save":
            for _, l in lines:
                m = re.search(r"weft train: checkpoint \S+step_0*(\d+) " + io, l)
                if m and int(m.group(1)) <= 2:
                    rows.append(dict(base, step=int(m.group(1)), mb=float(m.group(2)),
                                     seconds=float(m.group(3)), gbps=float(m.group(4))))
        else:
            m = next(filter(None, (re.search(r"resuming at step (\d+) from \S+ " + io, l)
                                   for _, l in lines)))
            rows.append(dict(base, cache=cache, step=int(m.group(1)), mb=float(m.group(2)),
                             seconds=float(m.group(3)), gbps=float(m.group(4))))
crash = json.load(open(f"{tmp}/crash.json"))
rows.append(crash)
with open(out_json, "w") as f:
    for r in rows:
        f.write(json.dumps(r, sort_keys=True) + "\n")

writes = [r["gbps"] for r in rows if r["kind"] == "dd_write"]
write_base = statistics.median(writes)
dd_read = {r["tag"]: r["gbps"] for r in rows if r["kind"] == "dd_read"}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
size = next(r["mb"] for r in rows if r["kind"] == "save")
c = crash
n = int(c["fault"].split(":")[1])
md = ["# Checkpoint benchmark: GPT-2 124M (L=12, C=768, Vp=50304), parameters + AdamW m and v", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}; script wall time {script_s:.0f} s",
      f"- machine: {cpu} ({os.cpu_count()} cores), {platform.platform()}; {mpi} (btl self,vader); "
      "checkpoints and the dd files on the same ext4 filesystem (/tmp, a virtual disk); "
      f"load average (1/5/15 min) {load_avg[0]} at the start, {load_avg[-1]} at the end "
      "(the machine is shared with other builds)",
      "- `bench/checkpoint/run.sh`: `weft train` of configs/models/gpt2-124m.toml on data/austen "
      "(`data.tokenizer=none`), `train.seq_len=64 train.micro_batch=1 train.eval_every=0 "
      "train.save_every=1 train.keep_last=2`, `train.global_batch` = micro_batch x dp (tp=2 pp=2: 2, "
      "for 2 pipeline microbatches); 1 rank: 2 threads; 4 ranks: 1 thread each on the 2 cores "
      "(`mpirun --oversubscribe`); e.g. `mpirun --mca btl self,vader --oversubscribe -n 4 weft train "
      "RUN.toml --set parallel.dp=4 --set parallel.zero=1 --set train.global_batch=4 --stop-after 2`, "
      "then the same with `--set run.out_dir=NEW --resume OLD/checkpoints/step_00000002 --stop-after 3`",
      f"- size: {size:.1f} MB per checkpoint (124.5M fp32 parameters, AdamW m and v: the bytes of "
      "every rank's files). Save: `--stop-after 2`, the saves of steps 1 and 2; the seconds are rank "
      "0's collective save (every file fsynced, renamed into place, `latest` replaced). Load: "
      "`--resume DIR/step_00000002 --stop-after 3` into a new out_dir, the seconds on the start line",
      "- baseline: `dd if=/dev/zero of=NEW bs=8M count=179 conv=fsync` (1.50 GB), "
      f"{len(writes)} times in the run (3 at the start, one before each layout's save run, one "
      f"at the end): median {write_base:.2f} GB/s, range {min(writes):.2f}-{max(writes):.2f}; "
      "`dd if=F of=/dev/null bs=8M`, page cache warm (F just written and read once) and cold (after "
      "`echo 3 > /proc/sys/vm/drop_caches`). weft's loads are warm (the checkpoint was just "
      "written) except the row marked cold (page cache dropped first)",
      "",
      "## Save and load throughput", "",
      "| operation | layout | ranks | step | s | GB/s | baseline GB/s | weft / baseline | run's launch to start line s |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    if r["kind"] == "save":
        md.append(f"| save | {r['layout']} | {r['ranks']} | {r['step']} | {r['seconds']:.2f} | "
                  f"{r['gbps']:.2f} | {write_base:.2f} (dd write, median) | {r['gbps']/write_base:.2f}x | "
                  f"{r['launch_to_start_line_s']:.1f} |")
    elif r["kind"] == "load":
        b = dd_read.get(r["cache"])
        md.append(f"| load ({r['cache']} cache) | {r['layout']} | {r['ranks']} | {r['step']} | "
                  f"{r['seconds']:.2f} | {r['gbps']:.2f} | {b:.2f} (dd read {r['cache']}) | "
                  f"{r['gbps']/b:.2f}x | {r['launch_to_start_line_s']:.1f} |")
md += ["", "dd runs: " + ", ".join(f"{r['kind'][3:]} {r['tag']} {r['gbps']:.2f} GB/s ({r['seconds']:.2f} s)"
                                    for r in rows if r["kind"].startswith("dd_"))]
a, b = c["kill_to_exit_s"], c["relaunch_to_back_s"]
step_s = c["plain_step_ms_median"] / 1e3
load = re.search(r"\(([\d.]+) MB in ([\d.]+) s", c["resume_line"])
load_s = float(load.group(2)) if load else float("nan")
md += ["", f"## Time lost to a crash: dp=4 zero=1, save_every={c['save_every']}, "
       f"WEFT_FAULT={c['fault']} (rank 1 SIGKILLed as step {n} begins)", "",
       "The kill time is the mtime of metrics.jsonl after the crashed job (its last write: step "
       f"{n-1}'s line, just before step {n} began); \"back\" is the mtime of the resumed run's "
       f"step {n-1} line (polled every 10 ms).", "",
       "| figure | value |", "|---|---:|",
       f"| (a) kill to the job's exit (mpirun's exit status {c['crashed_rc']}) | {a:.2f} s |",
       f"| (b) relaunch with `--resume` to training back at step {n-1} | {b:.2f} s |",
       f"| of (b): relaunch to the start line (mpirun, data, model init, load, GEMM ceiling) | {c['relaunch_to_start_line_s']:.2f} s |",
       f"| of that: the load (the start line's seconds) | {load_s:.2f} s |",
       f"| the crashed (fresh) run's launch to its start line, for comparison (no load) | {c['fresh_launch_to_start_line_s']:.2f} s |",
       f"| of (b): start line to step {n-1}'s line (the redone steps) | {c['start_line_to_back_s']:.2f} s |",
       f"| steps redone (step {n-1} - checkpoint step {c['checkpoint_step']}) | {c['steps_redone']} |",
       f"| plain step time (median of steps 2-{n-1} before the crash) | {step_s:.2f} s |",
       f"| the redone steps' step_ms after the resume | {', '.join(f'{x/1e3:.2f}' for x in c['redone_step_ms'])} s |",
       f"| total time lost (a) + (b) | {a+b:.2f} s |",
       f"| of it restart overhead: (a) + (b) - steps redone x plain step | {a+b-c['steps_redone']*step_s:.2f} s |"]
open(out_md, "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
