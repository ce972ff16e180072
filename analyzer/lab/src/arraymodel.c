/* The array's model, driven by its server (array.c; analyzer/lab/array.py): one
 * controller of an MSA-like array, a write-back cache in front of a RAID-6 set of N
 * HDD-like disks. Its parameters and their sources: analyzer/lab/array_model.toml
 * and docs/hybrid.md.
 *
 * - Writes are acknowledged after the cache's own time (ACK_MS + bytes at
 *   CACHE_MB_S) while the dirty data stays under DIRTY_MB; past it a write waits,
 *   in arrival order, until destaging frees room.
 * - Destaging runs in the background, oldest dirty stripe first, at most DESTAGE_DEPTH
 *   stripes at a time; a stripe is destaged once it is full, has been dirty for
 *   DESTAGE_DELAY_MS, or the dirty data is over WATERMARK of the limit. A full stripe
 *   is written whole (N writes, no reads); a partial one costs a read-modify-write
 *   (the old data of each dirty chunk, P and Q read; the same written: 3 + 3 for one
 *   chunk) or, when that reads fewer, a reconstruct-write (the clean chunks read).
 * - Reads of pages dirty in the cache are served at the cache's time; the rest go to
 *   the disk holding each chunk (RAID-6 left-symmetric rotation: data on every disk).
 * - Each disk has its own head and queue: service = seek (SETTLE + (FULL - SETTLE) *
 *   sqrt(distance / span), FULL from the data sheet's average) + rotation (until the
 *   sector comes round: its angle is its place in a track of the bytes one turn
 *   passes at the media rate) + transfer; none of seek and rotation when the request
 *   starts where the head is; a write over what the head just read waits one turn.
 *   The queue is reordered, NCQ-like: among the NCQ_WINDOW oldest, the least
 *   positioning time less AGE_WEIGHT x time queued (aged SPTF).
 *
 * The model runs as a discrete-event simulation on the real clock: request arrivals
 * are stamped when read from /dev/fuse; every later time is the model's own
 * (completion = start + service), so a stall of this process delays a reply but not
 * the model's timeline. The data lives in a memory-backed file; only modelled time
 * is spent. model_stats gives its counters (MOUNT/stats).
 *
 * - With TIER_MB > 0, an SSD performance tier (a mirrored pair, SSD_PARALLEL requests
 *   at once, each SSD_*_MS + bytes at SSD_MB_S): units of TIER_UNIT_KB (whole
 *   stripes), heat counted per TIER_STATS_S, every TIER_MIGRATE_S the hottest in it,
 *   decided by workload/src/tierpolicy.c (the simulator's `tiering` arithmetic, the
 *   engine's own policy: one implementation). One mover copies the units, demotions
 *   first (read from one side, written to the other: a promotion reads every data
 *   chunk, a demotion writes full stripes); reads of a unit in the tier and destages
 *   of its stripes go to the SSDs once its copy is done.
 *
 * - With CACHE_SSD_MB > 0 instead, an SSD read cache of such units: a read of a unit
 *   whose copy is there is served by the SSDs, a miss from the disks and queued for
 *   a fill (workload/src/cachepolicy.c: the engine's cache, the simulator's lru);
 *   the mover fills one unit at a time, evicting the least recent; destages update
 *   a cached unit's copy too.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "arraymodel.h"
#include "cachepolicy.h"
#include "fusefile.h"
#include "tierpolicy.h"

#define PAGE 4096u
#define MAX_DISKS 64

struct array_params P = {10, 512, 10000, 0.3, 3.8, 0.56, 4.4, 150, 0.3, 1600, 64, 0.5, 50, 4, 32, 200, 1,
       0, 4096, 5, 5, 60, 0.1, 0.1, 500, 4, 0};

/* derived */
static int ndisks, ndata;
static uint64_t chunk, ppc, span, dirty_limit, track_bytes;
static double rot_s, full_read_s, full_write_s;

static uint64_t rng;

/* ---- the model's objects ---- */
struct stripe {
	uint64_t no;
	uint64_t *dirty, *flight; /* pages dirty (waiting) and being destaged */
	unsigned ndirty, nflight;
	double since;
	int queued, destaging;
	struct stripe *hnext, *qnext;
};

struct job {
	struct stripe *st;
	int phase, pending;
	struct dop *writes; /* phase 2's operations, issued when phase 1's are done */
};

struct move;

struct dop {
	int disk, write; /* disk: an HDD of the set, or SSD (the tier's mirrored pair) */
	uint64_t off;
	uint32_t len;
	double queued;
	unsigned passed, overtaken, by_host; /* served before it while it queued; of those, arrived after it; host reads */
	struct host *host;
	struct job *job;
	struct move *move;
	struct dop *next;
};
#define SSD (-1)

