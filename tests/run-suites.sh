#!/bin/sh
# Runs every test binary of every built tree (called by run-all.sh inside
# with-servers.sh, which exports the server URLs) and prints the summary.
# A suite that crashes or whose output has no cmocka tally counts as one
# failed test. Set DBLOCK_TEST_ONLY=name to run one suite.
set -u
passed=0
failed=0
failed_names=""
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run_suite() { # label command...
  label=$1
  shift
  start=$(date +%s)
  "$@" >"$out" 2>&1
  rc=$?
  # A binary may run several cmocka groups: add their tallies up.
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
  p=${p:-0}
  f=${f:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  # A command without a cmocka tally (the benchmark smoke run) is one test.
  if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then p=1; fi
  passed=$((passed + p))
  failed=$((failed + f))
  echo "-- $label: $p passed, $f failed ($(($(date +%s) - start)) s)"
  if [ "$f" -ne 0 ]; then
    failed_names="$failed_names $label"
    grep -v '^\[ RUN      \]\|^\[       OK \]' "$out" | tail -n 60
  fi
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
for tree in build build-asan build-tsan; do
  for t in "$tree"/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.c|*.o) continue ;; esac
    name=$(basename "$t")
    # Replicated topologies: their own servers, normal tree only (below).
    [ "$name" = test_topology ] && continue
    if [ -n "${DBLOCK_TEST_ONLY:-}" ] && [ "$name" != "$DBLOCK_TEST_ONLY" ]; then continue; fi
    # The sanitizer trees run a lighter contention load and fewer bank
    # rounds (same checks), and test_faults leaves out its two slowest
    # tests there (see its main).
    export DBLOCK_TEST_TREE="$tree"
    if [ "$tree" != build ]; then export DBLOCK_TEST_CYCLES=60 DBLOCK_TEST_BANK_ROUNDS=15
    else unset DBLOCK_TEST_CYCLES DBLOCK_TEST_BANK_ROUNDS; fi
    run_suite "$tree/$name" "$t"
  done
done
if [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = test_topology ]; then
  # A PostgreSQL primary + synchronous standby and a 3-node Galera cluster,
  # started and stopped by with-topology.sh; heavy, so the normal tree only.
  run_suite "build/test_topology" tests/with-topology.sh build/test_topology
fi
if [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = bench ]; then
  # The benchmark in its quick mode, so it never rots (figures: make bench).
  DBLOCK_BENCH_JSON=build/bench-quick.json run_suite "bench/run.sh --quick" sh bench/run.sh --quick
fi
if [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = install ]; then
  run_suite "tests/check-install.sh" sh tests/check-install.sh
fi
if [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = valgrind ]; then
  run_suite "valgrind build/test_url" valgrind -q --error-exitcode=99 --leak-check=full build/test_url
fi
[ -n "$failed_names" ] && echo "failed suites:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
