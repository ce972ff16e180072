/* See tier.h. Consistency: each unit has a writer-preferring rwlock. Every
 * request's piece in a unit holds it shared while it looks up the unit's slot and
 * does its I/O; the migration thread holds it exclusive while it copies the unit
 * and changes the slot. So a write that races a migration lands either before
 * the copy (and is copied) or after the slot changed (and goes to the new
 * place): never into the copy that is about to be dropped. Writes go wherever the
 * unit is (the fast copy, once promoted, is the only current one), as an array's
 * tiering moves a page rather than caching it; a demotion copies it back. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ese.h"
#include "tier.h"
#include "cachepolicy.h"
#include "tierpolicy.h"

struct tdb {
	int fd;
	uint64_t base, end; /* the region's bytes on the slow device */
	int64_t first, n;   /* its units: first .. first + n - 1 */
};

struct tunit {
	pthread_rwlock_t lk;
	int32_t slot; /* in the fast target, or -1: on the slow device */
	int dbi;
};

enum { T_READ_SLOW, T_READ_FAST, T_WRITE_SLOW, T_WRITE_FAST, T_NKIND };

static struct {
	int on, fast_fd;
	uint64_t unit, t0;
	struct tdb db[MAX_DBS];
	int ndb;
	int64_t n;
	struct tunit *u;
	_Atomic uint32_t *cnt; /* accesses per unit in the open statistics interval */
	uint32_t *win;
	int32_t *free_slots;
	int64_t nfree;
	struct tp pol;
	int64_t *pro, *dem;
	char *buf;
	pthread_t thr;
	_Atomic int stop;
	FILE *log;
	_Atomic uint64_t ios[T_NKIND], bytes[T_NKIND];
	uint64_t migrations, promoted, demoted, migrated_bytes, drained_bytes, late;
	/* --tier-policy cache: its decisions (cachepolicy.c: the LRU, the misses
	 * queued for the migration thread to copy in) under cmu */
	int cache;
	pthread_mutex_t cmu;
	pthread_cond_t ccv;
	struct cp cp;
	uint64_t evicted;
	struct iostat mig[MAX_DBS]; /* the copies' reads and writes, by database: its migration stream */
	/* --tier-verify: a checksum per 4 KiB block written (0: never), by database
	 * block; what the end-of-run read-backs found */
	uint64_t *sum, *sum_first;
	uint64_t v_blocks, v_bad_placed, v_bad_slow;
} T;

#define VBLK 4096ull

static uint64_t block_sum(const char *p)
{
	uint64_t h = 1469598103934665603ull, w;
	for (size_t i = 0; i < VBLK; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 1099511628211ull;
	}
	return h | 1;
}

static void verify_note(int dbi, uint64_t off, const struct iovec *iov, int n)
{
	uint64_t b = T.sum_first[dbi] + (off - T.db[dbi].base) / VBLK;
	for (int i = 0; i < n; i++) {
		if ((uint64_t)iov[i].iov_base % 8 || iov[i].iov_len % VBLK || off % VBLK)
			return; /* not whole blocks: the engine writes pages, never this */
		for (size_t o = 0; o < iov[i].iov_len; o += VBLK)
			T.sum[b++] = block_sum((const char *)iov[i].iov_base + o);
	}
}

/* Every written block read back from where the placement says it is now: the
 * mismatches. */
static uint64_t verify_all(void)
{
	uint64_t bad = 0;
	for (int64_t u = 0; u < T.n; u++) {
		uint64_t off, len = 0;
		const struct tdb *t = &T.db[T.u[u].dbi];
		off = t->base + (uint64_t)(u - t->first) * T.unit;
		len = t->end - off < T.unit ? t->end - off : T.unit;
		int fd = T.u[u].slot >= 0 ? T.fast_fd : t->fd;
		uint64_t at = T.u[u].slot >= 0 ? (uint64_t)T.u[u].slot * T.unit : off;
		if (pread(fd, T.buf, len, (off_t)at) != (ssize_t)len)
			die("tier: verify read failed: %s", strerror(errno));
		uint64_t b0 = T.sum_first[T.u[u].dbi] + (off - t->base) / VBLK;
		for (uint64_t o = 0; o + VBLK <= len; o += VBLK)
			if (T.sum[b0 + o / VBLK] && T.sum[b0 + o / VBLK] != block_sum(T.buf + o))
				bad++;
	}
	return bad;
}

