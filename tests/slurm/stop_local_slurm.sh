#!/usr/bin/env bash
# Stop the daemons start_local_slurm.sh started, by the PIDs it recorded (never by name),
# in reverse order: SIGTERM, then SIGKILL for any still alive after 5 s.
set -u
STATE=${1:-/tmp/paratune-slurm}
[ -f "$STATE/pids" ] || exit 0
tac "$STATE/pids" | while read -r name pid; do
  [ -n "${pid:-}" ] || continue
  kill -TERM "$pid" 2>/dev/null || continue
  for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null && echo "stop_local_slurm: $name ($pid) needed SIGKILL"
done
rm -f "$STATE/pids"
