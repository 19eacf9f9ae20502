#!/bin/sh
# The Python binding's pytest suite (python/tests), run by make check
# inside with-servers.sh against the tree's library (DBLOCK_TEST_TREE,
# default build). It prints cmocka's tally lines (python/tests/conftest.py)
# for run-suites.sh to add up. Debian's python3 is the one with
# python3-pytest, python3-psycopg2 (tests/install-deps.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
py=${DBLOCK_TEST_PYTHON:-/usr/bin/python3}
export DBLOCK_LIBRARY="$PWD/${DBLOCK_TEST_TREE:-build}/libdblock.so.0"
export PYTHONDONTWRITEBYTECODE=1
[ "$#" -eq 0 ] && set -- python/tests
# (a test stuck for 120 s has every thread's stack printed)
exec "$py" -m pytest -p no:cacheprovider -o faulthandler_timeout=120 -q -rs "$@"
