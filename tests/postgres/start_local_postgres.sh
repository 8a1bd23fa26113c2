#!/usr/bin/env bash
# Start a real PostgreSQL on this machine for the campaign service's database tests: a fresh
# cluster in $STATE/data (initdb as user postgres), its socket in $STATE, TCP on 127.0.0.1 only
# (a free port from 55432 up), trust authentication for the socket and 127.0.0.1 only, and an
# empty database `paratune`. Records the postmaster in $STATE/pid ("postgres PID START":
# tests/recorded_pids.sh) and writes the SQLAlchemy URL to $STATE/url. Installs Debian's
# package when no PostgreSQL is installed. Needs root.
# Stop with stop_local_postgres.sh.
# Usage: tests/postgres/start_local_postgres.sh [STATE_DIR]   (default /tmp/paratune-postgres)
set -euo pipefail
STATE=${1:-/tmp/paratune-postgres}
case "$STATE" in /*) ;; *) STATE="$PWD/$STATE" ;; esac
STATE=${STATE%/}
[ -n "$STATE" ] || { echo "start_local_postgres: refusing / as the state dir" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "start_local_postgres: needs root (initdb and postgres run as user postgres)" >&2; exit 1; }

source "$(dirname "$0")/../recorded_pids.sh"
# The postmaster of an earlier start, when it still runs: reuse it.
if running=$(bash "$(dirname "$0")/postgres_up.sh" "$STATE"); then
  echo "local PostgreSQL already up: PID $running, $(cat "$STATE/url")"; exit 0
fi
postmaster_alive() {  # postmaster_alive PID
  [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = postgres ]
}
# What a start that did not finish, or a postmaster that died, left behind (our files only).
if [ -s "$STATE/data/postmaster.pid" ] && postmaster_alive "$(head -n1 "$STATE/data/postmaster.pid")"; then
  echo "start_local_postgres: a postgres (PID $(head -n1 "$STATE/data/postmaster.pid")) still runs on $STATE/data;" \
       "stop it with tests/postgres/stop_local_postgres.sh $STATE" >&2
  exit 1
fi
if [ -e "$STATE/data" ] && [ ! -f "$STATE/data/PG_VERSION" ]; then
  echo "start_local_postgres: $STATE/data is there and is no PostgreSQL cluster; choose another state dir" >&2; exit 1
fi
rm -rf "$STATE/data"
rm -f "$STATE/pid" "$STATE/url" "$STATE/postgres.log" "$STATE"/.s.PGSQL.*

if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  command -v apt-get >/dev/null || { echo "start_local_postgres: no PostgreSQL installed and no apt-get" >&2; exit 1; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
# The newest version installed (Debian 12: 15).
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
[ -x "$BIN/initdb" ] && [ -x "$BIN/postgres" ] || { echo "start_local_postgres: no initdb/postgres in $BIN" >&2; exit 1; }

mkdir -p "$STATE"
chown postgres:postgres "$STATE"
chmod 755 "$STATE"
as_postgres() { runuser -u postgres -- "$@"; }
as_postgres test -w "$STATE" || { echo "start_local_postgres: user postgres cannot write $STATE" >&2; exit 1; }

as_postgres "$BIN/initdb" -D "$STATE/data" -U postgres --auth=trust --no-locale --encoding=UTF8 \
  --no-instructions >"$STATE/initdb.log" 2>&1 \
  || { cat "$STATE/initdb.log" >&2; echo "start_local_postgres: initdb failed" >&2; exit 1; }
rm -f "$STATE/initdb.log"
cat > "$STATE/data/pg_hba.conf" <<CONF
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 trust
host    all       all   127.0.0.1/32  trust
CONF
# A throwaway cluster for tests: durability off, so that CREATE DATABASE per test is quick.
cat >> "$STATE/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$STATE'
fsync = off
synchronous_commit = off
full_page_writes = off
CONF

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }  # nothing answers there
ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -d postgres -U postgres; }

PID=""
for PORT in $(seq 55432 55531); do
  port_free "$PORT" || continue
  : > "$STATE/postgres.log"; chown postgres:postgres "$STATE/postgres.log"
  rm -f "$STATE/data/postmaster.pid"
  # In a session of its own, so that a Ctrl-C at the terminal does not reach it.
  setsid runuser -u postgres -- "$BIN/postgres" -D "$STATE/data" -p "$PORT" >>"$STATE/postgres.log" 2>&1 </dev/null &
  launcher=$!
  for _ in $(seq 1 150); do  # up to 30 s
    if [ -z "$PID" ] && [ -s "$STATE/data/postmaster.pid" ]; then
      PID=$(head -n1 "$STATE/data/postmaster.pid"); : > "$STATE/pid"; record_pid "$STATE/pid" postgres "$PID"
    fi
    [ -n "$PID" ] && ready "$PORT" && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.2
  done
  if [ -n "$PID" ] && ready "$PORT"; then break; fi
  if ! kill -0 "$launcher" 2>/dev/null && grep -q "could not bind\|could not create listen socket" "$STATE/postgres.log"; then
    PID=""; rm -f "$STATE/pid"; continue  # the port was taken meanwhile: try the next one
  fi
  cat "$STATE/postgres.log" >&2
  echo "start_local_postgres: postgres did not come up in 30s" >&2
  if [ -n "$PID" ]; then bash "$(dirname "$0")/stop_local_postgres.sh" "$STATE"; else kill -TERM "$launcher" 2>/dev/null; fi
  exit 1
done
[ -n "$PID" ] || { echo "start_local_postgres: no free port in 55432-55531" >&2; exit 1; }

"$BIN/psql" -q -h "$STATE" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE paratune" >/dev/null
echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/paratune" > "$STATE/url"
echo "local PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') up: PID $PID, $(cat "$STATE/url") (state in $STATE)"
