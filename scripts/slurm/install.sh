#!/usr/bin/env bash
# Installs what scripts/slurm/start_cluster.sh runs: Debian's Slurm (22.05 in bookworm: slurmctld,
# slurmd, the client commands sbatch/srun/squeue/scancel) and munge, its authentication daemon.
# Nothing is started: the packages' services stay down here (no systemd); start_cluster.sh runs
# the daemons itself. Needs root (apt-get); installs only what is missing, without recommends.
#
#   bash scripts/slurm/install.sh      # exit 0: all there; 1: cannot install (message says why)
set -euo pipefail

packages=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "slurm-install: ${packages[*]} already installed ($(slurmd -V 2>/dev/null))"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "slurm-install: missing ${missing[*]}, and installing them needs root" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "slurm-install: missing ${missing[*]}, and there is no apt-get here (not Debian?)" >&2
  exit 1
fi
echo "slurm-install: apt-get install ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The package lists may be stale or absent in a fresh container: update once when the first
# install attempt cannot find the packages.
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/slurm-install.$$.log 2>&1;
then
  apt-get update -q >>/tmp/slurm-install.$$.log 2>&1 || true
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" \
      >>/tmp/slurm-install.$$.log 2>&1; then
    tail -20 /tmp/slurm-install.$$.log >&2
    rm -f /tmp/slurm-install.$$.log
    echo "slurm-install: apt-get install ${missing[*]} failed (log above)" >&2
    exit 1
  fi
fi
rm -f /tmp/slurm-install.$$.log
echo "slurm-install: installed $(slurmd -V)"
