/* The checkpoint / scavenge writer (thread ese-ckpt-N), one per database.
 *
 * With storage groups the checkpoint is the group's in what it measures: a
 * page's lgpos and the depth are positions in the group's log, so a group's
 * pages are written once they are a checkpoint depth of the group's log
 * behind, whichever database logged that log. The writer itself stays one per
 * database because the cache, its dirty list and its lock are per database:
 * one writer per group would walk several caches under several locks for no
 * difference in what it writes.
 *
 * It writes dirty pages back for two reasons, as ESE does: the scavenger keeps
 * clean pages at the cold end of the LRU (flushing starts when fewer than the
 * start threshold are clean and stops at the stop threshold), and the checkpoint
 * writes any page first dirtied more than the checkpoint depth of log ago. Each
 * chosen page is grown into a run of dirty neighbours, up to the coalescing
 * limit, and written with one request; the writes of one pass are in flight
 * together. */
#include <stdlib.h>
#include <string.h>

#include "ese.h"

#define NIL (-1)
#define QD 32

struct run {
	int32_t first;
	int n;
	int32_t slots[128];
	struct iovec iov[128];
};

/* Grow a run around slot s over dirty, idle neighbours; mark them being written. */
static void take_run(struct db *d, int32_t s, struct run *r, int maxp)
{
	struct cache *c = &d->c;
	int64_t lo = c->slots[s].page, hi = lo;
	while (hi - lo + 1 < maxp) {
		int32_t t = cache_lookup(c, hi + 1);
		if (t == NIL || !c->slots[t].dirty || c->slots[t].writing || c->slots[t].reading)
			break;
		hi++;
	}
	while (hi - lo + 1 < maxp) {
		int32_t t = cache_lookup(c, lo - 1);
		if (t == NIL || !c->slots[t].dirty || c->slots[t].writing || c->slots[t].reading)
			break;
		lo--;
	}
	r->n = 0;
	for (int64_t p = lo; p <= hi; p++) {
		int32_t t = cache_lookup(c, p);
		struct slot *x = &c->slots[t];
		x->writing = 1;
		x->redirty = 0;
		dirty_unlink(c, t);
		r->slots[r->n] = t;
		r->iov[r->n] = (struct iovec){x->buf, (size_t)d->page};
		r->n++;
	}
	r->first = r->slots[0];
}

static uint64_t ckpt_depth(void)
{
	return (uint64_t)(E.cfg.ckpt_depth_mb * 1048576.0);
}

/* The log the database may stay behind by: the checkpoint depth, and at an
 * end=crash stop the last --recovery-behind-pct of the log this run wrote, if
 * less. ESE stops with the pages of the last checkpoint depth of log unwritten;
 * a published soft-recovery test replays about 500 logs of 1 MB of which those
 * are the last 20 (4 %), so recovery finds almost every page current. A short
 * run writes far less log than its checkpoint depth, and without this its
 * recovery would redo nearly every page it reads. */
static uint64_t keep_behind(struct db *d, uint64_t depth)
{
	if (!atomic_load(&E.flush_behind))
		return depth;
	uint64_t keep = (uint64_t)(E.cfg.recovery_behind_pct / 100.0 * (double)log_pos(d));
	return keep < depth ? keep : depth;
}

static int want_write(struct db *d, struct slot *x, uint64_t depth)
{
	if (!x->dirty || x->writing || x->reading)
		return 0;
	return atomic_load(&E.flush_all) || x->lgpos + keep_behind(d, depth) < log_pos(d);
}

/* Whether a dirty page older than the end=crash stop keeps is left (d->mu held):
 * the dirty list is in first-dirtied order, so its head is the oldest. */
int ckpt_behind_left(struct db *d)
{
	struct cache *c = &d->c;
	if (c->dirty_head == NIL)
		return 0;
	return c->slots[c->dirty_head].lgpos + keep_behind(d, ckpt_depth()) < log_pos(d);
}

/* Whether the scavenger has work: the cache is (nearly) full and fewer than the
 * start threshold of the coldest stop-threshold pages are clean. */
static int scavenge_due(struct cache *c)
{
	if (c->used + c->stop_pages < c->cap)
		return 0;
	int clean = 0, seen = 0;
	for (int32_t s = c->lru_tail; s != NIL && seen < c->stop_pages; s = c->slots[s].prev, seen++)
		if (!c->slots[s].dirty || c->slots[s].writing)
			clean++;
	return clean < c->start_pages;
}

/* Whether the writer would find something to write now (d->mu held): sessions
 * wake it only then, since on a cache that is all dirty nearly every miss
 * would otherwise wake it for nothing. */
int ckpt_has_work(struct db *d)
{
	struct cache *c = &d->c;
	return c->starved || scavenge_due(c) ||
	       (c->dirty_head != NIL && want_write(d, &c->slots[c->dirty_head], ckpt_depth()));
}

/* For sessions waiting for clean pages (cache.c wait_clean): write from the
 * cold end of the LRU until the free pages and those clean or being written
 * there reach what the waiters need in all. The thresholds cannot see this
 * need: a session gives back the pages it took before it waits, and with
 * more free pages than the stop threshold the scavenger is not due, while
 * the checkpoint has nothing old enough when the log stands still because
 * the sessions that write it wait. */
