/*
 * lease.h — helpers shared by the strategies: picking a dialect's SQL, the
 * owner-identifying parameters, and the lease statements that insert and
 * optimistic have in common.
 */
#ifndef DBLOCK_LEASE_H
#define DBLOCK_LEASE_H

#include <stdio.h>
#include <string.h>

#include "strategy.h"

/* The statement text for op's dialect. */
const char *dbl_pick(const dbl_op *op, const char *pg, const char *my,
                     const char *lite);
/* Fills p[0..3] with name, owner token, owner thread, fence. */
void dbl_owner_params(const dbl_op *op, dbl_param *p);
/* Server now + lease, for backends whose UPDATE cannot return it. */
int64_t dbl_estimate_expiry(const dbl_op *op);
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
