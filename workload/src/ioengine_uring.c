/* io_uring backend: one ring per thread, readv/writev; a synchronous request is
 * submitted and waited for in one call. */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

#include "ioengine.h"

struct ioengine {
	struct io_uring ring;
};

static struct ioengine *uring_open(unsigned depth)
{
	struct ioengine *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	if (io_uring_queue_init(depth < 4 ? 4 : depth, &e->ring, 0) < 0) {
		free(e);
		return NULL;
	}
	return e;
}

static int uring_prep(struct ioengine *e, struct ioreq *reqs, int n)
{
	for (int i = 0; i < n; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
		if (!sqe)
			return -EBUSY;
		if (reqs[i].write)
			io_uring_prep_writev(sqe, reqs[i].fd, reqs[i].iov, reqs[i].iovcnt, reqs[i].off);
		else
			io_uring_prep_readv(sqe, reqs[i].fd, reqs[i].iov, reqs[i].iovcnt, reqs[i].off);
		io_uring_sqe_set_data64(sqe, reqs[i].tag);
	}
	return 0;
}

static int uring_submit(struct ioengine *e, struct ioreq *reqs, int n)
{
	int r = uring_prep(e, reqs, n);
	if (r == 0)
		r = io_uring_submit(&e->ring);
	return r < 0 ? r : 0;
}

/* One io_uring_enter for submit and wait: a synchronous read or write otherwise
 * costs two system calls (submit, then wait for the completion). */
static int uring_submit_wait(struct ioengine *e, struct ioreq *reqs, int n)
{
	int r = uring_prep(e, reqs, n);
	if (r == 0) {
		do
			r = io_uring_submit_and_wait(&e->ring, 1);
		while (r == -EINTR);
	}
	return r < 0 ? r : 0;
}

static int uring_reap(struct ioengine *e, struct iocomp *out, int min, int max)
{
	int got = 0;
	while (got < max) {
		struct io_uring_cqe *cqe;
		int r = got < min ? io_uring_wait_cqe(&e->ring, &cqe) : io_uring_peek_cqe(&e->ring, &cqe);
		if (r == -EINTR)
			continue;
		if (r < 0)
			break;
		out[got].tag = io_uring_cqe_get_data64(cqe);
		out[got].res = cqe->res;
		io_uring_cqe_seen(&e->ring, cqe);
		got++;
	}
	return got;
}

static void uring_close(struct ioengine *e)
{
	if (!e)
		return;
	io_uring_queue_exit(&e->ring);
	free(e);
}

const struct ioengine_ops ioengine_uring = {
	.name = "io_uring",
	.open = uring_open,
	.submit = uring_submit,
	.submit_wait = uring_submit_wait,
	.reap = uring_reap,
	.close = uring_close,
};
