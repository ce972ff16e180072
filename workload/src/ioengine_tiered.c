/* tiered backend: psync's synchronous requests, each served by tier.c from the
 * unit's current device. Synchronous on purpose: a session thread waits for its
 * own I/O, so a faster tier lets the fixed thread count do more of it (the
 * closed loop the hybrid-array measurement is about). */
#include <errno.h>
#include <stdlib.h>

#include "ese.h"
#include "tier.h"

struct ioengine {
	struct iocomp_queue q;
};

static struct ioengine *tiered_open(unsigned depth)
{
	(void)depth;
	return calloc(1, sizeof(struct ioengine));
}

static int tiered_submit(struct ioengine *e, struct ioreq *reqs, int n)
{
	for (int i = 0; i < n; i++) {
		if (e->q.n >= IOE_MAX_DEPTH)
			return -EBUSY;
		uint64_t t0 = now_ns(); /* served one after another: each stamped on its own */
		int64_t r = tier_rw(reqs[i].fd, reqs[i].write, reqs[i].iov, reqs[i].iovcnt, reqs[i].off);
		iocomp_queue_push(&e->q, reqs[i].tag, r, t0, now_ns());
	}
	return 0;
}

static int tiered_reap(struct ioengine *e, struct iocomp *out, int min, int max)
{
	(void)min;
	return iocomp_queue_pop(&e->q, out, max);
}

static void tiered_close(struct ioengine *e)
{
	free(e);
}

const struct ioengine_ops ioengine_tiered = {
	.name = "tiered",
	.open = tiered_open,
	.submit = tiered_submit,
	.reap = tiered_reap,
	.close = tiered_close,
};
