/* Device-latency emulation (--emulate-*-ms), clearly an emulation: the engine
 * holds each completion back until the request has been in flight for at least
 * the given time, as if the device had answered that slowly.
 *
 * Why: group commit, lazy-commit flushing, checkpoint depth against the log
 * rate and the fixed-rate maintenance reads all run on the clock, so the I/O
 * shape of a run depends on the device's latency. A loop device over memory
 * answers in microseconds; the published SSD runs answered database reads in
 * ~11 ms and log writes in ~0.5 ms. Holding completions to the published
 * latencies reproduces the published run's timing on any fast target, while
 * the I/O itself (offsets, sizes, order per thread) stays real, so a recorder
 * sees every request. Only a floor: a device slower than the floor is left as
 * it is. Each worker serves one stream, so one floor per worker. */
#include <string.h>

#include "ese.h"

static void emu_mark(struct worker *w, struct ioreq *rq, int n)
{
	if (w->emu_ns) {
		uint64_t t = now_ns();
		for (int i = 0; i < n; i++)
			if (rq[i].tag < IOE_MAX_DEPTH)
				w->emu_sub[rq[i].tag] = t;
	}
}

int w_submit(struct worker *w, struct ioreq *rq, int n)
{
	emu_mark(w, rq, n);
	return w->ops->submit(w->io, rq, n);
}

int w_submit_wait(struct worker *w, struct ioreq *rq, int n)
{
	emu_mark(w, rq, n);
	if (w->ops->submit_wait)
		return w->ops->submit_wait(w->io, rq, n);
	return w->ops->submit(w->io, rq, n);
}

/* Move the held completions that are due into out[]; the earliest still held is
 * returned in *next (0 when none is held). */
static int take_due(struct worker *w, struct iocomp *out, int max, uint64_t now, uint64_t *next)
{
	int got = 0, k = 0;
	*next = 0;
	for (int i = 0; i < w->emu_n; i++) {
		if (got < max && w->emu_held[i].due <= now) {
			/* Its own start kept; it ends when handed back (t_end 0). */
			out[got] = (struct iocomp){.tag = w->emu_held[i].tag, .res = w->emu_held[i].res,
						   .t_start_ns = w->emu_held[i].start};
			got++;
			continue;
		}
		if (!*next || w->emu_held[i].due < *next)
			*next = w->emu_held[i].due;
		w->emu_held[k++] = w->emu_held[i];
	}
	w->emu_n = k;
	return got;
}

int w_reap(struct worker *w, struct iocomp *out, int min, int max)
{
	if (!w->emu_ns)
		return w->ops->reap(w->io, out, min, max);
	int got = 0;
	for (;;) {
		/* Everything the device has finished joins the held set, stamped with
		 * when the emulated device would have finished it. Block on the device
		 * only when nothing is held, so a held completion is never late. */
		struct iocomp tmp[IOE_MAX_DEPTH];
		int room = IOE_MAX_DEPTH - w->emu_n;
		int block = got < min && w->emu_n == 0;
		int r = room > 0 ? w->ops->reap(w->io, tmp, block ? 1 : 0, room) : 0;
		for (int i = 0; i < r; i++) {
			/* The floor counts from the request's own start where a
			 * synchronous backend gave it, not from the batch's submit. */
			uint64_t sub = tmp[i].t_start_ns ? tmp[i].t_start_ns
				       : tmp[i].tag < IOE_MAX_DEPTH ? w->emu_sub[tmp[i].tag] : 0;
			w->emu_held[w->emu_n].tag = tmp[i].tag;
			w->emu_held[w->emu_n].res = tmp[i].res;
			w->emu_held[w->emu_n].start = sub;
			w->emu_held[w->emu_n].due = sub + w->emu_ns;
			w->emu_n++;
		}
		uint64_t next, now = now_ns();
		got += take_due(w, out + got, max - got, now, &next);
		if (got >= min || got >= max)
			return got;
		if (next > now)
			sleep_ns(next - now);
	}
}

/* The floor each worker's stream gets, from its thread name. */
void emulate_setup(struct worker *w)
{
	const struct config *c = &E.cfg;
	double ms = 0;
	if (!strncmp(w->name, "ese-user", 8))
		ms = c->emu_db_read_ms;
	else if (!strncmp(w->name, "ese-ckpt", 8))
		ms = c->emu_db_write_ms;
	else if (!strncmp(w->name, "ese-log-", 8))
		ms = c->emu_log_write_ms;
	w->emu_ns = (uint64_t)(ms * 1e6);
}
