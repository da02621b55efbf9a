#!/usr/bin/env bash
# Starts what the tests need when it is not running, installing it from Debian's packages
# where it is missing: MariaDB (the machine's own service when it is up), ZooKeeper on a
# loopback port with its own data folder, Chromium (the /cache page test), promtool (the
# metrics lint), faketime (the fault suite's clock-ahead scenario), galera-4 and rsync (the
# Galera tests), and a private PostgreSQL 15 on 127.0.0.1:25432 (scripts/private-postgres.sh:
# its own data folder under .test-services, never the machine's own server on 5432).
# Creates the `leaf` database and user on each.
#
# Services of your own (macOS, a container, a shared server): with
#   LEAF_TEST_MYSQL_URL=mysql://user:pass@host:port   and/or
#   LEAF_TEST_ZK_ADDRESS=host:port   and/or
#   LEAF_TEST_PG_URL=postgres://user:pass@host:port
# nothing is installed or started for that service; the script only checks that it answers,
# and the tests use it (test/helpers/mysql.ts, test/helpers/zookeeper.ts). The MySQL user
# needs a database `leaf` and the rights to create and drop `leaf_test_*` databases (the
# PostgreSQL user: CREATEDB, and it owns the `leaf_test_*` databases it makes). The
# tools are still looked up on PATH, and installed with apt only where missing.
# Idempotent: run it as often as you like.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE_DIR="${LEAF_TEST_STATE_DIR:-$PWD/.test-services}"
ZK_PORT="${LEAF_TEST_ZK_PORT:-2181}"
PG_PORT="${LEAF_TEST_PG_PORT:-25432}"
mkdir -p "$STATE_DIR"

log() { printf '[services] %s\n' "$*"; }

