/* The transaction log of one storage group (its databases share it; one group
 * per database by default): a log buffer, the log writer (ese-log-G) and the
 * log file pre-formatter (ese-logfmt-G).
 *
 * Sessions append records to the buffer; a durable commit waits until the writer
 * has written its record, a lazy commit does not. What makes the writer write is
 * ESE's (logwrite.cxx): a durable commit waiting; the buffer half full (a
 * "capacity" write); and lazy commits, which schedule a write for
 * --lazy-flush-ms later (ESE's lazy-commit timer task) that any earlier write
 * makes unnecessary. With --lazy-flush-ms 0 every commit asks for a write at once.
 * The writer takes everything appended so far in one write (group commit: commits
 * that arrive while a write is in flight, or before a lazy deadline, share the
 * next one). So how many commits share a write depends on the device's latency
 * and on the lazy deadline against the commit rate. Log writes are whole 4 KiB
 * segments; what happens to a partly filled last segment is --log-partial:
 * - pad (ESE 14): the write pads it with zeros and the next write starts after
 *   it, so the log grows by every byte written;
 * - rewrite (ESE 15's 4 KiB log segments, logwrite.cxx ErrLGIWriteLog): a write
 *   writes the full segments, then, if a commit waits, the partial segment in a
 *   write of its own; the next write starts with that segment again. A write
 *   nobody waits for (a filling buffer, the lazy-commit timer) writes full
 *   segments only. The log grows by less than is written: the published
 *   Exchange 2013 run reads back 72 % of the log bytes it wrote;
 * - shadow (today's open-source ESE): rewrite, plus a shadow copy of the
 *   partial segment in the segment after it (the partial write is 8 KiB), and
 *   after a shadow the first full segment goes out alone (the order of sectors
 *   within one write is not guaranteed). It overshoots the published 2013 run's
 *   log writes (docs/workload.md), so no preset uses it.
 * A log file holds a 4 KiB header and then records; when the next write does not
 * fit, the file is closed (handed to replication) and the writer moves on to the
 * next file, which the pre-formatter has already written in full. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ese.h"

#define SECTOR 4096ull
#define LOG_HDR 4096ull

/* A session waiting for its durable commit. The writer wakes it alone when its
 * LSN is written, rather than every waiter whenever any write ends, and on a
 * futex of its own, so it returns without taking lmu back from the writer.
 * It lives on the session's stack: once done is set the session may return,
 * so a FUTEX_WAKE can land on the next wait at that address, which then finds
 * done still 0 and sleeps again. */
struct log_waiter {
	uint64_t lsn;
	_Atomic uint32_t done;
	struct log_waiter *next;
};

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

void log_init(struct loggroup *g)
{
	g->log_file_size = (uint64_t)E.cfg.log_file_kb * 1024ull;
	uint64_t cap = g->log_file_size - LOG_HDR;
	g->lbuf_size = cap < (1ull << 20) ? cap : (1ull << 20);
	/* Whole segments; with a partial segment kept, one write (up to a buffer,
	 * the partial segment and a shadow) still fits in a file. */
	g->lbuf_size = g->lbuf_size / SECTOR * SECTOR - (E.cfg.log_partial != LP_PAD ? 2 * SECTOR : 0);
	g->lbuf = xalign(g->lbuf_size);
	g->wbuf = xalign(g->lbuf_size + 2 * SECTOR); /* + a partial segment and its shadow */
	g->log_gen = 1; /* log_target_open starts the stream after what the target holds */
	g->log_fd = -1;
	pthread_mutex_init(&g->lmu, NULL);
	pthread_cond_init(&g->lcv, NULL);
	pthread_cond_init(&g->ldone_cv, NULL);
	pthread_cond_init(&g->lfmt_cv, NULL);
	pthread_cond_init(&g->lrepl_cv, NULL);
}

uint64_t log_append(struct loggroup *g, const void *rec, uint32_t len)
{
	if (len > g->lbuf_size / 2)
		len = (uint32_t)(g->lbuf_size / 2);
	pthread_mutex_lock(&g->lmu);
	while (g->lsn_end + len - g->lsn_seg > g->lbuf_size && !g->stopping) {
		g->space_waiters++;
		pthread_cond_wait(&g->ldone_cv, &g->lmu);
		g->space_waiters--;
	}
	for (uint32_t i = 0; i < len;) {
		uint64_t at = (g->lsn_end + i) % g->lbuf_size;
		uint32_t k = (uint32_t)(g->lbuf_size - at) < len - i ? (uint32_t)(g->lbuf_size - at) : len - i;
		memcpy(g->lbuf + at, (const char *)rec + i, k);
		i += k;
	}
	g->lsn_end += len;
	uint64_t lsn = g->lsn_end;
	atomic_store(&g->lsn_now, lsn);
	if (lsn - g->lsn_flushed >= g->lbuf_size / 2 && g->lsn_want < lsn) {
		g->lsn_want = lsn; /* half full: write it out before appenders stall */
		g->cap_pending = 1;
		pthread_cond_signal(&g->lcv);
	}
	pthread_mutex_unlock(&g->lmu);
	return lsn;
}

