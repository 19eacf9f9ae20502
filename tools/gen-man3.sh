#!/bin/sh
# Writes the man 3 pages of dblock's C API, generated from the public header
# so that they cannot drift from it:
#   OUT/<group>.3     one page per group of functions (dblock_client,
#                     dblock_lock, dblock_admin, dblock_migrate, dblock_stats):
#                     NAME, SYNOPSIS (the prototypes, joined onto one line),
#                     DESCRIPTION (each function's prototype and the comment
#                     block above it, verbatim; then the types and constants
#                     of the group, with their comments), SEE ALSO
#   OUT/<name>.3      one alias per function, and per typedef name, that
#                     has no page of its own: ".so man3/<group>.3", so that
#                     "man 3 dblock_lock_acquire" finds its group page
# The hand-written overview, man/dblock.3, documents what the groups leave to
# it (the status codes, the version macros); when it is found (OVERVIEW, by
# default man/dblock.3 beside the header's directory) every such name must
# appear in it.
# Every function, type and macro of the header must match one rule of the
# table below: one that matches none stops the script (exit 1, naming it), so
# a new function cannot be left out. Output is deterministic (no dates but
# the fixed one of the house style). OUT is the generator's own: its *.3
# files are replaced by the new set, and only once all of it is written, so
# nothing in OUT changes on failure.
# Usage: tools/gen-man3.sh include/dblock.h OUT [OVERVIEW]
set -eu
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: tools/gen-man3.sh HEADER OUTDIR [OVERVIEW]" >&2
  exit 2
fi
header=$1
out=$2
overview=${3:-$(dirname "$header")/../man/dblock.3}
[ -r "$header" ] || { echo "gen-man3: cannot read $header" >&2; exit 2; }
if [ $# -eq 3 ] && [ ! -r "$overview" ]; then
  echo "gen-man3: cannot read $overview" >&2
  exit 2
fi
[ -r "$overview" ] || overview=
LC_ALL=C
export LC_ALL

mkdir -p "$out"
tmp=$out/.gen-man3.$$
rm -rf "$tmp"
mkdir "$tmp"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

awk -v tmp="$tmp" -v hdr="$header" -v overview="$overview" '
BEGIN {
  # ---- The groups: page, and the summary its NAME line gives. ----------
  ng = 0
  group("client",  "dblock_client",
        "open, free and cancel a client; errors; strategies")
  group("lock",    "dblock_lock",
        "acquire, release and renew a lock; its fencing token and state")
  group("admin",   "dblock_admin",
        "inspect, list, doctor, force\\-unlock, forget, release a grant, reap")
  group("migrate", "dblock_migrate",
        "apply, adopt and list the lock table\\(aqs migrations")
  group("stats",   "dblock_stats",
        "a client\\(aqs counters, and their OpenMetrics text")

  # ---- The rules: first match wins; a trailing * matches a prefix. -----
  # "overview": documented in man/dblock.3, not in a group page.
  nr = 0
  rule("dblock_client_stats", "stats")
  rule("dblock_stats*", "stats")           # type dblock_stats, _openmetrics
  rule("DBLOCK_STATS_*", "stats")
  rule("dblock_lock_inspect", "admin")
  rule("dblock_lock_list", "admin")
  rule("dblock_lock_info", "admin")
  rule("dblock_doctor", "admin")
  rule("dblock_finding", "admin")
  rule("DBLOCK_SEV_*", "admin")
  rule("dblock_force_unlock", "admin")
  rule("dblock_forget", "admin")
  rule("dblock_release_grant", "admin")
  rule("dblock_reap", "admin")
  rule("dblock_migrat*", "migrate")        # migrate, migrate_*, migration_*
  rule("dblock_lock*", "lock")
  rule("dblock_sqlite_check_register", "lock") # fenced writes (a lock fence)
  rule("DBLOCK_NAME_MAX", "lock")
  rule("dblock_client*", "client")
  rule("dblock_strategy*", "client")       # the enum, _name, _parse
  rule("dblock_strerror", "client")
  rule("dblock_last_error", "client")
  rule("dblock_error_info", "client")
  rule("dblock_lost_fn", "client")
  rule("dblock_log_fn", "client")
  rule("DBLOCK_LOG_*", "client")
  rule("dblock_options", "client")
  rule("DBLOCK_OPTIONS_*", "client")
  rule("DBLOCK_VERSION_*", "overview")
  rule("DBLOCK_OK", "overview")
  rule("DBLOCK_E*", "overview")

  # The fixed parts of every page, in the style of man/dblock.1.
  date = "2024"
  version = ""

  for (i = 1; i < 256; i++) ord[sprintf("%c", i)] = i
  nb = 0; nd = 0; cb = 0; havec = 0; errors = 0
}

function group(key, page, summary) {
  ng++; gkey[ng] = key; gpage[key] = page; gsum[key] = summary
}
function rule(pat, key) { nr++; rpat[nr] = pat; rkey[nr] = key }
function classify(name,    i, p) {
  for (i = 1; i <= nr; i++) {
    p = rpat[i]
    if (p ~ /\*$/) {
      p = substr(p, 1, length(p) - 1)
      if (substr(name, 1, length(p)) == p) return rkey[i]
    } else if (name == p) return rkey[i]
  }
  return ""
}
function fail(msg) {
  printf "gen-man3: %s:%d: %s\n", hdr, NR, msg > "/dev/stderr"
  errors++
  exit 1
}
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }

