/* The two non-transactional modes.
 *
 * backup: one reader per database (ese-backup-N, not a labelled stream) reads it
 * front to back once, as fast as it can, in maintenance-sized reads (256 KiB),
 * as a streaming backup does. It reads no log and writes nothing: the logs a
 * performance run left stay for soft recovery.
 *
 * soft-recovery, as ESE's redo: the log files of the latest log stream on the
 * target (what the preceding performance or stress run wrote) are read in order
 * (ese-recov-G, one per storage group, log-read, 256 KiB reads) and parsed;
 * each record goes to its database's redo session (ese-user-rdo-N), which
 * replays them: it prereads the pages the next records name
 * (up to 64 pages ahead along the log, read together) into the database cache,
 * then applies each record in the cache. A record is applied only to a page
 * older than it (each page carries the number of its last modification, each
 * record the number it gave its pages): a page already written since is only
 * read. Applied pages are dirtied and left to the checkpoint writer, which
 * writes them under cache pressure or past the checkpoint depth (the replayed
 * log is the log position) and, once every log is replayed, flushes the rest,
 * as recovery ends with a clean database. So reads come from every page the log
 * names, writes only from pages that were behind, coalesced by the writer. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ese.h"

#define REC_MAGIC 0x31434552u
#define REC_RUNS 8
#define PREREAD_PAGES 64

void *backup_main(void *arg)
{
	struct worker *w = arg;
	struct db *d = w->db;
	uint64_t size = (uint64_t)E.cfg.bdm_read_kb * 1024ull;
	uint64_t total = (uint64_t)d->npages * (uint64_t)d->page;
	char *buf = xalign(size);
	for (uint64_t pos = 0; pos < total && !atomic_load(&E.stop); pos += size) {
		uint64_t n = total - pos < size ? total - pos : size;
		struct iovec iov = {buf, (size_t)n};
		io_sync(w, S_BACKUP_READ, d->fd, &iov, 1, d->data_off + pos, 0);
	}
	free(buf);
	w->ops_done = 1; /* finished */
	return NULL;
}

/* One logged run of pages: first page, pages, the record's modification number
 * and where the record ends in the replayed log. */
struct redo_run {
	int64_t page, n;
	uint64_t dbtime, lsn;
};

/* One database's replay: the parser appends runs, the redo session takes them. */
struct redo {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct redo_run *runs;
	size_t n, cap;
	int parsed;
	_Atomic int applied;
	uint64_t records, logs, pages_named, pages_redone, stream, t_end_ns;
};
static struct redo R[MAX_DBS];

static void add_run(struct redo *r, struct redo_run x)
{
	pthread_mutex_lock(&r->mu);
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 1024;
		r->runs = realloc(r->runs, r->cap * sizeof(*r->runs));
		if (!r->runs)
			die("out of memory");
	}
	r->runs[r->n++] = x;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* The database a record of group g's log belongs to (-1: none of the group's).
 * A group of one database replays into it whatever the record says, as the
 * logs written before storage groups did not name their database. */
static int record_db(const struct loggroup *g, uint32_t op)
{
	if (g->ndbs == 1)
		return g->dbs[0];
	int db = (int)(op >> REC_OP_DB_SHIFT);
	return db < E.cfg.databases && E.dbs[db].g == g ? db : -1;
}

/* Records of one log file already in memory (session.c's struct rec: magic, len,
 * op and database, nruns, runs, modification numbers); groups start on 4 KiB
 * boundaries. `at` is the log position of the file's first byte. Each record's
 * runs go to its own database's redo. */
