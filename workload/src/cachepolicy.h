/* The read cache's decisions (--tier-policy cache), without I/O or locks: an LRU
 * of cached units, a read hit moves its unit to the head, a read miss is queued
 * once for admission, and an admission evicts the tail when the cache is full.
 * Admitted with no delay (cp_next then cp_admitted at the miss), it is the
 * simulator's `lru` with count_writes=False (analyzer.tiering.native.lru_reference):
 * tests/workload/test_cache_policy.py feeds both one sequence through
 * build/iotape-cache-policy. tier.c calls it under its cache mutex and admits a
 * unit when its copy is done. */
#ifndef ESE_CACHEPOLICY_H
#define ESE_CACHEPOLICY_H

#include <stdint.h>

struct cp {
	int64_t n, k;           /* units, capacity in units (> 0) */
	int64_t *prev, *next, head, tail, size;
	uint8_t *in, *queued;   /* cached; queued for admission */
	int64_t *queue, qhead, qn;
};

/* 0, or -1 (out of memory). */
int cp_init(struct cp *c, int64_t n_units, int64_t k);
void cp_free(struct cp *c);
/* A read of u: 1 (a hit: u is now the most recent), or 0 (a miss: u queued for
 * admission unless it already is). */
int cp_read(struct cp *c, int64_t u);
/* The next queued unit to admit and the unit it evicts (-1: the cache has room),
 * which leaves the cache now. 0 when nothing is queued. */
int cp_next(struct cp *c, int64_t *unit, int64_t *victim);
/* u (from cp_next) is in the cache: the most recent. */
void cp_admitted(struct cp *c, int64_t u);

#endif
