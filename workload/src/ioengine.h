/* The contract between the engine and an I/O backend, one ops struct per backend
 * (io_uring.c, psync.c, null.c), as fio's ioengines.h. A backend instance is
 * owned by one thread; nothing here is shared. */
#ifndef ESE_IOENGINE_H
#define ESE_IOENGINE_H

#include <stdint.h>
#include <sys/uio.h>

#define IOE_MAX_DEPTH 64

/* One request: a vectored read or write at a byte offset. `tag` comes back in
 * the completion so the caller can find its own bookkeeping. */
struct ioreq {
	int fd;
	int write;
	const struct iovec *iov;
	int iovcnt;
	uint64_t off;
	uint64_t tag;
	uint64_t t_submit_ns; /* filled by the caller, read back on completion */
};

/* t_start_ns/t_end_ns: when a backend that serves requests one after another
 * (psync, tiered) began and finished this one; 0 where the backend cannot tell
 * (io_uring: the batch is in flight at once, so submit to reap is the request's
 * own latency, queueing included). Without them a caller that stamps a batch
 * once would charge every synchronous request the time of the requests served
 * before it in the same batch. */
struct iocomp {
	uint64_t tag;
	int64_t res; /* bytes or -errno */
	uint64_t t_start_ns, t_end_ns;
};

/* The request's own latency: the backend's times where it gave them, else from
 * the caller's submit stamp to the caller's reap. */
static inline uint64_t iocomp_latency(const struct iocomp *c, uint64_t t_submit, uint64_t t_reap)
{
	uint64_t s = c->t_start_ns ? c->t_start_ns : t_submit;
	uint64_t e = c->t_end_ns ? c->t_end_ns : t_reap;
	return e > s ? e - s : 0;
}

/* Backends that finish a request inside submit (psync, null) hand the
 * completions back at reap from this queue. */
struct iocomp_queue {
	struct iocomp done[IOE_MAX_DEPTH];
	int n;
};

static inline int iocomp_queue_push(struct iocomp_queue *q, uint64_t tag, int64_t res, uint64_t t_start,
				   uint64_t t_end)
{
	if (q->n >= IOE_MAX_DEPTH)
		return -1;
	q->done[q->n] = (struct iocomp){.tag = tag, .res = res, .t_start_ns = t_start, .t_end_ns = t_end};
	q->n++;
	return 0;
}

static inline int iocomp_queue_pop(struct iocomp_queue *q, struct iocomp *out, int max)
{
	int n = q->n < max ? q->n : max;

	for (int i = 0; i < n; i++)
		out[i] = q->done[i];
	for (int i = n; i < q->n; i++)
		q->done[i - n] = q->done[i];
	q->n -= n;
	return n;
}

struct ioengine;

struct ioengine_ops {
	const char *name;
	/* depth: the most requests this instance will have in flight. */
	struct ioengine *(*open)(unsigned depth);
	/* Called once by the thread that owns the instance, before its first
	 * request (NULL: nothing to do); 0 or -errno. */
	int (*attach)(struct ioengine *e);
	/* Queue and submit n requests (n <= free depth); 0 or -errno. */
	int (*submit)(struct ioengine *e, struct ioreq *reqs, int n);
	/* Submit n requests and wait until one has completed, in one system call, for
	 * a caller that waits at once (a page fault, a log write): NULL where submit
	 * already finishes the request (psync, null). Completions still come from reap. */
	int (*submit_wait)(struct ioengine *e, struct ioreq *reqs, int n);
	/* Wait for at least min completions, return up to max of them. */
	int (*reap)(struct ioengine *e, struct iocomp *out, int min, int max);
	void (*close)(struct ioengine *e);
};

const struct ioengine_ops *ioengine_find(const char *name);

#endif
