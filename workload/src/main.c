/* iotape-ese: an Exchange-like ESE storage workload. main() reads top to bottom:
 * options → databases → threads per mode → run (pacing, auto-tuning, progress)
 * → orderly stop → result. SIGINT/SIGTERM stop it the same way, with a partial
 * result marked "interrupted". */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "ese.h"
#include "tier.h"

struct engine E;

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&E.interrupted, 1);
	atomic_store(&E.stop, 1);
}

static void start_db_threads(struct db *d)
{
	const struct config *c = &E.cfg;
	char name[32];
	int transactional = c->mode <= M_THROUGHPUT;
	int nusers = c->mode == M_THROUGHPUT && c->auto_threads ? c->max_threads : c->threads;
	if (transactional || c->mode == M_SOFT_RECOVERY) {
		snprintf(name, sizeof(name), "ese-ckpt-%d", d->idx);
		worker_start(worker_new(d, name, 0, ckpt_main, 32));
	}
	/* A storage group's log threads start with its first database, whose number
	 * the group has (and whose report carries the group's log I/O). */
	if (transactional && d->g->idx == d->idx) {
		snprintf(name, sizeof(name), "ese-logfmt-%d", d->idx);
		worker_start(worker_new(d, name, 0, log_format_main, 4));
		snprintf(name, sizeof(name), "ese-log-%d", d->idx);
		worker_start(worker_new(d, name, 0, log_writer_main, 4));
		snprintf(name, sizeof(name), "ese-repl-%d", d->idx);
		worker_start(worker_new(d, name, 0, repl_main, 4));
	}
	if (transactional) {
		if (c->bdm && c->bdm_rate > 0) {
			snprintf(name, sizeof(name), "ese-bdm-%d", d->idx);
			worker_start(worker_new(d, name, 0, bdm_main, 4));
		}
		for (int t = 0; t < nusers; t++) {
			snprintf(name, sizeof(name), "ese-user-%d-%d", d->idx, t);
			worker_start(worker_new(d, name, t, session_main, 64));
		}
	}
	if (c->mode == M_BACKUP) {
		snprintf(name, sizeof(name), "ese-backup-%d", d->idx);
		worker_start(worker_new(d, name, 0, backup_main, 4));
	}
}

static void init_db(struct db *d)
{
	const struct config *c = &E.cfg;
	uint64_t seed[2];
	rng_seed(seed, (uint64_t)c->seed, 0xdb00u + (uint64_t)d->idx);
	double cache_mb = c->cache_max_mb / c->databases;
	int cap = (int)(cache_mb * 1048576.0 / d->page);
	if (cap < 64)
		cap = 64;
	cache_init(d, cap);
	d->tail = calloc((size_t)d->mailboxes, sizeof(*d->tail));
	d->tail_fill = calloc((size_t)d->mailboxes, sizeof(*d->tail_fill));
	if (!d->tail || !d->tail_fill)
		die("out of memory");
	for (int64_t m = 0; m < d->mailboxes; m++) {
		d->tail[m] = m * d->pages_per_mb + (int64_t)(rng_next(seed) % (uint64_t)d->pages_per_mb);
		/* Full, so a mailbox's first insert starts a new page rather than
		 * reading an old one: no warm-up reads skew a short run. */
		d->tail_fill[m] = (uint32_t)d->page;
	}
	if (d->g->idx == d->idx) {
		log_init(d->g);
		log_target_open(d->g);
	}
}

/* Database i is in storage group i % G (schemas/workload_header.py). */
static void init_groups(void)
{
	E.ngroups = E.cfg.storage_groups;
	for (int k = 0; k < E.ngroups; k++)
		E.groups[k].idx = k;
	for (int i = 0; i < E.cfg.databases; i++) {
		struct loggroup *g = &E.groups[i % E.ngroups];
		g->dbs[g->ndbs++] = i;
		E.dbs[i].g = g;
	}
}

static uint64_t db_reads_and_latency(double *lat_sum_ms)
{
	uint64_t n = 0, lat = 0;
	for (int k = 0; k < E.nworkers; k++) {
		const struct iostat *s = &E.workers[k]->st[S_DB_READ];
		n += __atomic_load_n(&s->count, __ATOMIC_RELAXED);
		lat += __atomic_load_n(&s->lat_sum_ns, __ATOMIC_RELAXED);
	}
	*lat_sum_ms = lat / 1e6;
	return n;
}

