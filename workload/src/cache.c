/* The database cache: a fixed pool of page buffers, an LRU list, a hash from page
 * number to slot and a FIFO of dirty pages in the order they were first dirtied
 * (oldest log position first, which is what the checkpoint needs).
 *
 * A miss evicts the coldest clean page that is neither being read nor written.
 * Those pages are also kept on a list of their own, in the same order as in the
 * LRU (by the stamp each gets when it goes to the LRU head), so that the victim
 * is that list's tail: scanning the LRU from its cold end instead walks past
 * hundreds of dirty pages on every miss when writes outpace the scavenger's
 * thresholds, all of it under the database mutex.
 *
 * Misses are read synchronously by the session that needs them. Missing pages
 * that are neighbours in the file are read with one request (a coalesced
 * preread); pages already cached split the run. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ese.h"

#define NIL (-1)

static uint32_t hash_page(int64_t p)
{
	uint64_t x = (uint64_t)p * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(x >> 32);
}

/* The page buffers, on transparent huge pages where the system allows them: every
 * O_DIRECT request pins its pages (one lookup per 4 KiB page otherwise, 8 for a
 * 32 KiB page and up to 128 for a coalesced write), and the random access of a
 * cache far larger than the TLB's reach misses it on every page. */
static char *cache_buffers(size_t size)
{
	const size_t huge = 2u << 20;
	void *p = NULL;
	size = (size + huge - 1) / huge * huge;
	if (posix_memalign(&p, huge, size))
		die("out of memory for the cache (%zu bytes)", size);
	madvise(p, size, MADV_HUGEPAGE); /* advice only: 4 KiB pages work the same */
	memset(p, 0, size);
	return p;
}

void cache_init(struct db *d, int cap)
{
	struct cache *c = &d->c;
	uint32_t hs = 1;
	while (hs < (uint32_t)cap * 2)
		hs <<= 1;
	c->cap = cap;
	c->hmask = hs - 1;
	c->hash = calloc(hs, sizeof(int32_t));
	c->slots = calloc((size_t)cap, sizeof(struct slot));
	if (!c->hash || !c->slots)
		die("out of memory for a %d-page cache", cap);
	for (uint32_t i = 0; i < hs; i++)
		c->hash[i] = NIL;
	char *bufs = cache_buffers((size_t)cap * (size_t)d->page);
	for (int i = 0; i < cap; i++) {
		c->slots[i].buf = bufs + (size_t)i * (size_t)d->page;
		c->slots[i].next = i + 1 < cap ? i + 1 : NIL;
		c->slots[i].page = -1;
	}
	c->free_head = 0;
	c->lru_head = c->lru_tail = c->dirty_head = c->dirty_tail = NIL;
	c->clean_head = c->clean_tail = NIL;
	/* ESE's start/stop flush thresholds: scavenge when fewer than start clean
	 * pages sit at the cold end of the LRU, until stop pages are clean. */
	c->start_pages = (int)(cap * E.cfg.flush_start_pct / 100.0);
	c->stop_pages = (int)(cap * E.cfg.flush_stop_pct / 100.0);
	/* ...but never fewer than two clean pages per session: each miss takes a
	 * clean page, and with 1 % of a small cache (6 pages of a 20 MB one) 16
	 * sessions waited for the scavenger 17 % of their time, 32 sessions most of
	 * it, and the engine got slower with more sessions. */
	int sessions = E.cfg.auto_threads ? E.cfg.max_threads : E.cfg.threads;
	if (c->start_pages < 2 * sessions)
		c->start_pages = 2 * sessions;
	if (c->stop_pages < c->start_pages * 2)
		c->stop_pages = c->start_pages * 2;
}

int32_t cache_lookup(struct cache *c, int64_t page)
{
	for (int32_t i = c->hash[hash_page(page) & c->hmask]; i != NIL; i = c->slots[i].hnext)
		if (c->slots[i].page == page)
			return i;
	return NIL;
}

static void hash_del(struct cache *c, int32_t s)
{
	int32_t *pp = &c->hash[hash_page(c->slots[s].page) & c->hmask];
	while (*pp != s)
		pp = &c->slots[*pp].hnext;
	*pp = c->slots[s].hnext;
}

static void lru_unlink(struct cache *c, int32_t s)
{
	struct slot *x = &c->slots[s];
	if (x->prev != NIL)
		c->slots[x->prev].next = x->next;
	else
		c->lru_head = x->next;
	if (x->next != NIL)
		c->slots[x->next].prev = x->prev;
	else
		c->lru_tail = x->prev;
}

