/*
 * run.c — running a statement by id: its parameters bound in the order
 * its dialect needs, its result read the way the dialect's table says.
 */
#include <stdlib.h>
#include <string.h>

#include "stmt.h"

#define MAX_BIND 48

/* The positional parameters of statement d: lp as is, or as d->bind
 * orders them (into p; '0'-'9' name parameters 0-9, 'a'-'z' 10-35). Returns the array to send; *n its length. */
static const dbl_param *bind(const dbl_sqldef *d, const dbl_param *lp, int nlp, dbl_param *p,
                             int *n) {
  if (!d->bind) {
    *n = nlp;
    return lp;
  }
  for (*n = 0; d->bind[*n] && *n < MAX_BIND; (*n)++) {
    char c = d->bind[*n];
    int k = c >= 'a' ? c - 'a' + 10 : c - '0';
    if (k < 0 || k >= nlp) return NULL; /* a table entry that does not fit its callers */
    p[*n] = lp[k];
  }
  return p;
}

/* Reads o->res into o's count and slots as d says; keep: leave the rows. */
static void read_out(const dbl_sqldef *d, dbl_out *o, int keep) {
  o->count = d->count_rows ? o->res.nrows : o->res.affected;
  for (int k = 0; k < DBL_O_COUNT; k++) {
    signed char from = d->out[k];
    if (from == DBL_FROM_INSERT_ID) {
      o->v[k] = o->res.insert_id;
      o->has[k] = 1;
    } else if (from >= 0 && o->res.nrows > 0 && from < o->res.ncols) {
      o->v[k] = dbl_res_i64(&o->res, 0, from);
      o->has[k] = 1;
    }
  }
  if (!keep) dbl_res_clear(&o->res);
}

int dbl_sql_run(const dbl_sqlrun *x, dbl_sid id, const dbl_param *lp, int nlp, dbl_out *o,
                int keep) {
  const dbl_sqldef *d = &x->defs[id];
  dbl_param p[MAX_BIND];
  const dbl_param *bound;
  int n, rc;
  memset(o, 0, sizeof *o);
  if (!d->sql) return 0; /* nothing to run on this dialect */
  if (!(bound = bind(d, lp, nlp, p, &n)) && nlp)
    return dbl_err_set(x->e, DBLOCK_EINVAL, "", 0, "statement %d: bad parameter map", (int)id);
  if ((rc = x->drv->query(x->c, x->sqls[id], bound, n, &o->res, x->e)) != 0) return rc;
  read_out(d, o, keep);
  return 0;
}

int dbl_sql_run_locking(const dbl_sqlrun *x, dbl_sid id, const dbl_param *lp, int nlp,
                        int64_t wait_ms, dbl_out *o) {
  const dbl_sqldef *d = &x->defs[id];
  dbl_param p[MAX_BIND];
  dbl_stmt st;
  int rc;
  memset(o, 0, sizeof *o);
  if (!d->sql)
    return dbl_err_set(x->e, DBLOCK_EUNSUPPORTED, "", 0, "statement %d: not on this database",
                       (int)id);
  st.sql = x->sqls[id];
  if (!(st.params = bind(d, lp, nlp, p, &st.nparams)) && nlp)
    return dbl_err_set(x->e, DBLOCK_EINVAL, "", 0, "statement %d: bad parameter map", (int)id);
  if ((rc = x->drv->lock_begin(x->c, wait_ms, &st, &o->res, x->e)) != 0) return rc;
  read_out(d, o, 0);
  return 0;
}

int dbl_sql_script(const dbl_sqlrun *x, dbl_sid id) {
  return x->defs[id].sql ? x->drv->script(x->c, x->sqls[id], x->e) : 0;
}

