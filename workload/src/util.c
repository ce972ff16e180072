/* Small helpers: the seeded RNG, workers and timed I/O. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ese.h"

const char *const stream_names[S_N] = {ESE_STREAM_NAMES};

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Each thread's stream depends only on (seed, its role), so a run's operation
 * sequence per thread is the same for the same --seed. */
void rng_seed(uint64_t s[2], uint64_t a, uint64_t b)
{
	uint64_t x = a * 0x100000001b3ull ^ b;
	s[0] = splitmix(&x);
	s[1] = splitmix(&x);
}

uint64_t rng_next(uint64_t s[2]) /* xoroshiro128+ */
{
	uint64_t s0 = s[0], s1 = s[1], r = s0 + s1;
	s1 ^= s0;
	s[0] = ((s0 << 24) | (s0 >> 40)) ^ s1 ^ (s1 << 16);
	s[1] = (s1 << 37) | (s1 >> 27);
	return r;
}

double rng_unit(uint64_t s[2])
{
	return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static void *trampoline(void *arg)
{
	struct worker *w = arg;
	/* The recorder labels each request by its submitting thread's name. */
	pthread_setname_np(pthread_self(), w->name);
	if (w->ops->attach) {
		int r = w->ops->attach(w->io);
		if (r < 0)
			die("%s: cannot enable its %s ring: %s", w->name, w->ops->name, strerror(-r));
	}
	return w->fn(w);
}

struct worker *worker_new(struct db *db, const char *name, int index, void *(*fn)(void *), unsigned depth)
{
	struct worker *w = calloc(1, sizeof(*w));
	if (!w)
		die("out of memory");
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->db = db;
	w->g = db ? db->g : NULL;
	w->index = index;
	w->fn = fn;
	w->ops = ioengine_find(E.cfg.ioengine);
	if (!w->ops)
		die("--ioengine %s: unknown; one of io_uring, psync, null, tiered", E.cfg.ioengine);
	w->io = w->ops->open(depth);
	if (!w->io)
		die("%s: cannot set up the %s backend (io_uring disabled? try --ioengine psync)", name,
		    E.cfg.ioengine);
	rng_seed(w->rng, (uint64_t)E.cfg.seed, (uint64_t)(db ? db->idx : 99) << 32 | (uint64_t)index << 8 |
						      (uint64_t)(unsigned char)name[4]);
	emulate_setup(w);
	E.workers[E.nworkers++] = w;
	return w;
}

void worker_start(struct worker *w)
{
	if (pthread_create(&w->tid, NULL, trampoline, w))
		die("cannot start thread %s", w->name);
}

/* One request, waited for, timed from submit to completion (the engine's own
 * latency, what the report is computed from). */
int64_t io_sync(struct worker *w, int stream, int fd, const struct iovec *iov, int n, uint64_t off, int write)
{
	struct ioreq rq = {.fd = fd, .write = write, .iov = iov, .iovcnt = n, .off = off, .tag = 1};
	struct iocomp c;
	uint64_t t = now_ns();
	int r = w_submit_wait(w, &rq, 1);
	if (r < 0)
		die("%s: submit failed: %s", w->name, strerror(-r));
	if (w_reap(w, &c, 1, 1) != 1)
		die("%s: no completion", w->name);
	uint64_t lat = iocomp_latency(&c, t, now_ns());
	if (c.res < 0)
		die("%s: %s at offset %llu failed: %s", w->name, write ? "write" : "read",
		    (unsigned long long)off, strerror((int)-c.res));
	stat_add(&w->st[stream], (uint64_t)c.res, lat);
	return c.res;
}

extern const struct ioengine_ops ioengine_uring, ioengine_psync, ioengine_null, ioengine_tiered;

const struct ioengine_ops *ioengine_find(const char *name)
{
	const struct ioengine_ops *all[] = {&ioengine_uring, &ioengine_psync, &ioengine_null, &ioengine_tiered};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (!strcmp(all[i]->name, name))
			return all[i];
	return NULL;
}
