/*
 * hash.h — the one hash of the tree: 64-bit FNV-1a, for migration
 * checksums, the migration lock's key, the version-hint cache and the wake
 * board. Not for anything an adversary chooses to collide with.
 */
#ifndef DBLOCK_HASH_H
#define DBLOCK_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DBL_FNV_INIT 1469598103934665603ULL

/* Folds the NUL-terminated string s into h (start from DBL_FNV_INIT). */
static inline uint64_t dbl_fnv1a(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

#endif
