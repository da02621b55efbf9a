#!/usr/bin/env bash
# A private PostgreSQL 15 on a loopback port, with its own data folder: for the tests
# (scripts/test-services.sh) and the fault suite (test/fault/services.ts), which share this
# start code. Never the machine's own server: it is found, started and stopped by its folder.
#
#   private-postgres.sh start DIR PORT   initdb when DIR/data is new, start when nothing answers,
#                                        then role leaf/leaf, database leaf and sql/*.postgres.sql
#   private-postgres.sh pid DIR          the postmaster's pid (first line of DIR/data/postmaster.pid)
#   private-postgres.sh stop DIR         pg_ctl -D DIR/data stop (fast)
# Idempotent. As root, the server runs as the user postgres (initdb refuses root).
set -euo pipefail
cd "$(dirname "$0")/.."

PG_BIN="${LEAF_PG_BIN:-/usr/lib/postgresql/15/bin}"
cmd=${1:?start, pid or stop}
dir=$(realpath -m "${2:?data folder}")
data="$dir/data"

as_server() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
  pid)
    head -n 1 "$data/postmaster.pid"
    ;;
  stop)
    [ -f "$data/postmaster.pid" ] && as_server "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    ;;
  start)
    port=${3:?port}
    if [ ! -x "$PG_BIN/initdb" ]; then
      echo "private-postgres: $PG_BIN/initdb missing (apt-get install postgresql)" >&2; exit 1
    fi
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir"; fi
    if [ ! -f "$data/PG_VERSION" ]; then
      as_server "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
      # Loopback only, a socket folder of its own (not /var/run/postgresql, the machine's).
      cat >>"$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = 200
CONF
    fi
    if ! "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port"; then
      as_server "$PG_BIN/pg_ctl" -D "$data" -o "-p $port" -l "$dir/postgres.log" -w -t 60 start >/dev/null
    fi
    if [ -S "$dir/.s.PGSQL.$port" ]; then
      psql_admin() { as_server "$PG_BIN/psql" -h "$dir" -p "$port" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
      psql_admin -d postgres <<'SQL'
SELECT 'CREATE ROLE leaf LOGIN CREATEDB PASSWORD ''leaf''' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'leaf')\gexec
SELECT 'CREATE DATABASE leaf OWNER leaf' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'leaf')\gexec
SQL
    elif ! PGPASSWORD=leaf "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U leaf -d leaf -qAt -c 'SELECT 1' >/dev/null 2>&1; then
      # Another folder's server holds the port (another checkout's), without the leaf login.
      echo "private-postgres: 127.0.0.1:$port answers, but it is not $dir's server and leaf/leaf cannot log in to its database leaf" >&2; exit 1
    fi
    for f in sql/*.postgres.sql; do
      PGPASSWORD=leaf PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U leaf -d leaf -v ON_ERROR_STOP=1 -q -f "$f" >/dev/null
    done
    ;;
  *)
    echo "private-postgres: unknown command $cmd" >&2; exit 2
    ;;
esac
