/*
 * client.c — opening and closing a client, its connection pool, the owner
 * identity, the server epoch used in fencing tokens, and SQL templates.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../sql/fence.h"
#include "internal.h"
#include "wait.h"

#define DEFAULT_TABLE "dblock_locks"
#define TABLE_MAX 40 /* leaves room for suffixes within PostgreSQL's 63 */

int64_t dbl_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The calling thread's id, asked of the kernel once per thread: a thread's
 * id never changes, and in a forked child (whose one thread inherits the
 * parent thread's copy) the atfork handler forgets it. */
static _Thread_local int64_t cached_tid;
static pthread_once_t tid_once = PTHREAD_ONCE_INIT;
static void tid_forget(void) { cached_tid = 0; }
static void tid_register(void) { pthread_atfork(NULL, NULL, tid_forget); }

int64_t dbl_thread_id(void) {
  if (!cached_tid) {
    pthread_once(&tid_once, tid_register);
    cached_tid = (int64_t)syscall(SYS_gettid);
  }
  return cached_tid;
}

const char *dblock_strategy_name(dblock_strategy s) {
  const dbl_strategy *st = dbl_strategy_by_id(s);
  return st ? st->name : NULL;
}

uint64_t dbl_parts_hash(const char *const *parts, int n) {
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < n; i++) {
    for (const unsigned char *s = (const unsigned char *)parts[i]; *s; s++)
      h = (h ^ *s) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL; /* (0xff never occurs in UTF-8) */
  }
  return h;
}

int dblock_strategy_parse(dblock_strategy *out, const char *name) {
  char canon[32];
  const dbl_strategy *st;
  if (!out || !name || strlen(name) >= sizeof canon) return DBLOCK_EINVAL;
  /* ("for-update" is accepted for "for_update": shells and flags like dashes) */
  for (size_t i = 0; i <= strlen(name); i++) canon[i] = name[i] == '-' ? '_' : name[i];
  if (!(st = dbl_strategy_named(canon))) return DBLOCK_EINVAL;
  *out = st->id;
  return 0;
}

/* A table name is lowercase [a-z_][a-z0-9_]* of at most TABLE_MAX bytes:
 * no quoting is ever needed, and no backend folds or truncates it. */
static int check_table(const char *t) {
  size_t n = strlen(t);
  if (n == 0 || n > TABLE_MAX) return 0;
  if (!(t[0] == '_' || (t[0] >= 'a' && t[0] <= 'z'))) return 0;
  for (size_t i = 1; i < n; i++)
    if (!(t[i] == '_' || (t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9')))
      return 0;
  return 1;
}

/* Valid UTF-8 (no overlongs, no surrogates), 1..DBLOCK_NAME_MAX bytes. */
int dbl_check_name(dblock_client *cl, const char *name) {
  const unsigned char *s = (const unsigned char *)name;
  size_t n;
  if (!name) return dbl_failf(cl, DBLOCK_EINVAL, "lock name is NULL");
  n = strlen(name);
  if (n == 0) return dbl_failf(cl, DBLOCK_EINVAL, "lock name is empty");
  if (n > DBLOCK_NAME_MAX)
    return dbl_failf(cl, DBLOCK_EINVAL, "lock name is %zu bytes; the limit is %d",
                     n, DBLOCK_NAME_MAX);
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t k;
    unsigned cp;
    if (c < 0x80) { i++; continue; }
    if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; }
    else goto bad;
    if (i + k >= n) goto bad;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) goto bad;
      cp = (cp << 6) | (s[i + j] & 0x3f);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      goto bad;
    i += k + 1;
  }
  return 0;
bad:
  return dbl_failf(cl, DBLOCK_EINVAL, "lock name is not valid UTF-8");
}

char *dbl_expand(const dblock_client *cl, const char *tmpl) {
  size_t cap = strlen(tmpl) * 2 + 256, o = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  for (const char *p = tmpl; *p;) {
    const char *rep = NULL;
    size_t skip = 0;
    if (strncmp(p, "${table}", 8) == 0) rep = cl->table, skip = 8;
    else if (strncmp(p, "${schema}", 9) == 0) rep = cl->schema, skip = 9;
    if (rep) {
      size_t rl = strlen(rep);
      if (o + rl + 1 >= cap) { free(s); return NULL; }
      memcpy(s + o, rep, rl);
      o += rl;
      p += skip;
    } else {
      if (o + 2 >= cap) { free(s); return NULL; }
      s[o++] = *p++;
    }
  }
  s[o] = 0;
  return s;
}

/* Expands the dialect's statement table once, at open: a statement is
 * then an array lookup, with no lock and no failure. */
static int expand_statements(dblock_client *cl) {
  cl->dl = dbl_dialect_of(cl->drv->dialect);
  cl->defs = cl->dl->stmts;
  for (int i = 0; i < DBL_S_COUNT; i++)
    if (cl->defs[i].sql && !(cl->sqls[i] = dbl_expand(cl, cl->defs[i].sql)))
      return dbl_failf(cl, DBLOCK_ENOMEM, "out of memory");
  return 0;
}

