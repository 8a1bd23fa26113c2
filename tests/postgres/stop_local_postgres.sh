#!/usr/bin/env bash
# Stop the PostgreSQL start_local_postgres.sh started, by the PID it recorded (never by name),
# and only while that PID still names the postmaster recorded (tests/recorded_pids.sh):
# SIGINT (fast shutdown: the postmaster ends its sessions and children), then SIGKILL if it
# is still alive after 30 s. Then removes the state dir (the cluster, the log, the socket).
# Usage: tests/postgres/stop_local_postgres.sh [STATE_DIR]   (default /tmp/paratune-postgres)
set -u
STATE=${1:-/tmp/paratune-postgres}
STATE=${STATE%/}
[ -n "$STATE" ] || { echo "stop_local_postgres: refusing / as the state dir" >&2; exit 1; }
[ -d "$STATE" ] || exit 0
source "$(dirname "$0")/../recorded_pids.sh"
name="" pid="" started=""
[ -s "$STATE/pid" ] && read -r name pid started < "$STATE/pid"
if [ "$name" = postgres ] && still_ours "$pid" "$started"; then
  kill -INT "$pid" 2>/dev/null
  for _ in $(seq 1 150); do still_ours "$pid" "$started" || break; sleep 0.2; done
  still_ours "$pid" "$started" && kill -KILL "$pid" 2>/dev/null && echo "stop_local_postgres: postgres ($pid) needed SIGKILL"
  for _ in $(seq 1 25); do still_ours "$pid" "$started" || break; sleep 0.2; done
fi
live=$(head -n1 "$STATE/data/postmaster.pid" 2>/dev/null || true)
if [ -n "$live" ] && [ "$(cat "/proc/$live/comm" 2>/dev/null)" = postgres ]; then
  echo "stop_local_postgres: $STATE kept: a postgres ($live) not recorded in $STATE/pid runs on it" >&2
  exit 1
fi
# Only what start_local_postgres.sh puts there, then the dir itself.
rm -rf "$STATE/data"
rm -f "$STATE/pid" "$STATE/url" "$STATE/postgres.log" "$STATE/initdb.log" "$STATE"/.s.PGSQL.*
rmdir "$STATE" 2>/dev/null || echo "stop_local_postgres: $STATE kept: it holds other files" >&2
exit 0