static uint64_t dev_size(int fd)
{
	struct stat st;
	if (fstat(fd, &st))
		return 0;
	if (S_ISBLK(st.st_mode)) {
		uint64_t b = 0;
		return ioctl(fd, BLKGETSIZE64, &b) ? 0 : b;
	}
	return (uint64_t)st.st_size;
}

static int64_t capacity_units(const struct config *c)
{
	return (int64_t)floor(c->tier_capacity_mb * 1048576.0 / ((double)c->tier_unit_kb * 1024.0));
}

void tier_check_options(const struct config *c)
{
	if (strcmp(c->ioengine, "tiered"))
		return;
	uint64_t unit = (uint64_t)c->tier_unit_kb * 1024;
	int64_t k = capacity_units(c);
	if (!*c->tier_fast)
		die("--ioengine tiered: give the fast device or file with --tier-fast");
	if (unit & (unit - 1))
		die("--tier-unit-kb %d: not a power of two", c->tier_unit_kb);
	if (unit < (uint64_t)c->page_kb * 1024)
		die("--tier-unit-kb %d: smaller than a database page (%d KiB)", c->tier_unit_kb, c->page_kb);
	if (k < 1)
		die("--tier-capacity-mb %g: holds no %d KiB unit", c->tier_capacity_mb, c->tier_unit_kb);
	if (strcmp(c->tier_policy, "tier") && strcmp(c->tier_policy, "cache"))
		die("--tier-policy %s: tier or cache", c->tier_policy);
	if (c->tier_migrate_s < c->tier_stats_s)
		die("--tier-migrate-s %g: shorter than --tier-stats-s %g", c->tier_migrate_s, c->tier_stats_s);
	int fd = open(c->tier_fast, O_RDWR | O_DIRECT);
	if (fd < 0)
		die("--tier-fast %s: cannot open: %s", c->tier_fast, strerror(errno));
	uint64_t have = dev_size(fd), need = (uint64_t)k * unit;
	close(fd);
	if (have < need)
		die("--tier-fast %s: %llu bytes, the tier's %lld units need %llu", c->tier_fast, (unsigned long long)have,
		    (long long)k, (unsigned long long)need);
	for (int i = 0; i < c->ndb_targets; i++)
		if (!strcmp(c->db[i].path, c->tier_fast))
			die("--tier-fast %s: is database %d's own target", c->tier_fast, i);
}

static void open_fast(const struct config *c)
{
	T.fast_fd = open(c->tier_fast, O_RDWR | O_DIRECT);
	if (T.fast_fd < 0)
		die("--tier-fast %s: cannot open: %s", c->tier_fast, strerror(errno));
}