void dbl_op_init(dbl_op *op, dblock_client *cl, dbl_pconn *pc,
                 struct dbl_held *h, dbl_err *e) {
  memset(op, 0, sizeof *op);
  op->drv = cl->drv;
  op->conn = pc ? pc->c : NULL;
  op->clock_offset_us = pc ? pc->clock_offset_us : 0;
  op->defs = cl->defs;
  op->sqls = (const char *const *)cl->sqls;
  op->table = cl->table;
  op->host = cl->host;
  op->token = cl->token;
  op->pid = cl->pid;
  op->e = e;
  op->version_hint = -1;
  if (h) {
    op->g.fence = h->fence;
    op->g.holds = h->holds;
    op->g.expires_us = h->expires_us;
    op->g.version = h->version;
    op->name = h->name;
    op->name_len = h->name_len;
    op->thread = h->thread;
    op->lease_ms = h->lease_ms;
  }
}

/* ---- Connection setup and the fencing epoch -----------------------------
 * A fencing token is epoch << 40 | sequence value (on MariaDB the
 * sequence value alone, the epoch being a jump of the sequence), drawn inside each
 * granting statement (src/sql/fence.h): the epoch is read there from
 * ${table}_alive (MariaDB: once per server session), which the server
 * empties whenever it may have lost unflushed state. When a grant finds it
 * empty (dbl_no_epoch), the core bumps the durable epoch with a flushed
 * commit, and only then refills
 * ${table}_alive: every token handed out afterwards exceeds every token
 * handed out before the loss, whatever the sequence forgot. */

int dbl_no_epoch(const dbl_err *e) {
  if (e->code != DBLOCK_EDB) return 0;
  return (strcmp(e->sqlstate, "42000") == 0 && e->native == DBL_NO_EPOCH_MY_NATIVE) ||
         (strcmp(e->sqlstate, DBL_NO_EPOCH_PG) == 0 && strstr(e->msg, DBL_NO_EPOCH_PG_NAME));
}

int dbl_fence_behind(const dbl_err *e) {
  if (e->code != DBLOCK_EDB) return 0;
  return (e->native == DBL_FENCE_BEHIND_MY_NATIVE && strstr(e->msg, DBL_FENCE_BEHIND_MY_SUM)) ||
         (strcmp(e->sqlstate, DBL_FENCE_BEHIND_PG) == 0 && strstr(e->msg, DBL_FENCE_BEHIND_PG_NAME));
}

int dbl_fence_catch_up(dblock_client *cl, dbl_pconn *pc, const char *name, size_t name_len,
                       dbl_err *e) {
  dbl_sqlrun x = dbl_runner(cl, pc->c, e);
  char state[sizeof e->sqlstate];
  if (cl->dl->fence_catch_up) return cl->dl->fence_catch_up(&x, name, name_len);
  memcpy(state, e->sqlstate, sizeof state);
  return dbl_err_set(e, DBLOCK_EDB, state, e->native,
                     "lock '%s': the fence sequence %s_fence_seq is behind the token this "
                     "name's row holds (moved back by hand?): refusing a token that could repeat "
                     "one already issued. Move the sequence forward past the row's fence "
                     "(setval), with every client of the table stopped",
                     name, cl->table);
}

int dbl_epoch_bump(dblock_client *cl, dbl_pconn *pc, int *moved, dbl_err *e) {
  dbl_sqlrun x = dbl_runner(cl, pc->c, e);
  int scratch;
  if (!moved) moved = &scratch;
  *moved = 0;
  return cl->dl->epoch_bump ? cl->dl->epoch_bump(&x, moved) : 0;
}

dbl_sqlrun dbl_runner(const dblock_client *cl, dbl_conn *c, dbl_err *e) {
  dbl_sqlrun x = {cl->drv, c, cl->defs, (const char *const *)cl->sqls, cl->table, e};
  return x;
}


/* The topology guard (DESIGN §10): may this client use a connection to a
 * server in state t? Judged from the server's own state, whatever the
 * user's privileges; a read_only client may use any server. */
static int guard(const dblock_client *cl, const dbl_topology *t, dbl_err *e) {
  if (cl->opts.read_only) return 0;
  if (t->read_only)
    return dbl_err_set(e, DBLOCK_EREPLICA, "25006", 0,
                       "connected to a read-only server (a standby or replica): locks need "
                       "the primary. List every server in the URL "
                       "(%s://user@host1:port1,host2:port2/db): dblock connects to the one "
                       "that takes writes. Inspecting locks on a replica needs a read-only "
                       "client (dblock_options.read_only; the inspect, list and status "
                       "commands)",
                       cl->drv->name);
  if (t->galera && !t->galera_ready)
    return dbl_err_set(e, DBLOCK_ECONN, "08S01", 1047,
                       "this Galera node cannot serve (not synced in the primary component, no "
                       "quorum, still joining, or drained by wsrep_reject_queries): list other "
                       "nodes in the URL");
  if (t->galera && cl->strat->node_local)
    return dbl_err_set(e, DBLOCK_EUNSUPPORTED, "", 0,
                       "the %s strategy cannot work on a Galera cluster: its row locks are "
                       "held by one node only, so another node grants the same name at once "
                       "and the conflict appears only at COMMIT, after both critical "
                       "sections ran. Use the insert or optimistic strategy (safe on Galera)",
                       cl->strat->name);
  return 0;
}

