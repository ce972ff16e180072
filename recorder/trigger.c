#include "trigger.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned bin_of(uint64_t v)
{
	unsigned e;

	if (v < 16)
		return (unsigned)v;
	e = 63 - __builtin_clzll(v);
	return (e - 3) * 16 + ((v >> (e - 4)) & 15);
}

/* The largest value in BIN. */
static uint64_t bin_top(unsigned bin)
{
	unsigned e = bin / 16 + 3, sub = bin % 16;

	if (bin < 16)
		return bin;
	return ((uint64_t)(16 + sub) << (e - 4)) + ((uint64_t)1 << (e - 4)) - 1;
}

/* NUM[UNIT] at *P; UNITS names each unit's scale. Returns 0 or -1. */
static int number(const char **p, double *v)
{
	char *end;

	errno = 0;
	*v = strtod(*p, &end);
	if (end == *p || errno || !isfinite(*v) || *v < 0)
		return -1;
	*p = end;
	return 0;
}

static int unit(const char **p, const char *const *names, const double *scale, double *v)
{
	for (int i = 0; names[i]; i++) {
		size_t n = strlen(names[i]);

		if (!strncmp(*p, names[i], n) && !((*p)[n] >= 'a' && (*p)[n] <= 'z')) {
			*v *= scale[i];
			*p += n;
			return 0;
		}
	}
	return -1;
}

