#!/usr/bin/env bash
# Build a two-node cluster on this machine with Linux network namespaces, for the multi-node
# tests: namespaces ptc-node1 and ptc-node2 (10.211.0.1 and .2 on a bridge, ptc-br0, whose
# host-side address 10.211.0.254 lets this machine's Slurm clients reach them), and in them:
#   node1: MariaDB + slurmdbd (accounting, so sacct answers), slurmctld, slurmd "node1"
#   node2: slurmd "node2"
# plus one munged (own key and socket) on this machine that both nodes use, as a cluster shares
# one key. Each node has 2 CPUs in slurm.conf. Inside a namespace "node1"/"node2" and this
# machine's host name resolve to the node's own address; each daemon there has the node's name
# as its host name (/etc/netns/NS/hosts, mounted
# over /etc/hosts there), so gloo and torchrun find each other across nodes.
#
# Everything it starts is recorded by PID in $STATE/pids; namespaces, links and files outside
# $STATE in $STATE/made. stop_cluster.sh removes all of it. Clients use SLURM_CONF=$STATE/slurm.conf
# (written to $STATE/env). Coexists with tests/slurm/start_local_slurm.sh: other config, socket,
# ports (its daemons' ports are inside the namespaces) and state.
#
# With `ray`, also a Ray cluster: a head in node1 (GCS 10.211.0.1:6379, Ray client server
# :10001, no dashboard) and a worker in node2, 2 CPUs each, with token authentication on a
# token of its own ($STATE/ray/auth_token, not ~/.ray's) and a Ray temp root of its own
# (RAY_TMPDIR=/tmp/ptc-ray, where `address: auto` finds the head). Ray 2.60 turns token auth on
# for `ray start --head` whenever ~/.ray/auth_token exists but not for `ray start --address`,
# so a worker or driver left to its defaults fails with InvalidAuthToken: every Ray process
# here, and every driver (source $STATE/ray.env), gets RAY_AUTH_MODE and RAY_AUTH_TOKEN_PATH.
# Usage: tests/cluster/start_cluster.sh [STATE_DIR] [ray]   (default /tmp/paratune-cluster)
# PARATUNE_PYTHON names the interpreter whose `ray` runs the nodes (default: the repo's .venv).
set -euo pipefail
STATE=${1:-/tmp/paratune-cluster}
WITH_RAY=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NET=10.211.0
NODES=(node1 node2)
if [ "$(id -u)" != 0 ]; then echo "start_cluster: needs root" >&2; exit 2; fi
if [ -s "$STATE/pids" ]; then echo "start_cluster: already up (state in $STATE)" >&2; exit 0; fi
mkdir -p "$STATE" && chmod 755 "$STATE"
: > "$STATE/pids"; : > "$STATE/made"; rm -f "$STATE"/*.pid
trap 'echo "start_cluster: failed; stopping what started" >&2; bash "$HERE/stop_cluster.sh" "$STATE"' ERR

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  for _ in $(seq 1 $((limit * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "start_cluster: $what did not come up in ${limit}s" >&2; return 1
}
source "$(dirname "$0")/../recorded_pids.sh"
record() { record_pid "$STATE/pids" "$1" "$2"; }
spawn() {  # spawn NAME NODE COMMAND...: a daemon in the background, its PID recorded, in the
  # node's network namespace with the node's host name (own UTS namespace) and hosts file (own
  # mount namespace, with a /dev/shm of its own); not `ip netns exec`, whose fresh /sys hides the cgroups slurmd needs
  local name=$1 ns=$2; shift 2
  (exec nsenter --net="/run/netns/ptc-$ns" unshare --mount --uts sh -c \
    'mount --bind "/etc/netns/ptc-$0/hosts" /etc/hosts && mount -t tmpfs -o size=2g shm /dev/shm &&
     hostname "$0" && exec "$@"' "$ns" "$@") \
    </dev/null >"$STATE/$name.out" 2>&1 &
  record "$name" $!
}

# --- network: a bridge on this machine, a veth into each namespace -----------------------------
ip link add ptc-br0 type bridge && echo "link ptc-br0" >> "$STATE/made"
ip addr add $NET.254/24 dev ptc-br0 && ip link set ptc-br0 up
i=0
for node in "${NODES[@]}"; do
  i=$((i + 1))
  ip netns add "ptc-$node" && echo "netns ptc-$node" >> "$STATE/made"
  ip link add "ptc-v$i" type veth peer name ptc0 netns "ptc-$node" && echo "link ptc-v$i" >> "$STATE/made"
  ip link set "ptc-v$i" master ptc-br0 up
  ip -n "ptc-$node" addr add "$NET.$i/24" dev ptc0
  ip -n "ptc-$node" link set lo up
  ip -n "ptc-$node" link set ptc0 up
  mkdir -p "/etc/netns/ptc-$node" && echo "dir /etc/netns/ptc-$node" >> "$STATE/made"
  {
    echo "127.0.0.1 localhost"
    echo "$NET.$i $node $(hostname)"
    j=0; for other in "${NODES[@]}"; do j=$((j + 1)); [ $j = $i ] || echo "$NET.$j $other"; done
  } > "/etc/netns/ptc-$node/hosts"
done

# --- munge: own key, socket and PID file -------------------------------------------------------
MUNGE=$STATE/munge
mkdir -p "$MUNGE" && chmod 700 "$MUNGE"
dd if=/dev/urandom bs=1 count=1024 of="$MUNGE/munge.key" 2>/dev/null && chmod 400 "$MUNGE/munge.key"
chown -R munge:munge "$MUNGE"
runuser -u munge -- /usr/sbin/munged --foreground --force --socket="$MUNGE/munge.sock" \
  --key-file="$MUNGE/munge.key" --pid-file="$MUNGE/munged.pid" --seed-file="$MUNGE/seed" \
  --log-file="$MUNGE/munged.log" </dev/null >/dev/null 2>&1 &
wait_for 10 munged test -S "$MUNGE/munge.sock"
record munged "$(cat "$MUNGE/munged.pid")"

# --- MariaDB and slurmdbd in node1 -------------------------------------------------------------
DB=$STATE/mysql
rm -rf "$DB" && mkdir -p "$DB" && chown mysql:mysql "$DB"
mariadb-install-db --no-defaults --user=mysql --datadir="$DB" --skip-test-db \
  --auth-root-authentication-method=socket >"$STATE/mariadb-install.log" 2>&1
spawn mariadbd node1 /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB" \
  --socket="$DB/mysqld.sock" --bind-address=127.0.0.1 --port=3306 --skip-name-resolve \
  --pid-file="$DB/mysqld.pid" --log-error="$STATE/mariadb.log"
wait_for 30 mariadb mariadb --no-defaults --socket="$DB/mysqld.sock" -e "select 1"
mariadb --no-defaults --socket="$DB/mysqld.sock" -e "CREATE DATABASE slurm_acct_db;
  CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

cat > "$STATE/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$MUNGE/munge.sock
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
LogFile=$STATE/slurmdbd.log
PidFile=$STATE/slurmdbd.pid
CONF
chmod 600 "$STATE/slurmdbd.conf"
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))
rm -rf "$STATE/ctld" "$STATE/spool" && mkdir -p "$STATE/ctld" "$STATE/spool"
cat > "$STATE/slurm.conf" <<CONF
ClusterName=paratune2
SlurmctldHost=node1($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE/munge.sock
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd-%n.log
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$NET.1
AccountingStoragePass=$MUNGE/munge.sock
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=10
MpiDefault=none
KillWait=2
InactiveLimit=0
MinJobAge=60
NodeName=node1 NodeAddr=$NET.1 CPUs=2 RealMemory=$MEM_MB State=UNKNOWN
NodeName=node2 NodeAddr=$NET.2 CPUs=2 RealMemory=$MEM_MB State=UNKNOWN
PartitionName=two Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
echo "export SLURM_CONF=$STATE/slurm.conf" > "$STATE/env"
export SLURM_CONF=$STATE/slurm.conf

spawn slurmdbd node1 /usr/sbin/slurmdbd -D
wait_for 30 slurmdbd bash -c "exec 3<>/dev/tcp/$NET.1/6819"
spawn slurmctld node1 /usr/sbin/slurmctld -D -i -f "$STATE/slurm.conf"
wait_for 30 slurmctld scontrol ping
for node in "${NODES[@]}"; do
  mkdir -p "$STATE/spool/$node"
  spawn "slurmd-$node" "$node" /usr/sbin/slurmd -D -N "$node" -f "$STATE/slurm.conf"
done
wait_for 60 "both nodes idle" sh -c '[ "$(sinfo -h -N -o %t | grep -cx idle)" = 2 ]'
echo "two-node Slurm up: $(sinfo -h -N -o '%N %t' | tr '\n' ' ')(state in $STATE)"


# --- Ray: a head in node1, a worker in node2 ---------------------------------------------------
if [ "$WITH_RAY" = ray ]; then
  PY=${PARATUNE_PYTHON:-$ROOT/.venv/bin/python}
  RAY="$(dirname "$PY")/ray"
  RAYTMP=/tmp/ptc-ray
  mkdir -p "$STATE/ray" && chmod 700 "$STATE/ray"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$STATE/ray/auth_token"
  chmod 600 "$STATE/ray/auth_token"
  rm -rf "$RAYTMP" && mkdir -p "$RAYTMP" && echo "dir $RAYTMP" >> "$STATE/made"
  cat > "$STATE/ray.env" <<ENV
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH=$STATE/ray/auth_token
export RAY_TMPDIR=$RAYTMP
export RAY_USAGE_STATS_ENABLED=0
ENV
  . "$STATE/ray.env"  # for the nodes and for `ray status` below
  RAYENV=(env PYTHONPATH="$ROOT")
  spawn ray-head node1 "${RAYENV[@]}" "$RAY" start --head --block --node-ip-address=$NET.1 \
    --port=6379 --num-cpus=2 --num-gpus=0 --object-store-memory=200000000 \
    --include-dashboard=false --ray-client-server-port=10001 --disable-usage-stats
  wait_for 90 "the Ray head" bash -c "exec 3<>/dev/tcp/$NET.1/6379"
  spawn ray-worker node2 "${RAYENV[@]}" "$RAY" start --block --address=$NET.1:6379 \
    --node-ip-address=$NET.2 --num-cpus=2 --num-gpus=0 --object-store-memory=200000000 \
    --disable-usage-stats
  wait_for 90 "two Ray nodes" sh -c "'$RAY' status --address=$NET.1:6379 2>/dev/null | grep -c node_ | grep -qx 2"
  wait_for 60 "the Ray client server" bash -c "exec 3<>/dev/tcp/$NET.1/10001"
  echo "Ray up: head $NET.1:6379 (client ray://$NET.1:10001), 2 nodes; drivers: . $STATE/ray.env"
fi
trap - ERR