static void map_units(void)
{
	for (int i = 0; i < E.cfg.databases; i++) {
		struct db *d = &E.dbs[i];
		struct tdb *t = &T.db[T.ndb++];
		t->fd = d->fd;
		t->base = E.cfg.db[i].off;
		t->end = d->data_off + (uint64_t)d->npages * (uint64_t)d->page;
		t->first = T.n;
		t->n = (int64_t)((t->end - t->base + T.unit - 1) / T.unit);
		T.n += t->n;
	}
	if (E.cfg.tier_verify) {
		uint64_t nb = 0;
		T.sum_first = calloc((size_t)T.ndb, sizeof(uint64_t));
		for (int i = 0; i < T.ndb && T.sum_first; i++) {
			T.sum_first[i] = nb;
			nb += (T.db[i].end - T.db[i].base + VBLK - 1) / VBLK;
		}
		T.sum = calloc((size_t)nb + 1, sizeof(uint64_t));
		if (!T.sum_first || !T.sum)
			die("out of memory");
	}
	T.u = calloc((size_t)T.n, sizeof(*T.u));
	T.cnt = calloc((size_t)T.n, sizeof(*T.cnt));
	T.win = calloc((size_t)T.n, sizeof(*T.win));
	T.pro = calloc((size_t)T.n + 1, sizeof(int64_t));
	T.dem = calloc((size_t)T.n + 1, sizeof(int64_t));
	if (!T.u || !T.cnt || !T.win || !T.pro || !T.dem)
		die("out of memory");
	pthread_rwlockattr_t a;
	pthread_rwlockattr_init(&a);
	/* A hot unit read without pause must not starve its migration. */
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	for (int i = 0; i < T.ndb; i++)
		for (int64_t x = 0; x < T.db[i].n; x++) {
			struct tunit *u = &T.u[T.db[i].first + x];
			pthread_rwlock_init(&u->lk, &a);
			u->slot = -1;
			u->dbi = i;
		}
	pthread_rwlockattr_destroy(&a);
}

/* The unit's bytes on the slow device: offset and length (the last is short). */
static uint64_t unit_span(int64_t u, uint64_t *off)
{
	const struct tdb *t = &T.db[T.u[u].dbi];
	*off = t->base + (uint64_t)(u - t->first) * T.unit;
	return t->end - *off < T.unit ? t->end - *off : T.unit;
}

static uint64_t copy(struct iostat *st, int from, uint64_t from_off, int to, uint64_t to_off, uint64_t len)
{
	uint64_t t = now_ns();
	for (uint64_t done = 0; done < len;) {
		ssize_t r = pread(from, T.buf + done, len - done, (off_t)(from_off + done));
		if (r <= 0)
			die("tier: migration read failed: %s", r < 0 ? strerror(errno) : "short read");
		done += (uint64_t)r;
	}
	stat_add(st, len, now_ns() - t);
	t = now_ns();
	for (uint64_t done = 0; done < len;) {
		ssize_t r = pwrite(to, T.buf + done, len - done, (off_t)(to_off + done));
		if (r <= 0)
			die("tier: migration write failed: %s", r < 0 ? strerror(errno) : "short write");
		done += (uint64_t)r;
	}
	stat_add(st, len, now_ns() - t);
	return len; /* moved: read from one device and written to the other */
}

static uint64_t demote(int64_t u)
{
	uint64_t off, len = unit_span(u, &off), n;
	pthread_rwlock_wrlock(&T.u[u].lk);
	int32_t s = T.u[u].slot;
	n = copy(&T.mig[T.u[u].dbi], T.fast_fd, (uint64_t)s * T.unit, T.db[T.u[u].dbi].fd, off, len);
	T.u[u].slot = -1;
	pthread_rwlock_unlock(&T.u[u].lk);
	T.free_slots[T.nfree++] = s;
	return n;
}

static uint64_t promote(int64_t u)
{
	uint64_t off, len = unit_span(u, &off), n;
	int32_t s = T.free_slots[--T.nfree];
	pthread_rwlock_wrlock(&T.u[u].lk);
	n = copy(&T.mig[T.u[u].dbi], T.db[T.u[u].dbi].fd, off, T.fast_fd, (uint64_t)s * T.unit, len);
	T.u[u].slot = s;
	pthread_rwlock_unlock(&T.u[u].lk);
	return n;
}

static void log_units(const char *key, const int64_t *v, int64_t n)
{
	fprintf(T.log, ",\"%s\":[", key);
	for (int64_t i = 0; i < n; i++)
		fprintf(T.log, "%s%lld", i ? "," : "", (long long)v[i]);
	fputc(']', T.log);
}

