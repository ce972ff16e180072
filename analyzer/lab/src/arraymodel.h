/* The array's model (arraymodel.c) as its server (array.c) drives it: the figures,
 * a request handed over, the counters. */
#ifndef IOTAPE_LAB_ARRAYMODEL_H
#define IOTAPE_LAB_ARRAYMODEL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>

/* KEY=VALUE on the command line (array.c's table); defaults are placeholders, the
 * Python side always passes analyzer/lab/array_model.toml's values. */
struct array_params {
	double disks, chunk_kb, rpm, settle_read_ms, avg_read_ms, settle_write_ms, avg_write_ms, mb_s;
	double ack_ms, cache_mb_s, dirty_mb, watermark, destage_delay_ms, destage_depth;
	double ncq_window, age_weight, seed;
	double tier_mb, tier_unit_kb, tier_stats_s, tier_migrate_s, tier_half_life_s;
	double ssd_read_ms, ssd_write_ms, ssd_mb_s, ssd_parallel, cache_ssd_mb;
	double rt_priority; /* the model's thread's SCHED_RR priority, 0: none (array.c) */
	double reader_batch; /* 1: the FUSE readers at SCHED_BATCH (array.c) */
};
extern struct array_params P;
/* The SCHED_RR priority the server's threads got (0: the default scheduling). */
extern int rt_priority;

/* One read or write of the disk file, its data already moved (a read's bytes in
 * data), replied to by the model when its modelled time is done. */
struct host {
	uint64_t unique;
	int write;
	uint64_t off;
	uint32_t len;
	double arrive, cache_done;
	/* The host path's times on the real clock, for the debug trace (host_trace):
	 * read off /dev/fuse, data moved and handed to the model, taken by the model. */
	double t_recv, t_submit, t_take;
	int pending; /* disk operations outstanding */
	char *data;  /* a read's bytes, replied at completion */
	size_t got;
	int err;
	struct host *next;
};

static inline double mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Derives and checks the model for a disk of `size` bytes: 0, or 2 (a bad model,
 * said on stderr) or 1 (out of memory). */
int model_setup(uint64_t size);
/* Starts the model's thread, its clock from now: 0, or 1. */
int model_start(void);
/* Hands a request to the model, stamped with its arrival. */
void model_submit(struct host *h);
/* Offline (array.c --replay): the model's clock from 0, no thread; each request
 * handed over in arrival order (h->arrive in s), the events due before it run
 * first; then the events up to a time. The policies' decisions are written to
 * `decisions` when set (arraybase.c). */
void model_replay_start(void);
void model_replay_arrive(struct host *h);
void model_replay_until(double t);
extern FILE *decisions;
/* A debug trace of the host path (IOTAPE_ARRAY_TRACE, array.c; off when NULL): one
 * line per reply, "op offset bytes recv submit take m_arrive m_done reply_start
 * reply_end" in CLOCK_MONOTONIC seconds (m_*: the model's own times), written by the
 * model's thread under its lock. */
extern FILE *host_trace;
/* The counters as one JSON line (MOUNT/stats). */
size_t model_stats(char *buf, size_t n);

#endif