static void clean_unlink(struct cache *c, int32_t s)
{
	struct slot *x = &c->slots[s];
	if (!x->in_clean)
		return;
	if (x->cprev != NIL)
		c->slots[x->cprev].cnext = x->cnext;
	else
		c->clean_head = x->cnext;
	if (x->cnext != NIL)
		c->slots[x->cnext].cprev = x->cprev;
	else
		c->clean_tail = x->cprev;
	x->in_clean = 0;
	c->nclean--;
}

/* Put s on the clean list after `after` (NIL: at the head). */
static void clean_insert(struct cache *c, int32_t s, int32_t after)
{
	struct slot *x = &c->slots[s];
	x->cprev = after;
	x->cnext = after != NIL ? c->slots[after].cnext : c->clean_head;
	if (x->cnext != NIL)
		c->slots[x->cnext].cprev = s;
	else
		c->clean_tail = s;
	if (after != NIL)
		c->slots[after].cnext = s;
	else
		c->clean_head = s;
	x->in_clean = 1;
	c->nclean++;
}

/* A page of the LRU that has just become clean and idle joins the clean list at
 * its LRU place. The walk starts from the nearer end: pages cleaned by the
 * scavenger are the coldest, pages whose read just finished are among the
 * hottest, so it is short for both. */
void clean_add(struct cache *c, int32_t s)
{
	struct slot *x = &c->slots[s];
	if (x->in_clean || x->dirty || x->reading || x->writing)
		return;
	if (c->clean_head == NIL || x->stamp >= c->slots[c->clean_head].stamp) {
		clean_insert(c, s, NIL);
		return;
	}
	uint64_t hot = c->slots[c->clean_head].stamp, cold = c->slots[c->clean_tail].stamp;
	int32_t t;
	if (x->stamp - cold < hot - x->stamp) {
		for (t = c->clean_tail; t != NIL && c->slots[t].stamp < x->stamp; t = c->slots[t].cprev)
			;
	} else {
		for (t = c->clean_head; c->slots[t].cnext != NIL && c->slots[c->slots[t].cnext].stamp > x->stamp;
		     t = c->slots[t].cnext)
			;
	}
	clean_insert(c, s, t);
}

static void lru_push_head(struct cache *c, int32_t s)
{
	struct slot *x = &c->slots[s];
	x->stamp = ++c->clock;
	if (x->in_clean) { /* now the hottest clean page too */
		clean_unlink(c, s);
		clean_insert(c, s, NIL);
	}
	x->prev = NIL;
	x->next = c->lru_head;
	if (c->lru_head != NIL)
		c->slots[c->lru_head].prev = s;
	c->lru_head = s;
	if (c->lru_tail == NIL)
		c->lru_tail = s;
}

void dirty_unlink(struct cache *c, int32_t s)
{
	struct slot *x = &c->slots[s];
	if (x->dprev != NIL)
		c->slots[x->dprev].dnext = x->dnext;
	else
		c->dirty_head = x->dnext;
	if (x->dnext != NIL)
		c->slots[x->dnext].dprev = x->dprev;
	else
		c->dirty_tail = x->dprev;
}

void dirty_append(struct cache *c, int32_t s)
{
	struct slot *x = &c->slots[s];
	x->dnext = NIL;
	x->dprev = c->dirty_tail;
	if (c->dirty_tail != NIL)
		c->slots[c->dirty_tail].dnext = s;
	else
		c->dirty_head = s;
	c->dirty_tail = s;
}

static void mark_dirty(struct db *d, int32_t s)
{
	struct cache *c = &d->c;
	struct slot *x = &c->slots[s];
	if (x->writing) {
		x->redirty = 1; /* written again after the write in flight completes */
		return;
	}
	if (!x->dirty) {
		clean_unlink(c, s);
		x->dirty = 1;
		x->lgpos = log_pos(d);
		c->ndirty++;
		dirty_append(c, s);
	}
}

/* A slot for a new page: a free one, else the coldest clean idle page (the clean
 * list's tail). NIL when every candidate is dirty or busy: the caller waits for
 * the scavenger. */
static int32_t grab(struct db *d)
{
	struct cache *c = &d->c;
	int32_t s = c->free_head;
	if (s != NIL) {
		c->free_head = c->slots[s].next;
		c->used++;
		return s;
	}
	s = c->clean_tail;
	if (s != NIL) {
		clean_unlink(c, s);
		lru_unlink(c, s);
		hash_del(c, s);
	}
	return s;
}

