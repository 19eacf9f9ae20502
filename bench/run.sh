#!/bin/sh
# make bench: BENCH.md's workloads for every backend x strategy, dblock beside
# the raw-SQL floor measured in the same run. Run inside tests/with-servers.sh
# (make bench does), which exports the private servers' URLs.
#
#   bench/run.sh            full run: 1 s warm-up, 10 s window per measurement
#   bench/run.sh --quick    smoke run: 0.05 s warm-up, 0.3 s window
#   DBLOCK_BENCH_BACKENDS="postgres mysql" bench/run.sh   only some backends
#   DBLOCK_BENCH_STRATEGIES="insert optimistic"             only some strategies
#   DBLOCK_BENCH_WINDOW_MS=5000                             another window
#   DBLOCK_BENCH_WORKLOADS="W1 W2"                          only some workloads
#   DBLOCK_BENCH_OLD_BIN=/old/tree/build/dblock-bench       an A/B run: every
#     dblock row measured again with an older build, in the same run, shown
#     in two more columns (old, new/old)
#
# Prints one table and writes every measurement as JSON lines to
# build/bench.json. Exits non-zero if any measurement fails its check.
set -u
cd "$(dirname "$0")/.." || exit 1
warmup=1000 window=10000 quick=0
[ "${1:-}" = "--quick" ] && { warmup=50 window=300 quick=1; }
[ -n "${DBLOCK_BENCH_WINDOW_MS:-}" ] && window=$DBLOCK_BENCH_WINDOW_MS
old_bin=${DBLOCK_BENCH_OLD_BIN:-}
strategies=${DBLOCK_BENCH_STRATEGIES:-insert for_update optimistic}
bin=${DBLOCK_BENCH_BIN:-build/dblock-bench}
out=${DBLOCK_BENCH_JSON:-build/bench.json}
tmp=${DBLOCK_TEST_TMP:-/tmp}
: >"$out"
fails=0

field() { # json key
  printf '%s\n' "$1" | sed -n 's/.*"'"$2"'":"\{0,1\}\([^,"}]*\).*/\1/p'
}
ratio() { # (numbers only: "-" for words such as the wake-up path, or a zero floor)
  awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b + 0 > 0)
    printf "%.2f", a / b; else print "-" }'
}

measure() { # label url strategy workload clients names mode [binary]
  line=$("${8:-$bin}" --url "$2" --strategy "$3" --workload "$4" --clients "$5" --names "$6" \
    --mode "$7" --warmup "$warmup" --window "$window" 2>"$tmp/bench.err") || {
    echo "bench: $1 $3 $4 $7 failed: $(tail -n 1 "$tmp/bench.err")" >&2
    line="{\"check\":\"FAIL\"}"
  }
  printf '{"backend":"%s",%s\n' "$1" "${line#\{}" >>"$out"
  [ "$(field "$line" check)" = ok ] || fails=$((fails + 1))
  printf '%s' "$line"
}

# Redis beside dblock (BENCH.md's anchor): a private redis-server on a free
# loopback port, no persistence, stopped (by its pid file) on exit.
redis_pid=
stop_redis() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
  redis_pid=
}
trap stop_redis EXIT INT TERM
start_redis() {
  command -v redis-server >/dev/null 2>&1 || return 1
  "$bin" --features | grep -qx redis || return 1
  # a free port below the ephemeral range (ss: nothing listening on it)
  port=
  for seed in 1 2 3 4 5 6 7 8 9 10; do
    p=$(awk -v s="$$$seed" 'BEGIN { srand(s); print 20000 + int(rand() * 12000) }')
    [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ] && port=$p && break
  done
  [ -n "$port" ] || return 1
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize yes --pidfile "$tmp/bench-redis.pid" --dir "$tmp" \
    --logfile "$tmp/bench-redis.log" >/dev/null || return 1
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -s "$tmp/bench-redis.pid" ] && redis_pid=$(cat "$tmp/bench-redis.pid") && break
    sleep 0.2
  done
  [ -n "$redis_pid" ] || return 1
  redis_url="redis://127.0.0.1:$port"
}

