/* The array's write-back cache (arraymodel.c's model): dirty pages per stripe,
 * acknowledged at the cache's time under the dirty limit, destaged in the background
 * to the RAID 6 set (full-stripe, read-modify-write or reconstruct-write). Figures:
 * analyzer/lab/array_model.toml. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "arrayparts.h"

#define NBUCKET 65536
static struct stripe *bucket[NBUCKET];
static struct stripe *fifo, **fifo_tail = &fifo;
struct host *waitq;
struct host **waitq_tail = &waitq;
uint64_t dirty_bytes;
int jobs_inflight;
double tick_at = -1;

/* ---- the cache's dirty pages, per stripe ---- */
struct stripe *stripe_get(uint64_t no, int make)
{
	struct stripe **b = &bucket[no % NBUCKET];
	for (struct stripe *s = *b; s; s = s->hnext)
		if (s->no == no)
			return s;
	if (!make)
		return NULL;
	size_t words = (ndata * ppc + 63) / 64;
	struct stripe *s = calloc(1, sizeof *s);
	if (!s || !(s->dirty = calloc(words, 8)) || !(s->flight = calloc(words, 8)))
		exit(1);
	s->no = no;
	s->hnext = *b;
	*b = s;
	return s;
}

static void stripe_drop(struct stripe *s)
{
	struct stripe **b = &bucket[s->no % NBUCKET];
	while (*b != s)
		b = &(*b)->hnext;
	*b = s->hnext;
	free(s->dirty);
	free(s->flight);
	free(s);
}

int bit(const uint64_t *m, uint64_t i)
{
	return (int)((m[i / 64] >> (i % 64)) & 1);
}

/* Calls fn(stripe, page index within the stripe) for each page of [off, off + len). */
#define FOR_PAGES(off, len, s, pg)                                                    \
	for (uint64_t _p = (off) / PAGE, _e = ((off) + (len) + PAGE - 1) / PAGE, s, pg; \
	     _p < _e && ((s = _p / (ndata * ppc)), (pg = _p % (ndata * ppc)), 1); _p++)

uint64_t new_dirty_bytes(uint64_t off, uint32_t len)
{
	uint64_t n = 0;
	FOR_PAGES(off, len, s, pg)
	{
		struct stripe *st = stripe_get(s, 0);
		n += !st || !bit(st->dirty, pg);
	}
	return n * PAGE;
}

static void fifo_push(struct stripe *st, double t)
{
	st->since = t;
	st->queued = 1;
	st->qnext = NULL;
	*fifo_tail = st;
	fifo_tail = &st->qnext;
}

static struct stripe *fifo_pop(void)
{
	struct stripe *st = fifo;
	fifo = st->qnext;
	if (!fifo)
		fifo_tail = &fifo;
	st->queued = 0;
	return st;
}

/* ---- destaging ---- */
static void start_destage(struct stripe *st, double t);

void try_destage(double t)
{
	while (fifo && jobs_inflight < (int)P.destage_depth) {
		struct stripe *st = fifo;
		int full = st->ndirty == ndata * ppc;
		int pressed = dirty_bytes >= P.watermark * (double)dirty_limit || waitq;
		/* Compared as the tick's own time: t - since < delay can hold at t == at
		 * (rounding), and the tick would reschedule itself at once, forever. */
		double at = st->since + P.destage_delay_ms / 1e3;
		if (!full && !pressed && t < at) {
			if (tick_at < 0 || at < tick_at) {
				tick_at = at;
				ev_schedule(at, EV_TICK, NULL);
			}
			return;
		}
		start_destage(fifo_pop(), t);
	}
}

/* The pages [lo, hi] of chunk c dirty in the in-flight bitmap; 0 if none. */
static int chunk_range(const struct stripe *st, int c, uint64_t *lo, uint64_t *hi)
{
	int any = 0;
	for (uint64_t i = 0; i < ppc; i++)
		if (bit(st->flight, c * ppc + i)) {
			if (!any)
				*lo = i;
			*hi = i;
			any = 1;
		}
	return any;
}

static void add_op(struct job *j, struct dop **list, int role, uint64_t lo, uint64_t hi, int write)
{
	struct dop *op = new_op(disk_of(j->st->no, role), j->st->no * chunk + lo * PAGE, (uint32_t)((hi - lo + 1) * PAGE), write);
	op->job = j;
	op->next = *list;
	*list = op;
}

