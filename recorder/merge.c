// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"

int merge_init(struct merge *m, int n)
{
	m->n = n;
	m->held = 0;
	m->run = calloc(n > 0 ? (size_t)n : 1, sizeof(*m->run));
	return m->run ? 0 : -ENOMEM;
}

int merge_add(struct merge *m, int i, const struct iotape_record *r)
{
	struct merge_run *u = &m->run[i];

	if (u->len == u->cap) {
		size_t cap = u->cap ? u->cap * 2 : 4096;
		struct iotape_record *p;

		/* Taken-out records first go, so a run grows only with what it holds. */
		if (u->head) {
			memmove(u->rec, u->rec + u->head, (u->len - u->head) * sizeof(*u->rec));
			u->len -= u->head;
			u->head = 0;
		}
		if (u->len == u->cap) {
			p = realloc(u->rec, cap * sizeof(*p));
			if (!p)
				return -ENOMEM;
			u->rec = p;
			u->cap = cap;
		}
	}
	memcpy(&u->rec[u->len++], r, sizeof(*r));
	m->held++;
	return 0;
}

int merge_out(struct merge *m, uint64_t cutoff,
	      int (*fn)(struct iotape_record *r, void *ctx), void *ctx)
{
	int err = 0;

	while (m->held) {
		struct merge_run *best = NULL;
		uint64_t t = cutoff;

		/* Linear over the heads: completions come from a few CPUs at once. */
		for (int i = 0; i < m->n; i++) {
			struct merge_run *u = &m->run[i];

			if (u->head < u->len && u->rec[u->head].ts_complete_ns < t) {
				t = u->rec[u->head].ts_complete_ns;
				best = u;
			}
		}
		if (!best && cutoff == UINT64_MAX) {
			/* Every head at UINT64_MAX itself: take any. */
			for (int i = 0; i < m->n && !best; i++)
				if (m->run[i].head < m->run[i].len)
					best = &m->run[i];
		}
		if (!best)
			break;
		m->held--;
		err = fn(&best->rec[best->head++], ctx);
		if (err)
			break;
	}
	for (int i = 0; i < m->n; i++) {
		struct merge_run *u = &m->run[i];

		if (u->head == u->len)
			u->head = u->len = 0;
	}
	return err;
}

void merge_free(struct merge *m)
{
	for (int i = 0; m->run && i < m->n; i++)
		free(m->run[i].rec);
	free(m->run);
	m->run = NULL;
	m->n = 0;
	m->held = 0;
}
