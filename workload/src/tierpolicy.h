/* Array-style sub-LUN tiering, the decision half: heat per unit folded in each
 * statistics interval (decayed by a half-life) and, every migration interval,
 * the hottest k units wanted in the fast tier, moved within a budget. The same
 * arithmetic, order and tie-breaking as analyzer.tiering.migration.tiering(), so
 * the engine's placements are the ones the offline simulator predicts
 * (tests/workload/test_tier_policy.py feeds both one sequence). No I/O here. */
#ifndef ESE_TIERPOLICY_H
#define ESE_TIERPOLICY_H

#include <stdint.h>

struct tp_params {
	int64_t k;            /* fast-tier capacity in units (> 0) */
	int64_t budget;       /* most units moved per migration; < 0: no limit */
	double stats_s;       /* heat is counted per interval of this */
	double migrate_s;     /* placement changes every this (a multiple of stats_s) */
	double half_life_s;   /* heat halves over this; 0: no decay */
};

struct tp {
	struct tp_params p;
	int64_t n;               /* units */
	double *h, scale, inv_decay;
	uint8_t *fast, *want;
	int64_t *order, in_tier;
	uint64_t stats_ns;
	int64_t per;             /* statistics intervals per migration */
	uint64_t windows;        /* statistics intervals folded so far */
};

/* 0, or -1 (out of memory). */
int tp_init(struct tp *t, const struct tp_params *p, int64_t n_units);
void tp_free(struct tp *t);
/* Close one statistics interval with its access counts per unit (count[n]).
 * Returns 1 when a migration is due after it. */
int tp_window(struct tp *t, const uint32_t *count);
/* Decide the migration due now and apply it to t->fast: units promoted
 * (hottest first) and demoted (coldest first), each array n units long. */
void tp_migrate(struct tp *t, int64_t *promote, int64_t *npromote, int64_t *demote, int64_t *ndemote);

#endif
