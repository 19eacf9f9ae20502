#!/bin/sh
# Packaging check (run by make check): `make install` into a private
# prefix, then build a program the way the README says — with pkg-config,
# against the shared library (found through an rpath) and against the static
# one — and run both on SQLite. Also: libdblock.so exports only dblock_*.
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
echo "[  PASSED  ] $pass test(s)."
[ "$fail" -eq 0 ] || echo "[  FAILED  ] $fail test(s)."
[ "$fail" -eq 0 ]
