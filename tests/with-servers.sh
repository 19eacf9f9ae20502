#!/usr/bin/env bash
# Run a command against private, throw-away PostgreSQL 15 and MariaDB servers
# (and a PgBouncer in transaction pooling mode in front of PostgreSQL).
#
#   tests/with-servers.sh CMD [ARGS...]
#
# Both servers live in a fresh `mktemp -d` folder, listen on 127.0.0.1 only, on
# free ports picked at run time (several runs at once do not collide), and have
# their unix sockets inside the folder. CMD runs with DBLOCK_TEST_* variables
# exported (see the end of this file); afterwards, also on failure, Ctrl-C or
# TERM, both servers are stopped and the folder removed. The exit status is
# CMD's. Requires root (initdb/postgres run as user postgres through runuser,
# mariadbd as user mysql). System servers on 5432/3306, if any, are ignored.
#
# Layout of the temp folder ($DBLOCK_TEST_TMP, mode 0711, owned by root):
#   pg/       owned by postgres: data/ (DBLOCK_TEST_PG_DATA), pg.log, socket
#   my/       owned by mysql:    data/, tmp/, my.sock, my.pid, my.err
#   pgb/      owned by postgres: pgb.ini, users.txt, pgb.pid, pgb.log
#   stopping  created when teardown starts (restart helpers then give up)
#
# Internal use (the values of DBLOCK_TEST_PG_RESTART / DBLOCK_TEST_MY_RESTART):
#   tests/with-servers.sh --pg-restart TMP
#       runuser -u postgres -- pg_ctl -D TMP/pg/data -l TMP/pg/pg.log \
#           -m immediate -w restart        (same port: it is in postgresql.auto.conf)
#   tests/with-servers.sh --my-restart TMP PORT
#       kill -9 mariadbd, start it again on PORT, wait until it answers a ping
# Both refuse to run once teardown has started.
#
# Signals: CMD runs in the foreground, in our process group, so Ctrl-C or
# `timeout` reach it too; a TERM sent to this script alone is acted on (servers
# stopped, folder removed) when CMD exits.
#
# shellcheck disable=SC2317  # cleanup and its helpers are only called from a trap
set -euo pipefail

PG_BIN=${DBLOCK_PG_BIN:-/usr/lib/postgresql/15/bin}
SELF=$(readlink -f -- "${BASH_SOURCE[0]}")

