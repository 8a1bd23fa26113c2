#!/usr/bin/env bash
# Undo start_cluster.sh: stop the daemons it recorded, by PID (while it still names the process
# recorded: tests/recorded_pids.sh), in reverse order (SIGTERM, then SIGKILL after 5 s); then
# end every process still inside the namespaces it made (job steps, trial ranks, Ray workers:
# all started there by this cluster); then delete those namespaces, the bridge and veths, and
# the /etc/netns files. Prints what needed SIGKILL.
# Usage: tests/cluster/stop_cluster.sh [STATE_DIR]   (default /tmp/paratune-cluster)
set -u
STATE=${1:-/tmp/paratune-cluster}
source "$(dirname "$0")/../recorded_pids.sh"
stop_pid() {  # stop_pid NAME PID START
  still_ours "$2" "$3" && kill -TERM "$2" 2>/dev/null || return 0
  for _ in $(seq 1 25); do still_ours "$2" "$3" || return 0; sleep 0.2; done
  kill -KILL "$2" 2>/dev/null && echo "stop_cluster: $1 ($2) needed SIGKILL"
}
if [ -f "$STATE/pids" ]; then
  tac "$STATE/pids" | while read -r name pid started; do
    case $name in
      # `ray start --block` only watches its node's Ray processes, and takes more than 5 s to
      # stop them one by one on SIGTERM: it is killed, and they end with the namespace below.
      ray-*) still_ours "$pid" "$started" && kill -KILL "$pid" 2>/dev/null ;;
      *) stop_pid "$name" "$pid" "$started" ;;
    esac
  done
fi
if [ -f "$STATE/made" ]; then
  namespaces=$(awk '$1 == "netns" {print $2}' "$STATE/made")
  left() { for ns in $namespaces; do ip netns pids "$ns" 2>/dev/null; done; }
  for pid in $(left); do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 1 25); do [ -z "$(left)" ] && break; sleep 0.2; done
  for ns in $namespaces; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null && echo "stop_cluster: $(cat /proc/$pid/comm 2>/dev/null) ($pid) in $ns needed SIGKILL"
    done
  done
  tac "$STATE/made" | while read -r kind name; do
    case $kind in
      link) ip link del "$name" 2>/dev/null ;;
      netns) ip netns del "$name" 2>/dev/null ;;
      dir) rm -rf "$name" ;;
    esac
  done
  rmdir /etc/netns 2>/dev/null
fi
rm -f "$STATE/pids" "$STATE/made"
exit 0
