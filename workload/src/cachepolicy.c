#include "cachepolicy.h"

#include <stdlib.h>

int cp_init(struct cp *c, int64_t n_units, int64_t k)
{
	*c = (struct cp){.n = n_units, .k = k, .head = -1, .tail = -1};
	c->prev = malloc((size_t)n_units * sizeof(int64_t));
	c->next = malloc((size_t)n_units * sizeof(int64_t));
	c->queue = malloc((size_t)n_units * sizeof(int64_t));
	c->in = calloc((size_t)n_units, 1);
	c->queued = calloc((size_t)n_units, 1);
	if (!c->prev || !c->next || !c->queue || !c->in || !c->queued) {
		cp_free(c);
		return -1;
	}
	return 0;
}

void cp_free(struct cp *c)
{
	free(c->prev);
	free(c->next);
	free(c->queue);
	free(c->in);
	free(c->queued);
	c->prev = c->next = c->queue = NULL;
	c->in = c->queued = NULL;
}

static void unlink_unit(struct cp *c, int64_t u)
{
	if (c->prev[u] >= 0)
		c->next[c->prev[u]] = c->next[u];
	else
		c->head = c->next[u];
	if (c->next[u] >= 0)
		c->prev[c->next[u]] = c->prev[u];
	else
		c->tail = c->prev[u];
}

static void push_head(struct cp *c, int64_t u)
{
	c->prev[u] = -1;
	c->next[u] = c->head;
	if (c->head >= 0)
		c->prev[c->head] = u;
	c->head = u;
	if (c->tail < 0)
		c->tail = u;
}

int cp_read(struct cp *c, int64_t u)
{
	if (c->in[u]) {
		unlink_unit(c, u);
		push_head(c, u);
		return 1;
	}
	if (!c->queued[u]) {
		c->queued[u] = 1;
		c->queue[(c->qhead + c->qn++) % c->n] = u;
	}
	return 0;
}

int cp_next(struct cp *c, int64_t *unit, int64_t *victim)
{
	if (!c->qn)
		return 0;
	*unit = c->queue[c->qhead];
	c->qhead = (c->qhead + 1) % c->n;
	c->qn--;
	*victim = -1;
	/* Units being copied in count against the capacity: the slot is taken now. */
	if (c->size >= c->k) {
		*victim = c->tail;
		unlink_unit(c, *victim);
		c->in[*victim] = 0;
		c->size--;
	}
	c->size++;
	return 1;
}

void cp_admitted(struct cp *c, int64_t u)
{
	c->queued[u] = 0;
	c->in[u] = 1;
	push_head(c, u);
}
