#!/usr/bin/env bash
# Install the Debian 12 packages dblock needs to build, test and benchmark.
# Idempotent: does nothing (and prints nothing) when everything is present.
#
#   tests/install-deps.sh          everything for the test suite
#   tests/install-deps.sh --demo   only what building the library/demo needs
#
# As root, missing packages are installed with apt-get; otherwise the missing
# ones are listed and the script exits 1.
# Note: installing mariadb-server or postgresql-15 may start system servers
# (3306 / 5432). The tests never use them and this script leaves them alone.
set -euo pipefail

demo_pkgs=(gcc make pkg-config libsqlite3-dev libpq-dev default-libmysqlclient-dev)
full_pkgs=("${demo_pkgs[@]}" postgresql-15 mariadb-server galera-4 rsync pgbouncer libcmocka-dev libjson-c-dev faketime socat valgrind redis-server libhiredis-dev cmake
    python3 python3-venv python3-pytest python3-psycopg2 python3-pymysql python3-tooz python3-redis)

case "${1:-}" in
    "") pkgs=("${full_pkgs[@]}") ;;
    --demo) pkgs=("${demo_pkgs[@]}") ;;
    -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac
if [ "$#" -gt 1 ]; then
    echo "usage: $0 [--demo]" >&2
    exit 2
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
    # Not Debian: fine for the demo if the compiler and the three client
    # libraries' headers are already there.
    if [ "${1:-}" = --demo ] && command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 &&
        pkg-config --exists libpq sqlite3 2>/dev/null &&
        { pkg-config --exists libmariadb 2>/dev/null || command -v mysql_config >/dev/null 2>&1; }; then
        exit 0
    fi
    echo "install-deps: dpkg-query not found; this script supports Debian/Ubuntu only" >&2
    echo "install-deps: install a C compiler, make, pkg-config and the libpq, MariaDB Connector/C" >&2
    echo "install-deps: and SQLite development files, then run make again" >&2
    exit 1
fi

missing_pkgs() {
    local p status
    for p in "$@"; do
        status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        if [ "$status" != "installed" ]; then
            printf '%s\n' "$p"
        fi
    done
}

mapfile -t missing < <(missing_pkgs "${pkgs[@]}")
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
fi

echo "install-deps: installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"

mapfile -t still < <(missing_pkgs "${pkgs[@]}")
if [ "${#still[@]}" -ne 0 ]; then
    echo "install-deps: still missing after apt-get: ${still[*]}" >&2
    exit 1
fi