/* One migration: demotions first, so that their slots are free for the promotions. */
static void migrate(uint64_t w)
{
	int64_t np, nd;
	tp_migrate(&T.pol, T.pro, &np, T.dem, &nd);
	uint64_t t_start = now_ns(), down = 0, up = 0;
	for (int64_t i = 0; i < nd; i++)
		down += demote(T.dem[i]);
	for (int64_t i = 0; i < np; i++)
		up += promote(T.pro[i]);
	uint64_t bytes = up + down;
	T.migrations++;
	T.promoted += (uint64_t)np;
	T.demoted += (uint64_t)nd;
	T.migrated_bytes += bytes;
	if (!T.log)
		return;
	fprintf(T.log, "{\"type\":\"migration\",\"window\":%llu,\"t\":%.6f,\"started\":%.6f,\"copy_s\":%.6f,\"bytes\":%llu,\"promoted_bytes\":%llu,\"demoted_bytes\":%llu",
		(unsigned long long)w, (double)(w * T.pol.stats_ns) / 1e9, (t_start - T.t0) / 1e9,
		(now_ns() - t_start) / 1e9, (unsigned long long)bytes, (unsigned long long)up, (unsigned long long)down);
	log_units("promoted", T.pro, np);
	log_units("demoted", T.dem, nd);
	fputs("}\n", T.log);
	fflush(T.log);
}

static void finish(void);
static void *cache_main(void *arg);

static void *migrate_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ese-migrate");
	for (uint64_t w = 1; !atomic_load(&T.stop); w++) {
		uint64_t due = T.t0 + w * T.pol.stats_ns;
		while (!atomic_load(&T.stop) && now_ns() < due) {
			uint64_t left = due - now_ns();
			sleep_ns(left < 5000000ull ? left : 5000000ull);
		}
		if (atomic_load(&T.stop))
			break; /* an unfinished interval is not folded */
		if (now_ns() > due + T.pol.stats_ns)
			T.late++; /* copies outlasted an interval: later accesses land in this one */
		for (int64_t u = 0; u < T.n; u++)
			T.win[u] = atomic_exchange(&T.cnt[u], 0);
		if (tp_window(&T.pol, T.win))
			migrate(w);
	}
	finish();
	return NULL;
}

static void log_start(const struct config *c)
{
	if (!*c->tier_log)
		return;
	T.log = fopen(c->tier_log, "w");
	if (!T.log)
		die("--tier-log %s: cannot write: %s", c->tier_log, strerror(errno));
	fprintf(T.log,
		"{\"type\":\"start\",\"policy\":\"%s\",\"fast\":\"%s\",\"unit\":%llu,\"slots\":%lld,\"units\":%lld,\"stats_s\":%g,"
		"\"migrate_s\":%g,\"half_life_s\":%g,\"budget_units\":%lld,\"databases\":[",
		c->tier_policy, c->tier_fast, (unsigned long long)T.unit, (long long)T.pol.p.k, (long long)T.n, c->tier_stats_s,
		c->tier_migrate_s, c->tier_half_life_s, (long long)T.pol.p.budget);
	for (int i = 0; i < T.ndb; i++)
		fprintf(T.log, "%s{\"db\":%d,\"path\":\"%s\",\"base\":%llu,\"end\":%llu,\"first_unit\":%lld,\"units\":%lld}",
			i ? "," : "", i, c->db[i].path, (unsigned long long)T.db[i].base, (unsigned long long)T.db[i].end,
			(long long)T.db[i].first, (long long)T.db[i].n);
	fputs("]}\n", T.log);
	fflush(T.log);
}

