/* The two non-transactional modes.
 *
 * backup: one reader per database (ese-backup-N, not a labelled stream) reads it
 * front to back once, as fast as it can, in maintenance-sized reads.
 *
 * soft-recovery: the log files a previous run left are read in order
 * (ese-recov-N, log-read), their records parsed, and every page they name is
 * redone by a redo session (ese-user-rdo-N: page reads as on a cache miss, the
 * page dirtied); the checkpoint writer writes them back and, once all logs are
 * replayed, flushes everything, as crash recovery ends with a clean database. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ese.h"

#define REC_MAGIC 0x31434552u

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
		io_sync(w, S_BACKUP, d->fd, &iov, 1, d->data_off + pos, 0);
	}
	free(buf);
	w->ops_done = 1; /* finished */
	return NULL;
}

struct redo {
	int64_t (*runs)[2];
	size_t n, cap;
	_Atomic int parsed, applied;
	uint64_t records, logs;
};
static struct redo R[MAX_DBS];

static void add_run(struct redo *r, int64_t page, int64_t n)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 1024;
		r->runs = realloc(r->runs, r->cap * sizeof(*r->runs));
		if (!r->runs)
			die("out of memory");
	}
	r->runs[r->n][0] = page;
	r->runs[r->n][1] = n;
	r->n++;
}

/* Records of one log file already in memory: groups start on 4 KiB boundaries. */
static void parse(struct db *d, struct redo *r, const char *buf, uint64_t len)
{
	uint64_t pos = 4096;
	while (pos + 16 <= len) {
		uint32_t magic, rl, nruns;
		memcpy(&magic, buf + pos, 4);
		memcpy(&rl, buf + pos + 4, 4);
		memcpy(&nruns, buf + pos + 12, 4);
		if (magic != REC_MAGIC || rl < 16 || pos + rl > len) {
			if (pos % 4096 == 0)
				break; /* a group starts with a record: zeros mean the end */
			pos = (pos + 4095) / 4096 * 4096;
			continue;
		}
		for (uint32_t i = 0; i < nruns && i < 8 && pos + 16 + (i + 1) * 16 <= len; i++) {
			int64_t run[2];
			memcpy(run, buf + pos + 16 + i * 16, 16);
			if (run[0] >= 0 && run[1] > 0 && run[0] + run[1] <= d->npages)
				add_run(r, run[0], run[1]);
		}
		r->records++;
		pos += rl;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The generations present, oldest first. */
static size_t find_logs(struct db *d, uint64_t *gens, size_t max, char *buf)
{
	size_t n = 0;
	if (d->log_is_dir) {
		DIR *dir = opendir(d->logt.path);
		if (!dir)
			die("%s: cannot read the log directory: %s", d->logt.path, strerror(errno));
		struct dirent *e;
		char prefix[8];
		snprintf(prefix, sizeof(prefix), "E%02d", d->idx);
		while ((e = readdir(dir)) && n < max)
			if (!strncmp(e->d_name, prefix, 3) && strlen(e->d_name) == 15 && !strcmp(e->d_name + 11, ".log"))
				gens[n++] = strtoull(e->d_name + 3, NULL, 16);
		closedir(dir);
	} else {
		uint64_t slots = d->logt.size / d->log_file_size;
		for (uint64_t s = 0; s < slots && n < max; s++) {
			if (pread(d->log_dev_fd, buf, 4096, (off_t)(d->logt.off + s * d->log_file_size)) != 4096)
				continue;
			int db;
			unsigned long long g;
			if (sscanf(buf, "IOTAPE-ESE-LOG 1 db=%d gen=%llu", &db, &g) == 2 && db == d->idx)
				gens[n++] = g;
		}
	}
	qsort(gens, n, sizeof(*gens), cmp_u64);
	return n;
}

static void *recov_main(void *arg)
{
	struct worker *w = arg;
	struct db *d = w->db;
	struct redo *r = &R[d->idx];
	uint64_t chunk = (uint64_t)E.cfg.repl_read_kb * 1024ull;
	char *buf = xalign(d->log_file_size);
	uint64_t gens[4096];
	size_t n = find_logs(d, gens, 4096, buf);
	if (!n)
		die("%s: no log files of database %d to replay", d->logt.path, d->idx);
	for (size_t i = 0; i < n && !atomic_load(&E.stop); i++) {
		uint64_t base = 0;
		int fd = log_file_open(d, gens[i], 0, &base);
		for (uint64_t off = 0; off < d->log_file_size; off += chunk) {
			uint64_t k = d->log_file_size - off < chunk ? d->log_file_size - off : chunk;
			struct iovec iov = {buf + off, (size_t)k};
			io_sync(w, S_LOG_READ, fd, &iov, 1, base + off, 0);
		}
		if (d->log_is_dir)
			close(fd);
		parse(d, r, buf, d->log_file_size);
		r->logs++;
	}
	free(buf);
	atomic_store(&r->parsed, 1);
	return NULL;
}

static void *redo_main(void *arg)
{
	struct worker *w = arg;
	struct redo *r = &R[w->db->idx];
	while (!atomic_load(&r->parsed) && !atomic_load(&E.stop))
		sleep_ns(1000000ull);
	for (size_t i = 0; i < r->n && !atomic_load(&E.stop); i++)
		cache_access(w, r->runs[i][0], (int)r->runs[i][1], CA_DIRTY);
	atomic_store(&r->applied, 1);
	return NULL;
}

void recovery_start(void)
{
	char name[32];
	for (int i = 0; i < E.cfg.databases; i++) {
		struct db *d = &E.dbs[i];
		snprintf(name, sizeof(name), "ese-recov-%d", i);
		worker_start(worker_new(d, name, 0, recov_main, 4));
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

uint64_t recovery_records(int db)
{
	return R[db].records;
}
