#!/bin/sh
# Writes dblock's migrations (migrations/<backend>/NNNN_name.sql, the one
# source) in the layouts of other migration tools:
#   OUT/flyway/<backend>/V<N>__<name>.sql
#       Flyway's versioned naming; the ${table} / ${schema} / ${check}
#       placeholders are kept (Flyway syntax): set flyway.placeholders.table,
#       (PostgreSQL) flyway.placeholders.schema, and
#       flyway.placeholders.check (the fenced-write check function:
#       dblock_check for the table dblock_locks, else <table>_check).
#   OUT/golang-migrate/<backend>/<NNNNNN>_<name>.up.sql and .down.sql
#       golang-migrate has no placeholders: TABLE (default dblock_locks),
#       SCHEMA (default public) and the check function's name are written in. Downs come from
#       migrations/<backend>/down/.
# Usage: tools/export-migrations.sh SRC OUT [TABLE [SCHEMA]]
set -eu
src=$1
out=$2
table=${3:-dblock_locks}
schema=${4:-public}
case $table in
  [a-z_]*) ;;
  *) echo "export-migrations: bad table name '$table'" >&2; exit 2 ;;
esac
if printf '%s%s' "$table" "$schema" | grep -q '[^a-z0-9_]'; then
  echo "export-migrations: table and schema: lowercase letters, digits and '_' only" >&2
  exit 2
fi
check=dblock_check
[ "$table" = dblock_locks ] || check=${table}_check
rm -rf "$out/flyway" "$out/golang-migrate"
for backend in postgres mysql sqlite; do
  mkdir -p "$out/flyway/$backend" "$out/golang-migrate/$backend"
  for f in "$src/$backend"/[0-9][0-9][0-9][0-9]_*.sql; do
    [ -e "$f" ] || continue
    base=$(basename "$f" .sql)
    num=${base%%_*}
    name=${base#*_}
    ver=$(echo "$num" | sed 's/^0*//')
    cp "$f" "$out/flyway/$backend/V${ver}__${name}.sql"
    gm=$(printf '%06d_%s' "$ver" "$name")
    sed -e "/^--/!s/\${table}/$table/g" -e "/^--/!s/\${schema}/$schema/g" -e "/^--/!s/\${check}/$check/g" "$f" \
      > "$out/golang-migrate/$backend/$gm.up.sql"
    down="$src/$backend/down/$base.sql"
    if [ ! -e "$down" ]; then
      echo "export-migrations: $down is missing (every migration needs its down)" >&2
      exit 1
    fi
    sed -e "/^--/!s/\${table}/$table/g" -e "/^--/!s/\${schema}/$schema/g" -e "/^--/!s/\${check}/$check/g" "$down" \
      > "$out/golang-migrate/$backend/$gm.down.sql"
  done
done
