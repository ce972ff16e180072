/* recorder/merge.c alone (tests/recorder/test_merge.py). Reads lines from stdin:
 *   add RING TS     a record completed at TS into ring RING (its offset: a counter)
 *   out CUTOFF      take out what completed before CUTOFF ("all": UINT64_MAX)
 * and prints each record taken out as "TS OFFSET", in the order taken. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"

#define RINGS 4

static int put(struct iotape_record *r, void *ctx)
{
	(void)ctx;
	printf("%" PRIu64 " %" PRIu64 "\n", (uint64_t)r->ts_complete_ns, (uint64_t)r->offset);
	return 0;
}

int main(void)
{
	struct merge m;
	struct iotape_record r;
	char line[128], arg[64];
	uint64_t n = 0, ts;
	int ring;

	if (merge_init(&m, RINGS))
		return 1;
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "add %d %" SCNu64, &ring, &ts) == 2 && ring >= 0 && ring < RINGS) {
			memset(&r, 0, sizeof(r));
			r.ts_complete_ns = ts;
			r.offset = n++;
			if (merge_add(&m, ring, &r))
				return 1;
		} else if (sscanf(line, "out %63s", arg) == 1) {
			if (merge_out(&m, strcmp(arg, "all") ? strtoull(arg, NULL, 10) : UINT64_MAX,
				      put, NULL))
				return 1;
			printf("held %zu\n", m.held);
		} else {
			fprintf(stderr, "merge-check: bad line: %s", line);
			return 2;
		}
	}
	merge_free(&m);
	return 0;
}
