#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests and trying out job scripts: munged,
# slurmctld and slurmd run as root in the background, their configuration, state, logs, sockets
# and pid files all under one scratch directory (nothing in /etc is written; systemd is not
# needed). Idempotent: when the cluster of DIR already runs, it says so and does nothing.
#
#   sudo bash scripts/slurm/start_cluster.sh DIR [CPUS]
#   export SLURM_CONF=DIR/slurm.conf     # what the client commands (sbatch, srun, sinfo) read
#   ...
#   sudo bash scripts/slurm/stop_cluster.sh DIR
#
# CPUS: what the node declares (default: the machine's, at least 4). slurmd takes the
# configuration's figures over what it detects (SlurmdParameters=config_overrides), so a
# 2-core machine can run the 4-rank jobs of tests/slurm, oversubscribed as mpirun
# --oversubscribe does. Exit status: 0 when the node is idle and takes jobs; 1 otherwise (the
# message and the daemons' logs say why).
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 DIR [CPUS]" >&2
  exit 2
fi
dir=$(mkdir -p "$1" && cd "$1" && pwd)
ncpu=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS
cpus=${2:-$((ncpu > 4 ? ncpu : 4))}
say() { echo "slurm-cluster: $*"; }
fail() {
  echo "slurm-cluster: $*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail "needs root (slurmd runs jobs as their users, munged and slurmctld as root here)"
for d in munged mungekey slurmctld slurmd sinfo; do
  command -v "$d" >/dev/null || fail "$d not found (bash scripts/slurm/install.sh)"
done

conf=$dir/slurm.conf
export SLURM_CONF=$conf
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -1; }

if alive "$dir/munged.pid" && alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid"; then
  say "already running in $dir (node $(node_state)); SLURM_CONF=$conf"
  exit 0
fi

mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
chmod 0700 "$dir/munge"
chmod 0755 "$dir" "$dir/state" "$dir/spool" "$dir/log"

# munge: a key of our own (munged insists on 0400/0600 and root ownership when it runs as root),
# its socket in the scratch directory, named to slurm by AuthInfo below.
if [ ! -s "$dir/munge/munge.key" ]; then
  mungekey --create --keyfile="$dir/munge/munge.key" --force
  chmod 0400 "$dir/munge/munge.key"
  say "munge key $dir/munge/munge.key"
fi
socket=$dir/munge/munge.socket.2
if ! alive "$dir/munged.pid"; then
  rm -f "$socket" "$socket.lock"
  munged --force --key-file="$dir/munge/munge.key" --socket="$socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" ||
    fail "munged did not start: $(tail -3 "$dir/log/munged.log" 2>/dev/null)"
  say "munged pid $(cat "$dir/munged.pid")"
fi

host=$(hostname -s)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
port=${WEFT_SLURM_PORT:-6817}
task_plugin=task/affinity
[ "$cpus" -gt "$ncpu" ] && task_plugin=task/none
cat >"$conf" <<CONF
# Written by scripts/slurm/start_cluster.sh: a one-node cluster for tests.
ClusterName=weft
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups here (containers, no systemd): processes tracked by their parent ids; tasks pinned
# with sched_setaffinity unless the node declares more CPUs than there are (nothing to pin to).
ProctrackType=proctrack/linuxproc
TaskPlugin=$task_plugin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Finished jobs stay in slurmctld for scontrol show job (their exit codes) for 10 minutes.
MinJobAge=600
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
say "wrote $conf: node $host, $cpus CPUs ($ncpu here, $task_plugin), ${mem_mb} MB, port $port"

if ! alive "$dir/slurmctld.pid"; then
  # -i: ignore state left by an earlier cluster of this directory.
  slurmctld -f "$conf" -i || fail "slurmctld did not start: $(tail -5 "$dir/log/slurmctld.log")"
  for _ in $(seq 50); do alive "$dir/slurmctld.pid" && break; sleep 0.2; done
  alive "$dir/slurmctld.pid" || fail "slurmctld exited: $(tail -5 "$dir/log/slurmctld.log")"
  say "slurmctld pid $(cat "$dir/slurmctld.pid")"
fi
if ! alive "$dir/slurmd.pid"; then
  slurmd -f "$conf" -N "$host" || fail "slurmd did not start: $(tail -5 "$dir/log/slurmd.log")"
  for _ in $(seq 50); do alive "$dir/slurmd.pid" && break; sleep 0.2; done
  alive "$dir/slurmd.pid" || fail "slurmd exited: $(tail -5 "$dir/log/slurmd.log")"
  say "slurmd pid $(cat "$dir/slurmd.pid")"
fi

state=
for _ in $(seq 60); do
  state=$(node_state)
  [ "$state" = idle ] && break
  sleep 0.5
done
if [ "$state" != idle ]; then
  fail "node $host is '${state:-not reported}' after 30 s, not idle:
$(tail -5 "$dir/log/slurmctld.log")
$(tail -5 "$dir/log/slurmd.log")"
fi
say "node $host idle; export SLURM_CONF=$conf"
