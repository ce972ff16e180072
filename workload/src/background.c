/* Background streams, independent of the user load: database maintenance of
 * one database (ese-bdm-N) and log replication of one storage group's log
 * (ese-repl-G). */
#include <stdlib.h>
#include <unistd.h>

#include "ese.h"

/* Reads the database front to back in fixed-size reads, on a fixed schedule
 * (reads/s per database), starting again at the front when it reaches the end.
 * The schedule is absolute so slow reads do not lower the rate, and a run at a
 * low user load still has the same maintenance I/O, as in Exchange. */
void *bdm_main(void *arg)
{
	struct worker *w = arg;
	struct db *d = w->db;
	uint64_t size = (uint64_t)E.cfg.bdm_read_kb * 1024ull;
	uint64_t total = (uint64_t)d->npages * (uint64_t)d->page, pos = 0;
	char *buf = xalign(size);
	uint64_t period = (uint64_t)(1e9 / E.cfg.bdm_rate), next = now_ns();
	while (!atomic_load(&E.stop)) {
		uint64_t t = now_ns();
		if (t < next) {
			uint64_t nap = next - t < 20000000ull ? next - t : 20000000ull;
			sleep_ns(nap);
			continue;
		}
		uint64_t n = total - pos < size ? total - pos : size;
		struct iovec iov = {buf, (size_t)n};
		io_sync(w, S_BDM_READ, d->fd, &iov, 1, d->data_off + pos, 0);
		pos = pos + n >= total ? 0 : pos + n;
		next += period;
		if (now_ns() > next + 1000000000ull)
			next = now_ns(); /* far behind (a stall): do not burst to catch up */
	}
	free(buf);
	return NULL;
}

/* Reads each closed log file of a storage group once per extra copy, header and the bytes written,
 * in fixed-size reads, as the log copier of each passive copy would. */
void *repl_main(void *arg)
{
	struct worker *w = arg;
	struct loggroup *g = w->g;
	uint64_t size = (uint64_t)E.cfg.repl_read_kb * 1024ull;
	char *buf = xalign(size);
	pthread_mutex_lock(&g->lmu);
	for (;;) {
		while (g->repl_done == g->nclosed && !g->writer_done)
			pthread_cond_wait(&g->lrepl_cv, &g->lmu);
		if (g->repl_done == g->nclosed)
			break;
		struct closed_log cl = g->closed[g->repl_done];
		pthread_mutex_unlock(&g->lmu);
		uint64_t base = 0;
		int fd = log_file_open(g, cl.gen, 0, &base);
		uint64_t len = 4096 + cl.used;
		for (int copy = 1; copy < E.cfg.copies; copy++)
			for (uint64_t off = 0; off < len; off += size) {
				uint64_t n = len - off < size ? len - off : size;
				struct iovec iov = {buf, (size_t)n};
				io_sync(w, S_LOG_REPLICATION_READ, fd, &iov, 1, base + off, 0);
			}
		if (g->log_is_dir)
			close(fd);
		log_file_retire(g, cl.gen);
		pthread_mutex_lock(&g->lmu);
		g->repl_done++;
	}
	pthread_mutex_unlock(&g->lmu);
	free(buf);
	return NULL;
}
