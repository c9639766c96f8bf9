#!/usr/bin/env bash
# slurm_dry_run.sh - runs deploy/prewarm.sbatch on a real single-node Slurm
# (Debian's slurm-wlm: slurmctld, slurmd and munged started here, on private
# sockets, ports and directories, and stopped at the end) as a job array of
# three tasks in dry-run mode, and checks that the tasks' bucket lists are
# disjoint and together the whole list of an unsharded dry run.
#
#   tests/deploy/slurm_dry_run.sh [--install] build/scree-tune
#
# Needs root (the daemons run as root) and slurm-wlm installed; --install
# installs it with apt-get first (.ci/run does). Exits 77 (skipped) without
# them: the CPU test test_slurm_dry_run runs it where Slurm is installed.
# About 15 s. docs/cluster.md.
set -eu
if [ "${1:-}" = --install ]; then
  shift
  if ! command -v sbatch >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null
  fi
fi
here=$(cd "$(dirname "$0")/../.." && pwd)
tune=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
for p in slurmctld slurmd munged sbatch; do
  command -v $p >/dev/null 2>&1 || PATH=$PATH:/usr/sbin
  command -v $p >/dev/null 2>&1 || { echo "SKIP: $p not installed (apt-get install slurm-wlm)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: the Slurm daemons of this test run as root"; exit 77; }
[ -r /etc/munge/munge.key ] || { echo "SKIP: no /etc/munge/munge.key"; exit 77; }

tmp=$(mktemp -d /tmp/scree-slurm-XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/out"
host=$(hostname -s)
# Ports from the pid, so that two runs at once do not meet.
port=$((20000 + ($$ % 20000) * 2))
munged --force --socket="$tmp/munge.sock" --pid-file="$tmp/munged.pid" \
  --log-file="$tmp/munged.log" --seed-file="$tmp/munged.seed" --foreground \
  2>>"$tmp/daemons.log" &
pids+=($!)
cat > "$tmp/slurm.conf" <<CONF
ClusterName=scree-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf
for i in $(seq 50); do [ -S "$tmp/munge.sock" ] && break; sleep 0.1; done
slurmctld -D -i -f "$SLURM_CONF" 2>>"$tmp/daemons.log" &
pids+=($!)
slurmd -D -f "$SLURM_CONF" 2>>"$tmp/daemons.log" &
pids+=($!)
for i in $(seq 100); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)' && break
  sleep 0.2
done
sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)' || {
  echo "FAIL: the node did not come up"; tail -20 "$tmp/daemons.log"; exit 1; }

# The job: three array tasks (ids 5-7: the shard is the id less the minimum),
# in dry-run mode, each writing its bucket list to its output file.
cd "$tmp/out"
SCREE_TUNE=$tune SCREE_DRY_RUN=1 SCREE_MODELS="llama-3-8b deepseek-moe-16b" \
  SCREE_DTYPES="bf16 fp16" SCREE_OUT=$tmp/out \
  timeout 120 sbatch --wait --array=5-7 --output="$tmp/out/task-%a.out" \
  "$here/deploy/prewarm.sbatch" >/dev/null
for m in llama-3-8b deepseek-moe-16b; do
  "$tune" prewarm --model $m --dtype bf16,fp16 --dry-run -q
done | sort > all.txt
n=0
for t in 5 6 7; do
  grep -q "^task $t of 3 on" "task-$t.out" || { echo "FAIL: task $t:"; cat "task-$t.out"; exit 1; }
  # stdout holds the buckets; the summary lines of stderr start with the program's name
  grep -v -e '^task ' -e '^scree-tune ' "task-$t.out" | sort > "buckets-$t.txt"
  echo "task $t: $(wc -l < "buckets-$t.txt") bucket(s)"
  n=$((n + $(wc -l < "buckets-$t.txt")))
done
sort buckets-*.txt | cmp -s - all.txt || { echo "FAIL: the tasks' lists are not the whole list:"; sort buckets-*.txt | diff - all.txt | head; exit 1; }
[ -z "$(sort buckets-*.txt | uniq -d)" ] || { echo "FAIL: a bucket is in two tasks"; exit 1; }
echo "ok: 3 Slurm array tasks listed $n bucket(s), disjoint, together the $(wc -l < all.txt) of the whole list"