log() { printf 'with-servers: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------- helpers

# shellcheck source=tests/servers-lib.sh
. "$(dirname "$SELF")/servers-lib.sh"

# ---------------------------------------------------------------- MariaDB

# my_start TMP PORT: start mariadbd detached, wait until it answers a ping.
# Returns 0 when up, 2 when the port was taken, 1 on any other failure.
my_start() {
    local tmp=$1 port=$2 my=$1/my offset pid n
    offset=$(stat -c %s "$my/my.err" 2>/dev/null || echo 0)
    rm -f "$my/my.pid"
    # setsid + closed stdio: the server must not hold the caller's pipes or get
    # its terminal signals (a test may call the restart helper via popen()).
    setsid mariadbd --no-defaults --user=mysql --datadir="$my/data" --tmpdir="$my/tmp" \
        --socket="$my/my.sock" --port="$port" --bind-address=127.0.0.1 \
        --skip-name-resolve --pid-file="$my/my.pid" --log-error="$my/my.err" \
        --innodb-flush-log-at-trx-commit=1 --max-connections=300 \
        </dev/null >/dev/null 2>&1 &
    pid=$!
    disown "$pid"      # no "Killed" job report when a restart kills it
    printf '%s\n' "$pid" >"$tmp/my.launched"
    n=300
    while [ "$n" -gt 0 ]; do
        if mariadb-admin --no-defaults --socket="$my/my.sock" -uroot \
            --connect-timeout=2 ping >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            if tail -c +"$((offset + 1))" "$my/my.err" 2>/dev/null |
                grep -q 'Address already in use'; then
                return 2
            fi
            break
        fi
        sleep 0.1
        n=$((n - 1))
    done
    log "mariadbd did not come up on port $port; error log:"
    tail -c +"$((offset + 1))" "$my/my.err" >&2 2>/dev/null || true
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
        wait_gone "$pid" 50 || true
    fi
    return 1
}

# Pids of our mariadbd: from its pid file and the one we launched last.
my_pids() {
    cat "$1/my/my.pid" "$1/my.launched" 2>/dev/null || true
}

# Kill our mariadbd hard; wait for it.
my_kill() {
    local tmp=$1 pid
    for pid in $(my_pids "$tmp"); do
        if pid_matches "$pid" "--datadir=$tmp/my/data"; then
            kill -9 "$pid" 2>/dev/null || true
            wait_gone "$pid" 100 || log "mariadbd $pid did not die"
        fi
    done
}

my_restart() {
    local tmp=$1 port=$2
    [ -d "$tmp/my" ] || die "--my-restart: no $tmp/my"
    [[ "$port" =~ ^[0-9]+$ ]] || die "--my-restart: bad port '$port'"
    [ ! -e "$tmp/stopping" ] || die "--my-restart: teardown in progress"
    my_kill "$tmp"
    [ ! -e "$tmp/stopping" ] || die "--my-restart: teardown in progress"
    local rc=0 tries=0
    # The port stays ours unless someone grabs it in the short window; a few
    # retries cover a lingering listener.
    while :; do
        my_start "$tmp" "$port" && return 0 || rc=$?
        tries=$((tries + 1))
        if [ "$rc" != 2 ] || [ "$tries" -ge 20 ]; then
            die "--my-restart failed"
        fi
        sleep 0.25
    done
}

pg_restart() {
    local tmp=$1
    [ -f "$tmp/pg/data/PG_VERSION" ] || die "--pg-restart: no $tmp/pg/data"
    [ ! -e "$tmp/stopping" ] || die "--pg-restart: teardown in progress"
    as_pg "$PG_BIN/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/pg.log" \
        -m immediate -w -t 30 -s restart || die "--pg-restart failed"
}

case "${1:-}" in
    --my-restart)
        [ "$#" = 3 ] || die "usage: $0 --my-restart TMP PORT"
        my_restart "$2" "$3"
        exit 0 ;;
    --pg-restart)
        [ "$#" = 2 ] || die "usage: $0 --pg-restart TMP"
        pg_restart "$2"
        exit 0 ;;
esac

# ---------------------------------------------------------------- main

if [ "$#" -eq 0 ]; then
    echo "usage: $0 CMD [ARGS...]" >&2
    exit 2
fi
[ "$(id -u)" -eq 0 ] || die "must run as root (servers run as users postgres and mysql)"
for tool in "$PG_BIN/initdb" "$PG_BIN/pg_ctl" "$PG_BIN/psql"; do
    [ -x "$tool" ] || die "$tool not found (run tests/install-deps.sh)"
done
for tool in mariadbd mariadb-install-db mariadb-admin mariadb pgbouncer ss runuser setsid; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (run tests/install-deps.sh)"
done

# Unix socket paths are limited to ~107 bytes and the path is used unquoted in
# the exported command strings: only use TMPDIR when it is short and plain.
base=${TMPDIR:-/tmp}
if [ "${#base}" -gt 50 ] || [[ ! "$base" =~ ^/[A-Za-z0-9/._-]*$ ]] || [ ! -d "$base" ]; then
    base=/tmp
fi

TMP=""
PG_DATA=""
MY_STARTED=0
PG_STARTED=0
PGB_STARTED=0

