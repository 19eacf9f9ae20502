/*
 * lease.h — helpers shared by the strategies: running a statement by id,
 * filling a grant, the owner-identifying parameters, and the lease
 * statements that insert and optimistic have in common.
 */
#ifndef DBLOCK_LEASE_H
#define DBLOCK_LEASE_H

#include <stdio.h>
#include <string.h>

#include "strategy.h"

/* Runs statement id on op's connection with its logical parameters lp[0..
 * nlp) (stmt.h lists them per statement) and reads the outcome into *o.
 * keep: leave the rows in o->res for the caller (who clears them); else
 * they are cleared. A statement the dialect does not run returns 0 with
 * count 0. Returns 0 or the driver's error (op->e set). */
int dbl_run(dbl_op *op, dbl_sid id, const dbl_param *lp, int nlp, dbl_out *o, int keep);
/* The same, as the first statement of a lock transaction opened by the
 * driver (dbl_driver.lock_begin) with row-lock waits of wait_ms. */
int dbl_run_locking(dbl_op *op, dbl_sid id, const dbl_param *lp, int nlp, int64_t wait_ms,
                    dbl_out *o);
/* A parameterless statement run as a script (dbl_sql_script). */
int dbl_run_script(dbl_op *op, dbl_sid id);
/* Fills op->g from a granting statement's outcome; version is used when
 * the dialect cannot return the row's version. */
void dbl_take_grant(dbl_op *op, const dbl_out *o, int64_t version);
/* Fills p[0..3] with name, owner token, owner thread, fence. */
void dbl_owner_params(const dbl_op *op, dbl_param *p);
/* Server now + lease, for backends whose UPDATE cannot return it. */
int64_t dbl_estimate_expiry(const dbl_op *op);
/* Appends the wait queue's logical parameters to an acquire statement's
 * (stmt.h: before-ticket and fair; with op->place.channel also ticket,
 * join, channel, alive, turn) and returns how many: p needs room for
 * DBL_QUEUE_PARAMS. */
#define DBL_QUEUE_PARAMS 7
int dbl_queue_params(const dbl_op *op, dbl_param *p);
/* Reads a queued statement's answer (run with keep; clears o->res):
 * 1 if busy — op->place.ticket is the caller's ticket, op->place.kept_out whether
 * the row keeps it out, and *strategy (if not NULL) gets the row's
 * strategy when the row exists, else "" — 0 if granted (the ticket is
 * gone with it). */
int dbl_queue_answer(dbl_op *op, dbl_out *o, char *strategy, size_t size);
/* Owner-checked lease renewal: 0 or DBLOCK_ELOST. */
int dbl_lease_renew(dbl_op *op);
/* Owner-checked release of an inner reentrant hold: 0 or DBLOCK_ELOST. */
int dbl_lease_release_inner(dbl_op *op);
/* After a final release whose reply was lost and whose second attempt
 * found the grant gone: 0 if the row is free and still names this owner
 * and fence (the first attempt ran), DBLOCK_ELOST otherwise. */
int dbl_lease_released(dbl_op *op);
/* Sets *is_other (and op->e to DBLOCK_EMISMATCH) when the name's row
 * belongs to a strategy that cannot share it with `strategy`. */
int dbl_row_strategy_is(dbl_op *op, const char *strategy, int *is_other);

#endif