static int conn_init(dblock_client *cl, dbl_pconn *pc, dbl_err *e) {
  dbl_out o;
  struct timespec ts;
  dbl_topology t;
  int rc;
  if (cl->drv->probe && !cl->opts.read_only) {
    if ((rc = cl->drv->probe(pc->c, &t, 0, e)) != 0) return rc;
    if ((rc = guard(cl, &t, e)) != 0) return rc;
  }
  /* What the core learns once per new connection: where UPDATE cannot
   * return the new expiry, the offset of the server's clock (the expiry is
   * then estimated from the local clock). */
  if (cl->defs[DBL_S_SERVER_NOW].sql) {
    dbl_sqlrun x = dbl_runner(cl, pc->c, e);
    if ((rc = dbl_sql_run(&x, DBL_S_SERVER_NOW, NULL, 0, &o, 1))) return rc;
    clock_gettime(CLOCK_REALTIME, &ts);
    pc->clock_offset_us =
        dbl_res_i64(&o.res, 0, 0) - ((int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
    dbl_res_clear(&o.res);
  }
  pc->ready = 1;
  return 0;
}

/* ---- Pool -------------------------------------------------------------- */

static void pool_close_one(dblock_client *cl, dbl_pconn *pc);

/* Opens a connection whose connect may take until deadline_ms (0: the
 * client's connect timeout), and enters it in cl->all. */
static int pool_open(dblock_client *cl, dbl_pconn **out, int64_t deadline_ms, dbl_err *e) {
  dbl_pconn *pc = calloc(1, sizeof *pc);
  int64_t tmo = cl->opts.connect_timeout_ms;
  int rc;
  *out = NULL;
  if (!pc) return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
  if (deadline_ms > 0) {
    int64_t left = deadline_ms - dbl_mono_ms();
    if (left < tmo) tmo = left < 1 ? 1 : left;
  }
  pc->pid = (int64_t)getpid();
  rc = cl->drv->connect(&pc->c, &cl->url, tmo, e);
  if (rc) {
    free(pc);
    return rc;
  }
  dbl_lock(cl);
  if (cl->nall == cl->capall) {
    int cap = cl->capall ? cl->capall * 2 : 16;
    dbl_pconn **all = realloc(cl->all, (size_t)cap * sizeof *all);
    if (!all) {
      dbl_unlock(cl);
      cl->drv->close(pc->c);
      free(pc);
      return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
    }
    cl->all = all;
    cl->capall = cap;
  }
  cl->all[cl->nall++] = pc;
  dbl_unlock(cl);
  DBL_COUNT(cl, connects);
  if (atomic_exchange(&cl->reconnect_note, 0))
    dbl_log(cl, DBLOCK_LOG_INFO, "reconnected to %s after a lost connection", cl->url.redacted);
  *out = pc;
  return 0;
}

/* Closes pc. When pc died (server restart, connection cut) the idle
 * connections most likely died with it: they are closed too, so the next
 * calls open fresh ones instead of each failing once on a dead socket. */
static void pool_close(dblock_client *cl, dbl_pconn *pc) {
  dbl_pconn *stale = NULL;
  int closing, cut;
  dbl_lock(cl);
  closing = cl->closing;
  cut = pc->interrupted;
  dbl_unlock(cl);
  /* (dblock_client_free cuts what is in flight: not a failure to tell.) */
  if (!closing && (cl->drv->broken(pc->c) || cut)) {
    DBL_COUNT(cl, disconnects);
    if (!atomic_exchange(&cl->reconnect_note, 1))
      dbl_log(cl, DBLOCK_LOG_INFO,
              "a connection to %s was lost or cut (server restart, network, or a call past "
              "its time limit); the next call reconnects",
              cl->url.redacted);
  }
  if (cl->drv->broken(pc->c)) {
    dbl_lock(cl);
    stale = cl->idle;
    cl->idle = NULL;
    cl->nidle = 0;
    for (dbl_pconn *t = cl->txn_idle, *next; t; t = next) {
      next = t->next;
      t->next = stale;
      stale = t;
    }
    cl->txn_idle = NULL;
    cl->ntxn_idle = 0;
    dbl_unlock(cl);
  }
  for (dbl_pconn *next; stale; stale = next) {
    next = stale->next;
    pool_close_one(cl, stale);
  }
  pool_close_one(cl, pc);
}

/* pc is no longer lent to an acquire: one more may borrow. Caller holds
 * mu. */
static void unlend(dblock_client *cl, dbl_pconn *pc) {
  dbl_assert_held(cl);
  if (!pc->lent) return;
  pc->lent = 0;
  cl->acq_out--;
  dbl_signal(&cl->pool_cv, 0);
}

/* Removes pc from cl->all (under mu: from then on the watchdog cannot
 * touch it) and closes it. */
static void pool_close_one(dblock_client *cl, dbl_pconn *pc) {
  dbl_lock(cl);
  unlend(cl, pc);
  if (cl->reserve == pc) cl->reserve = NULL;
  for (int i = 0; i < cl->nall; i++)
    if (cl->all[i] == pc) {
      cl->trips_closed += cl->drv->round_trips(pc->c);
      cl->all[i] = cl->all[--cl->nall];
      break;
    }
  dbl_unlock(cl);
  /* A connection a forked child inherited is the parent's session: its
   * sockets are /dev/null here (driver.c) and a SQLite handle is the
   * parent's file, which a close could checkpoint under it. The child
   * forgets it (its few bytes stay). */
  if (pc->pid == (int64_t)getpid()) cl->drv->close(pc->c);
  free(pc);
}

/* The refusal of a call on a client dbl_foreign says this process may not
 * use, into e. */
static int fork_refusal(const dblock_client *cl, dbl_err *e) {
  return dbl_err_set(e, DBLOCK_EINVAL, "", 0,
                     "this client belongs to process %lld, not to this one (a forked child: "
                     "its threads or its SQLite files are that process's): open a client of "
                     "its own here (dblock_client_free only forgets this copy)",
                     (long long)cl->pid);
}

/* Takes an idle connection (or opens one) and opens its call window,
 * bounded by deadline_ms (0: now + call_timeout_ms). */
static int pool_take_by(dblock_client *cl, dbl_pconn **out, int txn, int64_t deadline_ms,
                        dbl_err *e) {
  dbl_pconn *pc = NULL;
  dbl_pconn **list = txn ? &cl->txn_idle : &cl->idle;
  int *count = txn ? &cl->ntxn_idle : &cl->nidle;
  int rc, closing;
  /* Every call that talks to the database passes here: from the client's
   * own callback it could wait on the watchdog or a worker running it;
   * in a forked child that may not use the client, no watchdog bounds it. */
  if (dbl_foreign(cl)) return fork_refusal(cl, e);
  if (dbl_tls_callback == cl)
    return dbl_err_set(e, DBLOCK_EDEADLK, "", 0,
                       "called from this client's own on_lost or log callback, where it could "
                       "wait for the thread running the callback: note the event and act on it "
                       "from another thread");
  dbl_lock(cl);
  closing = cl->closing;
  if (*list && !closing) {
    pc = *list;
    *list = pc->next;
    (*count)--;
  }
  dbl_unlock(cl);
  if (closing) return dbl_err_set(e, DBLOCK_ECONN, "", 0, "the client is being closed");
  if (pc && pc->pid != (int64_t)getpid()) {
    pool_close_one(cl, pc); /* (the parent's session: forgotten, see there) */
    pc = NULL;
  }
  if (pc && cl->drv->idle_alive && !cl->drv->idle_alive(pc->c)) {
    pool_close(cl, pc); /* closed by the server: so are its idle siblings */
    pc = NULL;
  }
  if (!pc && (rc = pool_open(cl, &pc, deadline_ms, e)) != 0) return rc;
  pc->next = NULL;
  pc->txn = txn;
  dbl_call_bound(cl, pc, deadline_ms);
  *out = pc;
  return 0;
}

int dbl_pool_take(dblock_client *cl, dbl_pconn **out, int txn, dbl_err *e) {
  return pool_take_by(cl, out, txn, 0, e);
}

int dbl_pool_get_by(dblock_client *cl, dbl_pconn **out, int txn, int64_t deadline_ms,
                    dbl_err *e) {
  dbl_pconn *pc;
  int rc;
  if ((rc = pool_take_by(cl, &pc, txn, deadline_ms, e)) != 0) return rc;
  if (!pc->ready && (rc = dbl_call_check(cl, pc, conn_init(cl, pc, e), e)) != 0) {
    dbl_pool_return(cl, pc, rc);
    return rc;
  }
  *out = pc;
  return 0;
}

int dbl_pool_get(dblock_client *cl, dbl_pconn **out, int txn, dbl_err *e) {
  return dbl_pool_get_by(cl, out, txn, 0, e);
}

void dbl_pool_put(dblock_client *cl, dbl_pconn *pc) {
  int keep;
  if (!pc) return;
  dbl_pconn **list = pc->txn ? &cl->txn_idle : &cl->idle;
  int *count = pc->txn ? &cl->ntxn_idle : &cl->nidle;
  dbl_lock(cl);
  unlend(cl, pc);
  pc->call_deadline_ms = 0;
  keep = !pc->interrupted && !cl->drv->broken(pc->c) && *count < cl->opts.pool_size &&
         !cl->closing;
  if (keep) {
    pc->next = *list;
    *list = pc;
    (*count)++;
  }
  dbl_unlock(cl);
  if (!keep) pool_close(cl, pc);
}

int dbl_pool_get_acq(dblock_client *cl, dbl_pconn **out, int64_t deadline_ms, dbl_err *e) {
  int64_t end = deadline_ms ? deadline_ms : dbl_mono_ms() + cl->opts.call_timeout_ms, now;
  int rc;
  dbl_lock(cl);
  while (cl->acq_out >= cl->opts.pool_size && !cl->closing) {
    struct timespec at;
    if (dbl_cancelled(cl) || (now = dbl_mono_ms()) >= end) {
      dbl_unlock(cl);
      if (dbl_cancelled(cl)) return DBLOCK_ECANCELED;
      return dbl_err_set(e, DBLOCK_ETIMEOUT, "", 0,
                         "no connection of the client's pool (pool_size %d) came free in time: "
                         "its other threads' acquires use them all",
                         cl->opts.pool_size);
    }
    /* (slices: a cancel, perhaps from a signal handler, cannot signal) */
    now = end - now < 20 ? end : now + 20;
    at.tv_sec = now / 1000;
    at.tv_nsec = (now % 1000) * 1000000;
    dbl_timedwait(cl, &cl->pool_cv, &at);
  }
  cl->acq_out++; /* (counted now: the connect below may be slow) */
  dbl_unlock(cl);
  if ((rc = dbl_pool_get_by(cl, out, 0, 0, e)) != 0) {
    dbl_lock(cl);
    cl->acq_out--;
    dbl_signal(&cl->pool_cv, 0);
    dbl_unlock(cl);
    return rc;
  }
  (*out)->lent = 1;
  return 0;
}

int dbl_pool_get_owner(dblock_client *cl, dbl_pconn **out, int64_t deadline_ms, dbl_err *e) {
  dbl_pconn *pc;
  dbl_lock(cl);
  pc = cl->closing || dbl_foreign(cl) ? NULL : cl->reserve;
  cl->reserve = NULL;
  dbl_unlock(cl);
  if (pc && !cl->drv->broken(pc->c) && (!cl->drv->idle_alive || cl->drv->idle_alive(pc->c))) {
    dbl_call_bound(cl, pc, deadline_ms);
    *out = pc;
    return 0;
  }
  if (pc) pool_close(cl, pc); /* (closed by the server: its idle siblings too) */
  return dbl_pool_get_by(cl, out, 0, deadline_ms, e);
}

void dbl_pool_keep_reserve(dblock_client *cl, dbl_pconn *pc) {
  int kept = 0;
  dbl_lock(cl);
  if (!cl->reserve && !cl->closing && !pc->interrupted && !cl->drv->broken(pc->c)) {
    unlend(cl, pc);
    pc->call_deadline_ms = 0;
    cl->reserve = pc;
    kept = 1;
  }
  dbl_unlock(cl);
  if (!kept) dbl_pool_put(cl, pc);
}

void dbl_pool_free_reserve(dblock_client *cl) {
  dbl_pconn *pc;
  dbl_lock(cl);
  pc = cl->held ? NULL : cl->reserve;
  if (pc) cl->reserve = NULL;
  dbl_unlock(cl);
  if (pc) dbl_pool_put(cl, pc);
}

void dbl_pool_discard(dblock_client *cl, dbl_pconn *pc) {
  if (pc) pool_close(cl, pc);
}

void dbl_pool_discard_cancelled(dblock_client *cl, dbl_pconn *pc) {
  if (pc) pool_close_one(cl, pc);
}

void dbl_pool_return(dblock_client *cl, dbl_pconn *pc, int rc) {
  if (rc == DBLOCK_ECONN || (pc && cl->drv->broken(pc->c))) dbl_pool_discard(cl, pc);
  else dbl_pool_put(cl, pc);
}

void dbl_cut_locked(dblock_client *cl, dbl_pconn *pc) {
  dbl_assert_held(cl);
  if (pc->interrupted || !cl->drv->interrupt) return;
  pc->interrupted = 1;
  cl->drv->interrupt(pc->c);
}

void dbl_call_bound(dblock_client *cl, dbl_pconn *pc, int64_t deadline_ms) {
  if (deadline_ms <= 0) deadline_ms = dbl_mono_ms() + cl->opts.call_timeout_ms;
  dbl_lock(cl);
  pc->call_deadline_ms = deadline_ms;
  /* Closing: a call that starts now is cut at once (client_free has cut
   * the ones before), so nothing it joins can be stuck on the network. */
  if (cl->closing) dbl_cut_locked(cl, pc);
  /* The watchdog enforces the bound. It is started by the first call
   * (acquire also insists on it, see dblock_lock_acquire); it sleeps at
   * most a second when idle, so wake it only when this bound comes before
   * its planned wake-up. */
  if (!cl->watchdog_started) dbl_watchdog_start_locked(cl);
  else if (cl->wd_wake_ms > deadline_ms) dbl_signal(&cl->wake, 1);
  dbl_unlock(cl);
}

int dbl_call_end(dblock_client *cl, dbl_pconn *pc) {
  int cut;
  dbl_lock(cl);
  pc->call_deadline_ms = 0;
  cut = pc->interrupted;
  dbl_unlock(cl);
  return cut;
}

int dbl_call_was_cut(dblock_client *cl, dbl_pconn *pc) {
  int cut;
  dbl_lock(cl);
  cut = pc->interrupted;
  dbl_unlock(cl);
  return cut;
}

int dbl_call_check(dblock_client *cl, dbl_pconn *pc, int rc, dbl_err *e) {
  /* An answer stands (where a cut after it matters — a pinned for_update
   * session — dbl_call_end says so), and a loss stays a loss: only a failed
   * call needs a look, off the hot path. */
  if (rc == 0 || rc == DBLOCK_ELOST || !dbl_call_was_cut(cl, pc)) return rc;
  return dbl_err_set(e, DBLOCK_ECONN, "08006", 0,
                     "no answer from the server in time (stalled network or server?); "
                     "the call was cut and its connection closed");
}

void dbl_interrupt_all(dblock_client *cl) {
  dbl_assert_held(cl);
  for (int i = 0; i < cl->nall; i++)
    if (cl->all[i]->call_deadline_ms) dbl_cut_locked(cl, cl->all[i]);
}

uint64_t dblock_client_round_trips(const dblock_client *cl) {
  uint64_t n;
  dblock_client *m = (dblock_client *)cl;
  if (!cl) return 0;
  dbl_lock(m);
  n = m->trips_closed + dbl_queue_trips(m);
  for (int i = 0; i < m->nall; i++) n += m->drv->round_trips(m->all[i]->c);
  dbl_unlock(m);
  return n;
}

/* ---- Open / free ------------------------------------------------------- */

static int fill_options(dblock_client *cl, const dblock_options *o) {
  dblock_options d = DBLOCK_OPTIONS_INIT;
  if (o) {
    if (o->version < 1 || o->version > DBLOCK_OPTIONS_VERSION)
      return dbl_failf(cl, DBLOCK_EINVAL,
                       "dblock_options.version is %u; this library knows 1..%d",
                       o->version, DBLOCK_OPTIONS_VERSION);
    /* An older caller's struct ends before the fields of later versions. */
    if (o->version == 1) memcpy(&d, o, offsetof(dblock_options, call_timeout_ms));
    else if (o->version == 2) memcpy(&d, o, offsetof(dblock_options, read_only));
    else if (o->version == 3) memcpy(&d, o, offsetof(dblock_options, log_level));
    else if (o->version == 4) memcpy(&d, o, offsetof(dblock_options, fair));
    else d = *o;
  }
  if (d.strategy == DBLOCK_STRATEGY_DEFAULT) d.strategy = DBLOCK_STRATEGY_INSERT;
  if (!dblock_strategy_name(d.strategy))
    return dbl_failf(cl, DBLOCK_EINVAL, "unknown strategy %d", (int)d.strategy);
  if (d.lease_ms < 0 || d.backoff_min_ms < 0 || d.backoff_max_ms < 0 ||
      d.connect_timeout_ms < 0 || d.reaper_interval_ms < 0 ||
      d.reaper_grace_ms < 0 || d.pool_size < 0 || d.call_timeout_ms < 0 ||
      d.loss_margin_ms < 0)
    return dbl_failf(cl, DBLOCK_EINVAL, "negative value in dblock_options");
  if (d.fair != 0 && d.fair != 1)
    return dbl_failf(cl, DBLOCK_EINVAL, "fair must be 0 or 1 (it is %d)", d.fair);
  if (!d.lease_ms) d.lease_ms = 30000;
  if (d.lease_ms < 100)
    return dbl_failf(cl, DBLOCK_EINVAL, "lease_ms must be at least 100");
  if (!d.backoff_min_ms) d.backoff_min_ms = 2;
  if (!d.backoff_max_ms) d.backoff_max_ms = 250;
  if (d.backoff_max_ms < d.backoff_min_ms) d.backoff_max_ms = d.backoff_min_ms;
  if (!d.connect_timeout_ms) d.connect_timeout_ms = 5000;
  if (!d.call_timeout_ms) d.call_timeout_ms = 10000;
  if (d.call_timeout_ms < 100)
    return dbl_failf(cl, DBLOCK_EINVAL, "call_timeout_ms must be at least 100");
  if (!d.pool_size) d.pool_size = 4;
  if (!d.log_level) d.log_level = DBLOCK_LOG_WARNING;
  if (d.log_level < DBLOCK_LOG_WARNING || d.log_level > DBLOCK_LOG_INFO)
    return dbl_failf(cl, DBLOCK_EINVAL, "log_level must be DBLOCK_LOG_WARNING or DBLOCK_LOG_INFO");
  if (d.table && !check_table(d.table))
    return dbl_failf(cl, DBLOCK_EINVAL,
                     "bad table name: use lowercase letters, digits and '_' "
                     "(not first), at most %d bytes",
                     TABLE_MAX);
  snprintf(cl->table, sizeof cl->table, "%s", d.table ? d.table : DEFAULT_TABLE);
  snprintf(cl->schema, sizeof cl->schema, "public");
  if (d.owner_host) snprintf(cl->host, sizeof cl->host, "%s", d.owner_host);
  else if (gethostname(cl->host, sizeof cl->host - 1) != 0)
    snprintf(cl->host, sizeof cl->host, "unknown");
  /* Pointers in the copy must not outlive the caller's strings. */
  d.table = NULL;
  d.owner_host = NULL;
  cl->opts = d;
  return 0;
}

int dbl_read_only(dblock_client *cl) {
  return dbl_failf(cl, DBLOCK_EPERM,
                   "this client was opened read-only (dblock_options.read_only): it inspects "
                   "locks but takes, releases and changes none");
}

_Thread_local const dblock_client *dbl_tls_callback;

static void make_token(char out[33]);

int dbl_foreign(const dblock_client *cl) {
  long long me = (long long)getpid(), t = atomic_load(&cl->threads_pid);
  if (t != 0 && t != me) return 1;
  /* (an embedded backend has no probe: driver.h) */
  return cl->drv && !cl->drv->probe && cl->pid != 0 && cl->pid != (int64_t)me;
}

int dbl_fork_guard(dblock_client *cl) {
  if (dbl_foreign(cl)) {
    dbl_err e;
    memset(&e, 0, sizeof e);
    (void)fork_refusal(cl, &e);
    return dbl_fail(cl, &e);
  }
  if (cl->pid != (int64_t)getpid()) {
    /* Adopted (no thread at the fork): an owner of its own, so that no
     * row of the parent's ever reads as this process's (token + thread
     * id), and owner_pid says who holds. */
    dbl_lock(cl);
    if (cl->pid != (int64_t)getpid()) {
      cl->pid = (int64_t)getpid();
      make_token(cl->token);
      snprintf(cl->channel, sizeof cl->channel, "dblock_%.24s", cl->token);
    }
    dbl_unlock(cl);
  }
  return 0;
}

void dbl_threads_here(dblock_client *cl) {
  long long none = 0;
  (void)atomic_compare_exchange_strong(&cl->threads_pid, &none, (long long)getpid());
}

int dbl_callback_guard(dblock_client *cl) {
  if (!cl || dbl_tls_callback != cl) return 0;
  return dbl_failf(cl, DBLOCK_EDEADLK,
                   "called from this client's own on_lost or log callback, where it could "
                   "wait for the thread running the callback: note the event and act on it "
                   "from another thread");
}

void dbl_log(dblock_client *cl, int level, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  if (level > cl->opts.log_level) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (cl->opts.log) {
    const dblock_client *outer = dbl_tls_callback;
    dbl_tls_callback = cl;
    cl->opts.log(level, msg, cl->opts.log_arg);
    dbl_tls_callback = outer;
  } else fprintf(stderr, "dblock: %s: %s\n", level <= DBLOCK_LOG_WARNING ? "warning" : "info", msg);
}

struct open_cut { const dbl_driver *drv; dbl_pconn *pc; };
static void cut_pconn(void *arg) {
  struct open_cut *k = arg;
  k->pc->interrupted = 1;
  k->drv->interrupt(k->pc->c);
}

/* The check at open: the full probe (under its own time limit: the
 * watchdog is not running yet), the guard, and a warning for every way the
 * topology can lose a granted lock (dbl_topology_risks). */
static int open_check(dblock_client *cl, dbl_pconn *pc, dbl_err *e) {
  dbl_topology t;
  dbl_timer tm;
  struct open_cut k = {cl->drv, pc};
  char risks[4][320];
  int rc, n;
  if (!cl->drv->probe) return 0;
  dbl_timer_start(&tm, cl->opts.call_timeout_ms, cut_pconn, &k);
  rc = cl->drv->probe(pc->c, &t, 1, e);
  if (dbl_timer_stop(&tm) && rc == 0)
    rc = dbl_err_set(e, DBLOCK_ECONN, "08006", 0, "no answer from the server in time");
  if (rc) return rc;
  if ((rc = guard(cl, &t, e)) != 0) return rc;
  if (!cl->opts.read_only) {
    n = dbl_topology_risks(&t, risks, 4);
    for (int i = 0; i < n; i++) dbl_warn(cl, "%s", risks[i]);
  }
  return 0;
}

static void make_token(char out[33]) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { /* no entropy source: fall back to time and pid */
      uint64_t x = (uint64_t)dbl_mono_ms() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
      for (size_t i = got; i < sizeof b; i++) b[i] = (unsigned char)(x >> (8 * (i % 8))) ^ (unsigned char)i;
      break;
    }
    got += (size_t)n;
  }
  for (size_t i = 0; i < sizeof b; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

int dblock_client_open(dblock_client **out, const char *url,
                       const dblock_options *opts) {
  dblock_client *cl;
  char why[256];
  dbl_err e;
  dbl_pconn *pc = NULL;
  int rc;
  if (!out) return dbl_failf(NULL, DBLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!url) url = getenv("DBLOCK_URL");
  if (!(cl = calloc(1, sizeof *cl))) return dbl_failf(NULL, DBLOCK_ENOMEM, "out of memory");
  dbl_mutex_init(cl);
  {
    /* Timed waits (watchdog, reaper) measure by the monotonic clock, so a
     * wall-clock jump neither stalls nor rushes a renewal. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cl->cv, &ca);
    pthread_cond_init(&cl->wake, &ca);
    pthread_cond_init(&cl->reaper_wake, &ca);
    pthread_cond_init(&cl->work, &ca);
    pthread_cond_init(&cl->pool_cv, &ca);
    pthread_condattr_destroy(&ca);
  }
  if (dbl_cancel_init(cl) != 0) {
    rc = dbl_failf(cl, DBLOCK_ENOMEM, "cannot create the cancel pipe: out of descriptors?");
    goto err;
  }
  if ((rc = fill_options(cl, opts)) != 0) goto err;
  if ((rc = dbl_url_parse(&cl->url, url, why, sizeof why)) != 0) {
    rc = dbl_failf(cl, rc, "%s", rc == DBLOCK_ENOMEM ? "out of memory" : why);
    goto err;
  }
  if (!(cl->drv = dbl_driver_for(&cl->url))) {
    static const char *const how[] = {
        [DBL_B_PG] = "PostgreSQL: make WITH_PG=1, with libpq-dev",
        [DBL_B_MY] = "MySQL/MariaDB: make WITH_MYSQL=1, with libmariadb-dev",
        [DBL_B_LITE] = "SQLite: make WITH_SQLITE=1, with libsqlite3-dev"};
    rc = dbl_failf(cl, DBLOCK_EUNSUPPORTED,
                   "this libdblock was built without the backend of '%s' (%s)",
                   cl->url.redacted,
                   cl->url.backend > DBL_B_NONE && cl->url.backend <= DBL_B_LITE
                       ? how[cl->url.backend]
                       : "unknown backend");
    goto err;
  }
  cl->strat = dbl_strategy_by_id(cl->opts.strategy);
  if ((rc = expand_statements(cl)) != 0) goto err;
  cl->hints = cl->strat->version_hints &&
              (!cl->strat->hints_used || cl->strat->hints_used(cl->defs));
  if (cl->opts.fair && !dbl_queue_possible(cl)) {
    rc = dbl_failf(cl, DBLOCK_EUNSUPPORTED,
                   "fair mode needs dblock's wait queue: PostgreSQL with the insert or "
                   "optimistic strategy");
    goto err;
  }
  cl->waiter = dbl_waiter_for(cl);
  cl->pid = (int64_t)getpid();
  make_token(cl->token);
  snprintf(cl->channel, sizeof cl->channel, "dblock_%.24s", cl->token);
  memset(&e, 0, sizeof e);
  /* Connect once now so a bad URL or password, a replica or a topology
   * the strategy cannot work on fails here (the lock table need not exist
   * yet: dblock_migrate creates it). */
  if ((rc = pool_open(cl, &pc, 0, &e)) != 0) {
    rc = dbl_fail(cl, &e);
    goto err;
  }
  if ((rc = open_check(cl, pc, &e)) != 0) {
    dbl_pool_discard(cl, pc);
    rc = dbl_fail(cl, &e);
    goto err;
  }
  dbl_pool_put(cl, pc);
  /* (The watchdog starts with the first call that needs bounding: a
   * client that is opened and then forked has no thread yet.) */
  if (cl->opts.reaper_interval_ms > 0 && (rc = dbl_reaper_start(cl)) != 0) goto err;
  *out = cl;
  return 0;
err:
  dblock_client_free(cl);
  return rc;
}

/* Tells on_lost, on the caller's thread, of every loss declared but not
 * yet told once the workers have stopped — queued while every teller was
 * busy in a slow callback, or declared by is_lost just before — and of
 * every hold whose loss deadline had passed at `called` (when
 * dblock_client_free was called: not one that passed only because the
 * free stopped renewing it): on_lost is called once per lost grant, and
 * is_lost may already have said 1 for it. Called with no other thread of
 * the client left; the list is looked at again after each call, in which
 * is_lost may have declared another. */
static void tell_untold(dblock_client *cl, int64_t called) {
  struct dbl_held *h;
  dbl_lock(cl);
  for (h = cl->held; h; h = h->next) (void)dbl_declare_if_due(cl, h, called);
  do {
    for (h = cl->held; h; h = h->next) {
      /* (one that another thread of the caller's is telling — a release
       * racing the free, which dblock.h rules out — is waited for) */
      while (h->lost_notified == LOST_TELLING) dbl_wait(cl, &cl->cv);
      if (h->lost_notified == LOST_QUEUED) {
        h->lost_notified = LOST_TELLING;
        cl->ntell--;
        dbl_tell_locked(cl, h); /* (lets mu go during the callback) */
        break;
      }
    }
  } while (h);
  dbl_unlock(cl);
}

void dblock_client_free(dblock_client *cl) {
  dbl_pconn *pc;
  struct dbl_held *h;
  int64_t called = dbl_mono_ms();
  if (!cl) return;
  /* A forked child's copy of a client whose threads run in the parent
   * (they are not in this process: a join would wait forever; the mutex
   * may have been held by one of them at the fork; the holds are the
   * parent's), or of a SQLite client (its handles are the parent's files,
   * which a close could checkpoint under it). It is only forgotten:
   * nothing is sent, joined, told or closed, and its memory stays. (A
   * server client that had no thread at the fork is the child's own:
   * freed, its inherited connections forgotten in pool_close_one.) */
  if (dbl_foreign(cl)) return;
  /* From its own callback it would join the thread running it. */
  if (dbl_callback_guard(cl) != 0) return;
  dbl_lock(cl);
  cl->closing = 1;
  /* Renewals and reaper passes still talking to the server end now, so
   * closing never waits for an unreachable server. */
  dbl_interrupt_all(cl);
  dbl_signal(&cl->cv, 1);
  dbl_signal(&cl->wake, 1);
  dbl_signal(&cl->reaper_wake, 1);
  dbl_signal(&cl->work, 1);
  dbl_signal(&cl->pool_cv, 1);
  dbl_unlock(cl);
  dbl_queue_stop(cl);
  /* Their calls in flight were cut above, and any they start now is cut
   * at once (dbl_call_bound): the joins cannot wait on the network. */
  for (int i = 0; i < cl->nworkers; i++) pthread_join(cl->workers[i], NULL);
  if (cl->reaper_started) pthread_join(cl->reaper, NULL);
  if (cl->watchdog_started) pthread_join(cl->watchdog, NULL);
  tell_untold(cl, called);
  while ((h = cl->held) != NULL) { /* handles not released: drop them */
    cl->held = h->next;
    if (h->pinned) pool_close(cl, h->pinned);
    free(h);
  }
  while ((pc = cl->idle) != NULL) {
    cl->idle = pc->next;
    pool_close(cl, pc);
  }
  while ((pc = cl->txn_idle) != NULL) {
    cl->txn_idle = pc->next;
    pool_close(cl, pc);
  }
  if ((pc = cl->reserve) != NULL) pool_close(cl, pc); /* (clears cl->reserve) */
  /* Every thread that could hold a connection is joined and every list
   * above is empty: a connection still counted is an orphan (a path that
   * dropped it without closing it). It is closed all the same, so that
   * its session and socket end with the client. The sanitizer builds
   * say so, and leave it for LeakSanitizer to report with the stack that
   * opened it (it once reported leaked connections at a test's exit,
   * unexplained); the TSan build, which has no leak report, aborts. */
#ifdef DBL_CHECK_LOCKS
  if (cl->nall > 0) {
    fprintf(stderr, "dblock: internal error: %d connection(s) neither idle nor held at client free\n",
            cl->nall);
#if defined(__SANITIZE_THREAD__)
    abort(); /* (ThreadSanitizer has no leak report to leave it to) */
#endif
  }
#else
  while (cl->nall > 0) pool_close_one(cl, cl->all[cl->nall - 1]);
#endif
  for (int i = 0; i < DBL_S_COUNT; i++) free(cl->sqls[i]);
  dbl_cancel_close(cl);
  dbl_board_close(cl);
  dbl_url_free(&cl->url);
  free(cl->all);
  pthread_cond_destroy(&cl->cv);
  pthread_cond_destroy(&cl->wake);
  pthread_cond_destroy(&cl->reaper_wake);
  pthread_cond_destroy(&cl->work);
  pthread_cond_destroy(&cl->pool_cv);
  pthread_mutex_destroy(&cl->mu);
  free(cl);
}

const char *dblock_client_backend(const dblock_client *cl) {
  return cl && cl->drv ? cl->drv->name : NULL;
}

dblock_strategy dblock_client_strategy(const dblock_client *cl) {
  return cl ? cl->opts.strategy : DBLOCK_STRATEGY_DEFAULT;
}
