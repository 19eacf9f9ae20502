#!/bin/sh
# Packaging check (run by make check): `make install` into a private
# prefix, then build a program the way the README says — with pkg-config,
# against the shared library (found through an rpath) and against the static
# one — and run both on SQLite. Also: libdblock.so exports only dblock_*;
# the other tools' migration layouts and the systemd units are installed;
# a build without the PostgreSQL and MariaDB backends works on SQLite.
# Prints one cmocka-style tally line.
set -u
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
pass=0
ok() { pass=$((pass + 1)); echo "[       OK ] $1"; }
ko() { fail=$((fail + 1)); echo "[  FAILED  ] $1"; shift; printf '%s\n' "$@"; }

if make -s install PREFIX="$tmp/prefix" >"$tmp/install.log" 2>&1; then ok "make install PREFIX=..."
else ko "make install PREFIX=..." "$(tail -5 "$tmp/install.log")"; fi
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cat >"$tmp/app.c" <<'C'
#include <dblock.h>
#include <stdio.h>
int main(int argc, char **argv) {
  dblock_client *c;
  dblock_lock *l;
  int applied;
  if (argc < 2 || dblock_client_open(&c, argv[1], NULL) || dblock_migrate(c, &applied) ||
      dblock_lock_acquire(&l, c, "nightly", 0, 0) || dblock_lock_release(l))
    return 1;
  dblock_client_free(c);
  puts("ok");
  return 0;
}
C
libdir=$(pkg-config --variable=libdir dblock 2>/dev/null)
if [ "$libdir" = "$tmp/prefix/lib" ]; then ok "dblock.pc names the install prefix"
else ko "dblock.pc names the install prefix" "libdir=$libdir"; fi
# Shared: the program finds libdblock.so in the private prefix via its rpath.
if cc "$tmp/app.c" -o "$tmp/app" $(pkg-config --cflags --libs dblock) -Wl,-rpath,"$libdir" 2>"$tmp/cc.log" &&
    [ "$("$tmp/app" "sqlite://$tmp/a.db")" = ok ]; then ok "shared link with pkg-config"
else ko "shared link with pkg-config" "$(cat "$tmp/cc.log")"; fi
# Static: the archive plus pkg-config --static's private libraries.
if cc "$tmp/app.c" -o "$tmp/app-static" $(pkg-config --cflags dblock) "$libdir/libdblock.a" \
    $(pkg-config --libs --static dblock | sed 's/-ldblock//') 2>"$tmp/cc2.log" &&
    [ "$("$tmp/app-static" "sqlite://$tmp/b.db")" = ok ]; then ok "static link with pkg-config --static"
else ko "static link with pkg-config --static" "$(cat "$tmp/cc2.log")"; fi
so=$tmp/prefix/lib/libdblock.so
extra=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^dblock_' || true)
if [ -e "$so" ] && [ -z "$extra" ]; then ok "libdblock.so exports only dblock_*"
else ko "libdblock.so exports only dblock_*" "$extra"; fi
# Migrations for other tools and the reaper's systemd units are installed.
share=$tmp/prefix/share/dblock
if [ -e "$share/migrations/flyway/postgres/V1__lock_table.sql" ] &&
    grep -q '\${table}' "$share/migrations/flyway/postgres/V1__lock_table.sql" &&
    [ -e "$share/migrations/golang-migrate/mysql/000003_fence_epoch.down.sql" ] &&
    ! grep -v '^--' "$share"/migrations/golang-migrate/*/*.sql | grep -q '\${'; then
  ok "Flyway and golang-migrate layouts installed"
else ko "Flyway and golang-migrate layouts installed" "$(ls -R "$share/migrations" 2>&1 | head -20)"; fi
unit=$share/systemd/dblock-reaper.service
exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit" 2>/dev/null)
if [ -x "$exe" ] && [ "$exe" = "$tmp/prefix/sbin/dblock-reaper" ] &&
    grep -q '^After=network-online.target' "$unit" && grep -q '^DynamicUser=yes' "$unit" &&
    grep -q '^OnCalendar=' "$share/systemd/dblock-reaper.timer"; then
  ok "systemd service and timer for the reaper installed"
else ko "systemd service and timer for the reaper installed" "ExecStart=$exe"; fi
# CMake: find_package(dblock) gives the imported target dblock::dblock.
if command -v cmake >/dev/null 2>&1; then
  mkdir -p "$tmp/cm"
  cp "$tmp/app.c" "$tmp/cm/app.c"
  printf '%s\n' 'cmake_minimum_required(VERSION 3.13)' 'project(app C)' \
    'find_package(dblock 0.1 REQUIRED)' 'add_executable(app app.c)' \
    'target_link_libraries(app dblock::dblock)' >"$tmp/cm/CMakeLists.txt"
  if cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/cm.log" 2>&1 &&
      cmake --build "$tmp/cm/b" >>"$tmp/cm.log" 2>&1 &&
      [ "$("$tmp/cm/b/app" "sqlite://$tmp/c.db")" = ok ]; then ok "CMake find_package(dblock) -> dblock::dblock"
  else ko "CMake find_package(dblock) -> dblock::dblock" "$(tail -10 "$tmp/cm.log")"; fi
else ko "CMake find_package(dblock)" "cmake is not installed (tests/install-deps.sh installs it)"; fi
# man 3 from the install prefix: the overview, and a function's page (a
# .so alias of its group's page, generated from dblock.h).
man3=$tmp/prefix/share/man
if [ -e "$man3/man3/dblock.3" ] && [ -e "$man3/man3/dblock_lock_acquire.3" ] &&
    { ! command -v man >/dev/null 2>&1 ||
      MANPAGER=cat man -M "$man3" 3 dblock_lock_acquire 2>/dev/null | grep -q 'int dblock_lock_acquire'; }; then
  ok "man 3 dblock_lock_acquire from the install prefix"
else ko "man 3 dblock_lock_acquire from the install prefix" "$(ls "$man3/man3" 2>&1 | head -5)"; fi
# Python: make install put the package where python3 looks under the
# prefix, told where its library is (no DBLOCK_LIBRARY, no LD_LIBRARY_PATH).
pydir=$(python3 -c "import site; print(site.getsitepackages(['$tmp/prefix'])[-1])" 2>&1)
out=$(cd / && env -u DBLOCK_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$pydir" python3 -c "
import dblock, dblock._native as n
c = dblock.Client('sqlite://$tmp/py.db'); c.migrate()
with c.lock('x') as lk: print(lk.fence > 0, n.INSTALL_LIBDIR)" 2>&1)
if [ -e "$pydir/dblock/py.typed" ] && [ "$out" = "True $tmp/prefix/lib" ]; then
  ok "make install: import dblock finds the prefix's library"
else ko "make install: import dblock finds the prefix's library" "$pydir" "$out"; fi
# pip install ./python in a fresh venv with no index at all: the in-tree
# build backend needs nothing downloaded.
py=${DBLOCK_TEST_PYTHON:-/usr/bin/python3}
if "$py" -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1 &&
    "$tmp/venv/bin/pip" install --no-index --disable-pip-version-check ./python >>"$tmp/venv.log" 2>&1 &&
    out=$(cd / && DBLOCK_LIBRARY="$tmp/prefix/lib/libdblock.so.0" "$tmp/venv/bin/python" -c "
import os, dblock
assert os.path.exists(os.path.join(os.path.dirname(dblock.__file__), 'py.typed'))
c = dblock.Client('sqlite://$tmp/venv.db'); c.migrate()
with c.lock('x') as lk: print(dblock.__file__.startswith('$tmp/venv/'), lk.fence > 0)" 2>&1) &&
    [ "$out" = "True True" ]; then ok "pip install ./python in a fresh venv, offline"
else ko "pip install ./python in a fresh venv, offline" "$(tail -5 "$tmp/venv.log")" "$out"; fi
# Backends are optional: a build without PostgreSQL and MariaDB links no
# client library of theirs, refuses their URLs with DBLOCK_EUNSUPPORTED
# (exit 1, a clear message), and the demo runs on SQLite.
src=$tmp/src
mkdir -p "$src"
if git ls-files >/dev/null 2>&1; then git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$src"
else tar -cf - --exclude='./build*' . | tar -xf - -C "$src"; fi
if (cd "$src" && make -s -j2 WITH_PG=0 WITH_MYSQL=0 lib build/dblock build/dblock-bank) \
    >"$tmp/nodb.log" 2>&1; then
  needed=$(readelf -d "$src/build/libdblock.so" | grep NEEDED)
  msg=$("$src/build/dblock" --url postgres://u@127.0.0.1:1/db status x 2>&1)
  code=$?
  if ! echo "$needed" | grep -q 'libpq\|libmariadb\|libmysql' && [ "$code" -eq 1 ] &&
      echo "$msg" | grep -q 'built without the backend' &&
      "$src/build/dblock-bank" --rounds 3 >"$tmp/bank.log" 2>&1; then
    ok "make WITH_PG=0 WITH_MYSQL=0: no client library, clear refusal, demo runs"
  else ko "make WITH_PG=0 WITH_MYSQL=0: no client library, clear refusal, demo runs" \
    "$needed" "exit $code: $msg" "$(tail -5 "$tmp/bank.log")"; fi
else ko "make WITH_PG=0 WITH_MYSQL=0" "$(tail -5 "$tmp/nodb.log")"; fi
# Bash completion installed and loadable; uninstall leaves nothing behind.
comp=$tmp/prefix/share/bash-completion/completions/dblock
if [ -e "$comp" ] && bash -c ". '$comp' && COMP_WORDS=(dblock ru) COMP_CWORD=1 && _dblock &&
    [ \"\${COMPREPLY[*]}\" = run ]"; then ok "bash completion installed"
else ko "bash completion installed" "$(ls "$tmp/prefix/share" 2>&1)"; fi
if make -s uninstall PREFIX="$tmp/prefix" >"$tmp/uninstall.log" 2>&1 && [ ! -e "$tmp/prefix" ]; then
  ok "make uninstall leaves no file or directory"
else ko "make uninstall leaves no file or directory" "$(find "$tmp/prefix" 2>&1 | head -10)"; fi
echo "[  PASSED  ] $pass test(s)."
[ "$fail" -eq 0 ] || echo "[  FAILED  ] $fail test(s)."
[ "$fail" -eq 0 ]
