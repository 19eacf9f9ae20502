#!/usr/bin/env bash
# Run a command against private replicated topologies (DESIGN §10):
#   - a PostgreSQL 15 primary with one synchronous streaming standby
#     (application_name s1), hot standby on;
#   - a 3-node MariaDB Galera cluster (galera-4, rsync state transfer).
#
#   tests/with-topology.sh CMD [ARGS...]
#
# Everything lives in a fresh `mktemp -d` folder, listens on 127.0.0.1 only,
# on free ports picked at run time. CMD runs with these variables exported:
#   DBLOCK_TOPO_PW                 password of user dblock everywhere
#   DBLOCK_TOPO_PG_PRIMARY_PORT / DBLOCK_TOPO_PG_STANDBY_PORT
#   DBLOCK_TOPO_PG_PRIMARY_DATA / DBLOCK_TOPO_PG_STANDBY_DATA
#   DBLOCK_TOPO_PG_ADMIN_PRIMARY / _STANDBY  psql as superuser (append -c SQL)
#   DBLOCK_TOPO_PG_CTL             pg_ctl as user postgres (append args)
#   DBLOCK_TOPO_GALERA_PORTS       "p1 p2 p3" (SQL ports of the nodes)
#   DBLOCK_TOPO_GALERA_ADMIN1..3   mariadb client as root on node N
# The failover test stops the primary and promotes the standby; teardown
# stops whatever runs (by pid file, and the pids we launched), also on
# failure, Ctrl-C or TERM, and removes the folder. Exit status: CMD's.
# Requires root (postgres runs as user postgres, mariadbd as user mysql).
set -euo pipefail

