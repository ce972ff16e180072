/* null backend: every request completes at once with its full size and touches
 * nothing. Measures the engine's own CPU cost, as fio's null engine does. */
#include <stdlib.h>

#include "ioengine.h"

struct ioengine {
	struct iocomp done[IOE_MAX_DEPTH];
	int ndone;
};

static struct ioengine *null_open(unsigned depth)
{
	(void)depth;
	return calloc(1, sizeof(struct ioengine));
}

static int null_submit(struct ioengine *e, struct ioreq *reqs, int n)
{
	for (int i = 0; i < n && e->ndone < IOE_MAX_DEPTH; i++) {
		int64_t bytes = 0;
		for (int v = 0; v < reqs[i].iovcnt; v++)
			bytes += (int64_t)reqs[i].iov[v].iov_len;
		e->done[e->ndone].tag = reqs[i].tag;
		e->done[e->ndone].res = bytes;
		e->ndone++;
	}
	return 0;
}

static int null_reap(struct ioengine *e, struct iocomp *out, int min, int max)
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

static void null_close(struct ioengine *e)
{
	free(e);
}

const struct ioengine_ops ioengine_null = {
	.name = "null",
	.open = null_open,
	.submit = null_submit,
	.reap = null_reap,
	.close = null_close,
};
