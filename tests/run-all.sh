#!/bin/sh
# The whole test command (`make check`): builds the normal, ASan+UBSan and
# TSan trees, starts private PostgreSQL and MariaDB servers, runs every
# cmocka suite in each tree against SQLite, PostgreSQL and MariaDB (the
# replicated-topology suite in the normal tree only, and the
# unit suite under valgrind), stops the servers, and ends with
# "N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
jobs=$(nproc 2>/dev/null || echo 2)
for san in "" asan tsan; do
  echo "== building ${san:-normal} tree"
  make -s -j"$jobs" SAN="$san" all tests || { echo "build failed (${san:-normal})"; echo "0 passed, 1 failed"; exit 1; }
done
exec tests/with-servers.sh sh tests/run-suites.sh
