/*
 * insert.c — the unique-key INSERT strategy.
 *
 * A lock is held while its row says state = 1 and its lease has not
 * expired. Acquire is ONE statement: insert the row, or — on a key
 * conflict — take it over if it is free or expired, or add a hold if this
 * owner (token + thread) already has it. A conflict with a live holder
 * changes nothing and returns no row: busy is an answer, not an error in
 * the server log. Release frees the row (state 0), checked by owner and
 * fence; the row stays, with its fence, until the reaper collects it after
 * its lease (and grace) ended. Deleting it at release let a grant whose
 * statement drew its fence before another owner's whole acquire and
 * release — and then found no row — insert a lower fence; now that grant
 * finds the row and takes GREATEST(row fence + 1, its own).
 *
 * "This owner holds it" (a reentrant hold: same fence, one more hold) is
 * honoured only when the core knows of a live hold (reent = 1); a row this
 * owner left behind (a release whose answer was lost, a handle declared
 * lost) is taken over as a fresh grant with a fresh fence.
 *
 * The statements are DBL_S_INSERT_* in src/sql/ (one per dialect).
 */
#include "lease.h"

static int insert_acquire(dbl_op *op, int64_t wait_ms) {
  dbl_param p[7 + DBL_QUEUE_PARAMS];
  dbl_out o;
  char row[16] = "";
  int rc, other, n, queued = op->place.channel != NULL;
  (void)wait_ms;
  p[0] = DBL_TEXT(op->name, op->name_len);
  p[1] = DBL_STR(op->host);
  p[2] = DBL_I64(op->pid);
  p[3] = DBL_I64(op->thread);
  p[4] = DBL_STR(op->token);
  p[5] = DBL_I64(op->lease_ms * 1000);
  p[6] = DBL_I64(op->reentrant ? 1 : 0);
  n = 7 + dbl_queue_params(op, p + 7);
  if ((rc = dbl_run(op, queued ? DBL_S_INSERT_QUEUED : DBL_S_INSERT_ACQUIRE, p, n, &o, queued)) !=
      0)
    return rc;
  if (queued ? dbl_queue_answer(op, &o, row, sizeof row) : o.count == 0) {
    /* Say "another strategy" rather than "busy" when that is the reason;
     * checked once per acquire call, not on every poll (a queued answer
     * names the row's strategy: asked only when it is not ours). */
    if (op->attempt == 0 && (!queued || strcmp(row, "for_update") == 0) &&
        (rc = dbl_row_strategy_is(op, "insert", &other)) == 0 && other)
      return DBLOCK_EMISMATCH;
    op->taken = 1;
    return DBLOCK_EBUSY;
  }
  dbl_take_grant(op, &o, -1);
  return 0;
}

static int insert_release(dbl_op *op, int final) {
  dbl_param p[4];
  dbl_out o;
  int rc;
  if (!final) return dbl_lease_release_inner(op);
  dbl_owner_params(op, p);
  if ((rc = dbl_run(op, DBL_S_INSERT_FREE, p, 4, &o, 0)) != 0) return rc;
  return o.count == 1 ? 0 : DBLOCK_ELOST;
}

const dbl_strategy dbl_strategy_insert = {
    .name = "insert",
    .id = DBLOCK_STRATEGY_INSERT,
    .pins_connection = 0,
    .has_lease = 1,
    .acquire = insert_acquire,
    .release = insert_release,
    .renew = dbl_lease_renew,
    .released = dbl_lease_released,
};
