#!/usr/bin/env bash
# weft launched as HPC users launch it, against a real Slurm (ctest label `slurm`): a one-node
# cluster on this machine (scripts/slurm/start_cluster.sh), then
#   1. sbatch tests/slurm/train.sbatch: a 4-rank tp=2 x dp=2 run started by mpirun inside the
#      allocation gives the same run as `mpirun -n 4` outside Slurm, loss and gradient norm of
#      every step bit for bit (the same layout and seed: weft is deterministic);
#   2. `srun -n 2 --mpi=pmix` (Slurm starts the ranks, Open MPI meets them through PMIx) of a
#      tp=2 run: the same as `mpirun -n 2`;
#   3. preemption, under both launchers: `scancel --batch --signal=USR1` of an mpirun job (the
#      batch script passes SIGUSR1 to mpirun, which forwards it to the ranks, as the time limit's
#      --signal=B:USR1@N would) and `scancel --signal=TERM` of an srun job (the ranks are the
#      job's step) make every rank stop after the same step, write a checkpoint and exit 0, so
#      the job COMPLETES with exit code 0:0; the same job submitted again with --resume auto
#      finishes the run, and its metrics.jsonl is the uninterrupted run's, bit for bit;
#   4. nodes lost: the 4-task job stopped after step 4 and submitted again with 2 tasks and
#      `--resume auto --set parallel.auto=true` takes a layout for 2 ranks (parallel.auto,
#      docs/training.md), reshards the checkpoint into it and ends with the 4-rank run's losses.
# The cluster is torn down on exit, always. Exit 77 (ctest: skipped) with a "slurm-skip:" line
# where Slurm cannot run here: not root, the packages cannot be installed, the daemons do not
# start. docs/slurm.md explains the choices (why SIGUSR1 for mpirun).
#
#   bash tests/slurm/run_test.sh path/to/weft        # WEFT_SLURM_KEEP=1 keeps the scratch dir
set -uo pipefail

weft=$(realpath "${1:?usage: run_test.sh path/to/weft}")
src=$(cd "$(dirname "$0")/../.." && pwd)
# What every mpirun of the tests gets (CMake's WEFT_MPIEXEC_FLAGS, passed by the ctest entry).
if [ -z "${WEFT_MPIEXEC_FLAGS:-}" ]; then
  WEFT_MPIEXEC_FLAGS="--oversubscribe --mca btl self,vader"
  [ "$(id -u)" = 0 ] && WEFT_MPIEXEC_FLAGS+=" --allow-run-as-root"
fi
export WEFT_MPIEXEC_FLAGS WEFT_BIN=$weft OMP_NUM_THREADS=1
# srun's ranks do not know they share 2 cores 4 ways (mpirun --oversubscribe tells Open MPI):
# without yielding, a rank waiting for a message spins and starves the one that would send it.
export OMPI_MCA_mpi_yield_when_idle=1
# A rank left waiting for a peer that is gone fails with a message naming the op, not a hang.
export WEFT_COMM_TIMEOUT=${WEFT_COMM_TIMEOUT:-120}

t_start=$(date +%s)
say() { echo "slurm-test: $*"; }
skip() {
  echo "slurm-skip: $*"
  exit 77
}
failures=0
fail() {
  echo "slurm-test: FAIL: $*"
  failures=$((failures + 1))
}

[ "$(id -u)" = 0 ] || skip "needs root to run slurmctld/slurmd (run as root, or in a container)"
[ -x "$weft" ] || { echo "slurm-test: no weft binary at $weft"; exit 1; }
command -v perl >/dev/null || skip "perl (writes the token file) is not installed"
bash "$src/scripts/slurm/install.sh" || skip "cannot install Slurm (scripts/slurm/install.sh failed, above)"