cleanup() {
    local rc=$? pid
    trap '' INT TERM
    set +e
    if [ -n "$TMP" ] && [ -d "$TMP" ]; then
        : >"$TMP/stopping"
        # PgBouncer: by its pid file (SIGTERM, then SIGKILL).
        if [ "$PGB_STARTED" = 1 ]; then
            pid=$(cat "$TMP/pgb/pgb.pid" 2>/dev/null)
            if [[ "$pid" =~ ^[0-9]+$ ]] && [ -r "/proc/$pid/cmdline" ] &&
                tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q pgbouncer; then
                kill -TERM "$pid" 2>/dev/null
                wait_gone "$pid" 50 || kill -9 "$pid" 2>/dev/null
            fi
        fi
        # PostgreSQL: fast shutdown, else SIGKILL postmaster and its children.
        if [ "$PG_STARTED" = 1 ]; then
            if [ -f "$PG_DATA/postmaster.pid" ]; then
                as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 30 stop >/dev/null 2>&1
            fi
            pid=$(head -n1 "$PG_DATA/postmaster.pid" 2>/dev/null)
            if pid_matches "$pid" "$PG_DATA"; then
                log "pg_ctl stop failed; killing postmaster $pid"
                # shellcheck disable=SC2046
                kill -9 $(children_of "$pid") "$pid" 2>/dev/null
                wait_gone "$pid" 100
            fi
        fi
        # MariaDB: SHUTDOWN over the socket (like `mariadb-admin shutdown`, but
        # that one polls the pid file only once a second), else SIGTERM, and
        # SIGKILL whatever is still alive after 30 s.
        if [ "$MY_STARTED" = 1 ]; then
            if ! mariadb --no-defaults --socket="$TMP/my/my.sock" -uroot \
                --connect-timeout=5 -e SHUTDOWN >/dev/null 2>&1; then
                for pid in $(my_pids "$TMP"); do
                    pid_matches "$pid" "--datadir=$TMP/my/data" && kill -TERM "$pid" 2>/dev/null
                done
            fi
            for pid in $(my_pids "$TMP"); do
                pid_matches "$pid" "--datadir=$TMP/my/data" && wait_gone "$pid" 300
            done
            my_kill "$TMP"
        fi
        # Anything else still running from our folder (e.g. a restart helper
        # racing with us, or a server it just launched): kill it. Precise match
        # on the unique folder path; two passes in case one spawned a child.
        for _ in 1 2; do
            for pid in /proc/[0-9]*; do
                pid=${pid#/proc/}
                [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
                pid_matches "$pid" "$TMP/" && kill -9 "$pid" 2>/dev/null
            done
            sleep 0.1
        done
        rm -rf -- "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d "$base/dblock-test.XXXXXX")
chmod 0711 "$TMP"
PW=$(random_password)

# ---- PostgreSQL
PG_DIR=$TMP/pg
PG_DATA=$PG_DIR/data
PG_LOG=$PG_DIR/pg.log
mkdir -m 0700 "$PG_DIR"
chown postgres: "$PG_DIR"
if ! as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 --no-sync >"$TMP/initdb.log" 2>&1; then
    cat "$TMP/initdb.log" >&2
    die "initdb failed"
fi
cat >"$PG_DATA/pg_hba.conf" <<EOF
local all all trust
host  all all 127.0.0.1/32 scram-sha-256
EOF
cat >>"$PG_DATA/postgresql.conf" <<EOF

# with-servers.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_DIR'
max_connections = 300
fsync = on
EOF
chown postgres: "$PG_DATA/pg_hba.conf" "$PG_DATA/postgresql.conf"

PG_PORT=""
for attempt in 1 2 3 4 5 6 7 8 9 10; do
    PG_PORT=$(free_port)
    # postgresql.auto.conf is read last: the port lives there, so pg_ctl
    # restart (which reuses postmaster.opts) keeps it.
    printf 'port = %s\n' "$PG_PORT" >"$PG_DATA/postgresql.auto.conf"
    chown postgres: "$PG_DATA/postgresql.auto.conf"
    install -o postgres -g postgres -m 0600 /dev/null "$PG_LOG"
    PG_STARTED=1
    if as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 30 start >"$TMP/pg_ctl.log" 2>&1; then
        break
    fi
    if grep -q 'Address already in use' "$PG_LOG" && [ "$attempt" -lt 10 ]; then
        continue
    fi
    cat "$TMP/pg_ctl.log" "$PG_LOG" >&2
    die "postgres did not start"
done

PG_PSQL="runuser -u postgres -- env -C / $PG_BIN/psql -h $PG_DIR -p $PG_PORT -v ON_ERROR_STOP=1 -X -q"
$PG_PSQL -d postgres >"$TMP/pg_setup.log" 2>&1 <<EOF || { cat "$TMP/pg_setup.log" >&2; die "postgres setup failed"; }
CREATE ROLE dblock LOGIN PASSWORD '$PW';
CREATE ROLE dblock_ro LOGIN PASSWORD '$PW';
CREATE ROLE dblock_app LOGIN PASSWORD '$PW';
CREATE DATABASE dblock OWNER dblock;
REVOKE ALL ON DATABASE dblock FROM PUBLIC;
GRANT CONNECT ON DATABASE dblock TO dblock_ro, dblock_app;
\connect dblock
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO dblock_app;
EOF

# ---- MariaDB
MY_DIR=$TMP/my
mkdir -m 0700 "$MY_DIR" "$MY_DIR/tmp"
chown mysql: "$MY_DIR" "$MY_DIR/tmp"
# A private --tmpdir is essential: mariadbd deletes every "#sql*" file in its
# tmpdir when it starts, so instances sharing /tmp break each other's temporary
# tables (seen as a crash or "Unknown table" in concurrent mariadb-install-db).
if ! mariadb-install-db --no-defaults --user=mysql --datadir="$MY_DIR/data" --tmpdir="$MY_DIR/tmp" \
    --auth-root-authentication-method=socket --skip-test-db >"$TMP/my_install.log" 2>&1; then
    cat "$TMP/my_install.log" >&2
    die "mariadb-install-db failed"
fi
MY_PORT=""
for attempt in 1 2 3 4 5 6 7 8 9 10; do
    MY_PORT=$(free_port "$PG_PORT")
    MY_STARTED=1
    rc=0
    my_start "$TMP" "$MY_PORT" || rc=$?
    [ "$rc" = 0 ] && break
    [ "$rc" = 2 ] && [ "$attempt" -lt 10 ] && continue
    die "mariadbd did not start"
done

MY_CLI="mariadb --no-defaults --socket=$MY_DIR/my.sock -uroot"
$MY_CLI >"$TMP/my_setup.log" 2>&1 <<EOF || { cat "$TMP/my_setup.log" >&2; die "mariadb setup failed"; }
DROP USER IF EXISTS ''@'localhost';
DROP USER IF EXISTS ''@'$(hostname)';
CREATE DATABASE dblock;
CREATE USER 'dblock'@'127.0.0.1' IDENTIFIED BY '$PW';
CREATE USER 'dblock'@'localhost' IDENTIFIED BY '$PW';
GRANT ALL ON dblock.* TO 'dblock'@'127.0.0.1', 'dblock'@'localhost';
CREATE USER 'dblock_ro'@'127.0.0.1' IDENTIFIED BY '$PW';
CREATE USER 'dblock_ro'@'localhost' IDENTIFIED BY '$PW';
GRANT SELECT ON dblock.* TO 'dblock_ro'@'127.0.0.1', 'dblock_ro'@'localhost';
CREATE USER 'dblock_app'@'127.0.0.1' IDENTIFIED BY '$PW';
CREATE USER 'dblock_app'@'localhost' IDENTIFIED BY '$PW';
FLUSH PRIVILEGES;
EOF

# ---- PgBouncer (transaction pooling) in front of PostgreSQL, reaching it
# through its unix socket (local trust); clients are trusted by name.
PGB_DIR=$TMP/pgb
mkdir -m 0700 "$PGB_DIR"
printf '"dblock" ""\n' >"$PGB_DIR/users.txt"
PGB_PORT=""
for attempt in 1 2 3 4 5 6 7 8 9 10; do
    PGB_PORT=$(free_port "$PG_PORT" "$MY_PORT")
    cat >"$PGB_DIR/pgb.ini" <<EOF
[databases]
dblock = host=$PG_DIR port=$PG_PORT dbname=dblock user=dblock
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir =
auth_type = trust
auth_file = $PGB_DIR/users.txt
pool_mode = transaction
pidfile = $PGB_DIR/pgb.pid
logfile = $PGB_DIR/pgb.log
max_client_conn = 500
default_pool_size = 40
server_reset_query =
ignore_startup_parameters = extra_float_digits
EOF
    chown -R postgres: "$PGB_DIR"
    PGB_STARTED=1
    if runuser -u postgres -- pgbouncer -d -q "$PGB_DIR/pgb.ini" >"$TMP/pgb_start.log" 2>&1; then
        n=100
        while [ "$n" -gt 0 ] && [ -z "$(ss -Htln "sport = :$PGB_PORT" 2>/dev/null)" ]; do
            sleep 0.05
            n=$((n - 1))
        done
        [ "$n" -gt 0 ] && break
    fi
    if grep -q 'Address already in use' "$PGB_DIR/pgb.log" 2>/dev/null && [ "$attempt" -lt 10 ]; then
        continue
    fi
    cat "$TMP/pgb_start.log" "$PGB_DIR/pgb.log" >&2 2>/dev/null
    die "pgbouncer did not start"
done

# ---- environment for CMD
SELF_Q=$(printf '%q' "$SELF")
export DBLOCK_TEST_TMP=$TMP
export DBLOCK_TEST_PW=$PW
export DBLOCK_TEST_PG_PORT=$PG_PORT
export DBLOCK_TEST_PG_URL="postgres://dblock:$PW@127.0.0.1:$PG_PORT/dblock"
export DBLOCK_TEST_PG_RO_URL="postgres://dblock_ro:$PW@127.0.0.1:$PG_PORT/dblock"
export DBLOCK_TEST_PG_APP_URL="postgres://dblock_app:$PW@127.0.0.1:$PG_PORT/dblock"
export DBLOCK_TEST_PG_DATA=$PG_DATA
export DBLOCK_TEST_PG_SOCKDIR=$PG_DIR
export DBLOCK_TEST_PG_ADMIN="$PG_PSQL -d dblock"
export DBLOCK_TEST_PG_RESTART="$SELF_Q --pg-restart $TMP"
export DBLOCK_TEST_PGB_URL="postgres://dblock:$PW@127.0.0.1:$PGB_PORT/dblock?pooler=transaction"
export DBLOCK_TEST_MY_PORT=$MY_PORT
export DBLOCK_TEST_MY_URL="mysql://dblock:$PW@127.0.0.1:$MY_PORT/dblock"
export DBLOCK_TEST_MY_RO_URL="mysql://dblock_ro:$PW@127.0.0.1:$MY_PORT/dblock"
export DBLOCK_TEST_MY_APP_URL="mysql://dblock_app:$PW@127.0.0.1:$MY_PORT/dblock"
export DBLOCK_TEST_MY_SOCK=$MY_DIR/my.sock
export DBLOCK_TEST_MY_ADMIN="$MY_CLI dblock"
export DBLOCK_TEST_MY_RESTART="$SELF_Q --my-restart $TMP $MY_PORT"
export DBLOCK_TEST_MY_PIDFILE=$MY_DIR/my.pid

printf 'servers: %s\n' "postgres 127.0.0.1:$PG_PORT, mariadb 127.0.0.1:$MY_PORT, pgbouncer 127.0.0.1:$PGB_PORT ($TMP)" >&2

set +e
"$@"
rc=$?
set -e
exit "$rc"