PG_BIN=${DBLOCK_PG_BIN:-/usr/lib/postgresql/15/bin}
SELF=$(readlink -f -- "${BASH_SOURCE[0]}")
log() { printf 'with-topology: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=tests/servers-lib.sh
. "$(dirname "$SELF")/servers-lib.sh"

[ "$#" -ge 1 ] || die "usage: $0 CMD [ARGS...]"
[ "$(id -u)" -eq 0 ] || die "must run as root"
for tool in mariadbd mariadb-install-db mariadb rsync runuser setsid ss; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (run tests/install-deps.sh)"
done
GALERA_LIB=/usr/lib/galera/libgalera_smm.so
[ -e "$GALERA_LIB" ] || die "$GALERA_LIB not found (install galera-4)"

base=${TMPDIR:-/tmp}
TMP=$(mktemp -d "$base/dblock-topo.XXXXXX")
chmod 0711 "$TMP"
PW=$(random_password)
USED=()

# ---------------------------------------------------------------- teardown
# Galera nodes: by pid file, then the pid we launched (a node that never
# wrote its pid file); each must still be a mariadbd on our data folder.
galera_stop() {
    local n pid
    for n in 3 2 1; do
        for pid in $(cat "$TMP/g$n/my.pid" "$TMP/g$n.launched" 2>/dev/null | sort -u); do
            pid_matches "$pid" "--datadir=$TMP/g$n/data" || continue
            kill -TERM "$pid" 2>/dev/null || true
            wait_gone "$pid" 300 || { kill -KILL "$pid" 2>/dev/null || true; wait_gone "$pid" 50 || true; }
        done
    done
}
pg_stop() {
    local d
    for d in "$TMP/pgp/data" "$TMP/pgs/data"; do
        [ -e "$d/postmaster.pid" ] || continue
        as_pg "$PG_BIN/pg_ctl" -D "$d" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    done
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    galera_stop
    pg_stop
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port() { # a free port not handed out yet
    local p
    p=$(free_port "${USED[@]}")
    USED+=("$p")
    printf '%s\n' "$p"
}

# ---------------------------------------------------------------- PostgreSQL
PGP=$TMP/pgp PGS=$TMP/pgs
mkdir -m 0700 "$PGP" "$PGS"
chown postgres: "$PGP" "$PGS"
as_pg "$PG_BIN/initdb" -D "$PGP/data" -U postgres -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 --no-sync >"$TMP/initdb.log" 2>&1 ||
    { cat "$TMP/initdb.log" >&2; die "initdb failed"; }
cat >"$PGP/data/pg_hba.conf" <<EOF
local all all trust
host  replication postgres 127.0.0.1/32 trust
host  all all 127.0.0.1/32 scram-sha-256
EOF
PGP_PORT=$(port)
PGS_PORT=$(port)
cat >>"$PGP/data/postgresql.conf" <<EOF

# with-topology.sh (the standby's copy is rewritten below)
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PGP'
port = $PGP_PORT
wal_level = replica
max_wal_senders = 5
hot_standby = on
synchronous_standby_names = 's1'
fsync = on
EOF
as_pg "$PG_BIN/pg_ctl" -D "$PGP/data" -l "$PGP/pg.log" -w -t 30 start >"$TMP/pgp_ctl.log" 2>&1 ||
    { cat "$TMP/pgp_ctl.log" "$PGP/pg.log" >&2; die "primary did not start"; }
PSQL_P="runuser -u postgres -- env -C / $PG_BIN/psql -h $PGP -p $PGP_PORT -v ON_ERROR_STOP=1 -X -q"
# Until the standby is attached, commits would wait for it: set up first,
# with synchronous_commit off for the setup session only.
$PSQL_P -d postgres >"$TMP/pg_setup.log" 2>&1 <<EOF || { cat "$TMP/pg_setup.log" >&2; die "postgres setup failed"; }
SET synchronous_commit = local;
CREATE ROLE dblock LOGIN PASSWORD '$PW';
CREATE DATABASE dblock OWNER dblock;
EOF
as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PGP_PORT" -U postgres -D "$PGS/data" -X stream \
    --no-sync >"$TMP/basebackup.log" 2>&1 || { cat "$TMP/basebackup.log" >&2; die "pg_basebackup failed"; }
# The standby: its own port and socket, following the primary as s1, and not
# itself waiting for a synchronous standby once promoted.
cat >"$PGS/data/postgresql.auto.conf" <<EOF
port = $PGS_PORT
unix_socket_directories = '$PGS'
primary_conninfo = 'host=127.0.0.1 port=$PGP_PORT user=postgres application_name=s1'
synchronous_standby_names = ''
EOF
touch "$PGS/data/standby.signal"
chown -R postgres: "$PGS/data"
as_pg "$PG_BIN/pg_ctl" -D "$PGS/data" -l "$PGS/pg.log" -w -t 30 start >"$TMP/pgs_ctl.log" 2>&1 ||
    { cat "$TMP/pgs_ctl.log" "$PGS/pg.log" >&2; die "standby did not start"; }
for _ in $(seq 100); do
    state=$($PSQL_P -d postgres -Atc "SELECT sync_state FROM pg_stat_replication WHERE application_name = 's1'" 2>/dev/null || true)
    [ "$state" = sync ] && break
    sleep 0.1
done
[ "$state" = sync ] || die "the standby did not become synchronous"

# ---------------------------------------------------------------- Galera
# Node N: SQL port, group communication, IST and SST ports of its own.
declare -a SQLP GCP ISTP SSTP
for n in 1 2 3; do
    SQLP[$n]=$(port); GCP[$n]=$(port); ISTP[$n]=$(port); SSTP[$n]=$(port)
    mkdir -p "$TMP/g$n/data" "$TMP/g$n/tmp"
done
chown -R mysql: "$TMP"/g1 "$TMP"/g2 "$TMP"/g3
chmod 0700 "$TMP"/g1 "$TMP"/g2 "$TMP"/g3
mariadb-install-db --no-defaults --user=mysql --datadir="$TMP/g1/data" --tmpdir="$TMP/g1/tmp" \
    --auth-root-authentication-method=socket --skip-test-db >"$TMP/g_install.log" 2>&1 ||
    { cat "$TMP/g_install.log" >&2; die "mariadb-install-db failed"; }
CLUSTER="gcomm://127.0.0.1:${GCP[1]},127.0.0.1:${GCP[2]},127.0.0.1:${GCP[3]}"
galera_start() { # N [--wsrep-new-cluster]
    local n=$1 d=$TMP/g$1
    shift
    setsid mariadbd --no-defaults --user=mysql --datadir="$d/data" --tmpdir="$d/tmp" \
        --socket="$d/my.sock" --port="${SQLP[$n]}" --bind-address=127.0.0.1 --skip-name-resolve \
        --pid-file="$d/my.pid" --log-error="$d/my.err" --binlog-format=ROW \
        --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2 --innodb-buffer-pool-size=64M \
        --max-connections=300 --wsrep-on=ON --wsrep-provider="$GALERA_LIB" \
        --wsrep-cluster-name="dblock-test-$$" --wsrep-cluster-address="$CLUSTER" \
        --wsrep-node-name="node$n" --wsrep-node-address="127.0.0.1:${GCP[$n]}" \
        --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:${GCP[$n]};ist.recv_addr=127.0.0.1:${ISTP[$n]};gcache.size=32M" \
        --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:${SSTP[$n]}" \
        "$@" </dev/null >/dev/null 2>&1 &
    printf '%s\n' "$!" >"$TMP/g$n.launched"
}
galera_admin() { printf 'mariadb --no-defaults --socket=%s -uroot' "$TMP/g$1/my.sock"; }
galera_synced() { # N: wait until the node is Synced (status 1 if it never is)
    local n=$1 s=""
    for _ in $(seq 600); do
        s=$($(galera_admin "$n") -N -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2 || true)
        [ "$s" = Synced ] && return 0
        sleep 0.1
    done
    return 1
}
# Waits until node N (started by galera_start N ARGS) is Synced. A port
# picked free may be taken by another process before the node binds it
# (seen once: "Bind on TCP/IP port ... Address already in use" at node 1's
# start in a make check run): then the node gets new ports and another
# start, twice at most. Any other failure ends the script.
galera_up() { # N [--wsrep-new-cluster]
    local n=$1 try pid
    for try in 1 2 3; do
        galera_synced "$n" && return 0
        grep -q "Address already in use" "$TMP/g$n/my.err" 2>/dev/null || break
        [ "$try" = 3 ] && break
        log "galera node $n: a port was taken before it bound it; new ports, start $((try + 1))"
        pid=$(cat "$TMP/g$n.launched" 2>/dev/null || true)
        if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
        for _ in $(seq 50); do
            { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; } || break
            sleep 0.1
        done
        SQLP[$n]=$(port); GCP[$n]=$(port); ISTP[$n]=$(port); SSTP[$n]=$(port)
        CLUSTER="gcomm://127.0.0.1:${GCP[1]},127.0.0.1:${GCP[2]},127.0.0.1:${GCP[3]}"
        # (a bootstrap node that died is marked unsafe to bootstrap again)
        sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$TMP/g$n/data/grastate.dat" 2>/dev/null || true
        : >"$TMP/g$n/my.err"
        galera_start "$@"
    done
    tail -n 30 "$TMP/g$n/my.err" >&2 || true
    die "galera node $n did not sync"
}
galera_start 1 --wsrep-new-cluster
galera_up 1 --wsrep-new-cluster
$(galera_admin 1) >"$TMP/g_setup.log" 2>&1 <<EOF || { cat "$TMP/g_setup.log" >&2; die "galera setup failed"; }
CREATE DATABASE dblock;
CREATE USER 'dblock'@'127.0.0.1' IDENTIFIED BY '$PW';
GRANT ALL ON dblock.* TO 'dblock'@'127.0.0.1';
EOF
galera_start 2
galera_start 3
galera_up 2
galera_up 3

export DBLOCK_TOPO_PW=$PW
export DBLOCK_TOPO_PG_PRIMARY_PORT=$PGP_PORT DBLOCK_TOPO_PG_STANDBY_PORT=$PGS_PORT
export DBLOCK_TOPO_PG_PRIMARY_DATA=$PGP/data DBLOCK_TOPO_PG_STANDBY_DATA=$PGS/data
export DBLOCK_TOPO_PG_ADMIN_PRIMARY="$PSQL_P -d dblock -At"
export DBLOCK_TOPO_PG_ADMIN_STANDBY="runuser -u postgres -- env -C / $PG_BIN/psql -h $PGS -p $PGS_PORT -v ON_ERROR_STOP=1 -X -q -d dblock -At"
export DBLOCK_TOPO_PG_CTL="runuser -u postgres -- env -C / $PG_BIN/pg_ctl"
export DBLOCK_TOPO_GALERA_PORTS="${SQLP[1]} ${SQLP[2]} ${SQLP[3]}"
export DBLOCK_TOPO_GALERA_ADMIN1="$(galera_admin 1)" DBLOCK_TOPO_GALERA_ADMIN2="$(galera_admin 2)" \
    DBLOCK_TOPO_GALERA_ADMIN3="$(galera_admin 3)"
log "postgres primary $PGP_PORT + sync standby $PGS_PORT; galera ${SQLP[*]} ($TMP)"
rc=0
"$@" || rc=$?
exit "$rc"
