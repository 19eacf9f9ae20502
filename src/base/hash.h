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

/* FNV-1a over n strings, each followed by a separator that never occurs
 * in UTF-8 (0xff), so that ("ab", "c") and ("a", "bc") differ. */
static inline uint64_t dbl_parts_hash(const char *const *parts, int n) {
  uint64_t h = DBL_FNV_INIT;
  for (int i = 0; i < n; i++) h = dbl_fnv1a(dbl_fnv1a(h, parts[i]), "\xff");
  return h;
}

#endif
