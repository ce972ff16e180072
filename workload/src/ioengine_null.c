/* null backend: every request completes at once with its full size and touches
 * nothing. Measures the engine's own CPU cost, as fio's null engine does. */
#include <stdlib.h>

#include "ioengine.h"

struct ioengine {
	struct iocomp_queue q;
};

static struct ioengine *null_open(unsigned depth)
{
	(void)depth;
	return calloc(1, sizeof(struct ioengine));
}

static int null_submit(struct ioengine *e, struct ioreq *reqs, int n)
{
	for (int i = 0; i < n; i++) {
		int64_t bytes = 0;
		for (int v = 0; v < reqs[i].iovcnt; v++)
			bytes += (int64_t)reqs[i].iov[v].iov_len;
		if (iocomp_queue_push(&e->q, reqs[i].tag, bytes, 0, 0))
			break;
	}
	return 0;
}

static int null_reap(struct ioengine *e, struct iocomp *out, int min, int max)
{
	(void)min;
	return iocomp_queue_pop(&e->q, out, max);
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
