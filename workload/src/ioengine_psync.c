/* psync backend: preadv/pwritev done at submit time, completions handed back at
 * reap. A baseline to compare io_uring against, and a fallback where io_uring is
 * disabled (some containers forbid it). */
#include <errno.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "ioengine.h"

struct ioengine {
	struct iocomp done[IOE_MAX_DEPTH];
	int ndone;
};

static struct ioengine *psync_open(unsigned depth)
{
	(void)depth;
	return calloc(1, sizeof(struct ioengine));
}

static int psync_submit(struct ioengine *e, struct ioreq *reqs, int n)
{
	for (int i = 0; i < n; i++) {
		if (e->ndone >= IOE_MAX_DEPTH)
			return -EBUSY;
		ssize_t r = reqs[i].write ? pwritev(reqs[i].fd, reqs[i].iov, reqs[i].iovcnt, (off_t)reqs[i].off)
					  : preadv(reqs[i].fd, reqs[i].iov, reqs[i].iovcnt, (off_t)reqs[i].off);
		e->done[e->ndone].tag = reqs[i].tag;
		e->done[e->ndone].res = r < 0 ? -errno : r;
		e->ndone++;
	}
	return 0;
}

static int psync_reap(struct ioengine *e, struct iocomp *out, int min, int max)
{
	(void)min;
	int n = e->ndone < max ? e->ndone : max;
	for (int i = 0; i < n; i++)
		out[i] = e->done[i];
	for (int i = n; i < e->ndone; i++)
		e->done[i - n] = e->done[i];
	e->ndone -= n;
	return n;
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
