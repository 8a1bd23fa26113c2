#!/usr/bin/env bash
# Start a real one-node Slurm on this machine for the Slurm backend tests: munge, MariaDB,
# slurmdbd (so sacct works), slurmctld and slurmd, each in the background, their PIDs written
# to $STATE/pids. Installs Debian's packages when missing. Stop with stop_local_slurm.sh.
# Usage: tests/slurm/start_local_slurm.sh [STATE_DIR]   (default /tmp/paratune-slurm)
set -euo pipefail
STATE=${1:-/tmp/paratune-slurm}
mkdir -p "$STATE"
if [ -s "$STATE/pids" ] && timeout 10 sinfo -h -o %t 2>/dev/null | grep -qx idle; then
  echo "local Slurm already up (state in $STATE)"; exit 0
fi
: > "$STATE/pids"
HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10 ))

if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm slurmdbd munge mariadb-server >/dev/null
fi

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 $((limit * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "start_local_slurm: $what did not come up in ${limit}s" >&2; exit 1
}
pid_of() { cat "$1" 2>/dev/null; }
source "$(dirname "$0")/../recorded_pids.sh"
# A start that fails part-way stops the daemons it had recorded, so none is left behind.
trap 'status=$?; [ $status = 0 ] || bash "$(dirname "$0")/stop_local_slurm.sh" "$STATE"' EXIT

# munge
mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
[ -f /etc/munge/munge.key ] || (dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null && chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key)
runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
wait_for 10 munged test -s /run/munge/munged.pid
record_pid "$STATE/pids" munged "$(pid_of /run/munge/munged.pid)"

# MariaDB for slurmdbd
mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
setsid /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
  --bind-address=127.0.0.1 --pid-file=/run/mysqld/paratune.pid >"$STATE/mariadb.log" 2>&1 < /dev/null &
wait_for 30 mariadb mariadb -e "select 1"
wait_for 10 "mariadb pid file" test -s /run/mysqld/paratune.pid
record_pid "$STATE/pids" mariadbd "$(pid_of /run/mysqld/paratune.pid)"
mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
LogFile=$STATE/slurmdbd.log
PidFile=$STATE/slurmdbd.pid
CONF
chmod 600 /etc/slurm/slurmdbd.conf
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=2
InactiveLimit=0
MinJobAge=60
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

slurmdbd
wait_for 30 slurmdbd test -s "$STATE/slurmdbd.pid"
record_pid "$STATE/pids" slurmdbd "$(pid_of "$STATE/slurmdbd.pid")"
# On a new database slurmdbd creates its tables before it listens; a slurmctld started before
# then finds no TRES and exits.
wait_for 60 "slurmdbd's port" bash -c "exec 3<>/dev/tcp/127.0.0.1/6819"
slurmctld
wait_for 30 slurmctld test -s "$STATE/slurmctld.pid"
record_pid "$STATE/pids" slurmctld "$(pid_of "$STATE/slurmctld.pid")"
slurmd
wait_for 30 slurmd test -s "$STATE/slurmd.pid"
record_pid "$STATE/pids" slurmd "$(pid_of "$STATE/slurmd.pid")"
wait_for 60 "the node to be idle" sh -c "timeout 10 sinfo -h -o %t | grep -qx idle"
echo "local Slurm up: $(sinfo -h -o '%P %a %D %t') (state in $STATE)"
