#!/bin/sh
# Runs every test binary of every built tree (called by run-all.sh inside
# with-servers.sh, which exports the server URLs) and prints the summary.
# A suite that crashes or whose output has no cmocka tally counts as one
# failed test. Set DBLOCK_TEST_ONLY=name to run one suite, and
# DBLOCK_TEST_LOGS=dir to keep every suite's whole output there (the tests
# print the timings they check: a run's margins can be read off them).
set -u
passed=0
failed=0
skipped=0
failed_names=""
out=$(mktemp)
digest=$(mktemp) # each failed test's own lines, printed again at the very end
trap 'rm -f "$out" "$out".* "$digest"' EXIT
# (a run's logs start empty: report appends a suite's shards one by one)
if [ -n "${DBLOCK_TEST_LOGS:-}" ]; then rm -f "$DBLOCK_TEST_LOGS"/*.log; fi

# Adds one output's cmocka tallies (a binary may run several groups) to
# p, f and ks (skipped: a test that does not apply to a backend x strategy
# pair); rc is the command's exit status, which fails a run whose
# tallies say nothing failed.
tally() { # rc file
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$2" | awk '{s+=$1} END {print s+0}')
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$2" | awk '{s+=$1} END {print s+0}')
  ks=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$2" | awk '{s+=$1} END {print s+0}')
  if [ "$1" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
}

# Appends to the digest what each failed test in output file printed (its
# last 25 lines, from its RUN line to its FAILED line, headed by the shard
# and the pair the suite said it ran: "# shard", "# pair" lines), the head
# of a sanitizer's report, and the file's tail when neither was found (a
# crash, a missing tally). A CI log shown in part shows its end: a
# failure's own message must be there, not only far up in the output.
digest_add() { # label file
  found=0
  awk -v label="$1" '
    /^# shard / { shard = " [" $3 "]" }
    /^# pair / { pair = " " $3 }
    /^\[ RUN      \]/ { n = 0; run = 1 }
    { buf[n++] = $0 }
    /^\[       OK \]/ { run = 0 }
    /^\[  FAILED  \] [a-z_]/ && run {
      print "== " label shard pair ":"
      for (i = (n > 25 ? n - 25 : 0); i < n; i++) print buf[i]
      run = 0; shown = 1
    }
    END { exit shown ? 0 : 1 }' "$2" >>"$digest" && found=1
  if grep -q "$SAN_REPORT" "$2"; then
    { echo "== $1 $(sed -n 's/^# shard \(.*\)/[\1]/p' "$2"): a sanitizer's report, its head:"
      grep '^\[ RUN      \]' "$2" | tail -n 1
      sed -n "/$SAN_REPORT/,\$p" "$2" | head -n 40; } >>"$digest"
    found=1
  fi
  [ "$found" -eq 1 ] && return
  { echo "== $1 (no test failed by name; the output's tail):"; tail -n 30 "$2"; } >>"$digest"
}

# Whether an output file (one shard of a suite) failed: a FAILED tally, no
# tally at all, or a sanitizer's report (a leak is found at exit, after
# the tally).
SAN_REPORT='ERROR: [A-Za-z]*Sanitizer\|WARNING: ThreadSanitizer\|runtime error:'
failed_output() { # file
  grep -q '^\[  FAILED  \] [0-9]' "$1" || ! grep -q '^\[  PASSED  \]' "$1" ||
    grep -q "$SAN_REPORT" "$1"
}

# Counts p and f into the run's totals and prints the suite's line (with
# the output's tail when something failed).
report() { # label seconds file...
  label=$1
  secs=$2
  shift 2
  passed=$((passed + p))
  failed=$((failed + f))
  skipped=$((skipped + ks))
  echo "-- $label: $p passed, $f failed, $ks skipped ($secs s)"
  if [ -n "${DBLOCK_TEST_LOGS:-}" ] && mkdir -p "$DBLOCK_TEST_LOGS"; then
    for o in "$@"; do
      cat "$o" >>"$DBLOCK_TEST_LOGS/$(echo "$label" | tr '/ ' '__').log"
    done
  fi
  if [ "$f" -ne 0 ]; then
    failed_names="$failed_names $label"
    digested=0
    for o in "$@"; do
      if failed_output "$o"; then
        digest_add "$label" "$o"
        digested=1
      fi
    done
    # (failed by its exit status alone — valgrind's, a crash at exit: the
    # tails of all its outputs)
    if [ "$digested" -eq 0 ]; then
      for o in "$@"; do
        { echo "== $label (failed by its exit status; the output's tail):"; tail -n 30 "$o"; } >>"$digest"
      done
    fi
    for o in "$@"; do
      grep -v '^\[ RUN      \]\|^\[       OK \]' "$o" | tail -n 60
      # (a leak report's head names the leaked roots: the tail above only
      # shows its last stacks)
      if grep -q 'ERROR: LeakSanitizer' "$o"; then
        echo "-- the head of its leak report:"
        sed -n '/ERROR: LeakSanitizer/,$p' "$o" | head -n 80
      fi
    done
  fi
}

run_suite() { # label command...
  label=$1
  shift
  start=$(date +%s)
  "$@" >"$out" 2>&1
  rc=$?
  tally "$rc" "$out"
  # A command without a cmocka tally (the benchmark smoke run) is one test.
  if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$ks" -eq 0 ]; then p=1; fi
  report "$label" $(($(date +%s) - start)) "$out"
}

# Runs a cmocka suite as one shard per backend side by side (the tests on
# no backend go with SQLite's; see tu_backend_wanted): its tests mostly
# wait out leases, clocks and idle limits, and each shard talks to its own
# server, so the suite takes about as long as its slowest backend. A shard
# that prints no tally at all fails.
SHARDS="sqlite,none postgres mysql"
run_sharded() { # label command...
  label=$1
  shift
  start=$(date +%s)
  k=0
  pids=""
  for s in $SHARDS; do
    echo "# shard $s" >"$out.$k"
    DBLOCK_TEST_BACKEND=$s "$@" >>"$out.$k" 2>&1 &
    pids="$pids $!"
    k=$((k + 1))
  done
  k=0
  sp=0
  sf=0
  sk=0
  files=""
  for pid in $pids; do
    wait "$pid"
    rc=$?
    tally "$rc" "$out.$k"
    grep -q '^\[  PASSED  \]\|^\[  FAILED  \]' "$out.$k" || f=$((f + 1))
    sp=$((sp + p))
    sf=$((sf + f))
    sk=$((sk + ks))
    files="$files $out.$k"
    k=$((k + 1))
  done
  p=$sp
  f=$sf
  ks=$sk
  # shellcheck disable=SC2086
  report "$label" $(($(date +%s) - start)) $files
  # shellcheck disable=SC2086
  rm -f $files
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# DBLOCK_TEST_QUICK=1 (make check-quick): the normal tree only, and no
# scale test, replicated topologies, benchmark smoke run, install check or
# valgrind.
trees="build build-asan build-tsan"
[ -n "${DBLOCK_TEST_QUICK:-}" ] && trees=build
for tree in $trees; do
  for t in "$tree"/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.c|*.o) continue ;; esac
    name=$(basename "$t")
    # Replicated topologies: their own servers, normal tree only (below).
    [ "$name" = test_topology ] && continue
    # Heavy load (512 threads): the normal tree only, one backend at a time
    # (not sharded: two such loads at once starve 2 cores).
    [ "$name" = test_scale ] && { [ "$tree" != build ] || [ -n "${DBLOCK_TEST_QUICK:-}" ]; } &&
      continue
    # The sanitizer trees run the contract (conformance, contention, the
    # reaper, the units); the chaos suite (test_faults: stalls, kills,
    # restarts, clock steps) runs in the normal tree, where its timings
    # mean something. The TSan tree is for the library's threads: the
    # programs' suites (test_cli, test_bank: one process per command, each
    # ~10x slower under TSan) run in the normal and ASan trees.
    case "$tree/$name" in
      build-asan/test_faults | build-tsan/test_faults | build-tsan/test_cli | build-tsan/test_bank) continue ;;
    esac
    if [ -n "${DBLOCK_TEST_ONLY:-}" ] && [ "$name" != "$DBLOCK_TEST_ONLY" ]; then continue; fi
    # The sanitizer trees and make check-quick run a lighter contention
    # load and fewer bank rounds (same checks).
    export DBLOCK_TEST_TREE="$tree"
    if [ "$tree" != build ] || [ -n "${DBLOCK_TEST_QUICK:-}" ]; then
      export DBLOCK_TEST_CYCLES=60 DBLOCK_TEST_BANK_ROUNDS=15
    else unset DBLOCK_TEST_CYCLES DBLOCK_TEST_BANK_ROUNDS; fi
    # (Not in the TSan tree: there each process is CPU-bound, and three
    # side by side on 2 cores slowed the tests' forks enough that a child
    # forked while a helper thread of the last test was still exiting —
    # TSan kills such a child — and timed waits overran their margins.)
    case "$tree/$name" in
      build-tsan/*) run_suite "$tree/$name" "$t" ;;
      */test_conformance | */test_waiters | */test_fenced | */test_faults | */test_cli | */test_bank | */test_contention | */test_reaper)
        run_sharded "$tree/$name" "$t" ;;
      *) run_suite "$tree/$name" "$t" ;;
    esac
  done
