#!/usr/bin/env bash
# Tokenizer benchmark (issue: "preprocess with the GPT-2 tokenizer >= 5 MB/s of text per core"):
# in ONE run, on the same corpus (the King James Bible, 4.4 MB, from Debian's bible-kjv), weft's
# GPT-2 encode on one thread (`weft tokenizer encode`, a fresh process: cold piece cache, file
# already read) and the reference Node encoder (npm gpt-3-encoder 1.1.4 via
# tests/data/node_encode.js, 64 KiB chunks at line ends, its encode time only). Checks the ids
# are identical, and writes bench/results/tokenizer-<stamp>.md (bench/common.sh: date, time and
# commit) with the machine, date and ratio.
#
# Usage: bench/tokenizer/run.sh [REPEATS]   (default 3; the best of REPEATS for each side)
# WEFT_BIN overrides the binary (default build/release/bin/weft).
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=${1:-3}
source bench/common.sh
bench_setup tokenizer
weft=${WEFT_BIN:-$weft}
module=assets/npm/node_modules/gpt-3-encoder
[ -x "$weft" ] || { echo "no $weft: build first (make build)" >&2; exit 1; }
[ -f "$module/Encoder.js" ] || bash scripts/fetch_assets.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bible -f 'Gen1:1-Rev22:21' >"$tmp/kjv.txt"

weft_lines=""
for _ in $(seq "$repeats"); do
  weft_lines+=$(OMP_NUM_THREADS=1 taskset -c 0 "$weft" tokenizer encode --tokenizer gpt2 \
    --input "$tmp/kjv.txt" --output "$tmp/weft.ids" 2>&1 >/dev/null)$'\n'
done
# End to end: `weft preprocess` with one worker (read, encode, write .bin/.idx), whole process.
pre_lines=""
for i in $(seq "$repeats"); do
  t0=$(date +%s.%N)
  taskset -c 0 "$weft" preprocess --input "$tmp/kjv.txt" --tokenizer gpt2 \
    --output "$tmp/pre$i" --workers 1 --quiet >/dev/null
  pre_lines+="$t0 $(date +%s.%N)"$'\n'
done
node_lines=""
for _ in $(seq "$repeats"); do
  node_lines+=$(taskset -c 0 node tests/data/node_encode.js "$module" "$tmp/kjv.txt" \
    "$tmp/node.ids" 2>&1)$'\n'
done
same=no
cmp -s "$tmp/weft.ids" "$tmp/node.ids" && same=yes

/usr/bin/python3 - "$out_md" "$tmp/kjv.txt" "$same" "$repeats" <<PY
import os, platform, re, subprocess, sys, datetime
out_md, corpus, same, repeats = sys.argv[1:]
size = os.path.getsize(corpus)
weft = [float(m) for m in re.findall(r"tokens in ([0-9.]+) s", """$weft_lines""")]
node = [float(m) for m in re.findall(r"tokens, ([0-9.]+) s", """$node_lines""")]
tokens = re.search(r"into (\d+) tokens", """$weft_lines""").group(1)
w, n = min(weft), min(node)
pre = min(float(b) - float(a) for a, b in (l.split() for l in """$pre_lines""".strip().splitlines()))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
nodev = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
md = ["# Tokenizer benchmark: GPT-2 encode, one thread", "",
      f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; commit {commit}",
      f"- machine: {cpu}, {os.cpu_count()} cores; {platform.platform()}; both sides pinned to core 0; load average {os.getloadavg()[0]:.1f} at the end (shared machine)",
      f"- corpus: King James Bible (\`bible -f Gen1:1-Rev22:21\`, Debian bible-kjv), {size} bytes, {tokens} GPT-2 tokens",
      f"- weft: \`weft tokenizer encode --tokenizer gpt2\`, encode time only, fresh process (cold piece cache)",
      f"- Node {nodev}: npm gpt-3-encoder 1.1.4 (\`tests/data/node_encode.js\`, 64 KiB chunks at line ends), encode time only",
      f"- best of {repeats} runs each; ids identical: **{same}**", "",
      "| encoder | seconds | MB/s per core | vs Node |", "|---|---:|---:|---:|",
      f"| weft | {w:.3f} | {size / w / 1e6:.1f} | {n / w:.0f}x |",
      f"| weft preprocess, 1 worker, whole process (load, read, encode, write .bin/.idx) | {pre:.3f} | {size / pre / 1e6:.1f} | {n / pre:.0f}x |",
      f"| Node gpt-3-encoder | {n:.3f} | {size / n / 1e6:.2f} | 1x |", "",
      f"Target: preprocess >= 5 MB/s per core: **{'met' if size / pre / 1e6 >= 5 else 'NOT met'}**.",
      "The reference's encode() grows its result with Array.concat, quadratic in the tokens of",
      "one call; smaller chunks would make it faster, so the ratio is for these 64 KiB chunks."]
open(out_md, "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
[ "$same" = yes ] || { echo "ids differ between weft and Node" >&2; exit 1; }