/* One unit copied between the tier and the set by the mover: read all, write all. */
struct move {
	int64_t unit;
	int promote, fill, phase, pending; /* fill: a read cache's copy in (promote too) */
	struct move *next;
};

struct disk {
	uint64_t head, last_start;
	double phase; /* the spindle's angle at time 0, in turns (the disks turn unsynchronised) */
	int last_write, busy;
	struct dop *q;
	unsigned qlen;
	double busy_s, seek_s, rot_s_sum;
	uint64_t reads, writes, read_bytes, write_bytes;
};

struct event {
	double t;
	uint64_t seq;
	int kind;
	void *p;
};
enum { EV_DISK, EV_HOST, EV_TICK, EV_STATS };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static struct host *inbox, **inbox_tail = &inbox;
static struct event *heap;
static size_t nheap, capheap;
static uint64_t evseq;
static double mnow, t0, tick_at = -1;
static struct disk disk[MAX_DISKS];
#define NBUCKET 65536
static struct stripe *bucket[NBUCKET];
static struct stripe *fifo, **fifo_tail = &fifo;
static struct host *waitq, **waitq_tail = &waitq;
static uint64_t dirty_bytes;
static int jobs_inflight;

/* The SSD tier: the policy's placement decided (tp.fast), the data's place (where,
 * switched when a unit's copy is done), this window's accesses, the mover's queue. */
static int tiered, rcache; /* an SSD tier, or an SSD read cache (cachepolicy.c) */
static struct cp cp;
static uint8_t *filled; /* the read cache's units whose copy is done */
static uint64_t unit_bytes;
static int64_t nunits;
static struct tp tp;
static uint8_t *where;
static uint32_t *window;
static int64_t *promote_buf, *demote_buf;
static struct move *moves, **moves_tail = &moves;
static int moving;
static struct {
	struct dop *q;
	int busy;
	double busy_s;
} ssd;

static struct {
	uint64_t reads, writes, read_bytes, write_bytes, writes_waited, cache_read_pieces, disk_read_pieces;
	uint64_t dirty_peak, destaged_bytes, destage_full, destage_rmw, destage_reconstruct;
	uint64_t disk_read_ops_host, disk_read_ops_destage, disk_write_ops_destage;
	double read_lat_sum, read_lat_max, write_lat_sum, write_lat_max, wait_sum;
	double host_disk_read_service_s; /* the disks' service of host reads (no queueing) */
	uint64_t host_disk_reads_timed;
	uint64_t tier_read_pieces, tier_destages, ssd_reads, ssd_writes, ssd_read_bytes, ssd_write_bytes;
	uint64_t migrations, promoted, demoted, migrated_bytes, windows;
	uint64_t rcache_hits, rcache_misses, fills, evictions, rcache_updates;
	/* a host read's wait in its disk's queue: a histogram (WAIT_EDGES_MS) and the
	 * longest one's anatomy, to tell a FIFO queue from starvation by the reordering */
	uint64_t read_wait_hist[8];
	double worst_wait;
	unsigned worst_passed, worst_overtaken, worst_by_host;
} S;
static const double WAIT_EDGES_MS[7] = {5, 10, 25, 50, 100, 150, 200};