done
if [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = examples ]; then
  # The examples, built and run against SQLite (their output is kept).
  DBLOCK_TEST_TREE=build run_suite "tests/check-examples.sh" sh tests/check-examples.sh
  [ "$f" -eq 0 ] && cat "$out" # (what they printed: shown on failure already)
fi
if [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = python ]; then
  # The Python binding's pytest suite over the normal tree's library (its
  # examples too), one shard per backend like the cmocka suites.
  DBLOCK_TEST_TREE=build run_sharded "python/tests (pytest)" sh tests/check-python.sh
fi
if [ -n "${DBLOCK_TEST_QUICK:-}" ]; then
  : # (make check-quick: the cmocka suites of the normal tree only)
elif [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = test_topology ]; then
  # A PostgreSQL primary + synchronous standby and a 3-node Galera cluster,
  # started and stopped by with-topology.sh; heavy, so the normal tree only.
  run_suite "build/test_topology" tests/with-topology.sh build/test_topology
fi
if [ -n "${DBLOCK_TEST_QUICK:-}" ]; then
  :
elif [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = bench ]; then
  # The benchmark in its quick mode, so it never rots (figures: make bench).
  # (W1 and W2 only: the uncontended and the contended paths of the bench
  # program; make bench runs them all)
  DBLOCK_BENCH_JSON=build/bench-quick.json DBLOCK_BENCH_WORKLOADS="W1 W2" \
    run_suite "bench/run.sh --quick" sh bench/run.sh --quick
fi
if [ -n "${DBLOCK_TEST_QUICK:-}" ]; then
  :
elif [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = install ]; then
  run_suite "tests/check-install.sh" sh tests/check-install.sh
fi
if [ -n "${DBLOCK_TEST_QUICK:-}" ]; then
  :
elif [ -z "${DBLOCK_TEST_ONLY:-}" ] || [ "$DBLOCK_TEST_ONLY" = valgrind ]; then
  run_suite "valgrind build/test_url" valgrind -q --error-exitcode=99 --leak-check=full build/test_url
fi
if [ -n "$failed_names" ]; then
  echo "-- what each failed test printed last:"
  cat "$digest"
  echo "failed suites:$failed_names"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
