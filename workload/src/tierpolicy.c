/* See tierpolicy.h. Each step mirrors analyzer/tiering/migration.py line for
 * line where the floating-point result depends on it (the scaled heat, the
 * renormalisation, the product count * scale), so both rank alike. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tierpolicy.h"

int tp_init(struct tp *t, const struct tp_params *p, int64_t n_units)
{
	memset(t, 0, sizeof(*t));
	t->p = *p;
	t->n = n_units;
	t->h = calloc((size_t)n_units + 1, sizeof(double));
	t->fast = calloc((size_t)n_units + 1, 1);
	t->want = calloc((size_t)n_units + 1, 1);
	t->order = calloc((size_t)n_units + 1, sizeof(int64_t));
	if (!t->h || !t->fast || !t->want || !t->order)
		return -1;
	/* Python's round() and max(1, ...): half to even, as nearbyint by default. */
	double sns = nearbyint(p->stats_s * 1e9);
	t->stats_ns = sns < 1 ? 1 : (uint64_t)sns;
	double per = nearbyint(p->migrate_s / p->stats_s);
	t->per = per < 1 ? 1 : (int64_t)per;
	double decay = p->half_life_s > 0 ? pow(0.5, p->stats_s / p->half_life_s) : 1.0;
	if (decay < 1e-100)
		decay = 1e-100;
	t->inv_decay = 1.0 / decay;
	t->scale = 1.0;
	return 0;
}

void tp_free(struct tp *t)
{
	free(t->h);
	free(t->fast);
	free(t->want);
	free(t->order);
	memset(t, 0, sizeof(*t));
}

int tp_window(struct tp *t, const uint32_t *count)
{
	t->scale *= t->inv_decay;
	if (t->scale > 1e150) {
		for (int64_t u = 0; u < t->n; u++)
			t->h[u] /= t->scale;
		t->scale = 1.0;
	}
	for (int64_t u = 0; u < t->n; u++)
		if (count[u])
			t->h[u] += (double)count[u] * t->scale;
	t->windows++;
	return t->p.k > 0 && t->windows % (uint64_t)t->per == 0;
}

/* Hottest first, ties to the lower unit (ranking.rank). */
static const double *g_h;
static int hot_first(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	if (g_h[x] != g_h[y])
		return g_h[x] > g_h[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Coldest first, ties to the lower unit (ranking.rank of -heat). */
static int cold_first(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	if (g_h[x] != g_h[y])
		return g_h[x] < g_h[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

void tp_migrate(struct tp *t, int64_t *promote, int64_t *npromote, int64_t *demote, int64_t *ndemote)
{
	int64_t nhot = 0, np = 0, nout = 0;
	for (int64_t u = 0; u < t->n; u++)
		if (t->h[u] > 0)
			t->order[nhot++] = u;
	g_h = t->h; /* one migration thread, or the single-threaded test driver */
	qsort(t->order, (size_t)nhot, sizeof(int64_t), hot_first);
	int64_t ntarget = nhot < t->p.k ? nhot : t->p.k;
	for (int64_t i = 0; i < ntarget; i++) {
		int64_t u = t->order[i];
		t->want[u] = 1;
		if (!t->fast[u])
			promote[np++] = u;
	}
	/* The tier's units no longer wanted, ascending (`out`): reuse order's tail. */
	int64_t *out = t->order + ntarget;
	for (int64_t u = 0; u < t->n; u++)
		if (t->fast[u] && !t->want[u])
			out[nout++] = u;
	if (t->p.budget >= 0) {
		/* Each promotion into a full tier needs a demotion too: both move data. */
		int64_t free_ = t->p.k - t->in_tier, b = t->p.budget;
		int64_t fit = b <= free_ ? b : ((b + free_) / 2 > free_ ? (b + free_) / 2 : free_);
		if (np > fit)
			np = fit;
		int64_t nd = np - free_ > 0 ? np - free_ : 0;
		qsort(out, (size_t)nout, sizeof(int64_t), cold_first);
		nout = nd < nout ? nd : nout;
	}
	memcpy(demote, out, (size_t)nout * sizeof(int64_t));
	for (int64_t i = 0; i < ntarget; i++)
		t->want[t->order[i]] = 0;
	for (int64_t i = 0; i < nout; i++)
		t->fast[demote[i]] = 0;
	for (int64_t i = 0; i < np; i++)
		t->fast[promote[i]] = 1;
	t->in_tier += np - nout;
	*npromote = np;
	*ndemote = nout;
}