static void release(struct cache *c, int32_t s)
{
	clean_unlink(c, s);
	lru_unlink(c, s);
	hash_del(c, s);
	c->slots[s].page = -1;
	c->slots[s].next = c->free_head;
	c->free_head = s;
	c->used--;
}

/* Every page carries its number (bytes 0-7, written at creation) and the number
 * of its last modification (bytes 8-15): soft recovery compares that with a log
 * record's to know whether the record is already in the page. */
static uint64_t page_dbtime(const struct slot *x)
{
	uint64_t t;
	memcpy(&t, x->buf + 8, 8);
	return t;
}

static void stamp(struct slot *x, uint64_t t)
{
	memcpy(x->buf + 8, &t, 8);
}

/* Wait (d->mu held) until `need` pages are free or clean and idle: the
 * scavenger is told the need (c->want) and woken, and the wait is on d->cv,
 * which the writer broadcasts when its writes complete, a session when its
 * reads complete or it gives pages back, and main() when the run stops (a
 * signal handler cannot). 0 if the run stopped first.
 *
 * It waits for the condition, not for a fixed time: a retry that cannot
 * succeed yet would only take and give back pages again. Before, a session
 * retried every 5 ms and left only when the checkpoint writer had stopped,
 * which main() does after joining the sessions: at the end of the run, or on
 * SIGINT/SIGTERM, it waited for that session forever. */
static int wait_clean(struct db *d, int need)
{
	struct cache *c = &d->c;
	c->starved++;
	c->want += need;
	c->clean_waits++;
	while (!atomic_load(&E.stop) && c->cap - c->used + c->nclean < need) {
		pthread_cond_signal(&d->ckpt_cv);
		pthread_cond_wait(&d->cv, &d->mu);
	}
	c->starved--;
	c->want -= need;
	return !atomic_load(&E.stop);
}

