/* Stress driver of src/tier.c without the engine: threads write whole pages of
 * fresh random data through tier_rw() to a hot set that moves every few
 * milliseconds, while the migration thread moves units every 2 ms. The engine's
 * own writes are too few to hit a migration often; this makes every kind of race
 * (a write during a promotion's or a demotion's copy) happen thousands of times.
 * At the end tier_stop() reads every block back through the placement and after
 * the write-back (--tier-verify). Arguments: SLOW_FILE FAST_FILE SECONDS THREADS
 * [tier|cache] (the policy; cache: misses copied in as fast as they come).
 * Prints the tier's report object. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/ese.h"
#include "../src/tier.h"

struct engine E;

#define PAGE (32 * 1024)
#define UNITS 32
#define UNIT (1 << 20)

const char *const program_name = "iotape-tier-stress";

static uint64_t t_end;
static int nthreads;

static void *writer(void *arg)
{
	int me = (int)(uintptr_t)arg;
	uint64_t s = (uint64_t)me * 0x9E3779B97F4A7C15ull + 1;
	char *buf = xalign(PAGE);
	int64_t pages = (int64_t)E.dbs[0].npages;
	while (now_ns() < t_end) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		/* 3 of 4 writes to a hot set of 4 units that moves every 5 ms */
		int64_t hot = (int64_t)(now_ns() / 5000000ull) % UNITS;
		int64_t unit = s % 4 ? (hot + (int64_t)(s >> 8) % 4) % UNITS : (int64_t)(s >> 8) % UNITS;
		int64_t page = unit * (UNIT / PAGE) + (int64_t)(s >> 20) % (UNIT / PAGE);
		/* Each page has one writer, as the engine's do: the checksums note
		 * writes in the order they were made. */
		page -= page % nthreads - (me - 1);
		if (page < 1 || page > pages)
			continue;
		for (size_t i = 0; i < PAGE; i += 8)
			memcpy(buf + i, &s, 8), s = s * 6364136223846793005ull + 1442695040888963407ull;
		struct iovec iov = {buf, PAGE};
		if (tier_rw(E.dbs[0].fd, 1, &iov, 1, (uint64_t)page * PAGE) != PAGE)
			die("write failed");
		if (s % 2) { /* and read a page back, so reads race the copies too */
			if (tier_rw(E.dbs[0].fd, 0, &iov, 1, (uint64_t)page * PAGE) != PAGE)
				die("read failed");
		}
	}
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6)
		die("usage: SLOW_FILE FAST_FILE SECONDS THREADS [tier|cache]");
	struct config *c = &E.cfg;
	strcpy(c->ioengine, "tiered");
	snprintf(c->tier_policy, sizeof(c->tier_policy), "%s", argc == 6 ? argv[5] : "tier");
	snprintf(c->tier_fast, sizeof(c->tier_fast), "%s", argv[2]);
	snprintf(c->db[0].path, sizeof(c->db[0].path), "%s", argv[1]);
	c->databases = c->ndb_targets = 1;
	c->page_kb = PAGE / 1024;
	c->tier_unit_kb = UNIT / 1024;
	c->tier_capacity_mb = 4;
	c->tier_stats_s = c->tier_migrate_s = 0.002;
	c->tier_half_life_s = 0.005;
	c->tier_verify = 1;
	tier_check_options(c);
	struct db *d = &E.dbs[0];
	d->fd = open(argv[1], O_RDWR | O_DIRECT);
	if (d->fd < 0)
		die("%s: %s", argv[1], strerror(errno));
	d->page = PAGE;
	d->data_off = PAGE;
	d->npages = (int64_t)UNITS * (UNIT / PAGE) - 1;
	tier_start();
	int n = atoi(argv[4]);
	nthreads = n < 1 ? 1 : n > 64 ? 64 : n;
	pthread_t th[64];
	t_end = now_ns() + (uint64_t)(atof(argv[3]) * 1e9);
	for (int i = 0; i < n && i < 64; i++)
		pthread_create(&th[i], NULL, writer, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < n && i < 64; i++)
		pthread_join(th[i], NULL);
	tier_stop();
	tier_report(stdout);
	putchar('\n');
	return 0;
}
