/*
 * error.c — status codes, their descriptions, and the last error kept per
 * thread and per client.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local dblock_error_info tls_last;

const char *dblock_strerror(int code) {
  switch (code) {
  case DBLOCK_OK: return "success";
  case DBLOCK_EBUSY: return "lock is held by another owner";
  case DBLOCK_ETIMEOUT: return "timed out waiting for the lock";
  case DBLOCK_ELOST: return "lock was lost (expired and taken over, force-unlocked, or session died)";
  case DBLOCK_ENOTHELD: return "lock is not held by this owner";
  case DBLOCK_EDEADLK: return "this thread already holds the lock and reentrancy is off";
  case DBLOCK_ECONN: return "database connection failed or was lost";
  case DBLOCK_EAUTH: return "database authentication failed";
  case DBLOCK_ESCHEMA: return "lock table missing: run `dblock migrate`";
  case DBLOCK_EPERM: return "permission denied by the database";
  case DBLOCK_EINVAL: return "invalid argument";
  case DBLOCK_ERETRY: return "deadlock or serialization failure: retry";
  case DBLOCK_ENOMEM: return "out of memory";
  case DBLOCK_EMIGRATE: return "migration mismatch: an applied migration differs from this build";
  case DBLOCK_EMISMATCH: return "lock name is managed by a different strategy";
  case DBLOCK_EUNSUPPORTED: return "not supported by this build or backend";
  case DBLOCK_EDB: return "database error";
  case DBLOCK_EREPLICA: return "connected to a read-only replica";
  case DBLOCK_ECANCELED: return "cancelled";
  default: return "unknown error";
  }
}

int dblock_last_error(dblock_error_info *out) {
  if (!out) return DBLOCK_EINVAL;
  *out = tls_last;
  return 0;
}

int dblock_client_last_error(const dblock_client *cl, dblock_error_info *out) {
  if (!cl || !out) return DBLOCK_EINVAL;
  /* (the mutex is state, not the client's value: a const client locks) */
  dbl_lock((dblock_client *)cl);
  *out = cl->last;
  dbl_unlock((dblock_client *)cl);
  return 0;
}

int dbl_fail(dblock_client *cl, const dbl_err *e) {
  dblock_error_info info;
  memset(&info, 0, sizeof info);
  info.code = e->code;
  snprintf(info.sqlstate, sizeof info.sqlstate, "%s", e->sqlstate);
  info.native = e->native;
  snprintf(info.message, sizeof info.message, "%s",
           e->msg[0] ? e->msg : dblock_strerror(e->code));
  tls_last = info;
  /* (a forked child's copy: its mutex may have been held at the fork, so
   * the error is this thread's only) */
  if (cl && !dbl_foreign(cl)) {
    dbl_lock(cl);
    cl->last = info;
    dbl_unlock(cl);
  }
  return e->code;
}

int dbl_failf(dblock_client *cl, int code, const char *fmt, ...) {
  dbl_err e;
  va_list ap;
  memset(&e, 0, sizeof e);
  e.code = code;
  va_start(ap, fmt);
  vsnprintf(e.msg, sizeof e.msg, fmt, ap);
  va_end(ap);
  return dbl_fail(cl, &e);
}