/* Wake the sessions that wait for the cache (main(), once the run stops). */
void cache_wake(struct db *d)
{
	pthread_mutex_lock(&d->mu);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

/* The pages of `pages` (distinct, at most 64): hits go to the LRU head, misses
 * are read, neighbours with one request; with CA_DIRTY all are dirtied and
 * stamped with one new modification number, which is returned (else 0).
 * CA_CUT when the run stopped while it waited for clean pages: the pages
 * from the first that found none on are not in the cache. */
static uint64_t access_list(struct worker *w, const int64_t *pages, int n, int flags)
{
	struct db *d = w->db;
	struct cache *c = &d->c;
	int32_t miss[64];
	int nmiss;
	uint64_t t = 0;
	pthread_mutex_lock(&d->mu);
	if (flags & CA_DIRTY)
		t = ++d->dbtime;
retry:
	nmiss = 0;
	for (int i = 0; i < n; i++) {
		int32_t s = cache_lookup(c, pages[i]);
		if (s != NIL && c->slots[s].reading) {
			timed_wait(&d->cv, &d->mu, 50);
			goto retry;
		}
	}
	for (int i = 0; i < n; i++) {
		int32_t s = cache_lookup(c, pages[i]);
		if (s != NIL) {
			lru_unlink(c, s);
			lru_push_head(c, s);
			c->hits++;
			if (flags & CA_DIRTY) {
				mark_dirty(d, s);
				stamp(&c->slots[s], t);
			}
			continue;
		}
		s = grab(d);
		if (s == NIL) {
			/* Every page is dirty or busy. Give back what this call took (a
			 * session holding part of what it needs while it waits for the
			 * rest could wait on another doing the same), then wait for as
			 * many clean pages as the call needs. The slots given back are
			 * free: with more of them than the scavenger's stop threshold it
			 * saw nothing to do, and only the waiters' need makes it write. */
			int need = nmiss;
			for (int k = i; k < n; k++)
				need += cache_lookup(c, pages[k]) == NIL;
			for (int k = 0; k < nmiss; k++)
				release(c, miss[k]);
			if (nmiss)
				pthread_cond_broadcast(&d->cv); /* another waiter may have enough now */
			if (!wait_clean(d, need)) {
				pthread_mutex_unlock(&d->mu);
				return CA_CUT;
			}
			goto retry;
		}
		struct slot *x = &c->slots[s];
		x->page = pages[i];
		x->reading = !(flags & CA_NEW);
		x->dirty = x->writing = x->redirty = 0;
		int32_t *head = &c->hash[hash_page(x->page) & c->hmask];
		x->hnext = *head;
		*head = s;
		lru_push_head(c, s);
		clean_add(c, s); /* a new page not dirtied: clean and idle at once */
		miss[nmiss++] = s;
	}
	if (flags & CA_NEW) {
		for (int k = 0; k < nmiss; k++) {
			struct slot *x = &c->slots[miss[k]];
			memcpy(x->buf, &x->page, 8);
			stamp(x, t);
			if (flags & CA_DIRTY)
				mark_dirty(d, miss[k]);
		}
		pthread_mutex_unlock(&d->mu);
		return t;
	}
	c->misses += (uint64_t)nmiss;
	if (c->used >= c->cap && c->ndirty > c->cap - c->stop_pages && ckpt_has_work(d))
		pthread_cond_signal(&d->ckpt_cv);
	pthread_mutex_unlock(&d->mu);

	/* One read per run of neighbouring missing pages, all in flight together. */
	struct iovec iov[64];
	struct ioreq rq[64];
	int nrq = 0;
	for (int k = 0; k < nmiss;) {
		int j = k;
		while (j + 1 < nmiss && c->slots[miss[j + 1]].page == c->slots[miss[j]].page + 1)
			j++;
		for (int m = k; m <= j; m++)
			iov[m] = (struct iovec){c->slots[miss[m]].buf, (size_t)d->page};
		rq[nrq] = (struct ioreq){.fd = d->fd, .iov = &iov[k], .iovcnt = j - k + 1,
					 .off = d->data_off + (uint64_t)c->slots[miss[k]].page * (uint64_t)d->page,
					 .tag = (uint64_t)nrq};
		nrq++;
		k = j + 1;
	}
	if (nrq) {
		uint64_t t0 = now_ns();
		if (w_submit_wait(w, rq, nrq) < 0)
			die("%s: submit failed", w->name);
		struct iocomp comp[64];
		for (int got = 0; got < nrq;) {
			int r = w_reap(w, comp, 1, nrq - got);
			uint64_t t1 = now_ns();
			for (int i = 0; i < r; i++) {
				if (comp[i].res < 0)
					die("%s: database read failed: %s", w->name, strerror((int)-comp[i].res));
				stat_add(&w->st[S_DB_READ], (uint64_t)comp[i].res, iocomp_latency(&comp[i], t0, t1));
			}
			got += r;
		}
		atomic_fetch_add(&d->tx_ios, (uint64_t)nrq);
	}
	pthread_mutex_lock(&d->mu);
	for (int k = 0; k < nmiss; k++) {
		c->slots[miss[k]].reading = 0;
		if (flags & CA_DIRTY) {
			mark_dirty(d, miss[k]);
			stamp(&c->slots[miss[k]], t);
		}
		clean_add(c, miss[k]);
	}
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	return t;
}

uint64_t cache_access(struct worker *w, int64_t page, int n, int flags)
{
	int64_t pages[64];
	if (n > 64)
		n = 64;
	if (page + n > w->db->npages)
		n = (int)(w->db->npages - page);
	for (int i = 0; i < n; i++)
		pages[i] = page + i;
	return access_list(w, pages, n, flags);
}

/* Soft recovery's preread: the pages the next log records name, read ahead
 * together (at most 64, distinct, in log order). */
void cache_preread(struct worker *w, const int64_t *pages, int n)
{
	access_list(w, pages, n > 64 ? 64 : n, 0);
}

/* Redo one logged run with modification number t: each page is brought into
 * the cache (normally preread already) and, if it does not hold t yet, stamped
 * and dirtied; a page already as new as the record is left clean. The pages
 * redone. */
int cache_redo(struct worker *w, int64_t page, int n, uint64_t t)
{
	struct db *d = w->db;
	struct cache *c = &d->c;
	int redone = 0, tries = 0;
	if (page + n > d->npages)
		n = (int)(d->npages - page);
	pthread_mutex_lock(&d->mu);
	for (int i = 0; i < n; i++) {
		int32_t s = cache_lookup(c, page + i);
		if (s == NIL || c->slots[s].reading) { /* evicted since the preread, or still arriving */
			if (++tries > 100)
				break; /* the cache cannot take it (the run is stopping) */
			pthread_mutex_unlock(&d->mu);
			access_list(w, &(int64_t){page + i}, 1, 0);
			pthread_mutex_lock(&d->mu);
			i--;
			continue;
		}
		lru_unlink(c, s);
		lru_push_head(c, s);
		if (page_dbtime(&c->slots[s]) < t) {
			mark_dirty(d, s);
			stamp(&c->slots[s], t);
			redone++;
		}
	}
	pthread_mutex_unlock(&d->mu);
	return redone;
}
