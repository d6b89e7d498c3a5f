#!/usr/bin/env bash
# A hung rank on the GPU path (issue 38; tests/runtime/cli_flaky_cluster_test.cc does the same on
# the CPU and on host-bf16): `mpirun -n 4 weft train --device cuda` at tp=2 pp=2, four ranks
# sharing the one GPU (so their groups are the staged communicator's: device -> pinned host -> MPI),
# world rank 3 stopped with SIGSTOP as step 5 begins, train.comm_timeout = 5 s. It must:
#   - end within the deadline + 10 s, with a non-zero exit;
#   - name world rank 3 and its host in the roll call, with the step it stopped in;
#   - leave no rank running;
#   - leave step 2's checkpoint as `latest` (step 4's was written in the background and is
#     committed only by a step that never ended);
#   - and `--resume auto` must end with the losses of the run that never stopped.
# Called by bench/gpu/run.sh where an mpirun starts (the bundle carries Open MPI's); also runs
# alone, and here without a GPU:
#
#   [WEFT_MPIRUN="mpirun ..."] [WEFT_HANG_DEVICE=host-bf16] bash bench/gpu/hang_smoke.sh WEFT OUTDIR
set -uo pipefail
WEFT=$1
D=$2
DEVICE=${WEFT_HANG_DEVICE:-cuda}
MPIRUN=${WEFT_MPIRUN:-mpirun --allow-run-as-root --oversubscribe --mca btl self,vader}
log() { printf '[hang_smoke %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
rm -rf "$D"
mkdir -p "$D"

# 40k synthetic tokens below 512 (an llm.c token file and its sidecar): the test is of the hang,
# not of the text.
python3 "$(dirname "$0")/../synthetic_tokens.py" "$D/syn.bin" 512 40000
# Heads of 64 (what the CUDA attention takes), one per tp rank; a layer per pipeline stage.
cat >"$D/run.toml" <<EOF
[model]
name = "hang-2l"
n_layer = 2
n_embd = 128
n_head = 2
vocab_size = 512
pad_vocab_to = 64
max_seq_len = 64
[data]
train = "$D/syn.bin"
tokenizer = "none"
val_fraction = 0.1
[train]
seq_len = 64
micro_batch = 2
global_batch = 8
steps = 8
lr = 1e-3
eval_every = 4
eval_batches = 1
save_every = 2
keep_last = 0
threads = 1
comm_timeout = 5
log_every = 1
[parallel]
tp = 2
pp = 2
[run]
out_dir = "$D/out"
EOF
train() { $MPIRUN -n 4 "$WEFT" train "$D/run.toml" --device "$DEVICE" "$@"; }

log "$DEVICE, tp2 pp2 on 4 ranks: the run that never stops"
train --set run.out_dir="$D/whole" >"$D/whole.log" 2>&1 || {
  tail -20 "$D/whole.log"
  log "FAIL: the uninterrupted run failed"
  exit 1
}
log "world rank 3 stopped as step 5 begins (WEFT_FAULT=step:5:3:STOP)"
t0=$(date +%s%N)
WEFT_FAULT=step:5:3:STOP train >"$D/hung.log" 2>&1
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
grep -E 'error|roll call' "$D/hung.log" | head -6
ok=1
check() {  # what, condition
  if eval "$2"; then log "ok: $1"; else log "FAIL: $1"; ok=0; fi
}
check "the job failed (exit $rc)" '[[ $rc -ne 0 ]]'
check "it ended $((ms / 1000)).$((ms % 1000 / 100)) s after it started (bound: 25 s, its first 4 steps, the 5-s deadline and 10 s)" \
  '((ms < 25000))'
check "world rank 3 on $(uname -n) is named" \
  'grep -q "world rank 3 on $(uname -n) did not answer the roll call" "$D/hung.log"'
check "with the step" 'grep -q "at step 5 " "$D/hung.log"'
# The job's processes still alive (read from /proc: the device may have no pgrep).
left_running() {
  local f
  for f in /proc/[0-9]*/cmdline; do
    [[ "${f%/cmdline}" != "/proc/$$" ]] && grep -qa -- "$D/run.toml" "$f" 2>/dev/null &&
      echo "${f//[^0-9]/}"
  done
}
check "no rank is left running" '[[ -z "$(left_running)" ]]'
for pid in $(left_running); do kill -KILL "$pid" 2>/dev/null; done
check "latest is step 2's checkpoint" \
  '[[ "$(cat "$D/out/checkpoints/latest" 2>/dev/null)" == step_00000002 ]]'
log "--resume auto"
train --resume auto >"$D/resume.log" 2>&1
check "the resume ran (exit $?)" 'grep -q "resuming at step 2" "$D/resume.log"'
python3 - "$D" <<'PY' || ok=0
import json, sys
d = sys.argv[1]
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path))}
whole, resumed = losses(f"{d}/whole/metrics.jsonl"), losses(f"{d}/out/metrics.jsonl")
steps = sorted(resumed)
rel = max(abs(resumed[s] - whole[s]) / abs(whole[s]) for s in steps)
same = all(resumed[s] == whole[s] for s in steps)
print(f"[hang_smoke] steps {steps[0]}-{steps[-1]}: largest relative difference to the run that "
      f"never stopped {rel:.2e} ({'the same bits' if same else 'not bit for bit'})")
sys.exit(0 if steps[-1] == 8 and rel <= 1e-5 else 1)
PY
echo "hang_smoke: $([[ $ok -eq 1 ]] && echo PASS || echo FAIL)"
[[ $ok -eq 1 ]]
