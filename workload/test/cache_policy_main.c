/* Test driver of src/cachepolicy.c: each read of a unit (stdin: one unit id per
 * line) and, on a miss, its admission at once, as the simulator's `lru` admits.
 * Arguments: N_UNITS K. Prints per read "FLAGS VICTIM": FLAGS as
 * analyzer.tiering.native's (1 hit, 2 inserted, 4 evicted), VICTIM the unit
 * evicted or -1. */
#include <stdio.h>
#include <stdlib.h>

#include "../src/cachepolicy.h"

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s N_UNITS K\n", argv[0]);
		return 2;
	}
	int64_t n = atoll(argv[1]), k = atoll(argv[2]);
	struct cp c;
	if (n <= 0 || k <= 0 || cp_init(&c, n, k)) {
		fprintf(stderr, "bad N_UNITS or K, or out of memory\n");
		return 2;
	}
	long long u;
	while (scanf("%lld", &u) == 1) {
		if (u < 0 || u >= n) {
			fprintf(stderr, "unit %lld out of range\n", u);
			return 2;
		}
		if (cp_read(&c, u)) {
			printf("1 -1\n");
			continue;
		}
		int64_t got, victim;
		if (!cp_next(&c, &got, &victim) || got != u) {
			fprintf(stderr, "miss of %lld not queued\n", u);
			return 1;
		}
		cp_admitted(&c, got);
		printf("%d %lld\n", victim >= 0 ? 6 : 2, (long long)victim);
	}
	cp_free(&c);
	return 0;
}