static uint64_t tx_ios(void)
{
	uint64_t n = 0;
	for (int i = 0; i < E.cfg.databases; i++)
		n += atomic_load(&E.dbs[i].tx_ios);
	return n;
}

/* Throughput auto-tuning: one more thread per database each step while db read
 * latency stays under its limit and IOPS still grow; then hold the best count.
 * The first step is a warm-up and only logged: it starts with an empty cache,
 * where every access is a read and nothing is written yet, so its IOPS are not
 * those of the steady state. After it, a count whose IOPS beat the best so far
 * by 2 % becomes the best; two counts in a row that do not end the search at
 * the best count (one step's IOPS vary by a few percent, so one step alone
 * would end it early); read latency over the limit ends it one count below. */
static void auto_step(uint64_t *last_ios, double *last_lat, uint64_t *last_reads, uint64_t step_ns, int *tuning)
{
	static double best;
	static int best_n = 1, flat;
	double lat;
	uint64_t reads = db_reads_and_latency(&lat), ios = tx_ios();
	double iops = (double)(ios - *last_ios) / (step_ns / 1e9);
	double rd_ms = reads > *last_reads ? (lat - *last_lat) / (double)(reads - *last_reads) : 0;
	int n = atomic_load(&E.active_threads);
	if (E.auto_history_n < MAX_THREADS) {
		double *h = E.auto_history[E.auto_history_n++];
		h[0] = n, h[1] = iops, h[2] = rd_ms;
	}
	*last_ios = ios, *last_lat = lat, *last_reads = reads;
	if (!*tuning || E.auto_history_n == 1)
		return;
	int next = n + 1;
	if (rd_ms > E.cfg.auto_read_ms) {
		*tuning = 0;
		next = n > 1 ? n - 1 : 1;
	} else if (iops > best * 1.02) {
		best = iops, best_n = n, flat = 0;
	} else if (++flat >= 2) {
		*tuning = 0;
		next = best_n;
	}
	if (next > E.cfg.max_threads) {
		*tuning = 0;
		next = best_n;
	}
	atomic_store(&E.active_threads, next);
}

static void run(void)
{
	const struct config *c = &E.cfg;
	uint64_t dur = (uint64_t)(c->duration * 1e9), step = (uint64_t)(c->auto_step_s * 1e9);
	uint64_t next_tick = E.t0_ns + 1000000000ull, next_step = E.t0_ns + step;
	uint64_t last_ios = 0, last_reads = 0;
	double last_lat = 0;
	int tuning = c->mode == M_THROUGHPUT && c->auto_threads;
	while (!atomic_load(&E.stop)) {
		uint64_t t = now_ns();
		if (c->mode <= M_THROUGHPUT && !c->transactions && t - E.t0_ns >= dur)
			break;
		if (c->transactions && !atomic_load(&E.sessions_left))
			break;
		if (c->mode == M_BACKUP) {
			int done = 1;
			for (int k = 0; k < E.nworkers; k++)
				if (!strncmp(E.workers[k]->name, "ese-backup", 10) && !E.workers[k]->ops_done)
					done = 0;
			if (done)
				break;
		}
		if (c->mode == M_SOFT_RECOVERY && recovery_done())
			break;
		if (tuning && t >= next_step) {
			auto_step(&last_ios, &last_lat, &last_reads, step, &tuning);
			next_step += step;
		}
		if (t >= next_tick) {
			fprintf(E.progress, "{\"type\":\"tick\",\"t\":%.2f,\"tx_ios\":%llu,\"threads\":%d}\n",
				(t - E.t0_ns) / 1e9, (unsigned long long)tx_ios(), atomic_load(&E.active_threads));
			fflush(E.progress);
			next_tick += 1000000000ull;
		}
		if (c->transactions) {
			/* The last session wakes this at once: the stop follows the work, not a poll. */
			pthread_mutex_lock(&E.done_mu);
			if (atomic_load(&E.sessions_left))
				timed_wait(&E.done_cv, &E.done_mu, 5);
			pthread_mutex_unlock(&E.done_mu);
		} else {
			sleep_ns(5000000ull);
		}
	}
}

/* Threads that outlive the sessions: they finish the log and the cache. */
static int is_tail_worker(const char *name)
{
	return !strncmp(name, "ese-log", 7) || !strncmp(name, "ese-repl", 8) || !strncmp(name, "ese-ckpt", 8);
}

static int any_dirty(struct db *d)
{
	return d->c.ndirty != 0;
}

