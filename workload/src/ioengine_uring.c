/* io_uring backend: one ring per thread, readv/writev; a synchronous request is
 * submitted and waited for in one call.
 *
 * The ring is set up as fio's io_uring engine sets up its own: one issuer
 * (SINGLE_ISSUER), completions' task work deferred until the thread asks for
 * events (DEFER_TASKRUN) and never interrupting it (COOP_TASKRUN). Otherwise
 * every completion, which the block layer delivers from ksoftirqd for a
 * single-queue device such as a loop device, queues signal-style task work
 * that wakes the thread wherever it sleeps, and the thread runs it on its way
 * back to user space. TASKRUN_FLAG tells a non-blocking reap (liburing's peek)
 * when completions are waiting for it to enter the kernel. The ring is created
 * disabled and enabled by the thread that uses it (attach), since a
 * single-issuer ring belongs to the thread that enables it. Kernels without
 * these flags get a plain ring. */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ioengine.h"

#define FAST_FLAGS                                                                                        \
	(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN |             \
	 IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_R_DISABLED)

struct ioengine {
	struct io_uring ring;
	int disabled;
};

static struct ioengine *uring_open(unsigned depth)
{
	struct ioengine *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	struct io_uring_params p = {.flags = FAST_FLAGS};
	unsigned entries = depth < 4 ? 4 : depth;
	if (io_uring_queue_init_params(entries, &e->ring, &p) == 0) {
		e->disabled = 1;
	} else if (io_uring_queue_init(entries, &e->ring, 0) < 0) {
		free(e);
		return NULL;
	}
	return e;
}

/* In the thread that will use the ring: it becomes the ring's one issuer. */
static int uring_attach(struct ioengine *e)
{
	if (!e->disabled)
		return 0;
	e->disabled = 0;
	/* io_uring_enable_rings() is missing from some builds of liburing 2.3's
	 * shared library (Debian 12's): the system call itself. */
	if (syscall(__NR_io_uring_register, e->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0) < 0)
		return -errno;
	return 0;
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
		/* In flight together: the caller's submit-to-reap is the latency. */
		out[got] = (struct iocomp){.tag = io_uring_cqe_get_data64(cqe), .res = cqe->res};
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
	.attach = uring_attach,
	.submit = uring_submit,
	.submit_wait = uring_submit_wait,
	.reap = uring_reap,
	.close = uring_close,
};
