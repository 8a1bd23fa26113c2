#!/usr/bin/env bash
# Stop the PostgreSQL start_local_postgres.sh started, by the PID it recorded (never by name):
# SIGINT (fast shutdown: the postmaster ends its sessions and children), then SIGKILL if it
# is still alive after 30 s. Then removes the state dir (the cluster, the log, the socket).
# Usage: tests/postgres/stop_local_postgres.sh [STATE_DIR]   (default /tmp/paratune-postgres)
set -u
STATE=${1:-/tmp/paratune-postgres}
STATE=${STATE%/}
[ -n "$STATE" ] || { echo "stop_local_postgres: refusing / as the state dir" >&2; exit 1; }
[ -d "$STATE" ] || exit 0
pid=$(cat "$STATE/pid" 2>/dev/null || true)
if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ]; then
  kill -INT "$pid" 2>/dev/null
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null && echo "stop_local_postgres: postgres ($pid) needed SIGKILL"
  for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
fi
# Only what start_local_postgres.sh puts there, then the dir itself.
rm -rf "$STATE/data"
rm -f "$STATE/pid" "$STATE/url" "$STATE/postgres.log" "$STATE/initdb.log" "$STATE"/.s.PGSQL.*
rmdir "$STATE" 2>/dev/null || echo "stop_local_postgres: $STATE kept: it holds other files" >&2
exit 0