/* Wait (bounded) until no database has what `left` says is still to write
 * (d->mu held), waking its checkpoint writer meanwhile. */
static void flush_until(int (*left)(struct db *))
{
	uint64_t deadline = now_ns() + 120000000000ull;
	for (int i = 0; i < E.cfg.databases; i++) {
		struct db *d = &E.dbs[i];
		pthread_mutex_lock(&d->mu);
		while (left(d) && now_ns() < deadline) {
			pthread_cond_signal(&d->ckpt_cv);
			timed_wait(&d->cv, &d->mu, 10);
		}
		pthread_mutex_unlock(&d->mu);
	}
}

/* A clean shutdown's: every dirty page written. */
static void flush_caches(void)
{
	atomic_store(&E.flush_all, 1);
	flush_until(any_dirty);
}

/* end=crash: the stop of an instance that stops without a clean shutdown, as
 * ESE's checkpoint leaves it: the pages first dirtied more than the part of
 * the log the database stays behind by (ckpt.c keep_behind) are written, the
 * rest stay dirty and are dropped, for soft recovery to redo. */
static void flush_behind(void)
{
	atomic_store(&E.flush_behind, 1);
	flush_until(ckpt_behind_left);
}

const char *const program_name = "iotape-ese";

int main(int argc, char **argv)
{
	options_parse(&E.cfg, argc, argv);
	E.progress = E.cfg.quiet ? fopen("/dev/null", "w") : stdout;
	if (!E.progress)
		die("cannot open /dev/null");
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	init_groups();
	db_open_all();
	if (atomic_load(&E.stop)) {
		fprintf(stderr, "iotape-ese: interrupted while creating the databases\n");
		result_write(E.cfg.result);
		return 130;
	}
	for (int i = 0; i < E.cfg.databases; i++)
		init_db(&E.dbs[i]);
	int auto_t = E.cfg.mode == M_THROUGHPUT && E.cfg.auto_threads;
	atomic_store(&E.active_threads, auto_t ? 1 : E.cfg.threads);
	tier_start();
	fprintf(E.progress, "{\"type\":\"start\"}\n");
	fflush(E.progress);
	pthread_mutex_init(&E.done_mu, NULL);
	pthread_cond_init(&E.done_cv, NULL);
	atomic_store(&E.sessions_left, E.cfg.databases * E.cfg.threads);
	E.t0_ns = now_ns();
	int first = E.nworkers;
	for (int i = 0; i < E.cfg.databases; i++)
		start_db_threads(&E.dbs[i]);
	if (E.cfg.mode == M_SOFT_RECOVERY)
		recovery_start();
	run();
	/* The measurement window ends here: the final flush is a clean shutdown's, not load. */
	/* --transactions: the load is the work, up to the last session's last operation. */
	E.load_s = ((E.cfg.transactions && E.work_end_ns ? E.work_end_ns : now_ns()) - E.t0_ns) / 1e9;
	for (int i = 0; i < E.cfg.databases; i++)
		E.dbs[i].tx_ios_load = atomic_load(&E.dbs[i].tx_ios);

	/* Stop: sessions first (no new work); then, as a clean ESE termination, the
	 * checkpoint writes every dirty page back (not with end=crash: the pages
	 * dirtied in the last part of the log are left to soft recovery); the log writes
	 * what is left and closes its file, replication reads it, the rest wind down. */
	atomic_store(&E.stop, 1);
	for (int i = 0; i < E.cfg.databases; i++)
		cache_wake(&E.dbs[i]); /* sessions waiting for clean pages see the stop */
	for (int k = first; k < E.nworkers; k++)
		if (!is_tail_worker(E.workers[k]->name))
			pthread_join(E.workers[k]->tid, NULL);
	if (!E.cfg.crash_end || E.cfg.mode == M_SOFT_RECOVERY)
		flush_caches();
	else
		flush_behind();
	atomic_store(&E.ckpt_stop, 1);
	for (int k = 0; k < E.ngroups; k++)
		log_shutdown(&E.groups[k]);
	for (int k = first; k < E.nworkers; k++)
		if (is_tail_worker(E.workers[k]->name))
			pthread_join(E.workers[k]->tid, NULL);
	E.elapsed_s = (now_ns() - E.t0_ns) / 1e9;
	tier_stop();
	result_write(E.cfg.result);
	for (int k = 0; k < E.nworkers; k++)
		E.workers[k]->ops->close(E.workers[k]->io);
	return atomic_load(&E.interrupted) ? 130 : 0;
}