static void parse(const struct loggroup *g, const char *buf, uint64_t len, uint64_t at)
{
	uint64_t pos = 4096;
	while (pos + 16 <= len) {
		uint32_t magic, rl, op, nruns;
		memcpy(&magic, buf + pos, 4);
		memcpy(&rl, buf + pos + 4, 4);
		memcpy(&op, buf + pos + 8, 4);
		memcpy(&nruns, buf + pos + 12, 4);
		if (magic != REC_MAGIC || rl < 16 + REC_RUNS * 24 || pos + rl > len) {
			if (pos % 4096 == 0)
				break; /* a group starts with a record: zeros mean the end */
			pos = (pos + 4095) / 4096 * 4096;
			continue;
		}
		int db = record_db(g, op);
		if (db >= 0) {
			const struct db *d = &E.dbs[db];
			struct redo *r = &R[db];
			for (uint32_t i = 0; i < nruns && i < REC_RUNS; i++) {
				int64_t run[2];
				uint64_t t;
				memcpy(run, buf + pos + 16 + i * 16, 16);
				memcpy(&t, buf + pos + 16 + REC_RUNS * 16 + i * 8, 8);
				if (run[0] >= 0 && run[1] > 0 && run[0] + run[1] <= d->npages)
					add_run(r, (struct redo_run){run[0], run[1], t, at + pos + rl});
			}
			r->records++;
		}
		pos += rl;
	}
}

/* The log files to replay: those of the latest stream (the run that wrote the
 * highest generation), oldest first. */
static size_t replay_set(struct loggroup *g, struct log_file *files, size_t max, uint64_t *stream)
{
	size_t n = log_scan(g, files, max), k = 0;
	*stream = 0;
	for (size_t i = n; i-- > 0;)
		if (files[i].stream) {
			*stream = files[i].stream;
			break;
		}
	for (size_t i = 0; i < n; i++)
		if (*stream && files[i].stream == *stream)
			files[k++] = files[i];
	return k;
}

static void no_logs(const struct loggroup *g)
{
	if (g->ndbs == 1)
		die("%s: no log files of database %d to replay: soft recovery replays the logs that a performance or "
		    "stress run left on this log path",
		    g->logt.path, g->dbs[0]);
	die("%s: no log files of storage group %d to replay: soft recovery replays the logs that a performance or "
	    "stress run with the same --storage-groups left on this log path",
	    g->logt.path, g->idx);
}

/* One reader per storage group: its log holds the records of all its databases. */
static void *recov_main(void *arg)
{
	struct worker *w = arg;
	struct loggroup *g = w->g;
	uint64_t chunk = (uint64_t)E.cfg.repl_read_kb * 1024ull, stream = 0;
	char *buf = xalign(g->log_file_size);
	const size_t max = 1 << 16;
	struct log_file *files = malloc(max * sizeof(*files));
	if (!files)
		die("out of memory");
	size_t n = replay_set(g, files, max, &stream);
	if (!n)
		no_logs(g);
	for (int k = 0; k < g->ndbs; k++)
		R[g->dbs[k]].stream = stream;
	for (size_t i = 0; i < n && !atomic_load(&E.stop); i++) {
		uint64_t base = 0;
		int fd = log_file_open(g, files[i].gen, 0, &base);
		for (uint64_t off = 0; off < g->log_file_size; off += chunk) {
			uint64_t k = g->log_file_size - off < chunk ? g->log_file_size - off : chunk;
			struct iovec iov = {buf + off, (size_t)k};
			io_sync(w, S_LOG_READ, fd, &iov, 1, base + off, 0);
		}
		if (g->log_is_dir)
			close(fd);
		parse(g, buf, g->log_file_size, i * g->log_file_size);
		R[g->idx].logs++; /* counted once, as the group's first database's (report.c) */
	}
	free(files);
	free(buf);
	for (int k = 0; k < g->ndbs; k++) {
		struct redo *r = &R[g->dbs[k]];
		pthread_mutex_lock(&r->mu);
		r->parsed = 1;
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->mu);
	}
	return NULL;
}

/* The next runs to replay, copied out (the parser may grow the array meanwhile):
 * as many as name at most PREREAD_PAGES distinct pages, at least one. 0 when the
 * log is done. */