# The code of a line with its comments removed; incom carries an open
# comment over to the next line.
function code(s,    r, i) {
  r = ""
  while (s != "") {
    if (incom) {
      i = index(s, "*/")
      if (!i) return r
      s = substr(s, i + 2); incom = 0; r = r " "
    } else {
      i = index(s, "/*")
      if (!i) return r s
      r = r substr(s, 1, i - 1); s = substr(s, i + 2); incom = 1
    }
  }
  return r
}

# roff text: a backslash is \e, a hyphen-minus \- (C code and identifiers
# must copy as typed), UTF-8 becomes \[uXXXX] (the page is ASCII), and a
# line starting with . or '"'"' is protected with \&.
function esc(s,    r, i, n, c, o, cp, k, need) {
  r = ""; n = length(s)
  for (i = 1; i <= n; i++) {
    c = substr(s, i, 1); o = ord[c]
    if (c == "\\") r = r "\\e"
    else if (c == "-") r = r "\\-"
    else if (o < 128) r = r c
    else {
      if (o >= 240 && o < 248) { cp = o - 240; need = 3 }
      else if (o >= 224) { cp = o - 224; need = 2 }
      else if (o >= 192) { cp = o - 192; need = 1 }
      else fail("not UTF-8: " s)
      for (k = 1; k <= need; k++) {
        o = ord[substr(s, i + k, 1)]
        if (o < 128 || o >= 192) fail("not UTF-8: " s)
        cp = cp * 64 + (o - 128)
      }
      i += need
      if (cp == 8212) r = r "\\(em"
      else if (cp == 8211) r = r "\\(en"
      else if (cp == 215) r = r "\\(mu"
      else if (cp == 181) r = r "\\(mc"
      else r = r sprintf("\\[u%04X]", cp)
    }
  }
  if (r ~ /^[.\047]/) r = "\\&" r
  return r
}
# The same, as one quoted macro argument.
function arg(s,    r, i) {
  s = esc(s); sub(/^\\&/, "", s)
  while (i = index(s, "\"")) { r = r substr(s, 1, i - 1) "\\(dq"; s = substr(s, i + 1) }
  return "\"" r s "\""
}

# A prototype as one bold macro argument that breaks only after a comma.
function bproto(s,    r, i) {
  s = arg(s); r = ""
  while (i = index(s, " ")) {
    r = r substr(s, 1, i - 1) (substr(s, i - 1, 1) == "," ? " " : "\\ ")
    s = substr(s, i + 1)
  }
  return r s
}

