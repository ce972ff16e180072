/* Records from the per-CPU ring buffers back in completion order. Each ring's
 * records arrive in the order they were reserved on its CPU; the drain adds
 * them here, then takes out, merged by ts_complete, those completed before a
 * cutoff (the clock read before the rings were read: a record completed
 * earlier is in its ring by then, bar a CPU stalled between its clock read and
 * its reserve, which a single shared ring would have put out of order too). */
#ifndef MERGE_H
#define MERGE_H

#include <stddef.h>
#include <stdint.h>
#include "iotape_record.h"

struct merge_run {
	struct iotape_record *rec;
	size_t head, len, cap;
};

struct merge {
	struct merge_run *run;
	int n;
	size_t held;		/* records added and not yet taken out */
};

/* N runs (one per ring). Returns 0 or -ENOMEM. */
int merge_init(struct merge *m, int n);
/* A copy of R at the end of run I. Returns 0 or -ENOMEM. */
int merge_add(struct merge *m, int i, const struct iotape_record *r);
/* Hands FN, in ts_complete order across the runs, every record at a run's head
 * completed before CUTOFF (UINT64_MAX: all). Stops at FN's first nonzero
 * return and returns it (the record stays taken); else 0. */
int merge_out(struct merge *m, uint64_t cutoff,
	      int (*fn)(struct iotape_record *r, void *ctx), void *ctx);
void merge_free(struct merge *m);

#endif /* MERGE_H */