void tier_start(void)
{
	const struct config *c = &E.cfg;
	if (strcmp(c->ioengine, "tiered"))
		return;
	T.unit = (uint64_t)c->tier_unit_kb * 1024;
	int64_t k = capacity_units(c);
	open_fast(c);
	map_units();
	double budget = floor(c->tier_budget_mb * 1048576.0 / (double)T.unit);
	struct tp_params p = {.k = k, .budget = c->tier_budget_mb > 0 ? (int64_t)budget : -1, .stats_s = c->tier_stats_s,
			      .migrate_s = c->tier_migrate_s, .half_life_s = c->tier_half_life_s};
	if (tp_init(&T.pol, &p, T.n))
		die("out of memory");
	T.free_slots = calloc((size_t)k, sizeof(int32_t));
	T.buf = xalign(T.unit);
	if (!T.free_slots)
		die("out of memory");
	for (int64_t s = 0; s < k; s++)
		T.free_slots[T.nfree++] = (int32_t)(k - 1 - s); /* slot 0 first */
	log_start(c);
	T.cache = !strcmp(c->tier_policy, "cache");
	if (T.cache) {
		if (cp_init(&T.cp, T.n, k))
			die("out of memory");
		pthread_mutex_init(&T.cmu, NULL);
		pthread_cond_init(&T.ccv, NULL);
	}
	T.on = 1;
	T.t0 = now_ns();
	if (pthread_create(&T.thr, NULL, T.cache ? cache_main : migrate_main, NULL))
		die("tier: cannot start the migration thread");
}

/* The end, on the migration thread (so that the write-back's copies carry its
 * name in a recording too): the end placement, the read-back through it, the
 * write-back of every promoted unit, the read-back after it. */
static void finish(void)
{
	if (T.log) {
		fprintf(T.log, "{\"type\":\"end\",\"t\":%.6f,\"fast\":[", (now_ns() - T.t0) / 1e9);
		int first = 1;
		for (int64_t u = 0; u < T.n; u++)
			if (T.u[u].slot >= 0) {
				fprintf(T.log, "%s[%lld,%d]", first ? "" : ",", (long long)u, T.u[u].slot);
				first = 0;
			}
		fputs("]}\n", T.log);
	}
	if (T.sum)
		T.v_bad_placed = verify_all();
	/* The slow device is the database again for the next run (--create reuse). */
	for (int64_t u = 0; u < T.n; u++)
		if (T.u[u].slot >= 0 && T.cache)
			T.u[u].slot = -1; /* a cached copy is clean: nothing to write back */
		else if (T.u[u].slot >= 0)
			T.drained_bytes += demote(u);
	if (T.sum) {
		T.v_bad_slow = verify_all();
		for (int i = 0; i < T.ndb; i++)
			for (uint64_t b = T.sum_first[i]; b < T.sum_first[i] + (T.db[i].end - T.db[i].base) / VBLK; b++)
				T.v_blocks += T.sum[b] != 0;
	}
}

void tier_stop(void)
{
	if (!T.on)
		return;
	atomic_store(&T.stop, 1);
	pthread_join(T.thr, NULL);
	if (fdatasync(T.fast_fd) && errno != EINVAL)
		die("--tier-fast %s: fdatasync: %s", E.cfg.tier_fast, strerror(errno));
	if (T.log) {
		fprintf(T.log, "{\"type\":\"drain\",\"bytes\":%llu}\n", (unsigned long long)T.drained_bytes);
		fclose(T.log);
		T.log = NULL;
	}
}

/* A read of u: a hit moves it to the LRU's head, a miss queues it to be copied in. */
static void cache_touch(int64_t u)
{
	pthread_mutex_lock(&T.cmu);
	if (!cp_read(&T.cp, u))
		pthread_cond_signal(&T.ccv);
	pthread_mutex_unlock(&T.cmu);
}

/* The migration thread's part: copy one queued unit in, the LRU tail out (a
 * clean copy: no write-back). Returns 0 when the queue was empty. */
