/*
 * migrations.h — the migration files compiled into the library (generated
 * from migrations/ by tools/embed-migrations.sh at build time).
 */
#ifndef DBLOCK_MIGRATIONS_H
#define DBLOCK_MIGRATIONS_H

typedef struct dbl_migration {
  const char *backend; /* "postgres", "mysql", "sqlite" (driver names) */
  int version;
  const char *name;
  const char *sql;     /* with ${schema} / ${table} placeholders */
} dbl_migration;

extern const dbl_migration dbl_migrations[];
extern const int dbl_migrations_count;

#endif