static void start_destage(struct stripe *st, double t)
{
	memcpy(st->flight, st->dirty, (ndata * ppc + 63) / 64 * 8);
	memset(st->dirty, 0, (ndata * ppc + 63) / 64 * 8);
	st->nflight = st->ndirty;
	st->ndirty = 0;
	st->destaging = 1;
	struct job *j = calloc(1, sizeof *j);
	if (!j)
		exit(1);
	j->st = st;
	jobs_inflight++;
	uint64_t lo[MAX_DISKS], hi[MAX_DISKS], ulo = ppc, uhi = 0;
	int dirty[MAX_DISKS], k = 0;
	for (int c = 0; c < ndata; c++) {
		dirty[c] = chunk_range(st, c, &lo[c], &hi[c]);
		if (dirty[c]) {
			k++;
			ulo = lo[c] < ulo ? lo[c] : ulo;
			uhi = hi[c] > uhi ? hi[c] : uhi;
		}
	}
	struct dop *reads = NULL, *writes = NULL;
	if (tiered && where[st->no * ndata * chunk / unit_bytes]) {
		/* The unit is on the SSD pair: each dirty chunk's range written there (both
		 * mirrors at once), no parity. */
		S.tier_destages++;
		for (int c = 0; c < ndata; c++)
			if (dirty[c]) {
				struct dop *op = new_op(SSD, (st->no * ndata + c) * chunk + lo[c] * PAGE,
							(uint32_t)((hi[c] - lo[c] + 1) * PAGE), 1);
				op->job = j;
				op->next = writes;
				writes = op;
			}
		j->phase = 2;
		for (struct dop *o = writes; o; o = o->next)
			j->pending++;
		issue(writes, t);
		return;
	}
	if (st->nflight == ndata * ppc) {
		S.destage_full++; /* full stripe: new P and Q from the data alone */
	} else if (k + 2 <= ndata - k) {
		S.destage_rmw++; /* old data, P and Q read; the new parity from their difference */
		for (int c = 0; c < ndata; c++)
			if (dirty[c])
				add_op(j, &reads, c, lo[c], hi[c], 0);
		add_op(j, &reads, ndata, ulo, uhi, 0);
		add_op(j, &reads, ndata + 1, ulo, uhi, 0);
	} else {
		S.destage_reconstruct++; /* the clean chunks read; parity from the whole stripe */
		for (int c = 0; c < ndata; c++)
			if (!dirty[c])
				add_op(j, &reads, c, ulo, uhi, 0);
	}
	for (int c = 0; c < ndata; c++)
		if (dirty[c]) {
			add_op(j, &writes, c, lo[c], hi[c], 1);
			if (rcache && filled[st->no * ndata * chunk / unit_bytes]) {
				/* the cached copy updated, not dropped (as the engine's cache) */
				S.rcache_updates++;
				struct dop *op = new_op(SSD, (st->no * ndata + c) * chunk + lo[c] * PAGE,
							(uint32_t)((hi[c] - lo[c] + 1) * PAGE), 1);
				op->job = j;
				op->next = writes;
				writes = op;
			}
		}
	add_op(j, &writes, ndata, ulo, uhi, 1);
	add_op(j, &writes, ndata + 1, ulo, uhi, 1);
	j->writes = writes;
	j->phase = reads ? 1 : 2;
	struct dop *now = reads ? reads : writes;
	if (!reads)
		j->writes = NULL;
	for (struct dop *o = now; o; o = o->next)
		j->pending++;
	if (j->phase == 1)
		for (struct dop *o = reads; o; o = o->next)
			S.disk_read_ops_destage++;
	for (struct dop *o = writes; o; o = o->next)
		S.disk_write_ops_destage++;
	issue(now, t);
}


void destage_done(struct job *j, double t)
{
	struct stripe *st = j->st;
	dirty_bytes -= (uint64_t)st->nflight * PAGE;
	S.destaged_bytes += (uint64_t)st->nflight * PAGE;
	memset(st->flight, 0, (ndata * ppc + 63) / 64 * 8);
	st->nflight = 0;
	st->destaging = 0;
	jobs_inflight--;
	free(j);
	if (st->ndirty && !st->queued)
		fifo_push(st, t);
	else if (!st->ndirty && !st->queued)
		stripe_drop(st);
	while (waitq) {
		struct host *h = waitq;
		if (dirty_bytes && dirty_bytes + new_dirty_bytes(h->off, h->len) > dirty_limit)
			break;
		waitq = h->next;
		if (!waitq)
			waitq_tail = &waitq;
		S.wait_sum += t - h->arrive;
		admit(h, t);
	}
	try_destage(t);
}

double cache_s(uint32_t len)
{
	return P.ack_ms / 1e3 + len / (P.cache_mb_s * 1e6);
}

void admit(struct host *h, double t)
{
	FOR_PAGES(h->off, h->len, s, pg)
	{
		struct stripe *st = stripe_get(s, 1);
		if (!bit(st->dirty, pg)) {
			st->dirty[pg / 64] |= 1ull << (pg % 64);
			st->ndirty++;
			dirty_bytes += PAGE;
		}
		if (!st->queued && !st->destaging)
			fifo_push(st, t);
	}
	if (dirty_bytes > S.dirty_peak)
		S.dirty_peak = dirty_bytes;
	ev_schedule(t + cache_s(h->len), EV_HOST, h);
	try_destage(t);
}