static int cache_fill(void)
{
	pthread_mutex_lock(&T.cmu);
	int64_t u, v;
	if (!cp_next(&T.cp, &u, &v)) {
		pthread_mutex_unlock(&T.cmu);
		return 0;
	}
	int32_t s;
	if (v < 0) {
		s = T.free_slots[--T.nfree];
	} else {
		pthread_rwlock_wrlock(&T.u[v].lk);
		s = T.u[v].slot;
		T.u[v].slot = -1;
		pthread_rwlock_unlock(&T.u[v].lk);
		T.evicted++;
	}
	pthread_mutex_unlock(&T.cmu);
	uint64_t off, len = unit_span(u, &off);
	pthread_rwlock_wrlock(&T.u[u].lk);
	uint64_t t0 = now_ns(), n = copy(&T.mig[T.u[u].dbi], T.db[T.u[u].dbi].fd, off, T.fast_fd, (uint64_t)s * T.unit, len);
	pthread_mutex_lock(&T.cmu);
	T.u[u].slot = s;
	cp_admitted(&T.cp, u);
	pthread_mutex_unlock(&T.cmu);
	pthread_rwlock_unlock(&T.u[u].lk);
	T.migrations++;
	T.promoted++;
	T.demoted += v >= 0;
	T.migrated_bytes += n;
	if (T.log) {
		fprintf(T.log, "{\"type\":\"fill\",\"t\":%.6f,\"copy_s\":%.6f,\"unit\":%lld,\"evicted\":%lld,\"bytes\":%llu}\n",
			(t0 - T.t0) / 1e9, (now_ns() - t0) / 1e9, (long long)u, (long long)v, (unsigned long long)n);
		fflush(T.log);
	}
	return 1;
}

static void *cache_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ese-migrate");
	while (!atomic_load(&T.stop)) {
		if (cache_fill())
			continue;
		pthread_mutex_lock(&T.cmu);
		if (!T.cp.qn && !atomic_load(&T.stop))
			timed_wait(&T.ccv, &T.cmu, 5);
		pthread_mutex_unlock(&T.cmu);
	}
	finish();
	return NULL;
}

/* One request's piece inside unit u. */
static int64_t unit_io(int64_t u, int fd, int write, const struct iovec *iov, int n, uint64_t off)
{
	struct tunit *x = &T.u[u];
	if (T.cache && !write)
		cache_touch(u);
	pthread_rwlock_rdlock(&x->lk);
	int kind = (write ? T_WRITE_SLOW : T_READ_SLOW) + (x->slot >= 0);
	uint64_t slow_off = off;
	if (T.cache && write && x->slot >= 0) {
		/* Write-through: the slow copy stays current, the cached one is updated. */
		uint64_t at = (uint64_t)x->slot * T.unit + (off - T.db[x->dbi].base) % T.unit;
		if (pwritev(T.fast_fd, iov, n, (off_t)at) < 0)
			die("--tier-fast %s: write failed: %s", E.cfg.tier_fast, strerror(errno));
	} else if (x->slot >= 0) {
		off = (uint64_t)x->slot * T.unit + (off - T.db[x->dbi].base) % T.unit;
		fd = T.fast_fd;
	}
	ssize_t r = write ? pwritev(fd, iov, n, (off_t)off) : preadv(fd, iov, n, (off_t)off);
	pthread_rwlock_unlock(&x->lk);
	if (T.sum && write && r > 0)
		verify_note(x->dbi, slow_off, iov, n);
	atomic_fetch_add(&T.cnt[u], 1);
	atomic_fetch_add(&T.ios[kind], 1);
	if (r > 0)
		atomic_fetch_add(&T.bytes[kind], (uint64_t)r);
	return r < 0 ? -errno : r;
}

static const struct tdb *find_db(int fd, uint64_t off)
{
	for (int i = 0; i < T.ndb; i++)
		if (T.db[i].fd == fd && off >= T.db[i].base && off < T.db[i].end)
			return &T.db[i];
	return NULL;
}