backends=${DBLOCK_BENCH_BACKENDS:-sqlite-full sqlite-normal postgres mysql redis}
# (the smoke run skips sqlite-normal: the same code as sqlite-full)
[ "$quick" = 1 ] && [ -z "${DBLOCK_BENCH_BACKENDS:-}" ] && backends="sqlite-full postgres mysql redis"
# One row: backend strategy workload metric dblock floor ratio check, and
# with an old build, its figure and new/old.
row() {
  printf '%-13s %-10s %-3s %-28s %10s %10s %6s %-9s' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8"
  if [ -n "$old_bin" ] && [ "${9:-}" = old ]; then printf ' %10s %7s' old new/old
  elif [ -n "$old_bin" ]; then printf ' %10s %7s' "${9:--}" "$(ratio "$5" "${9:-}")"; fi
  printf '\n'
}
if [ -n "$old_bin" ]; then
  row backend strategy wl metric dblock floor ratio check old new/old
else
  row backend strategy wl metric dblock floor ratio check
fi
for be in $backends; do
  if [ "$be" = redis ]; then
    if start_redis; then
      for wl in W1 W2 W3 W4-2 W4-8 W4-32; do
        case $wl in
        W1) c=1 n=1 ;; W2) c=8 n=1 ;; W3) c=8 n=10000 ;;
        W4-2) c=2 n=1 ;; W4-8) c=8 n=1 ;; W4-32) c=32 n=1 ;;
        esac
        [ "$quick" = 1 ] && { [ "$wl" = W4-32 ] || [ "$wl" = W4-8 ]; } && continue
        d=$(measure redis "$redis_url" insert "${wl%%-*}" "$c" "$n" redis)
        case $wl in
        W1|W3) ms="grants_per_s cycle_p50_ms cycle_p99_ms" ;;
        W2) ms="grants_per_s wait_p99_ms wait_max_ms fairness" ;;
        W4*) ms=statements_per_grant ;;
        esac
        for m in $ms; do
          label=$m
          [ "$m" = statements_per_grant ] && label="statements/grant ($c clients)"
          row redis set-nx "${wl%%-*}" "$label" "$(field "$d" $m)" - - "$(field "$d" check)"
        done
      done
      stop_redis
    else
      echo "bench: no redis row (needs redis-server and a dblock-bench built with libhiredis-dev)" >&2
    fi
    continue
  fi
  case $be in
  sqlite-full) url="sqlite://$tmp/bench-full.db" ;;
  sqlite-normal) url="sqlite://$tmp/bench-normal.db?synchronous=normal" ;;
  postgres) url=$DBLOCK_TEST_PG_URL ;;
  mysql) url=$DBLOCK_TEST_MY_URL ;;
  esac
  for st in $strategies; do
    for wl in ${DBLOCK_BENCH_WORKLOADS:-W1 W2 W3 W4-2 W4-8 W4-32}; do
      case $wl in
      W1) c=1 n=1 ;; W2) c=8 n=1 ;; W3) c=8 n=10000 ;;
      W4-2) c=2 n=1 ;; W4-8) c=8 n=1 ;; W4-32) c=32 n=1 ;;
      esac
      # SQLite with synchronous=NORMAL: the uncontended and contended rows only.
      [ "$be" = sqlite-normal ] && [ "$wl" != W1 ] && [ "$wl" != W2 ] && continue
      # (the smoke run: every workload once, the larger W4s only in full)
      [ "$quick" = 1 ] && { [ "$wl" = W4-32 ] || [ "$wl" = W4-8 ]; } && continue
      d=$(measure "$be" "$url" "$st" "${wl%%-*}" "$c" "$n" dblock)
      f=$(measure "$be" "$url" "$st" "${wl%%-*}" "$c" "$n" floor)
      o=
      [ -n "$old_bin" ] && o=$(measure "$be-old" "$url" "$st" "${wl%%-*}" "$c" "$n" dblock "$old_bin")
      chk="$(field "$d" check)/$(field "$f" check)"
      case $wl in
      W1|W3) ms="grants_per_s cycle_p50_ms cycle_p99_ms" ;;
      W2) ms="grants_per_s wait_p99_ms wait_max_ms fairness wakeups_per_grant wake" ;;
      W4*) ms=statements_per_grant ;;
      esac
      for m in $ms; do
        label=$m
        [ "$m" = statements_per_grant ] && label="statements/grant ($c clients)"
        row "$be" "$st" "${wl%%-*}" "$label" "$(field "$d" $m)" "$(field "$f" $m)" \
          "$(ratio "$(field "$d" $m)" "$(field "$f" $m)")" "$chk" "$(field "$o" $m)"
      done
    done
  done
  { [ "$be" = sqlite-normal ] || [ -n "${DBLOCK_BENCH_STRATEGIES:-}" ]; } && continue
  w5=$(measure "$be" "$url" insert W5 1 1 dblock)
  row "$be" insert W5 "rows/s deleted" "$(field "$w5" rows_per_s)" - - "$(field "$w5" check)"
  row "$be" insert W5 "acquire max wait ms" "$(field "$w5" acquire_max_wait_ms)" - - \
    "live $(field "$w5" live_survived)/1000"
  mem=$(measure "$be" "$url" insert MEM 1 1 dblock)
  row "$be" insert MEM "RSS MB for 10,000 held" "$(field "$mem" rss_growth_mb)" - - \
    "$(field "$mem" check)"