static double uniform(void)
{
	/* splitmix64, under the model's lock */
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* ---- the event heap ---- */
static int before(const struct event *a, const struct event *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void schedule(double t, int kind, void *p)
{
	if (nheap == capheap) {
		capheap = capheap ? 2 * capheap : 1024;
		heap = realloc(heap, capheap * sizeof *heap);
		if (!heap)
			exit(1);
	}
	size_t i = nheap++;
	heap[i] = (struct event){t, evseq++, kind, p};
	while (i && before(&heap[i], &heap[(i - 1) / 2])) {
		struct event x = heap[i];
		heap[i] = heap[(i - 1) / 2];
		heap[(i - 1) / 2] = x;
		i = (i - 1) / 2;
	}
}

static struct event pop(void)
{
	struct event top = heap[0];
	heap[0] = heap[--nheap];
	for (size_t i = 0;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < nheap && before(&heap[l], &heap[m]))
			m = l;
		if (r < nheap && before(&heap[r], &heap[m]))
			m = r;
		if (m == i)
			break;
		struct event x = heap[i];
		heap[i] = heap[m];
		heap[m] = x;
		i = m;
	}
	return top;
}

/* ---- layout: stripe s holds ndata chunks and P, Q, rotating (left-symmetric) ---- */
static int disk_of(uint64_t s, int role) /* role: data 0..ndata-1, ndata = P, ndata+1 = Q */
{
	int p = ndisks - 1 - (int)(s % (uint64_t)ndisks), q = (p + 1) % ndisks;
	if (role == ndata)
		return p;
	if (role == ndata + 1)
		return q;
	return (q + 1 + role) % ndisks;
}

/* ---- the cache's dirty pages, per stripe ---- */
static struct stripe *stripe_get(uint64_t no, int make)
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

static int bit(const uint64_t *m, uint64_t i)
{
	return (int)((m[i / 64] >> (i % 64)) & 1);
}

/* Calls fn(stripe, page index within the stripe) for each page of [off, off + len). */
#define FOR_PAGES(off, len, s, pg)                                                    \
	for (uint64_t _p = (off) / PAGE, _e = ((off) + (len) + PAGE - 1) / PAGE, s, pg; \
	     _p < _e && ((s = _p / (ndata * ppc)), (pg = _p % (ndata * ppc)), 1); _p++)

static uint64_t new_dirty_bytes(uint64_t off, uint32_t len)
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

/* ---- disks ---- */
static double seek_s(uint64_t dist, int write)
{
	double settle = (write ? P.settle_write_ms : P.settle_read_ms) / 1e3;
	double full = write ? full_write_s : full_read_s;
	return settle + (full - settle) * sqrt((double)dist / (double)span);
}

static uint64_t distance(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

/* The time from t until the head is over `off` and can start on it: the seek, then
 * the wait for the sector to come round (a sector's angle is its place in its track
 * of track_bytes, the bytes that pass the head in one turn at the media rate; the
 * head's angle is the spindle's, its phase per disk). A write over what the head
 * just read waits one whole turn; a request that starts where the head is, none. */
static double position_s(const struct disk *k, const struct dop *op, double t, double *seek)
{
	*seek = 0;
	if (op->write && !k->last_write && op->off == k->last_start && op->off + op->len == k->head)
		return rot_s - op->len / (P.mb_s * 1e6);
	if (op->off == k->head)
		return 0;
	*seek = seek_s(distance(op->off, k->head), op->write);
	double head = (t + *seek) / rot_s + k->phase;
	double sector = (double)(op->off % track_bytes) / (double)track_bytes;
	double wait = sector - (head - floor(head));
	return *seek + (wait - floor(wait)) * rot_s;
}

static void disk_start(int d, double t)
{
	struct disk *k = &disk[d];
	if (k->busy || !k->q)
		return;
	/* NCQ-like, aged shortest positioning time first (Jacobson & Wilkes 1991, ASATF;
	 * Worthington, Ganger & Patt 1994, ASPTF): among the oldest ncq_window, the one
	 * whose positioning time less AGE_WEIGHT x its time queued is least. Pure
	 * positioning order (weight 0) starves a request far from the head while nearer
	 * ones keep arriving; the weight bounds that. The queue is in arrival order. */
	struct dop **pick = &k->q;
	double best = INFINITY, sk;
	unsigned i = 0;
	for (struct dop **o = &k->q; *o && i < (unsigned)P.ncq_window; o = &(*o)->next, i++) {
		double eff = position_s(k, *o, t, &sk) - P.age_weight * (t - (*o)->queued);
		if (eff < best) {
			best = eff;
			pick = o;
		}
	}
	struct dop *op = *pick;
	*pick = op->next;
	k->qlen--;
	for (struct dop *o = k->q; o; o = o->next) {
		o->passed++;
		o->overtaken += op->queued > o->queued;
		o->by_host += op->host != NULL;
	}
	if (op->host) {
		double w = t - op->queued;
		int b = 0;
		while (b < 7 && w * 1e3 >= WAIT_EDGES_MS[b])
			b++;
		S.read_wait_hist[b]++;
		if (w > S.worst_wait) {
			S.worst_wait = w;
			S.worst_passed = op->passed;
			S.worst_overtaken = op->overtaken;
			S.worst_by_host = op->by_host;
		}
	}
	double xfer = op->len / (P.mb_s * 1e6), seek;
	double rot = position_s(k, op, t, &seek) - seek;
	double service = seek + rot + xfer;
	k->busy = 1;
	k->busy_s += service;
	k->seek_s += seek;
	k->rot_s_sum += rot;
	k->head = op->off + op->len;
	k->last_start = op->off;
	k->last_write = op->write;
	if (op->write) {
		k->writes++;
		k->write_bytes += op->len;
	} else {
		k->reads++;
		k->read_bytes += op->len;
	}
	if (op->host) {
		S.host_disk_read_service_s += service;
		S.host_disk_reads_timed++;
	}
	schedule(t + service, EV_DISK, op);
}

static void ssd_start(double t)
{
	/* ssd_parallel requests at once (the pair's channels), FIFO: no seek to reorder */
	while (ssd.q && ssd.busy < (int)P.ssd_parallel) {
		struct dop *op = ssd.q;
		ssd.q = op->next;
		double service = (op->write ? P.ssd_write_ms : P.ssd_read_ms) / 1e3 + op->len / (P.ssd_mb_s * 1e6);
		ssd.busy++;
		ssd.busy_s += service;
		if (op->write) {
			S.ssd_writes++;
			S.ssd_write_bytes += op->len;
		} else {
			S.ssd_reads++;
			S.ssd_read_bytes += op->len;
		}
		schedule(t + service, EV_DISK, op);
	}
}

static void submit(struct dop *op, double t)
{
	if (op->disk == SSD) {
		op->queued = t;
		op->next = NULL;
		struct dop **o = &ssd.q;
		while (*o)
			o = &(*o)->next;
		*o = op;
		ssd_start(t);
		return;
	}
	op->queued = t;
	op->next = NULL;
	struct dop **o = &disk[op->disk].q;
	while (*o)
		o = &(*o)->next;
	*o = op;
	disk[op->disk].qlen++;
	disk_start(op->disk, t);
}

static struct dop *new_op(int d, uint64_t off, uint32_t len, int write)
{
	struct dop *op = calloc(1, sizeof *op);
	if (!op)
		exit(1);
	op->disk = d;
	op->off = off;
	op->len = len;
	op->write = write;
	return op;
}

/* ---- destaging ---- */
static void start_destage(struct stripe *st, double t);

static void try_destage(double t)
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
				schedule(at, EV_TICK, NULL);
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

static void issue(struct dop *list, double t)
{
	while (list) {
		struct dop *next = list->next;
		submit(list, t);
		list = next;
	}
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

static void admit(struct host *h, double t);

static void destage_done(struct job *j, double t)
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

/* ---- host requests ---- */
static double cache_s(uint32_t len)
{
	return P.ack_ms / 1e3 + len / (P.cache_mb_s * 1e6);
}

static void admit(struct host *h, double t)
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
	schedule(t + cache_s(h->len), EV_HOST, h);
	try_destage(t);
}

static void fill_next(double t);

/* A read of unit u in the read cache: a hit when its copy is there (the LRU's most
 * recent now), else a miss queued for a fill (cachepolicy.c: the simulator's lru). */
static int rcache_read(int64_t u)
{
	if (u >= nunits)
		return 0;
	if (cp_read(&cp, u) && filled[u]) {
		S.rcache_hits++;
		return 1;
	}
	S.rcache_misses++;
	return 0;
}

static void host_arrive(struct host *h, double t)
{
	if (tiered) /* one access per unit touched, reads and writes alike (accesses.py) */
		for (uint64_t u = h->off / unit_bytes; u <= (h->off + h->len - 1) / unit_bytes && u < (uint64_t)nunits; u++)
			window[u]++;
	if (h->write) {
		if (waitq || (dirty_bytes && dirty_bytes + new_dirty_bytes(h->off, h->len) > dirty_limit)) {
			S.writes_waited++;
			h->next = NULL;
			*waitq_tail = h;
			waitq_tail = &h->next;
			try_destage(t);
			return;
		}
		admit(h, t);
		return;
	}
	/* A read: each chunk's piece from the cache when all its pages are there (dirty or
	 * being destaged), else from the disk holding it. */
	uint64_t end = h->off + h->len;
	h->cache_done = t;
	struct dop *ops = NULL;
	for (uint64_t off = h->off; off < end;) {
		uint64_t c = off / chunk, next = (c + 1) * chunk < end ? (c + 1) * chunk : end;
		uint64_t s = c / (uint64_t)ndata;
		int role = (int)(c % (uint64_t)ndata);
		struct stripe *st = stripe_get(s, 0);
		int cached = st != NULL;
		for (uint64_t p = off / PAGE; cached && p * PAGE < next; p++) {
			uint64_t pg = p % (ndata * ppc);
			cached = bit(st->dirty, pg) || bit(st->flight, pg);
		}
		if (cached) {
			S.cache_read_pieces++;
			double done = t + cache_s((uint32_t)(next - off));
			h->cache_done = done > h->cache_done ? done : h->cache_done;
		} else if ((tiered && where[off / unit_bytes]) || (rcache && rcache_read(off / unit_bytes))) {
			S.tier_read_pieces++;
			struct dop *op = new_op(SSD, off, (uint32_t)(next - off), 0);
			op->host = h;
			op->next = ops;
			ops = op;
			h->pending++;
		} else {
			S.disk_read_pieces++;
			S.disk_read_ops_host++;
			struct dop *op = new_op(disk_of(s, role), s * chunk + off % chunk, (uint32_t)(next - off), 0);
			op->host = h;
			op->next = ops;
			ops = op;
			h->pending++;
		}
		off = next;
	}
	if (!ops)
		schedule(h->cache_done, EV_HOST, h);
	issue(ops, t);
	if (rcache)
		fill_next(t);
}

static void host_done(struct host *h, double t)
{
	double lat = t - h->arrive;
	if (h->write) {
		S.writes++;
		S.write_bytes += h->len;
		S.write_lat_sum += lat;
		S.write_lat_max = lat > S.write_lat_max ? lat : S.write_lat_max;
		struct fuse_write_out o = {.size = h->len};
		ff_reply(h->unique, h->err, &o, sizeof o);
	} else {
		S.reads++;
		S.read_bytes += h->len;
		S.read_lat_sum += lat;
		S.read_lat_max = lat > S.read_lat_max ? lat : S.read_lat_max;
		ff_reply(h->unique, h->err, h->data, h->got);
	}
	free(h->data);
	free(h);
}

static void move_next(double t);
static void move_op_done(struct move *m, double t);

static void disk_done(struct dop *op, double t)
{
	if (op->disk == SSD)
		ssd.busy--;
	else
		disk[op->disk].busy = 0;
	if (op->move) {
		move_op_done(op->move, t);
	} else if (op->host) {
		struct host *h = op->host;
		if (--h->pending == 0)
			schedule(t > h->cache_done ? t : h->cache_done, EV_HOST, h);
	} else if (--op->job->pending == 0) {
		struct job *j = op->job;
		if (j->phase == 1) {
			j->phase = 2;
			for (struct dop *o = j->writes; o; o = o->next)
				j->pending++;
			struct dop *w = j->writes;
			j->writes = NULL;
			issue(w, t);
		} else {
			destage_done(j, t);
		}
	}
	int d = op->disk;
	free(op);
	if (d == SSD)
		ssd_start(t);
	else
		disk_start(d, t);
}

/* ---- the tier's mover: one unit at a time, demotions first (as the engine's) ---- */
static struct move *move_add(int64_t unit, int promote)
{
	struct move *m = calloc(1, sizeof *m);
	if (!m)
		exit(1);
	m->unit = unit;
	m->promote = promote;
	*moves_tail = m;
	moves_tail = &m->next;
	return m;
}

/* The unit on the set: per stripe, each data chunk (reads) or all N chunks (a full
 * stripe written: data, P and Q). */
static void move_set_ops(struct move *m, int write, double t)
{
	uint64_t first = (uint64_t)m->unit * unit_bytes / (ndata * chunk), n = unit_bytes / (ndata * chunk);
	struct dop *list = NULL;
	for (uint64_t s = first; s < first + n; s++)
		for (int role = 0; role < (write ? ndata + 2 : ndata); role++) {
			struct dop *op = new_op(disk_of(s, role), s * chunk, (uint32_t)chunk, write);
			op->move = m;
			op->next = list;
			list = op;
			m->pending++;
		}
	issue(list, t);
}

static void move_ssd_op(struct move *m, int write, double t)
{
	struct dop *op = new_op(SSD, (uint64_t)m->unit * unit_bytes, (uint32_t)unit_bytes, write);
	op->move = m;
	m->pending = 1;
	issue(op, t);
}

static void move_next(double t)
{
	if (moving || !moves)
		return;
	struct move *m = moves;
	moves = m->next;
	if (!moves)
		moves_tail = &moves;
	moving = 1;
	m->phase = 1;
	if (m->promote)
		move_set_ops(m, 0, t);
	else
		move_ssd_op(m, 0, t);
}

static void move_op_done(struct move *m, double t)
{
	if (--m->pending)
		return;
	if (m->phase == 1) {
		m->phase = 2;
		if (m->promote)
			move_ssd_op(m, 1, t);
		else
			move_set_ops(m, 1, t);
		return;
	}
	S.migrated_bytes += unit_bytes;
	if (m->fill) {
		cp_admitted(&cp, m->unit);
		filled[m->unit] = 1;
		S.fills++;
	} else {
		where[m->unit] = (uint8_t)m->promote; /* the data's place switches when copied */
		if (m->promote)
			S.promoted++;
		else
			S.demoted++;
	}
	free(m);
	moving = 0;
	if (rcache)
		fill_next(t);
	else
		move_next(t);
}

/* The read cache's next fill, one at a time: the victim leaves at once (its copy is
 * clean: nothing to write back), the unit is read from the disks and written to the
 * SSDs, and is a hit once that is done. */
static void fill_next(double t)
{
	int64_t u, victim;
	if (moving || !cp_next(&cp, &u, &victim))
		return;
	if (victim >= 0) {
		filled[victim] = 0;
		S.evictions++;
	}
	move_add(u, 1)->fill = 1;
	move_next(t);
}

/* A statistics boundary (t0 + n x tier_stats_s): the window's accesses to the
 * policy (workload/src/tierpolicy.c, the simulator's arithmetic); a migration's
 * decisions queued for the mover. */
static void stats_boundary(double t)
{
	S.windows++;
	if (tp_window(&tp, window)) {
		int64_t np, nd;
		tp_migrate(&tp, promote_buf, &np, demote_buf, &nd);
		if (np || nd)
			S.migrations++;
		for (int64_t i = 0; i < nd; i++)
			move_add(demote_buf[i], 0);
		for (int64_t i = 0; i < np; i++)
			move_add(promote_buf[i], 1);
		move_next(t);
	}
	memset(window, 0, (size_t)nunits * sizeof *window);
	schedule(t0 + (double)(S.windows + 1) * P.tier_stats_s, EV_STATS, NULL);
}

/* ---- the model's thread: events and arrivals in time order, on the real clock ---- */
static void *model(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		double now = mono();
		for (;;) {
			double te = nheap ? heap[0].t : INFINITY;
			double ta = inbox ? (inbox->arrive > mnow ? inbox->arrive : mnow) : INFINITY;
			if (ta <= te && ta <= now) {
				struct host *h = inbox;
				inbox = h->next;
				if (!inbox)
					inbox_tail = &inbox;
				mnow = ta;
				h->arrive = ta;
				host_arrive(h, ta);
			} else if (te <= now) {
				struct event e = pop();
				mnow = e.t > mnow ? e.t : mnow;
				if (e.kind == EV_DISK)
					disk_done(e.p, e.t);
				else if (e.kind == EV_HOST)
					host_done(e.p, e.t);
				else if (e.kind == EV_STATS)
					stats_boundary(e.t);
				else {
					tick_at = -1;
					try_destage(e.t);
				}
			} else {
				break;
			}
		}
		if (nheap) {
			double t = heap[0].t;
			struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - floor(t)) * 1e9)};
			pthread_cond_timedwait(&wake, &mu, &ts);
		} else {
			pthread_cond_wait(&wake, &mu);
		}
	}
	return NULL;
}

