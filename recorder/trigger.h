/* Snapshot triggers (iotape record --trigger 'p99 > 50ms over 10s'): a condition on
 * the records the loader already reads, over a sliding window, evaluated in the
 * drain loop (every ~10 ms). See docs/recording.md, "Flight recorder".
 *
 *   EXPR   := METRIC OP VALUE [over DURATION]      (DURATION: 1s when left out)
 *   METRIC := pNN (a latency percentile, p99, p99.9) | max | avg   latency, queue to
 *             completion (iostat's await), VALUE with a unit: ns, us, ms, s
 *           | queue  the average number in flight, iostat's aqu-sz: the requests'
 *             latencies summed over the window divided by its length (Little's law)
 *           | iops   completions per second
 *   OP     := > | >= | < | <=
 * Latencies go into a log-linear histogram (16 bins per power of two), so a
 * percentile is the upper edge of its bin: at most 1/16 (6.25 %) above the exact
 * value. */
#ifndef TRIGGER_H
#define TRIGGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iotape_record.h"

#define TRIG_BINS 976		/* 16 exact bins below 16 ns, then 16 per power of two */
#define TRIG_BUCKETS 50		/* the window slides in steps of OVER / 50 */
#define TRIG_MAX 8

enum trig_metric { TRIG_PCT, TRIG_LMAX, TRIG_AVG, TRIG_QUEUE, TRIG_IOPS };
enum trig_op { TRIG_GT, TRIG_GE, TRIG_LT, TRIG_LE };

struct trigger {
	char text[128];		/* the expression as given */
	enum trig_metric metric;
	enum trig_op op;
	double pct;		/* TRIG_PCT: the percentile, 0 < pct <= 100 */
	double value;		/* ns for a latency, a count otherwise */
	uint64_t over_ns, width_ns;
	uint64_t head;		/* the newest bucket's number (time / width_ns) */
	uint32_t *bins;		/* TRIG_BUCKETS x TRIG_BINS latency counts */
	uint32_t total[TRIG_BINS];
	uint64_t count[TRIG_BUCKETS], sum[TRIG_BUCKETS], max[TRIG_BUCKETS];
	uint64_t n, lat_sum;	/* over the whole window */
	/* Firing: once when the condition turns true, again only after it was false. */
	bool armed;
	uint64_t last_false_ns;	/* CLOCK_MONOTONIC of the last evaluation that was false */
	double last;		/* the value at the last evaluation */
};

/* Parses EXPR into T (allocates its window). Returns 0, or -1 with a one-line
 * reason in MSG. */
int trig_parse(struct trigger *t, const char *expr, char *msg, size_t size);
/* A record, by its completion time (ns since the capture's start). */
void trig_add(struct trigger *t, const struct iotape_record *r);
/* Whether the condition holds at NOW_REL (ns since the capture's start); sets
 * t->last. A window without a completion holds no latency: false then. */
bool trig_eval(struct trigger *t, uint64_t now_rel);
void trig_free(struct trigger *t);

#endif /* TRIGGER_H */