scratch=$(mktemp -d /tmp/weft-slurm-test.XXXXXX)
cluster=$scratch/cluster
cleanup() {
  bash "$src/scripts/slurm/stop_cluster.sh" "$cluster" >/dev/null 2>&1
  if [ -n "${WEFT_SLURM_KEEP:-}" ]; then say "kept $scratch"; else rm -rf "$scratch"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A port of our own, away from a real Slurm's 6817/6818.
WEFT_SLURM_PORT=${WEFT_SLURM_PORT:-26817} bash "$src/scripts/slurm/start_cluster.sh" "$cluster" ||
  skip "the one-node Slurm cluster did not start (scripts/slurm/start_cluster.sh, above)"
export SLURM_CONF=$cluster/slurm.conf

# The tiny model (2 layers, C=32) on an llm.c token file of 6401 ids below 61 with its sidecar:
# a pattern with pseudo-random noise, so that the loss keeps moving for hundreds of steps.
cd "$scratch" || exit 1
perl -e '
  my $n = 16 * 400 + 1; my $x = 1; my @t;
  for my $i (0 .. $n - 1) {
    $x = ($x * 1103515245 + 12345) % 2147483648;
    push @t, ($i * 7 + int($i / 16) * 3 + ($x >> 16) % 5) % 61;
  }
  my $docs = grep { $_ == 60 } @t;
  open(my $f, ">:raw", "syn.bin") or die; print $f pack("l<256", 20240520, 1, $n, (0) x 253);
  print $f pack("S<*", @t); close $f;
  open($f, ">", "syn.json") or die;
  print $f "{\"tokenizer\": \"none\", \"vocab_size\": 61, \"eod\": 60, \"documents\": $docs, " .
           "\"tokens\": $n, \"source\": \"synthetic\"}\n";'
cat >run.toml <<TOML
[model]
config = "$src/configs/models/tiny.toml"
[data]
train = "$scratch/syn.bin"
val_fraction = 0.2
tokenizer = "none"
[train]
seq_len = 16
micro_batch = 2
global_batch = 8
steps = 8
lr = 1e-2
eval_every = 0
save_every = 0
threads = 1
seed = 1234
[parallel]
tp = 2
dp = 2
[run]
out_dir = "$scratch/out"
TOML

# `weft train run.toml` under mpirun -n N into DIR, outside Slurm (as the other tests run it).
mpirun_train() {  # N DIR [weft train options...]
  local n=$1 dir=$2
  shift 2
  # shellcheck disable=SC2086
  mpirun $WEFT_MPIEXEC_FLAGS -n "$n" "$weft" train run.toml --set run.out_dir="$scratch/$dir" \
    "$@" >"$scratch/$dir.log" 2>&1 || {
    fail "mpirun -n $n weft train ($dir) exited $?: $(tail -5 "$scratch/$dir.log")"
    return 1
  }
}
# Submits train.sbatch with WEFT_LAUNCHER=$1 into DIR; prints the job id. WEFT_NTASKS=N: N tasks
# instead of the script's 4.
submit() {  # LAUNCHER DIR [weft train options...]
  local launcher=$1 dir=$2
  shift 2
  WEFT_LAUNCHER=$launcher sbatch --parsable ${WEFT_NTASKS:+--ntasks=$WEFT_NTASKS} \
    --chdir="$scratch" --output="$scratch/$dir.out" \
    "$src/tests/slurm/train.sbatch" run.toml --set run.out_dir="$scratch/$dir" "$@"
}
# Field F of `scontrol show job ID` (JobState, ExitCode, ...).
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# Waits for job ID to end (at most $2 s); prints "STATE EXITCODE", e.g. "COMPLETED 0:0".
wait_job() {  # ID TIMEOUT_S
  local state deadline=$(($(date +%s) + $2))
  while :; do
    state=$(job_field "$1" JobState)
    case $state in
      PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED | RESIZING | SUSPENDED) ;;
      *) break ;;
    esac
    if [ "$(date +%s)" -ge "$deadline" ]; then
      scancel "$1"
      echo "TIMEOUT -"
      return
    fi
    sleep 0.2
  done
  echo "${state:-UNKNOWN} $(job_field "$1" ExitCode)"
}
# The "loss" and "grad_norm" of every line of a metrics.jsonl, as written: the writer prints the
# shortest text that reads back as the same double, so equal text is equal values, bit for bit.
curve() { sed -E 's/.*"grad_norm":([^,}]*).*"loss":([^,}]*).*/\2 \1/' "$1"; }
# Fails unless run A's and B's curves are the same, line for line (and not empty).
same_curves() {  # WHAT A/metrics.jsonl B/metrics.jsonl [LINES]
  local a b
  a=$(curve "$2") b=$(curve "$3")
  if [ -z "$a" ] || [ "$a" != "$b" ]; then
    fail "$1: loss and grad_norm differ from the reference (left: $2, right: $3):
$(diff <(echo "$a") <(echo "$b") | head -10)"
    return 1
  fi
  if [ -n "${4:-}" ] && [ "$(echo "$a" | wc -l)" != "$4" ]; then
    fail "$1: $(echo "$a" | wc -l) steps in $2, expected $4"
    return 1
  fi
  say "$1: $(echo "$a" | wc -l) steps, loss and grad_norm equal to the reference bit for bit" \
    "(last: $(echo "$a" | tail -1))"
}
# Fails unless run B's losses are run A's within a relative TOL at every step, LINES of them.
close_losses() {  # WHAT A/metrics.jsonl B/metrics.jsonl TOL LINES
  local a b worst
  a=$(curve "$2" | cut -d' ' -f1) b=$(curve "$3" | cut -d' ' -f1)
  if [ "$(echo "$b" | grep -c .)" != "$5" ] || [ "$(echo "$a" | grep -c .)" != "$5" ]; then
    fail "$1: $(echo "$b" | grep -c .) steps in $3 and $(echo "$a" | grep -c .) in $2, expected $5"
    return 1
  fi
  worst=$(paste -d' ' <(echo "$a") <(echo "$b") |
    awk '{ d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > w) w = d } END { printf "%.2g", w }')
  if awk -v w="$worst" -v t="$4" 'BEGIN { exit !(w > t) }'; then
    fail "$1: losses differ from the reference's by $worst relative (more than $4):
$(paste -d' ' <(echo "$a") <(echo "$b") | head -10)"
    return 1
  fi
  say "$1: $5 steps, losses within $worst relative of the reference's"
}

