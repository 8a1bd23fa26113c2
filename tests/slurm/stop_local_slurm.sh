#!/usr/bin/env bash
# Stop the daemons start_local_slurm.sh started, by the PIDs it recorded (never by name, and
# only while a PID still names the process recorded: tests/recorded_pids.sh), in reverse
# order: SIGTERM, then SIGKILL for any still alive after 5 s.
set -u
STATE=${1:-/tmp/paratune-slurm}
source "$(dirname "$0")/../recorded_pids.sh"
[ -f "$STATE/pids" ] || exit 0
tac "$STATE/pids" | while read -r name pid started; do
  still_ours "$pid" "$started" || continue
  kill -TERM "$pid" 2>/dev/null || continue
  for _ in $(seq 1 25); do still_ours "$pid" "$started" || break; sleep 0.2; done
  still_ours "$pid" "$started" && kill -KILL "$pid" 2>/dev/null && echo "stop_local_slurm: $name ($pid) needed SIGKILL"
done
rm -f "$STATE/pids"