int64_t tier_rw(int fd, int write, const struct iovec *iov, int iovcnt, uint64_t off)
{
	const struct tdb *t = T.on ? find_db(fd, off) : NULL;
	if (!t) {
		ssize_t r = write ? pwritev(fd, iov, iovcnt, (off_t)off) : preadv(fd, iov, iovcnt, (off_t)off);
		return r < 0 ? -errno : r;
	}
	uint64_t len = 0, done = 0;
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	struct iovec sub[iovcnt + 1];
	int vi = 0;
	size_t vo = 0;
	while (done < len) {
		uint64_t rel = off + done - t->base, in = rel % T.unit;
		uint64_t n = len - done < T.unit - in ? len - done : T.unit - in;
		int ns = 0;
		for (uint64_t got = 0; got < n; ns++) {
			size_t take = iov[vi].iov_len - vo < n - got ? iov[vi].iov_len - vo : (size_t)(n - got);
			sub[ns] = (struct iovec){(char *)iov[vi].iov_base + vo, take};
			got += take;
			vo += take;
			if (vo == iov[vi].iov_len) {
				vi++;
				vo = 0;
			}
		}
		int64_t r = unit_io(t->first + (int64_t)(rel / T.unit), fd, write, sub, ns, off + done);
		if (r < 0)
			return done ? (int64_t)done : r;
		done += (uint64_t)r;
		if ((uint64_t)r < n)
			break;
	}
	return (int64_t)done;
}

void tier_report(FILE *f)
{
	if (!T.on) {
		fputs("null", f);
		return;
	}
	uint64_t rd = T.ios[T_READ_SLOW] + T.ios[T_READ_FAST], wr = T.ios[T_WRITE_SLOW] + T.ios[T_WRITE_FAST];
	fprintf(f,
		"{\"policy\":\"%s\",\"evicted\":%llu,\"unit\":%llu,\"slots\":%lld,\"units\":%lld,\"migrations\":%llu,\"late_intervals\":%llu,"
		"\"promoted\":%llu,\"demoted\":%llu,\"migrated_bytes\":%llu,\"drained_bytes\":%llu,"
		"\"reads_fast\":%llu,\"reads_slow\":%llu,\"writes_fast\":%llu,\"writes_slow\":%llu,"
		"\"read_bytes_fast\":%llu,\"read_bytes_slow\":%llu,\"write_bytes_fast\":%llu,\"write_bytes_slow\":%llu,"
		"\"read_hit_ratio\":%.6f,\"write_hit_ratio\":%.6f,",
		T.cache ? "cache" : "tier", (unsigned long long)T.evicted, (unsigned long long)T.unit, (long long)T.pol.p.k,
		(long long)T.n, (unsigned long long)T.migrations,
		(unsigned long long)T.late, (unsigned long long)T.promoted, (unsigned long long)T.demoted,
		(unsigned long long)T.migrated_bytes, (unsigned long long)T.drained_bytes,
		(unsigned long long)T.ios[T_READ_FAST], (unsigned long long)T.ios[T_READ_SLOW],
		(unsigned long long)T.ios[T_WRITE_FAST], (unsigned long long)T.ios[T_WRITE_SLOW],
		(unsigned long long)T.bytes[T_READ_FAST], (unsigned long long)T.bytes[T_READ_SLOW],
		(unsigned long long)T.bytes[T_WRITE_FAST], (unsigned long long)T.bytes[T_WRITE_SLOW],
		rd ? (double)T.ios[T_READ_FAST] / (double)rd : 0.0, wr ? (double)T.ios[T_WRITE_FAST] / (double)wr : 0.0);
	if (T.sum)
		fprintf(f, "\"verify\":{\"blocks\":%llu,\"bad_placed\":%llu,\"bad_after_writeback\":%llu}}",
			(unsigned long long)T.v_blocks, (unsigned long long)T.v_bad_placed, (unsigned long long)T.v_bad_slow);
	else
		fputs("\"verify\":null}", f);
}

void tier_db_stats(int db, struct iostat *out)
{
	if (T.on)
		*out = T.mig[db];
}