# 1. sbatch + mpirun inside the allocation, against mpirun -n 4 outside it.
t0=$(date +%s)
if mpirun_train 4 ref4; then
  id=$(submit mpirun sbatch4)
  result=$(wait_job "$id" 180)
  if [ "$result" != "COMPLETED 0:0" ]; then
    fail "sbatch job $id (mpirun, 4 ranks): $result, not COMPLETED 0:0:
$(tail -15 "$scratch/sbatch4.out")"
  else
    grep -q "tp=2 pp=1 dp=2, 4 ranks" "$scratch/sbatch4.out" ||
      fail "sbatch job $id did not run 4 ranks at tp=2 dp=2: $(head -5 "$scratch/sbatch4.out")"
    same_curves "sbatch (job $id, mpirun -n 4 from the allocation)" ref4/metrics.jsonl \
      sbatch4/metrics.jsonl 8
  fi
fi
say "1. sbatch + mpirun: $(($(date +%s) - t0)) s"

# 2. srun --mpi=pmix -n 2 (tp=2), against mpirun -n 2.
t0=$(date +%s)
pmix=yes
if ! srun --mpi=list 2>&1 | grep -qw pmix; then
  pmix=no
  say "2. srun: SKIPPED: this Slurm has no PMIx plugin (srun --mpi=list: $(srun --mpi=list 2>&1 |
    tr '\n' ' '))"
elif mpirun_train 2 ref2 --set parallel.dp=1; then
  if ! timeout 180 srun -n 2 --mpi=pmix "$weft" train run.toml --set parallel.dp=1 \
    --set run.out_dir="$scratch/srun2" >"$scratch/srun2.log" 2>&1; then
    fail "srun -n 2 --mpi=pmix weft train exited $?: $(tail -15 "$scratch/srun2.log")"
  else
    grep -q "tp=2 pp=1 dp=1, 2 ranks" "$scratch/srun2.log" ||
      fail "srun -n 2 did not run 2 ranks at tp=2: $(head -5 "$scratch/srun2.log")"
    same_curves "srun -n 2 --mpi=pmix" ref2/metrics.jsonl srun2/metrics.jsonl 8
  fi
  say "2. srun --mpi=pmix: $(($(date +%s) - t0)) s"
fi