size_t model_stats(char *buf, size_t n)
{
	pthread_mutex_lock(&mu);
	double busy = 0, seek = 0, rot = 0;
	uint64_t dr = 0, dw = 0, drb = 0, dwb = 0;
	for (int d = 0; d < ndisks; d++) {
		busy += disk[d].busy_s;
		seek += disk[d].seek_s;
		rot += disk[d].rot_s_sum;
		dr += disk[d].reads;
		dw += disk[d].writes;
		drb += disk[d].read_bytes;
		dwb += disk[d].write_bytes;
	}
	int64_t in_tier = 0;
	for (int64_t u = 0; u < nunits; u++)
		in_tier += tiered ? where[u] : rcache ? filled[u] : 0;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
		     (double)ru.ru_stime.tv_usec / 1e6;
	int len = snprintf(buf, n,
		"{\"now_s\": %.6f, \"model_s\": %.6f, \"cpu_s\": %.3f, \"reads\": %llu, \"writes\": %llu, \"read_bytes\": %llu, "
		"\"write_bytes\": %llu, \"read_latency_s_sum\": %.6f, \"read_latency_s_max\": %.6f, "
		"\"write_latency_s_sum\": %.6f, \"write_latency_s_max\": %.6f, \"writes_waited\": %llu, "
		"\"write_wait_s_sum\": %.6f, \"cache_read_pieces\": %llu, \"disk_read_pieces\": %llu, "
		"\"dirty_bytes\": %llu, \"dirty_peak\": %llu, \"dirty_limit\": %llu, \"destaged_bytes\": %llu, "
		"\"destage_full\": %llu, \"destage_rmw\": %llu, \"destage_reconstruct\": %llu, "
		"\"disk_read_ops_host\": %llu, \"disk_read_ops_destage\": %llu, \"disk_write_ops_destage\": %llu, "
		"\"disk_reads\": %llu, \"disk_writes\": %llu, \"disk_read_bytes\": %llu, \"disk_write_bytes\": %llu, "
		"\"disk_busy_s\": %.6f, \"disk_seek_s\": %.6f, \"disk_rotation_s\": %.6f, "
		"\"host_disk_read_service_s\": %.6f, \"host_disk_reads_timed\": %llu, \"queued_writes\": %d, "
		"\"destaging\": %d, \"tier_read_pieces\": %llu, \"tier_destages\": %llu, \"ssd_reads\": %llu, "
		"\"ssd_writes\": %llu, \"ssd_read_bytes\": %llu, \"ssd_write_bytes\": %llu, \"ssd_busy_s\": %.6f, "
		"\"tier_windows\": %llu, \"migrations\": %llu, \"promoted\": %llu, \"demoted\": %llu, "
		"\"migrated_bytes\": %llu, \"tier_units\": %lld, \"tier_units_wanted\": %lld, "
		"\"rcache_hits\": %llu, \"rcache_misses\": %llu, \"fills\": %llu, \"evictions\": %llu, "
		"\"rcache_updates\": %llu, \"read_wait_ms_edges\": [5, 10, 25, 50, 100, 150, 200], "
		"\"read_wait_hist\": [%llu, %llu, %llu, %llu, %llu, %llu, %llu, %llu], "
		"\"worst_read_wait_s\": %.6f, \"worst_read_passed\": %u, \"worst_read_overtaken\": %u, "
		"\"worst_read_passed_by_host\": %u}\n",
		mono() - t0, mnow - t0, cpu, (unsigned long long)S.reads, (unsigned long long)S.writes,
		(unsigned long long)S.read_bytes, (unsigned long long)S.write_bytes, S.read_lat_sum,
		S.read_lat_max, S.write_lat_sum, S.write_lat_max, (unsigned long long)S.writes_waited, S.wait_sum,
		(unsigned long long)S.cache_read_pieces, (unsigned long long)S.disk_read_pieces,
		(unsigned long long)dirty_bytes, (unsigned long long)S.dirty_peak, (unsigned long long)dirty_limit,
		(unsigned long long)S.destaged_bytes, (unsigned long long)S.destage_full,
		(unsigned long long)S.destage_rmw, (unsigned long long)S.destage_reconstruct,
		(unsigned long long)S.disk_read_ops_host, (unsigned long long)S.disk_read_ops_destage,
		(unsigned long long)S.disk_write_ops_destage, (unsigned long long)dr, (unsigned long long)dw,
		(unsigned long long)drb, (unsigned long long)dwb, busy, seek, rot, S.host_disk_read_service_s,
		(unsigned long long)S.host_disk_reads_timed, waitq != NULL, jobs_inflight,
		(unsigned long long)S.tier_read_pieces, (unsigned long long)S.tier_destages,
		(unsigned long long)S.ssd_reads, (unsigned long long)S.ssd_writes, (unsigned long long)S.ssd_read_bytes,
		(unsigned long long)S.ssd_write_bytes, ssd.busy_s, (unsigned long long)S.windows,
		(unsigned long long)S.migrations, (unsigned long long)S.promoted, (unsigned long long)S.demoted,
		(unsigned long long)S.migrated_bytes, (long long)in_tier, (long long)tp.in_tier,
		(unsigned long long)S.rcache_hits, (unsigned long long)S.rcache_misses, (unsigned long long)S.fills,
		(unsigned long long)S.evictions, (unsigned long long)S.rcache_updates,
		(unsigned long long)S.read_wait_hist[0], (unsigned long long)S.read_wait_hist[1],
		(unsigned long long)S.read_wait_hist[2], (unsigned long long)S.read_wait_hist[3],
		(unsigned long long)S.read_wait_hist[4], (unsigned long long)S.read_wait_hist[5],
		(unsigned long long)S.read_wait_hist[6], (unsigned long long)S.read_wait_hist[7],
		S.worst_wait, S.worst_passed, S.worst_overtaken, S.worst_by_host);
	pthread_mutex_unlock(&mu);
	return len < 0 ? 0 : (size_t)len < n ? (size_t)len : n - 1;
}

