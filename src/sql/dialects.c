/*
 * dialects.c — which statement table a dialect uses. The one place that
 * maps a dialect to its SQL; everything else asks by statement id.
 */
#include "../drivers/driver.h"
#include "stmt.h"

const dbl_sqldef *dbl_sql_table(int dialect) {
  switch (dialect) {
  case DBL_PG: return dbl_sql_postgres;
  case DBL_MY: return dbl_sql_mysql;
  default: return dbl_sql_sqlite;
  }
}
