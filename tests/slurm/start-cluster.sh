#!/usr/bin/env bash
# Start a real single-node SLURM cluster on this machine, for the tests (the smoke run of tests/e2e/) and
# for trying profiles/slurm without a cluster. Idempotent: a running cluster is left alone.
#
#   sudo tests/slurm/start-cluster.sh        # install (if needed), configure, start; ~1 s once installed
#   sudo tests/slurm/stop-cluster.sh         # stop the daemons this script started
#
# What it sets up (Debian 12 packages slurmctld/slurmd/slurm-client 22.05 and munge):
#   - one node, "localhost" on 127.0.0.1, with every CPU and all but 1 GiB of the memory;
#   - partitions "main" (default) and "gpu", both on that node;
#   - fake GPUs (gres/gpu, File=/dev/null, /dev/zero, ...; one per CPU, at most 4) so that jobs
#     asking for `gpu: 1` are schedulable side by side;
#   - no accounting database: job status through squeue, so the profile must say
#     `slurm-status-command: squeue`; MinJobAge 3600 s keeps finished jobs visible to squeue for
#     an hour (the plugin needs them there; the tests read the whole smoke run's history);
#   - ProctrackType=proctrack/linuxproc, TaskPlugin=task/none (no cgroups, no systemd here).
# slurm.conf goes to the default path /etc/slurm/slurm.conf: the executor plugin's nested srun
# drops SLURM_CONF. Daemons run as root without systemd; their pids go to $STATE/pids.
set -euo pipefail

STATE=/run/benchmark-illusion-slurm
LOGS=/var/log/slurm
CONF=/etc/slurm/slurm.conf

say() { echo "start-cluster: $*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
  say "must run as root (it installs packages, writes /etc/slurm and starts daemons)"
  exit 2
fi

node_state() { sinfo -h -n localhost -o %T 2>/dev/null | head -1; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  say "installing slurmctld slurmd slurm-client munge"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null
fi

mkdir -p "$STATE" "$LOGS" /etc/slurm /var/spool/slurmctld /var/spool/slurmd

# munge: a key (0400, owned by munge), its socket directory, the daemon as the munge user.
if [[ ! -s /etc/munge/munge.key ]]; then
  mungekey --create --keyfile=/etc/munge/munge.key --force
fi
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge /var/lib/munge /var/log/munge && chown munge:munge /run/munge /var/lib/munge /var/log/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- munged </dev/null >/dev/null 2>&1
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  pgrep -u munge -x munged > "$STATE/munged.pid" || true
fi

cpus=$(nproc)
# One fake GPU per CPU (at most 4): with a single one, every GPU-bound job of a test run would
# queue behind the others. Each is a distinct character device that exists everywhere.
devices=(/dev/null /dev/zero /dev/full /dev/urandom)
gpus=$(( cpus < 4 ? cpus : 4 ))
mem_mb=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))

new_conf=$(mktemp)
cat > "$new_conf" <<CONF
# Written by tests/slurm/start-cluster.sh (benchmark-illusion): a single-node test cluster.
ClusterName=benchmark-illusion-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SchedulerType=sched/backfill
MinJobAge=3600
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb Gres=gpu:$gpus State=UNKNOWN
PartitionName=main Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP
CONF
# A count-only gres line marks the node invalid; device files make the fake GPUs countable.
new_gres=$(mktemp)
for (( i = 0; i < gpus; i++ )); do
  echo "NodeName=localhost Name=gpu File=${devices[$i]}" >> "$new_gres"
done
if scontrol ping 2>/dev/null | grep -q UP && [[ "$(node_state)" =~ ^(idle|mixed|allocated) ]]; then
  if cmp -s "$new_conf" "$CONF" && cmp -s "$new_gres" /etc/slurm/gres.conf; then
    rm -f "$new_conf" "$new_gres"
    say "already running ($(node_state))"
    exit 0
  fi
  # A changed node (CPUs, memory, GPUs) needs both daemons restarted, not a reconfigure.
  say "configuration changed: restarting slurmctld and slurmd"
  for name in slurmd slurmctld; do
    [[ -s "$STATE/$name.pid" ]] && kill "$(cat "$STATE/$name.pid")" 2>/dev/null || true
  done
  for _ in $(seq 100); do pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break; sleep 0.1; done
fi
mv "$new_conf" "$CONF"
mv "$new_gres" /etc/slurm/gres.conf
chmod 0644 "$CONF" /etc/slurm/gres.conf

if ! scontrol ping 2>/dev/null | grep -q UP; then
  slurmctld -i </dev/null >>"$LOGS/slurmctld.out" 2>&1
fi
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
if ! pgrep -x slurmd >/dev/null; then
  slurmd -N localhost </dev/null >>"$LOGS/slurmd.out" 2>&1
fi

for _ in $(seq 150); do
  state=$(node_state)
  case "$state" in
    idle|mixed|allocated) break ;;
    down*|drain*|unknown*|"") scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.2
done
state=$(node_state)
if [[ ! "$state" =~ ^(idle|mixed|allocated) ]]; then
  say "node did not come up (state '$state'); see $LOGS/slurmctld.log and $LOGS/slurmd.log"
  exit 1
fi
say "up: node localhost ($cpus CPUs, $mem_mb MB, $gpus fake GPUs), partitions main (default) and gpu"
