#!/bin/sh
# The examples (examples/), built by `make tests`, run against a SQLite file
# of their own, each checked for what it says it shows; their output is
# printed. Part of make check and make check-quick (tests/run-suites.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
B=${DBLOCK_TEST_TREE:-build}
tmp=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
export DBLOCK_URL="sqlite://$tmp/examples.db" PATH="$PWD/$B:$PATH"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
show() { sed 's/^/    /' "$1"; }

echo "== basic_lock"
"$B/examples/basic_lock" >"$tmp/out" 2>&1; rc=$?
show "$tmp/out"
[ "$rc" -eq 0 ] && grep -q '^holding nightly-report, fence [0-9][0-9]*$' "$tmp/out" ||
  fail "basic_lock: exit $rc, no 'holding nightly-report, fence N' line"

echo "== fenced_write"
"$B/examples/fenced_write" "$DBLOCK_URL" "$tmp/account.db" >"$tmp/out" 2>&1; rc=$?
show "$tmp/out"
[ "$rc" -eq 0 ] && grep -q 'REFUSED' "$tmp/out" && grep -q 'balance 100' "$tmp/out" ||
  fail "fenced_write: exit $rc, the stale write not refused or B's write missing"

echo "== worker_cancel (job held elsewhere; SIGINT after 1 s)"
dblock acquire job --lease 1m >"$tmp/held" || fail "could not hold job"
"$B/examples/worker_cancel" >"$tmp/out" 2>&1 &
w=$!
pids="$pids $w"
sleep 1
kill -INT "$w"
wait "$w"; rc=$?
show "$tmp/out"
[ "$rc" -eq 130 ] && grep -q 'cancelled while waiting: nothing held' "$tmp/out" ||
  fail "worker_cancel: exit $rc (130 expected), no 'cancelled while waiting' line"
eval "$(cat "$tmp/held")"
dblock release job --token "$token" || fail "could not release job"

echo "== cron_job.sh (two hosts, one schedule)"
MIN_HOLD=3s examples/cron_job.sh report sh -c 'echo "host 1 runs, fence $DBLOCK_FENCE"' \
  >"$tmp/out1" 2>&1 &
h=$!
pids="$pids $h"
sleep 1
examples/cron_job.sh report sh -c 'echo "host 2 runs"' >"$tmp/out2" 2>&1; rc2=$?
wait "$h"; rc1=$?
show "$tmp/out1"
show "$tmp/out2"
[ "$rc1" -eq 0 ] && grep -q 'host 1 runs, fence [0-9]' "$tmp/out1" || fail "cron_job: host 1 exit $rc1"
[ "$rc2" -eq 0 ] && grep -q 'skipped' "$tmp/out2" && ! grep -q 'host 2 runs' "$tmp/out2" ||
  fail "cron_job: host 2 exit $rc2, not skipped"

[ "$fails" -eq 0 ] && echo "examples: all 4 did what they show"
exit "$fails"
