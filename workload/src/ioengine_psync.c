/* psync backend: preadv/pwritev done at submit time, completions handed back at
 * reap. A baseline to compare io_uring against, and a fallback where io_uring is
 * disabled (some containers forbid it). */
#include <errno.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "ese.h"
#include "ioengine.h"

struct ioengine {
	struct iocomp_queue q;
};

static struct ioengine *psync_open(unsigned depth)
{
	(void)depth;
	return calloc(1, sizeof(struct ioengine));
}

static int psync_submit(struct ioengine *e, struct ioreq *reqs, int n)
{
	for (int i = 0; i < n; i++) {
		if (e->q.n >= IOE_MAX_DEPTH)
			return -EBUSY;
		/* Each request stamped on its own: they are served one after another. */
		uint64_t t0 = now_ns();
		ssize_t r = reqs[i].write ? pwritev(reqs[i].fd, reqs[i].iov, reqs[i].iovcnt, (off_t)reqs[i].off)
					  : preadv(reqs[i].fd, reqs[i].iov, reqs[i].iovcnt, (off_t)reqs[i].off);
		int64_t res = r < 0 ? -errno : r;
		iocomp_queue_push(&e->q, reqs[i].tag, res, t0, now_ns());
	}
	return 0;
}

static int psync_reap(struct ioengine *e, struct iocomp *out, int min, int max)
{
	(void)min;
	return iocomp_queue_pop(&e->q, out, max);
}

static void psync_close(struct ioengine *e)
{
	free(e);
}

const struct ioengine_ops ioengine_psync = {
	.name = "psync",
	.open = psync_open,
	.submit = psync_submit,
	.reap = psync_reap,
	.close = psync_close,
};