function endblock() { cb = 0 }
function adddecl(kind, name, text, proto) {
  if (!cb) {
    nb++; cb = nb
    bcom[nb] = havec ? com : ""; bnd[nb] = 0
    havec = 0
  }
  nd++
  dkind[nd] = kind; dname[nd] = name; dtext[nd] = text; dproto[nd] = proto
  dline[nd] = NR
  bdecl[cb, ++bnd[cb]] = nd
  if (name in seen) fail(name " is declared twice")
  seen[name] = 1
}

# ---- Comments -------------------------------------------------------------
/^\/\*/ {
  endblock()
  n = 1; line[1] = $0
  while (index(line[n], "*/") == 0) {
    if ((getline l) <= 0) fail("unterminated comment")
    line[++n] = l
  }
  if (n == 1 && $0 ~ /^\/\* *-+ .* -+ *\*\/$/) { havec = 0; next }  # banner
  com = ""
  for (k = 1; k <= n; k++) {
    l = line[k]
    if (k == 1) { sub(/^\/\* ?/, "", l) }
    else if (l == " *") l = ""
    else sub(/^ \* /, "", l)
    if (k == n) { sub(/ *\*\/ *$/, "", l) }
    sub(/[ \t]+$/, "", l)
    if (k == n && l == "" && n > 1) break
    com = com (k > 1 ? "\n" : "") l
  }
  havec = 1
  next
}

/^[ \t]*$/ { endblock(); havec = 0; next }

