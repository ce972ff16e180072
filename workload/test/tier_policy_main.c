/* Test driver of src/tierpolicy.c: the policy fed an access sequence the way
 * analyzer.tiering.migration.tiering() steps through one, so a test can compare
 * the two. Arguments: K BUDGET(-1: none) STATS_S MIGRATE_S HALF_LIFE_S(0: none)
 * N_UNITS T0_NS; stdin: "t_ns unit" per access, in time order. Prints per access
 * "h 0|1" (its unit in the fast tier then) and per migration
 * "m T_NS PROMOTED DEMOTED". */
#include <stdio.h>
#include <stdlib.h>

#include "../src/tierpolicy.h"

int main(int argc, char **argv)
{
	if (argc != 8) {
		fprintf(stderr, "usage: %s K BUDGET STATS_S MIGRATE_S HALF_LIFE_S N_UNITS T0_NS\n", argv[0]);
		return 2;
	}
	struct tp_params p = {.k = atoll(argv[1]), .budget = atoll(argv[2]), .stats_s = atof(argv[3]),
			      .migrate_s = atof(argv[4]), .half_life_s = atof(argv[5])};
	int64_t n = atoll(argv[6]);
	uint64_t t0 = strtoull(argv[7], NULL, 10);
	struct tp t;
	uint32_t *cnt = calloc((size_t)n + 1, sizeof(uint32_t));
	int64_t *pro = calloc((size_t)n + 1, sizeof(int64_t)), *dem = calloc((size_t)n + 1, sizeof(int64_t));
	if (!cnt || !pro || !dem || tp_init(&t, &p, n)) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	unsigned long long ts;
	long long u;
	uint64_t w = 0; /* the window being filled */
	int have = 0;
	while (scanf("%llu %lld", &ts, &u) == 2) {
		if (u < 0 || u >= n) {
			fprintf(stderr, "unit %lld out of range\n", u);
			return 2;
		}
		uint64_t wa = (ts - t0) / t.stats_ns;
		for (; w < wa; w++) {
			if (tp_window(&t, cnt)) {
				int64_t np, nd;
				tp_migrate(&t, pro, &np, dem, &nd);
				printf("m %llu %lld %lld\n", (unsigned long long)(t0 + (w + 1) * t.stats_ns), (long long)np,
				       (long long)nd);
			}
			for (int64_t i = 0; i < n; i++)
				cnt[i] = 0;
		}
		printf("h %d\n", t.fast[u]);
		cnt[u]++;
		have = 1;
	}
	/* The last window is closed too, as the simulator's last boundary does. */
	if (have && tp_window(&t, cnt)) {
		int64_t np, nd;
		tp_migrate(&t, pro, &np, dem, &nd);
		printf("m %llu %lld %lld\n", (unsigned long long)(t0 + (w + 1) * t.stats_ns), (long long)np, (long long)nd);
	}
	tp_free(&t);
	return 0;
}
