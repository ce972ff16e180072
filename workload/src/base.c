/* The helpers with no engine state (clocks, errors, buffers, counters), linked by
 * the engine and by the test drivers in test/. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ese.h"

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(program_name, stderr);
	fputs(": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

void *xalign(size_t size)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, size ? size : 4096))
		die("out of memory (%zu bytes)", size);
	memset(p, 0, size);
	return p;
}

void stat_add(struct iostat *s, uint64_t bytes, uint64_t lat_ns)
{
	s->count++;
	s->bytes += bytes;
	s->lat_sum_ns += lat_ns;
	if (lat_ns > s->lat_max_ns)
		s->lat_max_ns = lat_ns;
	int b = lat_ns ? 64 - __builtin_clzll(lat_ns) : 0;
	s->hist[b < HIST_BUCKETS ? b : HIST_BUCKETS - 1]++;
}

void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(cv, mu, &ts);
}