int model_setup(uint64_t size)
{
	ndisks = (int)P.disks;
	ndata = ndisks - 2;
	chunk = (uint64_t)P.chunk_kb * 1024;
	ppc = chunk / PAGE;
	if (ndisks < 4 || ndisks > MAX_DISKS || chunk < PAGE || chunk % PAGE || ndata * ppc > 1u << 20 || P.rpm <= 0 ||
	    P.mb_s <= 0 || P.cache_mb_s <= 0 || P.dirty_mb <= 0 || P.destage_depth < 1 || P.ncq_window < 1 ||
	    P.avg_read_ms < P.settle_read_ms || P.avg_write_ms < P.settle_write_ms) {
		fprintf(stderr, "iotape-array: bad model (disks 4-%d, chunk a multiple of 4 KiB, rates, limit, depth and "
				"window positive, average seek >= settle)\n",
			MAX_DISKS);
		return 2;
	}
	rot_s = 60.0 / P.rpm;
	/* The sqrt curve's mean over uniform pairs of positions is SETTLE + (FULL - SETTLE)
	 * x 8/15: FULL is set so that the mean is the data sheet's average seek. */
	full_read_s = (P.settle_read_ms + (P.avg_read_ms - P.settle_read_ms) * 15 / 8) / 1e3;
	full_write_s = (P.settle_write_ms + (P.avg_write_ms - P.settle_write_ms) * 15 / 8) / 1e3;
	dirty_limit = (uint64_t)(P.dirty_mb * 1048576);
	rng = (uint64_t)P.seed;
	track_bytes = (uint64_t)(P.mb_s * 1e6 * rot_s); /* one turn at the media rate */
	for (int d = 0; d < ndisks; d++)
		disk[d].phase = uniform();
	uint64_t stripe_bytes = (uint64_t)ndata * chunk;
	span = (size + stripe_bytes - 1) / stripe_bytes * chunk; /* each disk's share */
	if (P.tier_mb > 0) {
		unit_bytes = (uint64_t)P.tier_unit_kb * 1024;
		struct tp_params tpp = {.k = (int64_t)(P.tier_mb * 1048576 / (double)unit_bytes), .budget = -1,
					.stats_s = P.tier_stats_s, .migrate_s = P.tier_migrate_s,
					.half_life_s = P.tier_half_life_s};
		if (!unit_bytes || unit_bytes % stripe_bytes || tpp.k < 1 || P.tier_stats_s <= 0 ||
		    P.tier_migrate_s < P.tier_stats_s || P.ssd_mb_s <= 0 || P.ssd_parallel < 1) {
			fprintf(stderr, "iotape-array: bad tier (unit a multiple of a stripe's data, %llu KiB; "
					"at least one unit; intervals and SSD rates positive)\n",
				(unsigned long long)(stripe_bytes / 1024));
			return 2;
		}
		nunits = (int64_t)((size + unit_bytes - 1) / unit_bytes);
		where = calloc((size_t)nunits, 1);
		window = calloc((size_t)nunits, sizeof *window);
		promote_buf = calloc((size_t)nunits, sizeof *promote_buf);
		demote_buf = calloc((size_t)nunits, sizeof *demote_buf);
		if (!where || !window || !promote_buf || !demote_buf || tp_init(&tp, &tpp, nunits))
			return 1;
		tiered = 1;
	}
	if (P.cache_ssd_mb > 0) {
		unit_bytes = (uint64_t)P.tier_unit_kb * 1024;
		int64_t k = (int64_t)(P.cache_ssd_mb * 1048576 / (double)unit_bytes);
		if (tiered || !unit_bytes || unit_bytes % stripe_bytes || k < 1 || P.ssd_mb_s <= 0 ||
		    P.ssd_parallel < 1) {
			fprintf(stderr, "iotape-array: bad read cache (not with a tier; units of whole stripes, "
					"%llu KiB; at least one unit)\n",
				(unsigned long long)(stripe_bytes / 1024));
			return 2;
		}
		nunits = (int64_t)((size + unit_bytes - 1) / unit_bytes);
		filled = calloc((size_t)nunits, 1);
		if (!filled || cp_init(&cp, nunits, k))
			return 1;
		rcache = 1;
	}
	return 0;
}

int model_start(void)
{
	t0 = mnow = mono();
	if (tiered)
		schedule(t0 + P.tier_stats_s, EV_STATS, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&wake, &ca);
	pthread_t m;
	if (pthread_create(&m, NULL, model, NULL)) {
		fprintf(stderr, "iotape-array: cannot start the model's thread\n");
		return 1;
	}
	return 0;
}

void model_submit(struct host *h)
{
	pthread_mutex_lock(&mu);
	h->next = NULL;
	*inbox_tail = h;
	inbox_tail = &h->next;
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&mu);
}
