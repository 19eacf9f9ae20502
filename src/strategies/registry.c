/*
 * registry.c — the strategies by id and by the name their rows record.
 */
#include <string.h>

#include "strategy.h"

static const dbl_strategy *const ALL[] = {&dbl_strategy_insert, &dbl_strategy_for_update,
                                           &dbl_strategy_optimistic};

const dbl_strategy *dbl_strategy_by_id(dblock_strategy id) {
  if (id == DBLOCK_STRATEGY_DEFAULT) return &dbl_strategy_insert;
  for (size_t i = 0; i < sizeof ALL / sizeof ALL[0]; i++)
    if (ALL[i]->id == id) return ALL[i];
  return NULL;
}

const dbl_strategy *dbl_strategy_named(const char *name) {
  for (size_t i = 0; name && i < sizeof ALL / sizeof ALL[0]; i++)
    if (strcmp(ALL[i]->name, name) == 0) return ALL[i];
  return NULL;
}
