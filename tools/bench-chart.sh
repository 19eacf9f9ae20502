#!/bin/sh
# bench-chart.sh BENCH.JSON [TITLE] > chart.svg — the benchmark at a glance:
# for every backend x strategy, dblock beside its raw-SQL floor (and Redis
# where it was measured): W1 uncontended cycles/s, and W2 (8 clients, one
# name) p99 wait. Plain SVG written by awk, no plotting tool needed. make
# bench (bench/run.sh) draws build/bench.svg with it.
set -u
json=$1
title=${2:-dblock beside the raw-SQL floor}
awk -v title="$title" '
function field(line, key,   m, v) {
  if (!match(line, "\"" key "\":\"?[^,\"}]*")) return ""
  v = substr(line, RSTART, RLENGTH); sub("^\"" key "\":\"?", "", v); return v
}
{
  be = field($0, "backend"); if (be ~ /-old$/ || be ~ /^py-/) next
  wl = field($0, "workload"); mode = field($0, "mode"); st = field($0, "strategy")
  if (field($0, "check") != "ok") next
  row = (mode == "redis") ? "redis" : be " " st
  if (!(row in seen)) { seen[row] = 1; rows[++n] = row }
  if (wl == "W1") w1[row, mode] = field($0, "grants_per_s") + 0
  if (wl == "W2") w2[row, mode] = field($0, "wait_p99_ms") + 0
}
END {
  for (i = 1; i <= n; i++) for (m = 1; m <= 3; m++) {
    k = (m == 1 ? "dblock" : m == 2 ? "floor" : "redis")
    if (w1[rows[i], k] > max1) max1 = w1[rows[i], k]
    if (w2[rows[i], k] > max2) max2 = w2[rows[i], k]
  }
  if (max1 <= 0) max1 = 1; if (max2 <= 0) max2 = 1
  rh = 30; top = 60; left = 190; bw = 300; gap = 60
  h = top + n * rh + 50; w = left + 2 * bw + gap + 120
  printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", w, h
  printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
  printf "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", title
  printf "<text x=\"%d\" y=\"45\">W1: uncontended cycles/s (longer is better)</text>\n", left
  printf "<text x=\"%d\" y=\"45\">W2: p99 wait, ms, 8 clients on one name (shorter is better)</text>\n", left + bw + gap
  for (i = 1; i <= n; i++) {
    y = top + (i - 1) * rh
    printf "<text x=\"10\" y=\"%d\">%s</text>\n", y + 17, rows[i]
    for (p = 0; p < 2; p++) {
      x0 = left + p * (bw + gap)
      for (m = 0; m < 2; m++) {
        k = (rows[i] == "redis") ? "redis" : (m == 0 ? "dblock" : "floor")
        if (rows[i] == "redis" && m == 1) continue
        v = p == 0 ? w1[rows[i], k] : w2[rows[i], k]
        if (v == "" || v <= 0) continue
        len = bw * v / (p == 0 ? max1 : max2)
        col = k == "dblock" ? "#3366cc" : k == "floor" ? "#aaaaaa" : "#cc3333"
        printf "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"11\" fill=\"%s\"/>\n", x0, y + 2 + m * 12, len, col
        printf "<text x=\"%.1f\" y=\"%d\" font-size=\"10\">%s</text>\n", x0 + len + 4, y + 12 + m * 12, v
      }
    }
  }
  y = top + n * rh + 20
  printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"11\" fill=\"#3366cc\"/><text x=\"%d\" y=\"%d\">dblock</text>\n", left, y, left + 16, y + 10
  printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"11\" fill=\"#aaaaaa\"/><text x=\"%d\" y=\"%d\">raw-SQL floor (same statements, no library)</text>\n", left + 80, y, left + 96, y + 10
  printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"11\" fill=\"#cc3333\"/><text x=\"%d\" y=\"%d\">Redis (SET NX; not durable)</text>\n", left + 390, y, left + 406, y + 10
  printf "</svg>\n"
}' "$json"