static int choose_starved(struct db *d, struct run **out, int room, int maxp)
{
	struct cache *c = &d->c;
	int n = 0, have = c->cap - c->used;
	for (int32_t s = c->lru_tail; s != NIL && have < c->want && n < room; s = c->slots[s].prev) {
		struct slot *x = &c->slots[s];
		if (x->reading)
			continue;
		/* The rest of a run is hotter than s (colder dirty idle pages were
		 * taken already) and is counted when the walk reaches it. */
		if (x->dirty && !x->writing)
			take_run(d, s, out[n++], maxp);
		have++;
	}
	return n;
}

/* Choose up to `room` runs to write (into the free run slots): what waiting
 * sessions need, scavenge the cold end, then the checkpoint. */
static int choose(struct db *d, struct run **out, int room, int maxp, uint64_t depth)
{
	struct cache *c = &d->c;
	int n = c->starved ? choose_starved(d, out, room, maxp) : 0, seen = 0;
	if (scavenge_due(c)) {
		for (int32_t s = c->lru_tail; s != NIL && seen < c->stop_pages && n < room;
		     s = c->slots[s].prev, seen++) {
			struct slot *x = &c->slots[s];
			if (x->dirty && !x->writing && !x->reading)
				take_run(d, s, out[n++], maxp);
		}
	}
	while (n < room && c->dirty_head != NIL && want_write(d, &c->slots[c->dirty_head], depth))
		take_run(d, c->dirty_head, out[n++], maxp);
	return n;
}

static void complete(struct db *d, struct run *r)
{
	struct cache *c = &d->c;
	for (int k = 0; k < r->n; k++) {
		int32_t s = r->slots[k];
		struct slot *x = &c->slots[s];
		x->writing = 0;
		if (x->redirty) {
			x->redirty = 0;
			x->lgpos = log_pos(d);
			dirty_append(c, s);
		} else {
			x->dirty = 0;
			c->ndirty--;
			clean_add(c, s);
		}
	}
}

/* Writes stay in flight while the next ones are chosen (ESE writes back
 * asynchronously): up to QD runs at a time. */
void *ckpt_main(void *arg)
{
	struct worker *w = arg;
	struct db *d = w->db;
	struct cache *c = &d->c;
	int maxp = E.cfg.write_coalesce_kb * 1024 / d->page;
	if (maxp > 128)
		maxp = 128;
	if (maxp < 1)
		maxp = 1;
	uint64_t depth = ckpt_depth();
	struct run *runs = calloc(QD, sizeof(*runs));
	struct run *freel[QD], *chosen[QD];
	struct ioreq rq[QD];
	struct iocomp comp[QD];
	uint64_t t_sub[QD];
	int nfree = QD, inflight = 0;
	if (!runs)
		die("out of memory");
	for (int i = 0; i < QD; i++)
		freel[i] = &runs[QD - 1 - i];
	pthread_mutex_lock(&d->mu);
	while (!atomic_load(&E.ckpt_stop) || inflight) {
		/* The free run slots are offered in order; the first n get used. */
		memcpy(chosen, freel, sizeof(freel[0]) * (size_t)nfree);
		int n = atomic_load(&E.ckpt_stop) ? 0 : choose(d, chosen, nfree, maxp, depth);
		if (!n && !inflight) {
			timed_wait(&d->ckpt_cv, &d->mu, 5);
			continue;
		}
		memmove(freel, freel + n, sizeof(freel[0]) * (size_t)(nfree - n));
		nfree -= n;
		pthread_mutex_unlock(&d->mu);
		uint64_t t = now_ns();
		for (int i = 0; i < n; i++) {
			uint64_t tag = (uint64_t)(chosen[i] - runs);
			rq[i] = (struct ioreq){.fd = d->fd, .write = 1, .iov = chosen[i]->iov, .iovcnt = chosen[i]->n,
					       .off = d->data_off + (uint64_t)c->slots[chosen[i]->first].page * (uint64_t)d->page,
					       .tag = tag};
			t_sub[tag] = t;
		}
		if (n && w_submit(w, rq, n) < 0)
			die("%s: submit failed", w->name);
		inflight += n;
		/* Block for a completion only when there is nothing new to write or no room. */
		int r = w_reap(w, comp, (n == 0 || inflight == QD) ? 1 : 0, inflight);
		t = now_ns();
		for (int i = 0; i < r; i++) {
			if (comp[i].res < 0)
				die("%s: database write failed: %s", w->name, strerror((int)-comp[i].res));
			stat_add(&w->st[S_DB_WRITE], (uint64_t)comp[i].res, iocomp_latency(&comp[i], t_sub[comp[i].tag], t));
		}
		atomic_fetch_add(&d->tx_ios, (uint64_t)r);
		inflight -= r;
		pthread_mutex_lock(&d->mu);
		for (int i = 0; i < r; i++) {
			complete(d, &runs[comp[i].tag]);
			freel[nfree++] = &runs[comp[i].tag];
		}
		if (r)
			pthread_cond_broadcast(&d->cv);
	}
	pthread_mutex_unlock(&d->mu);
	free(runs);
	return NULL;
}