# ---- Macros -----------------------------------------------------------------
/^#[ \t]*define[ \t]/ {
  text = $0; incom = 0
  c = code($0)
  while (incom || c ~ /\\$/) {
    if ((getline l) <= 0) fail("unterminated #define")
    text = text "\n" l; c = c code(l)
  }
  name = $0; sub(/^#[ \t]*define[ \t]+/, "", name); sub(/[^A-Za-z0-9_].*$/, "", name)
  if (name == "") fail("cannot parse #define")
  if (trim(substr(c, index(c, name) + length(name))) == "") {  # include guard
    endblock(); havec = 0; next
  }
  if (name == "DBLOCK_VERSION_STRING") {
    version = c; sub(/^[^"]*"/, "", version); sub(/".*$/, "", version)
  }
  adddecl("T", name, text, "")
  next
}
/^#/ || /^extern "C"/ || /^}[ \t]*$/ { endblock(); havec = 0; next }
# (a forward declaration of another library type: struct sqlite3;)
/^struct[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]*;[ \t]*$/ { next }

# ---- Types -------------------------------------------------------------------
/^typedef[ \t]/ {
  text = $0; incom = 0
  c = code($0); all = c
  while (1) {
    t = all; depth = gsub(/\{/, "{", t) - gsub(/\}/, "}", t)
    if (depth == 0 && c ~ /;[ \t]*$/ && !incom) break
    if ((getline l) <= 0) fail("unterminated typedef")
    text = text "\n" l; c = code(l); all = all " " c
  }
  name = ""
  if (index(all, "{") == 0 && match(all, /\([ \t]*\*[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*\)/)) {
    name = substr(all, RSTART, RLENGTH); gsub(/[^A-Za-z0-9_]/, "", name)
  } else if (match(all, /[A-Za-z_][A-Za-z0-9_]*[ \t]*;[ \t]*$/)) {
    name = substr(all, RSTART, RLENGTH); sub(/[ \t]*;.*$/, "", name)
  }
  if (name == "") fail("cannot parse typedef")
  adddecl("T", name, text, "")
  next
}

# ---- Functions ---------------------------------------------------------------
/^[A-Za-z_]/ {
  text = $0; incom = 0
  c = code($0); all = c
  while (!(c ~ /;[ \t]*$/) || incom) {
    if ((getline l) <= 0) fail("unterminated declaration")
    text = text "\n" l; c = code(l); all = all " " c
  }
  proto = trim(all); gsub(/[ \t]+/, " ", proto)
  gsub(/\( /, "(", proto); gsub(/ \)/, ")", proto)
  if (!match(proto, /[A-Za-z_][A-Za-z0-9_]*\(/)) fail("cannot parse: " proto)
  name = substr(proto, RSTART, RLENGTH - 1)
  adddecl("F", name, text, proto)
  next
}

{ fail("cannot parse this line: " $0) }

# ---- Pages ---------------------------------------------------------------------
function head(key, page, f,    d, names, sep) {
  printf ".TH %s 3 \"%s\" \"dblock %s\" \"Library Functions\"\n", \
    esc(toupper(page)), date, version > f
  print ".\\\" Generated from include/dblock.h by tools/gen-man3.sh: do not edit." > f
  print ".nh" > f
  print ".ad l" > f
  print ".SH NAME" > f
  names = ""; sep = ""
  for (d = 1; d <= nd; d++)
    if (dgroup[d] == key && dkind[d] == "F") { names = names sep esc(dname[d]); sep = ",\n" }
  print names > f
  print "\\- " gsum[key] > f
  print ".SH SYNOPSIS" > f
  print ".nf" > f
  print ".B #include <dblock.h>" > f
  print ".fi" > f
  for (d = 1; d <= nd; d++)
    if (dgroup[d] == key && dkind[d] == "F") { print ".PP" > f; print ".B " bproto(dproto[d]) > f }
  print ".PP" > f
  print "Link with" > f
  print ".IR \"$(pkg\\-config \\-\\-libs dblock)\" ." > f
}
# A line of filled text whose "quoted strings" do not break across lines.
function quoted(s,    n, r, i, c, q, t) {
  n = length(s); t = s
  if (gsub(/"/, "", t) % 2) return s
  r = ""; q = 0
  for (i = 1; i <= n; i++) {
    c = substr(s, i, 1)
    if (c == "\"") q = !q
    r = r ((q && c == " ") ? "\\ " : c)
  }
  return r
}
# A comment block as text: prose is filled, an indented line is kept as it is.
function prose(s, f,    n, L, i, nf) {
  n = split(s, L, "\n"); nf = 0
  for (i = 1; i <= n; i++) {
    if (L[i] == "") { if (nf) { print ".fi" > f; nf = 0 } print ".PP" > f }
    else if (L[i] ~ /^[ \t]/) { if (!nf) { print ".nf" > f; nf = 1 } print esc(L[i]) > f }
    else { if (nf) { print ".fi" > f; nf = 0 } print quoted(esc(L[i])) > f }
  }
  if (nf) print ".fi" > f
}
function code_block(s, f, first,    n, L, i, l) {
  n = split(s, L, "\n")
  if (!first) print ".PP" > f
  print ".nf" > f
  for (i = 1; i <= n; i++) { l = esc(L[i]); print (l == "" ? "\\&" : l) > f }
  print ".fi" > f
}
function write_page(key,    f, b, i, d, any, k, names, txt) {
  f = tmp "/" gpage[key] ".3"
  head(key, gpage[key], f)
  # Each block of functions: their names as the heading, each prototype in
  # bold, then the comment block above them.
  print ".SH DESCRIPTION" > f
  for (b = 1; b <= nb; b++) {
    names = ""
    for (i = 1; i <= bnd[b]; i++) {
      d = bdecl[b, i]
      if (dgroup[d] == key && dkind[d] == "F") names = names (names == "" ? "" : ", ") dname[d]
    }
    if (names == "") continue
    print ".SS " arg(names) > f
    any = 0
    for (i = 1; i <= bnd[b]; i++) {
      d = bdecl[b, i]
      if (dgroup[d] != key || dkind[d] != "F") continue
      if (any) print ".br" > f
      print ".B " bproto(dproto[d]) > f
      any = 1
    }
    if (bcom[b] != "") { print ".PP" > f; prose(bcom[b], f) }
  }
  # The types and macros: their names as the heading, the comment
  # block, then the declarations as the header has them.
  any = 0
  for (d = 1; d <= nd; d++) if (dgroup[d] == key && dkind[d] == "T") any = 1
  if (any) {
    print ".SH \"TYPES AND CONSTANTS\"" > f
    for (b = 1; b <= nb; b++) {
      names = ""
      for (i = 1; i <= bnd[b]; i++) {
        d = bdecl[b, i]
        if (dgroup[d] == key && dkind[d] == "T") names = names (names == "" ? "" : ", ") dname[d]
      }
      if (names == "") continue
      print ".SS " arg(names) > f
      if (bcom[b] != "") prose(bcom[b], f)
      txt = ""
      for (i = 1; i <= bnd[b]; i++) {
        d = bdecl[b, i]
        if (dgroup[d] == key && dkind[d] == "T") txt = txt (txt == "" ? "" : "\n") dtext[d]
      }
      code_block(txt, f, bcom[b] == "")
    }
  }
  print ".SH SEE ALSO" > f
  print ".BR dblock (3)" (ng > 1 ? "," : "") > f
  k = 0
  for (i = 1; i <= ng; i++) {
    if (gkey[i] == key) continue
    k++
    print ".BR " esc(gpage[gkey[i]]) " (3)" (k < ng - 1 ? "," : "") > f
  }
  close(f)
}

END {
  if (errors) exit 1
  if (version == "") { NR = 0; fail("no DBLOCK_VERSION_STRING") }
  for (d = 1; d <= nd; d++) {
    dgroup[d] = classify(dname[d])
    if (dgroup[d] == "") {
      printf "gen-man3: %s:%d: %s %s matches no group: add a rule to tools/gen-man3.sh\n", \
        hdr, dline[d], (dkind[d] == "F" ? "function" : "type or macro"), dname[d] > "/dev/stderr"
      errors++
    } else if (dgroup[d] != "overview" && !(dgroup[d] in gpage)) {
      printf "gen-man3: rule for %s names no group %s\n", dname[d], dgroup[d] > "/dev/stderr"
      errors++
    } else if (dgroup[d] == "overview" && dkind[d] == "F") {
      printf "gen-man3: %s:%d: function %s must be in a group page, not the overview\n", \
        hdr, dline[d], dname[d] > "/dev/stderr"
      errors++
    }
  }
  # What the overview documents must be named in it.
  if (overview != "") {
    while ((getline l < overview) > 0) { gsub(/\\-/, "-", l); gsub(/\\&/, "", l); ov = ov " " l " " }
    close(overview)
    for (d = 1; d <= nd; d++)
      if (dgroup[d] == "overview" && \
          !match(ov, "[^A-Za-z0-9_]" dname[d] "[^A-Za-z0-9_]")) {
        printf "gen-man3: %s:%d: %s is left to %s, which does not name it\n", \
          hdr, dline[d], dname[d], overview > "/dev/stderr"
        errors++
      }
  }
  for (i = 1; i <= ng; i++) pagename[gpage[gkey[i]]] = 1
  for (d = 1; d <= nd; d++)
    if (dkind[d] == "F" && (dname[d] in pagename) && gpage[dgroup[d]] != dname[d]) {
      printf "gen-man3: function %s has the name of another group page\n", dname[d] > "/dev/stderr"
      errors++
    }
  if (errors) exit 1

  for (i = 1; i <= ng; i++) {
    k = gkey[i]; n = 0
    for (d = 1; d <= nd; d++) if (dgroup[d] == k && dkind[d] == "F") n++
    if (n == 0) { printf "gen-man3: group %s has no function\n", gpage[k] > "/dev/stderr"; exit 1 }
    write_page(k)
  }
  # One alias per function and per typedef name (macros have none): not for
  # a name that is a group page already (dblock_migrate, dblock_stats).
  for (d = 1; d <= nd; d++) {
    if (dgroup[d] == "overview" || dname[d] in pagename) continue
    if (dkind[d] == "T" && dtext[d] !~ /^typedef/) continue
    f = tmp "/" dname[d] ".3"
    print ".so man3/" gpage[dgroup[d]] ".3" > f
    close(f)
  }
}
' "$header"

# Replace the previous output only now that all of it was written.
for f in "$out"/*.3; do
  [ -e "$f" ] && rm -f "$f"
done
mv "$tmp"/*.3 "$out"/