# 3. Preemption, for each launcher: the ranks get the stop signal, write the checkpoint and the job
# completes with exit 0; the job submitted again with --resume auto ends with the uninterrupted
# run's curves. srun: scancel --signal=TERM (the job's steps, the ranks srun started: what the time
# limit's --signal=TERM@N does). mpirun: scancel --batch --signal=USR1 (the batch script, which
# passes it to mpirun, which forwards it to the ranks: what train.sbatch's --signal=B:USR1@N does).
# 1000 steps take about 2 s here, unloaded: the signal lands well before the end.
steps=1000
preempt() {  # LAUNCHER SIGNAL [scancel flags...]
  local launcher=$1 sig=$2 dir=preempt-$1 id id2 result stopped
  shift 2
  id=$(submit "$launcher" "$dir" --set train.steps=$steps --resume auto)
  for _ in $(seq 600); do  # until a few steps are done (at most 60 s)
    [ "$(wc -l 2>/dev/null <"$dir/metrics.jsonl")" -ge 5 ] 2>/dev/null && break
    sleep 0.1
  done
  scancel "$@" --signal="$sig" "$id"
  result=$(wait_job "$id" 180)
  stopped=$(sed -n "s/.*stopped by SIG$sig after step \([0-9]*\)\/.*/\1/p" "$dir.out" | head -1)
  if [ "$result" != "COMPLETED 0:0" ]; then
    fail "$launcher job $id after scancel $* --signal=$sig: $result, not COMPLETED 0:0:
$(grep -v '^step' "$dir.out" | tail -15)"
  elif [ -z "$stopped" ]; then
    fail "$launcher job $id did not stop on SIG$sig (it finished all $steps steps before the" \
      "signal, or ignored it): $(grep -v '^step' "$dir.out" | tail -5)"
  elif [ ! -d "$(printf '%s/checkpoints/step_%08d' "$dir" "$stopped")" ]; then
    fail "$launcher job $id stopped after step $stopped but wrote no checkpoint of it:" \
      "$(ls "$dir/checkpoints" 2>&1)"
  else
    say "3. $launcher job $id: scancel $* --signal=$sig -> stopped after step $stopped/$steps," \
      "checkpoint written, COMPLETED 0:0"
    id2=$(submit "$launcher" "$dir" --set train.steps=$steps --resume auto)
    result=$(wait_job "$id2" 240)
    if [ "$result" != "COMPLETED 0:0" ]; then
      fail "resubmitted $launcher job $id2: $result, not COMPLETED 0:0: $(tail -15 "$dir.out")"
    else
      grep -q "resuming at step $stopped " "$dir.out" ||
        fail "job $id2 did not resume at step $stopped: $(grep -v '^step' "$dir.out" | head -5)"
      same_curves "$launcher: preempted at step $stopped and resumed (jobs $id, $id2)" \
        ref-long/metrics.jsonl "$dir/metrics.jsonl" $steps
    fi
  fi
}
t0=$(date +%s)
if mpirun_train 4 ref-long --set train.steps=$steps; then
  preempt mpirun USR1 --batch
  if [ $pmix = no ]; then
    say "3. preemption under srun: SKIPPED: needs srun --mpi=pmix"
  else
    preempt srun TERM
  fi
fi
say "3. preemption: $(($(date +%s) - t0)) s"

# 4. Nodes lost: the 4-task job stops after step 4 with its checkpoint (as a preempted or failed
# one leaves it); submitted again with 2 tasks and parallel.auto, it takes the planner's layout for
# 2 ranks, reshards the checkpoint into it and finishes: steps 1-4 are ref4's (the same layout),
# steps 5-8 within 1e-5 of its losses (fp32 summed in another order).
t0=$(date +%s)
if [ -s ref4/metrics.jsonl ]; then
  id=$(submit mpirun relayout --stop-after 4)
  result=$(wait_job "$id" 180)
  if [ "$result" != "COMPLETED 0:0" ]; then
    fail "sbatch job $id (4 tasks, --stop-after 4): $result, not COMPLETED 0:0:
$(tail -15 "$scratch/relayout.out")"
  else
    id2=$(WEFT_NTASKS=2 submit mpirun relayout --resume auto --set parallel.auto=true)
    result=$(wait_job "$id2" 180)
    chose=$(grep "parallel.auto chose" "$scratch/relayout.out")
    if [ "$result" != "COMPLETED 0:0" ]; then
      fail "job $id2 (2 tasks, parallel.auto): $result, not COMPLETED 0:0:
$(grep -v '^step' "$scratch/relayout.out" | tail -15)"
    elif ! grep -q " for 2 ranks: predicted " <<<"$chose"; then
      fail "job $id2 chose no layout for its 2 ranks: $(grep -v '^step' relayout.out | head -5)"
    elif ! grep -q "resuming at step 4 " "$scratch/relayout.out"; then
      fail "job $id2 did not resume at step 4: $(grep -v '^step' relayout.out | head -5)"
    else
      say "4. job $id2: ${chose#weft train: }"
      close_losses "4 tasks, then 2 with parallel.auto (jobs $id, $id2)" ref4/metrics.jsonl \
        relayout/metrics.jsonl 1e-5 8
    fi
  fi
fi
say "4. resubmitted with fewer tasks: $(($(date +%s) - t0)) s"

say "total $(($(date +%s) - t_start)) s, $failures failure(s)"
[ $failures = 0 ]