apt_updated=0
apt_install() {
  if ! command -v apt-get >/dev/null; then log "missing: $* (no apt-get here: install it yourself, see the README's Development section)"; exit 1; fi
  if [ "$(id -u)" != 0 ]; then log "need root to install $*"; exit 1; fi
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

wait_for() { # description, seconds, command...
  local what=$1 seconds=$2; shift 2
  for _ in $(seq $((seconds * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  log "$what did not come up within ${seconds}s"; return 1
}

port_open() { (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null; }

# host:port (or [v6]:port, or a host alone) -> "host port", the default port where none is given
split_host_port() {
  local hostport=$1 default_port=$2
  if [[ $hostport =~ ^\[(.*)\]:([0-9]+)$ ]]; then printf '%s %s' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  elif [[ $hostport =~ ^\[(.*)\]$ ]]; then printf '%s %s' "${BASH_REMATCH[1]}" "$default_port"
  elif [[ $hostport =~ ^([^:]+):([0-9]+)$ ]]; then printf '%s %s' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  else printf '%s %s' "$hostport" "$default_port"; fi
}

# A service of the developer's own: it must answer; nothing is installed or started for it.
check_own_service() { # what, variable, host, port
  if wait_for "$1 at $3:$4 ($2)" 10 port_open "$4" "$3"; then
    log "$1: $2 given, using $3:$4 (nothing installed or started)"
  else
    log "$1: nothing answers at $3:$4 ($2)"; exit 1
  fi
}

# --- Tools the tests call ------------------------------------------------------
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v promtool >/dev/null || missing+=(prometheus)
# faketime: the fault suite preloads its libfaketime for clocks ahead (scenarios 12, 15, 20, 21).
command -v faketime >/dev/null || missing+=(faketime)
# Galera (test/integration/galera.test.ts): its provider, and rsync for its state transfer; the replica
# pair and the Galera nodes run private mariadbd processes of their own (mariadb-server).
[ -e /usr/lib/galera/libgalera_smm.so ] || missing+=(galera-4)
command -v rsync >/dev/null || missing+=(rsync)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  apt_install "${missing[@]}"
fi

# --- MariaDB ---------------------------------------------------------------
if [ -n "${LEAF_TEST_MYSQL_URL:-}" ]; then
  rest=${LEAF_TEST_MYSQL_URL#*://}
  rest=${rest##*@}
  read -r mysql_host mysql_port <<<"$(split_host_port "${rest%%/*}" 3306)"
  check_own_service MySQL LEAF_TEST_MYSQL_URL "$mysql_host" "$mysql_port"
else
if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then
  log "installing MariaDB"
  apt_install mariadb-server mariadb-client
fi
if ! mariadb-admin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1; then
  log "starting MariaDB"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  # --pidfile: without it, start-stop-daemon takes any private mariadbd a test left running for
  # this one and starts nothing.
  start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid --exec /usr/sbin/mariadbd -- --user=root
  wait_for MariaDB 60 mariadb-admin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping
fi
mariadb --protocol=tcp -h127.0.0.1 -P3306 -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS leaf;
CREATE USER IF NOT EXISTS 'leaf'@'%' IDENTIFIED BY 'leaf';
CREATE USER IF NOT EXISTS 'leaf'@'localhost' IDENTIFIED BY 'leaf';
GRANT ALL PRIVILEGES ON `leaf%`.* TO 'leaf'@'%';
GRANT ALL PRIVILEGES ON `leaf%`.* TO 'leaf'@'localhost';
FLUSH PRIVILEGES;
SQL
mariadb --protocol=tcp -h127.0.0.1 -P3306 -uleaf -pleaf leaf < sql/leaf_alloc.sql
mariadb --protocol=tcp -h127.0.0.1 -P3306 -uleaf -pleaf leaf < sql/leaf_worker_lease.sql
mariadb --protocol=tcp -h127.0.0.1 -P3306 -uleaf -pleaf leaf < sql/leaf_alloc_parked.sql
log "MariaDB ready on 127.0.0.1:3306 (database leaf, user leaf/leaf)"
fi

# --- ZooKeeper -------------------------------------------------------------
if [ -n "${LEAF_TEST_ZK_ADDRESS:-}" ]; then
  read -r zk_host zk_port <<<"$(split_host_port "$LEAF_TEST_ZK_ADDRESS" 2181)"
  check_own_service ZooKeeper LEAF_TEST_ZK_ADDRESS "$zk_host" "$zk_port"
else
if [ ! -d /usr/share/zookeeper ] && ! ls /usr/share/java/zookeeper*.jar >/dev/null 2>&1; then
  log "installing ZooKeeper"
  apt_install zookeeper
fi
if ! command -v java >/dev/null; then apt_install default-jre-headless; fi
if ! port_open "$ZK_PORT"; then
  log "starting ZooKeeper on 127.0.0.1:$ZK_PORT"
  ZK_DIR="$STATE_DIR/zookeeper-$ZK_PORT"
  mkdir -p "$ZK_DIR/data"
  cat > "$ZK_DIR/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxSessionTimeout=60000
minSessionTimeout=1000
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
CFG
  cat > "$ZK_DIR/log4j.properties" <<'CFG'
log4j.rootLogger=WARN, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d %-5p %m%n
CFG
  nohup java -Dzookeeper.log.dir="$ZK_DIR" -Dlog4j.configuration="file:$ZK_DIR/log4j.properties" \
    -cp "/etc/zookeeper/conf:/usr/share/java/*" org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_DIR/zoo.cfg" \
    > "$ZK_DIR/zookeeper.out" 2>&1 &
  echo $! > "$ZK_DIR/pid"
  wait_for ZooKeeper 30 port_open "$ZK_PORT"
fi
log "ZooKeeper ready on 127.0.0.1:$ZK_PORT"
fi

# --- PostgreSQL ------------------------------------------------------------
if [ -n "${LEAF_TEST_PG_URL:-}" ]; then
  rest=${LEAF_TEST_PG_URL#*://}
  rest=${rest##*@}
  read -r pg_host pg_port <<<"$(split_host_port "${rest%%/*}" 5432)"
  check_own_service PostgreSQL LEAF_TEST_PG_URL "$pg_host" "$pg_port"
else
if [ ! -x /usr/lib/postgresql/15/bin/initdb ] || [ ! -x /usr/lib/postgresql/15/bin/pg_ctl ]; then
  log "installing PostgreSQL 15"
  apt_install postgresql-15 postgresql-client-15
fi
# Idempotent: initdb only into a new folder, pg_ctl start only when nothing answers.
bash scripts/private-postgres.sh start "$STATE_DIR/postgres-$PG_PORT" "$PG_PORT"
log "PostgreSQL ready on 127.0.0.1:$PG_PORT (database leaf, user leaf/leaf; stop: scripts/private-postgres.sh stop $STATE_DIR/postgres-$PG_PORT)"
fi
