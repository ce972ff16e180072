/* The array's disks and its SSD pair (arraymodel.c's model): each disk's head and
 * queue, served in aged shortest-positioning-time order; the SSDs FIFO, a few at
 * once. Figures: analyzer/lab/array_model.toml. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>

#include "arrayparts.h"

struct disk disk[MAX_DISKS];
struct ssd_pair ssd;
const double WAIT_EDGES_MS[7] = {5, 10, 25, 50, 100, 150, 200};

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

void disk_start(int d, double t)
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
	ev_schedule(t + service, EV_DISK, op);
}

void ssd_start(double t)
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
		ev_schedule(t + service, EV_DISK, op);
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

struct dop *new_op(int d, uint64_t off, uint32_t len, int write)
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


void issue(struct dop *list, double t)
{
	while (list) {
		struct dop *next = list->next;
		submit(list, t);
		list = next;
	}
}
