/*
 * dialects.c — which dialect a driver speaks. The one place that maps a
 * driver to its SQL; everything else asks by statement id.
 */
#include "../drivers/driver.h"
#include "stmt.h"

const dbl_sqldialect *dbl_dialect_of(int dialect) {
  switch (dialect) {
  case DBL_PG: return &dbl_dialect_postgres;
  case DBL_MY: return &dbl_dialect_mysql;
  default: return &dbl_dialect_sqlite;
  }
}
