/* The array's model's parts (arraymodel.c: the controller's front, the event loop,
 * the counters; arraycache.c: the write-back cache and its destaging to the RAID 6
 * set; arraydisk.c: the disks' and the SSD pair's queues; arraytier.c: the SSD tier
 * and read cache and the mover between them): what they share, under the model's
 * one lock. Only these files include it; array.c sees arraymodel.h. */
#ifndef IOTAPE_LAB_ARRAYPARTS_H
#define IOTAPE_LAB_ARRAYPARTS_H

#include <stddef.h>
#include <stdint.h>

#include "arraymodel.h"
#include "cachepolicy.h"
#include "tierpolicy.h"

#define PAGE 4096u
#define MAX_DISKS 64

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

/* arraybase.c: derived from P; the event heap; the random stream */
extern int ndisks, ndata;
extern uint64_t chunk, ppc, span, dirty_limit, track_bytes;
extern double rot_s, full_read_s, full_write_s;
extern double mnow, t0;
extern uint64_t rng;
extern struct event *heap;
extern size_t nheap;
struct event ev_pop(void);

/* the counters (arraybase.c), model_stats's JSON (arraymodel.c) */
struct array_stats {
	uint64_t reads, writes, read_bytes, write_bytes, writes_waited, cache_read_pieces, disk_read_pieces;
	uint64_t dirty_peak, destaged_bytes, destage_full, destage_rmw, destage_reconstruct;
	uint64_t disk_read_ops_host, disk_read_ops_destage, disk_write_ops_destage;
	double read_lat_sum, read_lat_max, write_lat_sum, write_lat_max, wait_sum;
	double host_disk_read_service_s; /* the disks' service of host reads (no queueing) */
	uint64_t host_disk_reads_timed;
	uint64_t tier_read_pieces, tier_destages, ssd_reads, ssd_writes, ssd_read_bytes, ssd_write_bytes;
	uint64_t migrations, promoted, demoted, migrated_bytes, windows;
	uint64_t rcache_hits, rcache_misses, fills, evictions, rcache_updates;
	/* a host read's wait in its disk's queue: a histogram (WAIT_EDGES_MS) and
	 * the longest one's anatomy, to tell a FIFO queue from starvation by the reordering */
	uint64_t read_wait_hist[8];
	double worst_wait;
	unsigned worst_passed, worst_overtaken, worst_by_host;
};
extern struct array_stats S;

/* arraybase.c: the random stream, the event heap, the layout */
double spindle_uniform(void);
void ev_schedule(double t, int kind, void *p);
int disk_of(uint64_t s, int role);

/* arraycache.c: the write-back cache */
extern double tick_at;
extern struct host *waitq, **waitq_tail;
extern uint64_t dirty_bytes;
extern int jobs_inflight;
struct stripe *stripe_get(uint64_t no, int make);
int bit(const uint64_t *m, uint64_t i);
uint64_t new_dirty_bytes(uint64_t off, uint32_t len);
void try_destage(double t);
void destage_done(struct job *j, double t);
double cache_s(uint32_t len);
void admit(struct host *h, double t);

/* arraydisk.c: the disks' and the SSD pair's queues */
extern struct disk disk[MAX_DISKS];
extern const double WAIT_EDGES_MS[7]; /* read_wait_hist's edges: 8 bins */
extern struct ssd_pair {
	struct dop *q;
	int busy;
	double busy_s;
} ssd;
void disk_start(int d, double t);
void ssd_start(double t);
struct dop *new_op(int d, uint64_t off, uint32_t len, int write);
void issue(struct dop *list, double t);

/* arraytier.c: the SSD tier (tierpolicy.c) or read cache (cachepolicy.c), the mover */
extern int tiered, rcache;
extern struct cp cp;
extern uint8_t *filled;
extern uint64_t unit_bytes;
extern int64_t nunits;
extern struct tp tp;
extern uint8_t *where;
extern uint32_t *window;
extern int64_t *promote_buf, *demote_buf;
int rcache_read(int64_t u);
void move_op_done(struct move *m, double t);
void fill_next(double t);
void stats_boundary(double t);

#endif