static size_t next_window(struct redo *r, size_t from, struct redo_run *win, int64_t *pages, int *npages)
{
	size_t k = 0;
	*npages = 0;
	pthread_mutex_lock(&r->mu);
	while (from == r->n && !r->parsed && !atomic_load(&E.stop))
		timed_wait(&r->cv, &r->mu, 10);
	for (size_t i = from; i < r->n && k < PREREAD_PAGES; i++) {
		const struct redo_run *x = &r->runs[i];
		int add = 0;
		int64_t fresh[PREREAD_PAGES];
		for (int64_t p = x->page; p < x->page + x->n && add < PREREAD_PAGES; p++) {
			int seen = 0;
			for (int j = 0; j < *npages && !seen; j++)
				seen = pages[j] == p;
			for (int j = 0; j < add && !seen; j++)
				seen = fresh[j] == p;
			if (!seen)
				fresh[add++] = p;
		}
		if (k && *npages + add > PREREAD_PAGES)
			break;
		for (int j = 0; j < add && *npages < PREREAD_PAGES; j++)
			pages[(*npages)++] = fresh[j];
		win[k++] = *x;
	}
	pthread_mutex_unlock(&r->mu);
	return k;
}

static void *redo_main(void *arg)
{
	struct worker *w = arg;
	struct db *d = w->db;
	struct redo *r = &R[d->idx];
	struct redo_run win[PREREAD_PAGES];
	int64_t pages[PREREAD_PAGES];
	int npages;
	size_t done = 0, k;
	while (!atomic_load(&E.stop) && (k = next_window(r, done, win, pages, &npages))) {
		cache_preread(w, pages, npages);
		for (size_t i = 0; i < k; i++) {
			atomic_store(&d->redo_lsn, win[i].lsn); /* the checkpoint's log position */
			r->pages_named += (uint64_t)win[i].n;
			r->pages_redone += (uint64_t)cache_redo(w, win[i].page, (int)win[i].n, win[i].dbtime);
		}
		done += k;
	}
	r->t_end_ns = now_ns();
	atomic_store(&r->applied, 1);
	return NULL;
}

void recovery_start(void)
{
	char name[32];
	/* A group's reader hands runs to all its databases' redo: every one ready first. */
	for (int i = 0; i < E.cfg.databases; i++) {
		pthread_mutex_init(&R[i].mu, NULL);
		pthread_cond_init(&R[i].cv, NULL);
	}
	for (int i = 0; i < E.cfg.databases; i++) {
		struct db *d = &E.dbs[i];
		if (d->g->idx == i) { /* the group's first database: its log's reader */
			snprintf(name, sizeof(name), "ese-recov-%d", i);
			struct worker *w = worker_new(d, name, 0, recov_main, 4);
			w->g = d->g;
			worker_start(w);
		}
		snprintf(name, sizeof(name), "ese-user-rdo-%d", i);
		worker_start(worker_new(d, name, 0, redo_main, 64));
	}
}

/* 1 once every database is replayed and its cache written back. */
int recovery_done(void)
{
	for (int i = 0; i < E.cfg.databases; i++)
		if (!atomic_load(&R[i].applied))
			return 0;
	atomic_store(&E.flush_all, 1);
	for (int i = 0; i < E.cfg.databases; i++) {
		struct db *d = &E.dbs[i];
		pthread_mutex_lock(&d->mu);
		int dirty = d->c.ndirty;
		pthread_cond_signal(&d->ckpt_cv);
		pthread_mutex_unlock(&d->mu);
		if (dirty)
			return 0;
	}
	return 1;
}

void recovery_result(FILE *f, int db)
{
	const struct redo *r = &R[db];
	double secs = r->t_end_ns > E.t0_ns ? (r->t_end_ns - E.t0_ns) / 1e9 : 0;
	fprintf(f, "\"recovery\":{\"log_stream\":%llu,\"logs_replayed\":%llu,\"records\":%llu,\"runs\":%zu,"
		   "\"pages_named\":%llu,\"pages_redone\":%llu,\"replay_s\":%.4f},",
		(unsigned long long)r->stream, (unsigned long long)r->logs, (unsigned long long)r->records, r->n,
		(unsigned long long)r->pages_named, (unsigned long long)r->pages_redone, secs);
}