void log_wait(struct loggroup *g, uint64_t lsn)
{
	/* A write that sealed past this LSN may already have made it durable. */
	if (atomic_load(&g->lsn_durable) >= lsn)
		return;
	pthread_mutex_lock(&g->lmu);
	if (g->lsn_want < lsn) {
		g->lsn_want = lsn;
		pthread_cond_signal(&g->lcv);
	}
	if (g->lsn_flushed >= lsn || g->writer_done) {
		pthread_mutex_unlock(&g->lmu);
		return;
	}
	struct log_waiter me = {.lsn = lsn, .next = g->waiters};
	g->waiters = &me;
	pthread_mutex_unlock(&g->lmu);
	/* The writer unlinks it and sets done when it has written lsn or stops. */
	while (!atomic_load(&me.done))
		syscall(SYS_futex, &me.done, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

/* Wake (lmu held) the durable commits whose LSN is now written; all of them when
 * the writer stops. */
static void wake_waiters(struct loggroup *g, int all)
{
	for (struct log_waiter **p = &g->waiters; *p;) {
		struct log_waiter *x = *p;
		if (all || x->lsn <= g->lsn_flushed) {
			*p = x->next;
			atomic_store(&x->done, 1);
			syscall(SYS_futex, &x->done, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		} else {
			p = &x->next;
		}
	}
}

/* A commit of the record ending at lsn: a durable one waits for it; a lazy one
 * asks for it to be written within --lazy-flush-ms, unless a write is already
 * due sooner. */
void log_commit(struct loggroup *g, uint64_t lsn, int durable)
{
	if (durable) {
		log_wait(g, lsn);
		return;
	}
	uint64_t delay = (uint64_t)(E.cfg.lazy_flush_ms * 1e6);
	pthread_mutex_lock(&g->lmu);
	if (g->lsn_flushed < lsn) {
		if (!delay) {
			if (g->lsn_want < lsn)
				g->lsn_want = lsn;
			pthread_cond_signal(&g->lcv);
		} else if (!g->lazy_due_ns) {
			g->lazy_due_ns = now_ns() + delay;
			pthread_cond_signal(&g->lcv);
		}
	}
	pthread_mutex_unlock(&g->lmu);
}

/* Wait (lmu held) until something asks for a write; the reason, or -1 when
 * there is nothing to write and the log is stopping. */
static int wait_for_work(struct loggroup *g)
{
	for (;;) {
		if (g->lsn_end > g->lsn_flushed) {
			if (g->stopping)
				return LF_STOP;
			if (g->lsn_want > g->lsn_flushed)
				return g->cap_pending ? LF_CAPACITY : LF_DURABLE;
			if (g->lazy_due_ns && now_ns() >= g->lazy_due_ns)
				return LF_LAZY;
		} else {
			g->lazy_due_ns = 0; /* everything is written: the timer has nothing to do */
			if (g->stopping)
				return -1;
		}
		if (g->lazy_due_ns) {
			uint64_t left = g->lazy_due_ns - now_ns();
			if ((int64_t)left > 0) {
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				uint64_t ns = (uint64_t)ts.tv_nsec + left;
				ts.tv_sec += (time_t)(ns / 1000000000ull);
				ts.tv_nsec = (long)(ns % 1000000000ull);
				pthread_cond_timedwait(&g->lcv, &g->lmu, &ts);
			}
		} else {
			pthread_cond_wait(&g->lcv, &g->lmu);
		}
	}
}

/* Close the current file (lmu held): replication gets it, the writer the next one. */
static void close_log(struct loggroup *g)
{
	if (g->nclosed == g->nclosed_cap) {
		g->nclosed_cap = g->nclosed_cap ? g->nclosed_cap * 2 : 64;
		g->closed = realloc(g->closed, g->nclosed_cap * sizeof(*g->closed));
		if (!g->closed)
			die("out of memory");
	}
	g->closed[g->nclosed++] = (struct closed_log){g->log_gen, g->log_used};
	g->closed_logs++;
	pthread_cond_broadcast(&g->lrepl_cv);
	if (g->log_is_dir && g->log_fd >= 0)
		close(g->log_fd);
	g->log_fd = -1;
	g->log_gen++;
	g->log_used = 0;
	pthread_cond_broadcast(&g->lfmt_cv);
}

static uint64_t open_current(struct loggroup *g)
{
	uint64_t base = 0;
	while (g->fmt_ready_gen < g->log_gen)
		pthread_cond_wait(&g->lfmt_cv, &g->lmu);
	g->log_fd = log_file_open(g, g->log_gen, 0, &base);
	return base;
}

/* Copy the log bytes [from, from + n) to wbuf + at (lbuf is circular). */
static void gather(struct loggroup *g, uint64_t at, uint64_t from, uint64_t n)
{
	while (n) {
		uint64_t o = from % g->lbuf_size, k = g->lbuf_size - o < n ? g->lbuf_size - o : n;
		memcpy(g->wbuf + at, g->lbuf + o, k);
		at += k, from += k, n -= k;
	}
}

static void write_out(struct worker *w, struct loggroup *g, int fd, uint64_t off, uint64_t at, uint64_t len)
{
	struct iovec iov = {g->wbuf + at, (size_t)len};
	io_sync(w, S_LOG_WRITE, fd, &iov, 1, off, 1);
}

/* Everything up to lsn is on disk (lmu held). */
static void written(struct loggroup *g, uint64_t lsn)
{
	g->lsn_flushed = lsn;
	atomic_store(&g->lsn_durable, lsn);
	wake_waiters(g, 0);
	if (g->space_waiters)
		pthread_cond_broadcast(&g->ldone_cv);
}

/* Pad the log to the next segment boundary (lmu held): nothing ever follows in
 * that segment. lsn_seg is a segment boundary and lbuf whole segments, so the
 * pad never wraps. */
static void seal(struct loggroup *g)
{
	uint64_t end = g->lsn_seg + round_up(g->lsn_end - g->lsn_seg, SECTOR);
	if (end > g->lsn_end)
		memset(g->lbuf + g->lsn_end % g->lbuf_size, 0, end - g->lsn_end);
	g->lsn_end = end;
	atomic_store(&g->lsn_now, end);
}

/* --log-partial pad: everything appended so far, padded to a segment; later records
 * start after the padding. lmu held on entry and on return. Always writes. */
static int flush_padded(struct worker *w, struct loggroup *g, uint64_t *base)
{
	g->lazy_due_ns = 0; /* this write covers the lazy commits so far */
	seal(g);
	uint64_t start = g->lsn_seg, len = g->lsn_end - start;
	if (g->log_used + len > g->log_file_size - LOG_HDR) {
		close_log(g);
		*base = open_current(g);
	}
	gather(g, 0, start, len);
	uint64_t off = *base + LOG_HDR + g->log_used;
	int fd = g->log_fd;
	pthread_mutex_unlock(&g->lmu);
	write_out(w, g, fd, off, 0, len);
	pthread_mutex_lock(&g->lmu);
	g->log_used += len;
	g->lsn_seg = start + len;
	written(g, g->lsn_seg);
	return 1;
}

/* --log-partial rewrite|shadow. lsn_seg stays at the partial segment, which the
 * next write rewrites. At the end (why == LF_STOP) the partial segment is padded,
 * as ESE's final flush does, and a stale shadow after it is zeroed, so soft
 * recovery finds the end of the log where the records end. lmu held on entry and
 * on return. 0 when there was nothing to write: a lazy deadline with no full
 * segment, whose commits ride on the next write. */
static int flush_partial(struct worker *w, struct loggroup *g, int why, uint64_t *base)
{
	if (why == LF_STOP)
		seal(g);
	uint64_t s = g->lsn_seg, e = g->lsn_end, want = g->lsn_want;
	uint64_t nfull = (e - s) / SECTOR, part = (e - s) % SECTOR;
	int waiting = why == LF_DURABLE || why == LF_STOP || g->waiters || (why == LF_CAPACITY && !nfull);
	if (why == LF_LAZY || waiting)
		g->lazy_due_ns = 0;
	if (!waiting)
		part = 0; /* nobody waiting: full segments only */
	if (!nfull && !part)
		return 0;
	uint64_t zero = why == LF_STOP && g->have_shadow ? SECTOR : 0;
	uint64_t sh = E.cfg.log_partial == LP_SHADOW ? SECTOR : 0;
	uint64_t need = nfull * SECTOR + (part ? SECTOR + sh : zero);
	if (g->log_used + need > g->log_file_size - LOG_HDR) {
		/* The next file starts with this segment again, partial bytes and all:
		 * the closed file ends at its last full segment. */
		close_log(g);
		*base = open_current(g);
		g->have_shadow = 0;
		zero = 0;
	}
	gather(g, 0, s, nfull * SECTOR + part);
	if (part) {
		memset(g->wbuf + nfull * SECTOR + part, 0, SECTOR - part);
		memcpy(g->wbuf + (nfull + 1) * SECTOR, g->wbuf + nfull * SECTOR, SECTOR);
	} else if (zero) {
		memset(g->wbuf + nfull * SECTOR, 0, SECTOR);
	}
	uint64_t off = *base + LOG_HDR + g->log_used, at = 0;
	int fd = g->log_fd, shadow = g->have_shadow;
	pthread_mutex_unlock(&g->lmu);
	if (nfull) {
		if (shadow) {
			write_out(w, g, fd, off, 0, SECTOR);
			at = SECTOR;
		}
		if (nfull * SECTOR + zero > at)
			write_out(w, g, fd, off + at, at, nfull * SECTOR + zero - at);
	}
	if (part) {
		at = nfull * SECTOR;
		if (shadow && !nfull) {
			write_out(w, g, fd, off + at, at, SECTOR);
			write_out(w, g, fd, off + at + SECTOR, at + SECTOR, SECTOR);
		} else {
			write_out(w, g, fd, off + at, at, SECTOR + sh);
		}
	}
	pthread_mutex_lock(&g->lmu);
	g->log_used += nfull * SECTOR;
	g->lsn_seg = s + nfull * SECTOR;
	if (part || nfull)
		g->have_shadow = part != 0 && sh;
	written(g, part ? e : g->lsn_seg);
	/* A full-segments-only write answered the filling buffer; a commit that
	 * asked for more meanwhile raised lsn_want and still gets its write. */
	if (!waiting && g->lsn_want == want && g->lsn_want > g->lsn_flushed)
		g->lsn_want = g->lsn_flushed;
	return 1;
}

void *log_writer_main(void *arg)
{
	struct worker *w = arg;
	struct loggroup *g = w->g;
	uint64_t base = 0;
	pthread_mutex_lock(&g->lmu);
	base = open_current(g);
	for (;;) {
		int why = wait_for_work(g);
		if (why < 0)
			break;
		g->cap_pending = 0;
		if (E.cfg.log_partial != LP_PAD ? flush_partial(w, g, why, &base) : flush_padded(w, g, &base))
			g->log_flushes[why]++;
	}
	/* A clean stop closes the last log too, so replication sees every byte written. */
	if (g->log_used)
		close_log(g);
	else if (g->log_is_dir && g->log_fd >= 0)
		close(g->log_fd);
	g->writer_done = 1;
	wake_waiters(g, 1);
	pthread_cond_broadcast(&g->ldone_cv);
	pthread_cond_broadcast(&g->lrepl_cv);
	pthread_cond_broadcast(&g->lfmt_cv);
	pthread_mutex_unlock(&g->lmu);
	return NULL;
}

/* Write the next log file in full before the writer needs it: header, then zeros. */
void *log_format_main(void *arg)
{
	struct worker *w = arg;
	struct loggroup *g = w->g;
	uint64_t chunk = (uint64_t)E.cfg.logfmt_kb * 1024ull;
	char *buf = xalign(chunk);
	pthread_mutex_lock(&g->lmu);
	for (;;) {
		/* Runs until the writer is done: a stop can still close a file and
		 * the writer must then find the next one ready. */
		while (g->fmt_ready_gen > g->log_gen && !g->writer_done)
			pthread_cond_wait(&g->lfmt_cv, &g->lmu);
		if (g->writer_done)
			break;
		uint64_t gen = g->fmt_ready_gen + 1, base = 0;
		pthread_mutex_unlock(&g->lmu);
		int fd = log_file_open(g, gen, 1, &base);
		for (uint64_t off = 0; off < g->log_file_size; off += chunk) {
			uint64_t n = g->log_file_size - off < chunk ? g->log_file_size - off : chunk;
			memset(buf, 0, n);
			if (off == 0)
				log_header_format(buf, LOG_HDR, g, gen);
			struct iovec iov = {buf, (size_t)n};
			io_sync(w, S_LOG_PREFORMAT, fd, &iov, 1, base + off, 1);
		}
		if (g->log_is_dir)
			close(fd);
		pthread_mutex_lock(&g->lmu);
		g->fmt_ready_gen = gen;
		pthread_cond_broadcast(&g->lfmt_cv);
	}
	pthread_mutex_unlock(&g->lmu);
	free(buf);
	return NULL;
}

uint64_t log_pos(struct db *d)
{
	return E.cfg.mode == M_SOFT_RECOVERY ? atomic_load(&d->redo_lsn) : atomic_load(&d->g->lsn_now);
}

void log_shutdown(struct loggroup *g)
{
	pthread_mutex_lock(&g->lmu);
	g->stopping = 1;
	pthread_cond_broadcast(&g->lcv);
	pthread_cond_broadcast(&g->lfmt_cv);
	pthread_cond_broadcast(&g->ldone_cv);
	pthread_mutex_unlock(&g->lmu);
}
