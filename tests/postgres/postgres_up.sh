#!/usr/bin/env bash
# Whether the PostgreSQL that start_local_postgres.sh recorded in STATE_DIR still runs: its
# URL is written and its PID still names the postmaster recorded (tests/recorded_pids.sh: a
# postmaster that died leaves its PID free for another process). Prints that PID; exit 0 when
# it runs, 1 otherwise.
# Usage: tests/postgres/postgres_up.sh [STATE_DIR]   (default /tmp/paratune-postgres)
set -u
STATE=${1:-/tmp/paratune-postgres}
source "$(dirname "$0")/../recorded_pids.sh"
[ -s "$STATE/url" ] && [ -s "$STATE/pid" ] || exit 1
read -r name pid started < "$STATE/pid"
[ "$name" = postgres ] && still_ours "$pid" "${started:-}" && echo "$pid"
