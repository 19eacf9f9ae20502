/*
 * pool.c — a client's connections: setting one up (the topology guard and
 * the fencing epoch), the pool (idle connections, the acquires' share of
 * pool_size, the holders' reserve, the lock-transaction connections), and
 * the call windows that bound every call in time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../sql/fence.h"
#include "internal.h"

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
int dbl_topology_guard(const dblock_client *cl, const dbl_topology *t, dbl_err *e) {
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
    if ((rc = dbl_topology_guard(cl, &t, e)) != 0) return rc;
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
 * client's connect timeout), and enters it in cl->pool.all. */
int dbl_pool_open(dblock_client *cl, dbl_pconn **out, int64_t deadline_ms, dbl_err *e) {
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
  if (cl->pool.nall == cl->pool.capall) {
    int cap = cl->pool.capall ? cl->pool.capall * 2 : 16;
    dbl_pconn **all = realloc(cl->pool.all, (size_t)cap * sizeof *all);
    if (!all) {
      dbl_unlock(cl);
      cl->drv->close(pc->c);
      free(pc);
      return dbl_err_set(e, DBLOCK_ENOMEM, "", 0, "out of memory");
    }
    cl->pool.all = all;
    cl->pool.capall = cap;
  }
  cl->pool.all[cl->pool.nall++] = pc;
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
    stale = cl->pool.idle;
    cl->pool.idle = NULL;
    cl->pool.nidle = 0;
    for (dbl_pconn *t = cl->pool.txn_idle, *next; t; t = next) {
      next = t->next;
      t->next = stale;
      stale = t;
    }
    cl->pool.txn_idle = NULL;
    cl->pool.ntxn_idle = 0;
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
  cl->pool.acq_out--;
  dbl_signal(&cl->pool.cv, 0);
}

/* Removes pc from cl->pool.all (under mu: from then on the watchdog cannot
 * touch it) and closes it. */
static void pool_close_one(dblock_client *cl, dbl_pconn *pc) {
  dbl_lock(cl);
  unlend(cl, pc);
  if (cl->pool.reserve == pc) cl->pool.reserve = NULL;
  for (int i = 0; i < cl->pool.nall; i++)
    if (cl->pool.all[i] == pc) {
      cl->pool.trips_closed += cl->drv->round_trips(pc->c);
      cl->pool.all[i] = cl->pool.all[--cl->pool.nall];
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
int dbl_fork_refusal(const dblock_client *cl, dbl_err *e) {
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
  dbl_pconn **list = txn ? &cl->pool.txn_idle : &cl->pool.idle;
  int *count = txn ? &cl->pool.ntxn_idle : &cl->pool.nidle;
  int rc, closing;
  /* Every call that talks to the database passes here: from the client's
   * own callback it could wait on the watchdog or a worker running it;
   * in a forked child that may not use the client, no watchdog bounds it. */
  if (dbl_foreign(cl)) return dbl_fork_refusal(cl, e);
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
  if (!pc && (rc = dbl_pool_open(cl, &pc, deadline_ms, e)) != 0) return rc;
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
  dbl_pconn **list = pc->txn ? &cl->pool.txn_idle : &cl->pool.idle;
  int *count = pc->txn ? &cl->pool.ntxn_idle : &cl->pool.nidle;
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
  while (cl->pool.acq_out >= cl->opts.pool_size && !cl->closing) {
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
    dbl_timedwait(cl, &cl->pool.cv, &at);
  }
  cl->pool.acq_out++; /* (counted now: the connect below may be slow) */
  dbl_unlock(cl);
  if ((rc = dbl_pool_get_by(cl, out, 0, 0, e)) != 0) {
    dbl_lock(cl);
    cl->pool.acq_out--;
    dbl_signal(&cl->pool.cv, 0);
    dbl_unlock(cl);
    return rc;
  }
  (*out)->lent = 1;
  return 0;
}

int dbl_pool_get_owner(dblock_client *cl, dbl_pconn **out, int64_t deadline_ms, dbl_err *e) {
  dbl_pconn *pc;
  dbl_lock(cl);
  pc = NULL;
  if (!cl->closing && !dbl_foreign(cl)) {
    pc = cl->pool.reserve; /* (closing: client free closes it) */
    cl->pool.reserve = NULL;
  }
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
  if (!cl->pool.reserve && !cl->closing && !pc->interrupted && !cl->drv->broken(pc->c)) {
    unlend(cl, pc);
    pc->call_deadline_ms = 0;
    cl->pool.reserve = pc;
    kept = 1;
  }
  dbl_unlock(cl);
  if (!kept) dbl_pool_put(cl, pc);
}

void dbl_pool_free_reserve(dblock_client *cl) {
  dbl_pconn *pc;
  dbl_lock(cl);
  pc = cl->held ? NULL : cl->pool.reserve;
  if (pc) cl->pool.reserve = NULL;
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
  if (!cl->wd.started) dbl_watchdog_start_locked(cl);
  else if (cl->wd.wake_ms > deadline_ms) dbl_signal(&cl->wd.wake, 1);
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
  for (int i = 0; i < cl->pool.nall; i++)
    if (cl->pool.all[i]->call_deadline_ms) dbl_cut_locked(cl, cl->pool.all[i]);
}

uint64_t dblock_client_round_trips(const dblock_client *cl) {
  uint64_t n;
  dblock_client *m = (dblock_client *)cl;
  if (!cl) return 0;
  dbl_lock(m);
  n = m->pool.trips_closed + dbl_queue_trips(m);
  for (int i = 0; i < m->pool.nall; i++) n += m->drv->round_trips(m->pool.all[i]->c);
  dbl_unlock(m);
  return n;
}