static const char *skip(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

#define FAIL(fmt, ...) do { snprintf(msg, size, "--trigger '%s': " fmt, expr, ##__VA_ARGS__); return -1; } while (0)

int trig_parse(struct trigger *t, const char *expr, char *msg, size_t size)
{
	static const char *const lat_units[] = { "ns", "us", "ms", "s", NULL };
	static const double lat_scale[] = { 1, 1e3, 1e6, 1e9 };
	static const char *const dur_units[] = { "ms", "s", "m", "h", NULL };
	static const double dur_scale[] = { 1e6, 1e9, 60e9, 3600e9 };
	const char *p = skip(expr);
	double over = 1e9;
	bool latency;

	memset(t, 0, sizeof(*t));
	if (strlen(expr) >= sizeof(t->text))
		FAIL("longer than %zu characters", sizeof(t->text) - 1);
	snprintf(t->text, sizeof(t->text), "%s", expr);
	if (*p == 'p' && p[1] >= '0' && p[1] <= '9') {
		p++;
		if (number(&p, &t->pct) || !(t->pct > 0 && t->pct <= 100))
			FAIL("a percentile is above p0 and at most p100 (p99, p99.9)");
		t->metric = TRIG_PCT;
	} else if (!strncmp(p, "max", 3)) {
		t->metric = TRIG_LMAX, p += 3;
	} else if (!strncmp(p, "avg", 3)) {
		t->metric = TRIG_AVG, p += 3;
	} else if (!strncmp(p, "queue", 5)) {
		t->metric = TRIG_QUEUE, p += 5;
	} else if (!strncmp(p, "iops", 4)) {
		t->metric = TRIG_IOPS, p += 4;
	} else {
		FAIL("starts with pNN, max, avg, queue or iops (e.g. 'p99 > 50ms over 10s')");
	}
	latency = t->metric <= TRIG_AVG;
	p = skip(p);
	if (*p == '>' || *p == '<') {
		bool eq = p[1] == '=';

		t->op = *p == '>' ? (eq ? TRIG_GE : TRIG_GT) : (eq ? TRIG_LE : TRIG_LT);
		p += 1 + eq;
	} else {
		FAIL("expected >, >=, < or <= after the metric");
	}
	p = skip(p);
	if (number(&p, &t->value))
		FAIL("expected a number after the comparison");
	if (latency && unit(&p, lat_units, lat_scale, &t->value))
		FAIL("a latency needs a unit: ns, us, ms or s (e.g. 50ms)");
	if (!latency && *p && *p != ' ' && *p != '\t')
		FAIL("%s is a plain number, without a unit", t->metric == TRIG_QUEUE ? "queue" : "iops");
	p = skip(p);
	if (!strncmp(p, "over", 4) && (p[4] == ' ' || p[4] == '\t')) {
		p = skip(p + 4);
		if (number(&p, &over) || unit(&p, dur_units, dur_scale, &over))
			FAIL("'over' needs a duration: 10s, 500ms, 5m, 1h");
		p = skip(p);
	}
	if (*p)
		FAIL("unexpected '%s'", p);
	if (over < 100e6 || over > 3600e9)
		FAIL("the window ('over') must be 100ms to 1h");
	t->over_ns = (uint64_t)over;
	t->width_ns = t->over_ns / TRIG_BUCKETS;
	t->bins = calloc((size_t)TRIG_BUCKETS * TRIG_BINS, sizeof(*t->bins));
	if (!t->bins)
		FAIL("out of memory");
	t->armed = true;
	return 0;
}

/* Moves the window so that bucket B is its newest, emptying the ones it passes. */
static void advance(struct trigger *t, uint64_t b)
{
	if (b <= t->head)
		return;
	if (b - t->head >= TRIG_BUCKETS) {
		memset(t->bins, 0, (size_t)TRIG_BUCKETS * TRIG_BINS * sizeof(*t->bins));
		memset(t->total, 0, sizeof(t->total));
		memset(t->count, 0, sizeof(t->count));
		memset(t->sum, 0, sizeof(t->sum));
		memset(t->max, 0, sizeof(t->max));
		t->n = t->lat_sum = 0;
		t->head = b;
		return;
	}
	while (t->head < b) {
		unsigned s = ++t->head % TRIG_BUCKETS;
		uint32_t *bins = t->bins + (size_t)s * TRIG_BINS;

		if (t->count[s])
			for (unsigned i = 0; i < TRIG_BINS; i++)
				t->total[i] -= bins[i];
		memset(bins, 0, TRIG_BINS * sizeof(*bins));
		t->n -= t->count[s];
		t->lat_sum -= t->sum[s];
		t->count[s] = t->sum[s] = t->max[s] = 0;
	}
}

void trig_add(struct trigger *t, const struct iotape_record *r)
{
	uint64_t start = r->ts_queue_ns ? r->ts_queue_ns : r->ts_issue_ns, lat, b;
	unsigned s, bin;

	if (!start || r->ts_complete_ns < start)
		return;		/* no start known (in flight before the capture) */
	lat = r->ts_complete_ns - start;
	b = r->ts_complete_ns / t->width_ns;
	advance(t, b);
	if (b + TRIG_BUCKETS <= t->head)
		return;		/* older than the window */
	s = b % TRIG_BUCKETS;
	bin = bin_of(lat);
	t->bins[(size_t)s * TRIG_BINS + bin]++;
	t->total[bin]++;
	t->count[s]++;
	t->sum[s] += lat;
	if (lat > t->max[s])
		t->max[s] = lat;
	t->n++;
	t->lat_sum += lat;
}

static double percentile(const struct trigger *t)
{
	uint64_t rank = (uint64_t)ceil(t->pct / 100.0 * (double)t->n), seen = 0;

	if (!rank)
		rank = 1;
	for (unsigned i = 0; i < TRIG_BINS; i++) {
		seen += t->total[i];
		if (seen >= rank)
			return (double)bin_top(i);
	}
	return (double)bin_top(TRIG_BINS - 1);
}

bool trig_eval(struct trigger *t, uint64_t now_rel)
{
	/* The window's length: OVER, or less while the capture is younger than that. */
	double span = (double)(now_rel < t->over_ns ? (now_rel ? now_rel : 1) : t->over_ns);
	uint64_t m = 0;

	advance(t, now_rel / t->width_ns);
	switch (t->metric) {
	case TRIG_PCT:
		t->last = t->n ? percentile(t) : NAN;
		break;
	case TRIG_LMAX:
		for (unsigned i = 0; i < TRIG_BUCKETS; i++)
			m = t->max[i] > m ? t->max[i] : m;
		t->last = t->n ? (double)m : NAN;
		break;
	case TRIG_AVG:
		t->last = t->n ? (double)t->lat_sum / (double)t->n : NAN;
		break;
	case TRIG_QUEUE:
		t->last = (double)t->lat_sum / span;
		break;
	case TRIG_IOPS:
		t->last = (double)t->n * 1e9 / span;
		break;
	}
	if (isnan(t->last))
		return false;
	switch (t->op) {
	case TRIG_GT: return t->last > t->value;
	case TRIG_GE: return t->last >= t->value;
	case TRIG_LT: return t->last < t->value;
	default: return t->last <= t->value;
	}
}

void trig_free(struct trigger *t)
{
	free(t->bins);
	t->bins = NULL;
}
