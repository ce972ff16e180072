/* The array's model, driven by its server (array.c; analyzer/lab/array.py): one
 * controller of an MSA-like array, a write-back cache in front of a RAID-6 set of N
 * HDD-like disks. Its parameters and their sources: analyzer/lab/array_model.toml
 * and docs/hybrid.md. This file is the controller's front (a request's arrival and
 * reply), the event loop and the counters' JSON; the parts below it, one way
 * (arrayparts.h): arraycache.c, arraytier.c, arraydisk.c, arraybase.c.
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

#include "arrayparts.h"
#include "fusefile.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static struct host *inbox, **inbox_tail = &inbox;
static int offline; /* replaying a request list (model_replay_*): no FUSE to reply to */

static void host_arrive(struct host *h, double t)
{
	if (tiered) /* one access per unit touched, reads and writes alike (accesses.py) */
		for (uint64_t u = h->off / unit_bytes; u <= (h->off + h->len - 1) / unit_bytes && u < (uint64_t)nunits; u++) {
			window[u]++;
			if (decisions) /* the policy's placement of the unit now (the data's follows a copy) */
				fprintf(decisions, "a %llu %d\n", (unsigned long long)u, tp.fast[u]);
		}
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
	/* The read cache is looked up once per unit the read touches, before its pieces
	 * are placed (its pieces dirty in the write-back cache included): one access per
	 * (request, unit), as the simulator's `lru` counts them (accesses.py), not one per
	 * chunk piece. */
	uint64_t u0 = rcache ? h->off / unit_bytes : 0, nu = rcache ? (end - 1) / unit_bytes - u0 + 1 : 0;
	uint8_t few[64], *ssd_hit = nu <= sizeof few ? few : malloc(nu);
	if (!ssd_hit)
		exit(1);
	for (uint64_t i = 0; i < nu; i++) {
		ssd_hit[i] = (uint8_t)rcache_read((int64_t)(u0 + i));
		/* A miss's fill is decided before the next unit's look-up (the victim as the
		 * simulator evicts it: at the miss), when the mover is free. */
		if (!ssd_hit[i])
			fill_next(t);
	}
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
		} else if ((tiered && where[off / unit_bytes]) || (rcache && ssd_hit[off / unit_bytes - u0])) {
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
	if (ssd_hit != few)
		free(ssd_hit);
	if (!ops)
		ev_schedule(h->cache_done, EV_HOST, h);
	issue(ops, t);
}

FILE *host_trace;

static void trace_reply(const struct host *h, double t, double r0)
{
	fprintf(host_trace, "%d %llu %u %.6f %.6f %.6f %.6f %.6f %.6f %.6f\n", h->write,
		(unsigned long long)h->off, h->len, h->t_recv, h->t_submit, h->t_take, h->arrive, t, r0, mono());
}

static void host_done(struct host *h, double t)
{
	double lat = t - h->arrive;
	double r0 = host_trace ? mono() : 0;
	if (h->write) {
		S.writes++;
		S.write_bytes += h->len;
		S.write_lat_sum += lat;
		S.write_lat_max = lat > S.write_lat_max ? lat : S.write_lat_max;
		struct fuse_write_out o = {.size = h->len};
		if (!offline)
			ff_reply(h->unique, h->err, &o, sizeof o);
	} else {
		S.reads++;
		S.read_bytes += h->len;
		S.read_lat_sum += lat;
		S.read_lat_max = lat > S.read_lat_max ? lat : S.read_lat_max;
		if (!offline)
			ff_reply(h->unique, h->err, h->data, h->got);
	}
	if (host_trace)
		trace_reply(h, t, r0);
	free(h->data);
	free(h);
}

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
			ev_schedule(t > h->cache_done ? t : h->cache_done, EV_HOST, h);
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

/* One event of the heap, due now (the model's clock at its time). */
static void handle(struct event e)
{
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
				h->t_take = now;
				host_arrive(h, ta);
			} else if (te <= now) {
				handle(ev_pop());
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

/* ---- offline: a recorded request list on the model's own clock, no FUSE (array.c
 * --replay): the same arrivals and events in the same order as the thread above
 * takes them (an arrival before an event of the same time), nothing replied. ---- */
void model_replay_start(void)
{
	offline = 1;
	t0 = mnow = 0;
	if (tiered)
		ev_schedule(P.tier_stats_s, EV_STATS, NULL);
}

void model_replay_until(double t)
{
	while (nheap && heap[0].t <= t)
		handle(ev_pop());
}

void model_replay_arrive(struct host *h)
{
	while (nheap && heap[0].t < h->arrive)
		handle(ev_pop());
	mnow = h->arrive > mnow ? h->arrive : mnow;
	h->arrive = mnow;
	host_arrive(h, mnow);
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
		"\"rcache_updates\": %llu, \"read_wait_ms_edges\": [%g, %g, %g, %g, %g, %g, %g], "
		"\"read_wait_hist\": [%llu, %llu, %llu, %llu, %llu, %llu, %llu, %llu], "
		"\"worst_read_wait_s\": %.6f, \"worst_read_passed\": %u, \"worst_read_overtaken\": %u, "
		"\"worst_read_passed_by_host\": %u, \"rt_priority\": %d}\n",
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
		WAIT_EDGES_MS[0], WAIT_EDGES_MS[1], WAIT_EDGES_MS[2], WAIT_EDGES_MS[3], WAIT_EDGES_MS[4],
		WAIT_EDGES_MS[5], WAIT_EDGES_MS[6], (unsigned long long)S.read_wait_hist[0], (unsigned long long)S.read_wait_hist[1],
		(unsigned long long)S.read_wait_hist[2], (unsigned long long)S.read_wait_hist[3],
		(unsigned long long)S.read_wait_hist[4], (unsigned long long)S.read_wait_hist[5],
		(unsigned long long)S.read_wait_hist[6], (unsigned long long)S.read_wait_hist[7],
		S.worst_wait, S.worst_passed, S.worst_overtaken, S.worst_by_host, rt_priority);
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
		disk[d].phase = spindle_uniform();
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
		ev_schedule(t0 + P.tier_stats_s, EV_STATS, NULL);
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
