#!/usr/bin/env bash
# Stops the cluster scripts/slurm/start_cluster.sh DIR started (slurmd, slurmctld, munged, by
# their pid files in DIR, and any job step daemons left) and removes DIR. Safe to run when
# nothing runs.
#
#   sudo bash scripts/slurm/stop_cluster.sh DIR
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1
[ -d "$dir" ] || exit 0
export SLURM_CONF=$dir/slurm.conf

# Jobs first, so that slurmd does not leave their processes behind.
if [ -f "$SLURM_CONF" ] && command -v scancel >/dev/null; then
  scancel --full --signal=KILL --user="$(id -un)" 2>/dev/null
  scancel --user="$(id -un)" 2>/dev/null
fi
stop() {  # NAME: TERM, then KILL after 10 s
  local pidfile=$dir/$1.pid pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "slurm-cluster: stopped $1 (pid $pid)"
  fi
  rm -f "$pidfile"
}
stop slurmd
stop slurmctld
stop munged
# Step daemons of this cluster still running (a job killed with its node), by their spool dir.
for p in $(pgrep -x slurmstepd 2>/dev/null); do
  if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$dir"; then kill -KILL "$p"; fi
done
rm -rf "$dir"
echo "slurm-cluster: removed $dir"