done
# Python (bench/python_w1.py): W1 through the binding, and through the
# locks a Python developer would otherwise take (OpenStack tooz's
# PostgreSQL and MySQL drivers, redis-py's Lock), each beside the C
# library's own W1 (C hiredis for redis-py) measured right then: in these
# rows "floor" is that C figure.
py=${DBLOCK_BENCH_PYTHON:-/usr/bin/python3}
pyw1() { # subject url strategy
  DBLOCK_LIBRARY="$PWD/$(dirname "$bin")/libdblock.so.0" PYTHONPATH="$PWD/python" "$py" bench/python_w1.py \
    --subject "$1" --url "$2" --strategy "$3" --warmup "$warmup" --window "$window" 2>"$tmp/bench.err" ||
    { echo "bench: python $1 $3 failed: $(tail -n 1 "$tmp/bench.err")" >&2; echo '{"check":"FAIL"}'; }
}
pyrow() { # backend label python-json c-json
  printf '{"backend":"%s",%s\n' "$1" "${3#\{}" >>"$out"
  [ "$(field "$3" check)" = ok ] || fails=$((fails + 1))
  row "$1" "$2" W1 grants_per_s "$(field "$3" grants_per_s)" "$(field "$4" grants_per_s)" \
    "$(ratio "$(field "$3" grants_per_s)" "$(field "$4" grants_per_s)")" "$(field "$3" check)/$(field "$4" check)"
}
case " ${DBLOCK_BENCH_WORKLOADS:-W1} " in *" W1 "*) w1=1 ;; *) w1=0 ;; esac
if [ "$w1" = 1 ] && [ -z "${DBLOCK_BENCH_BACKENDS:-}" ] && "$py" -c 'import tooz, redis, psycopg2, pymysql' 2>/dev/null; then
  echo "# Python, W1: the subject's cycles/s beside the C library's (\"floor\" column) in this run"
  pybes="postgres mysql"
  [ "$quick" = 1 ] && pybes=postgres # (the smoke run: that the rows still run)
  for be in $pybes; do
    url=$DBLOCK_TEST_PG_URL
    [ "$be" = mysql ] && url=$DBLOCK_TEST_MY_URL
    sts="insert for_update"
    [ "$quick" = 1 ] && sts=insert
    for st in $sts; do
      c=$(measure "py-$be" "$url" "$st" W1 1 1 dblock)
      [ "$st" = insert ] && c_insert=$c # (tooz's row is beside it too)
      pyrow "py-$be" "$st" "$(pyw1 dblock "$url" "$st" | sed 's/"subject":"dblock"/"subject":"dblock-'"$st"'"/')" "$c"
    done
    pyrow "py-$be" "tooz" "$(pyw1 tooz "$url" -)" "$c_insert"
  done
  if start_redis; then
    c=$(measure py-redis "$redis_url" insert W1 1 1 redis)
    pyrow py-redis "redis-py" "$(pyw1 redis-py "$redis_url" -)" "$c"
    stop_redis
  fi
fi
echo "figures: $out"
# The chart (W1 cycles/s and W2 p99 wait beside the floor and Redis).
sh tools/bench-chart.sh "$out" "make bench, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), ${window} ms windows" \
  >"${out%.json}.svg" && echo "chart: ${out%.json}.svg"
if [ "$fails" -ne 0 ]; then
  echo "bench: $fails measurement(s) FAILED their check"
  exit 1
fi
