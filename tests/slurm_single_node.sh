#!/usr/bin/env bash
# A single-node SLURM on this machine for tests/test_slurm.py: munge, slurmctld and slurmd from Debian's packages,
# configured in a scratch folder (nothing under /etc/slurm is touched). Needs root (apt, the daemons).
#
#   tests/slurm_single_node.sh start DIR    # install if missing, start; prints SLURM_CONF=DIR/slurm.conf
#   tests/slurm_single_node.sh stop DIR
set -euo pipefail
cmd=${1:?start or stop}
dir=$(realpath -m "${2:?a scratch folder}")
conf="$dir/slurm.conf"

stop() {
  local pids=()
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" /run/munge/itervision-munged.pid; do
    [ -f "$pidfile" ] && pids+=("$(cat "$pidfile")")
  done
  [ ${#pids[@]} = 0 ] && return 0
  kill "${pids[@]}" 2>/dev/null || true
  # gone before the next start looks for a running munged (a dying one would be taken as running)
  local _ pid alive
  for _ in $(seq 1 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.2
  done
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "skip: a single-node SLURM needs root (apt-get, munged, slurmd)"; exit 3; }
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge) \
    >/dev/null 2>&1 || { echo "skip: apt-get could not install slurmctld, slurmd, slurm-client and munge"; exit 3; }
fi
mkdir -p "$dir/state" "$dir/spool"
[ -s /etc/munge/munge.key ] || { mungekey --create --force >/dev/null 2>&1 || \
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2>/dev/null; }
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/lib/munge /var/log/munge && chown munge:munge /run/munge /var/lib/munge /var/log/munge
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- munged --pid-file=/run/munge/itervision-munged.pid --log-file=/var/log/munge/itervision-munged.log
fi
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
cat > "$conf" <<EOF
ClusterName=itervision
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF="$conf"
slurmctld -f "$conf"
slurmd -f "$conf"
for _ in $(seq 1 30); do
  if sinfo -h -o "%T" 2>/dev/null | grep -qE "idle|mix|alloc"; then echo "SLURM_CONF=$conf"; exit 0; fi
  sleep 1
done
echo "skip: slurmd did not come up within 30 s (see $dir/slurmctld.log, $dir/slurmd.log)"
stop
exit 3
