#include "cpurings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

uint32_t cpurings_slots(uint64_t ring_bytes, int ncpu)
{
	uint64_t fit = ring_bytes / (uint64_t)(ncpu > 0 ? ncpu : 1) / sizeof(struct iotape_record);
	uint32_t slots = 1;

	while ((uint64_t)slots * 2 <= fit && slots < (1u << 30))
		slots *= 2;
	return slots;
}

int cpurings_open(struct cpurings *c, int recs_fd, int pos_fd, int ncpu, uint32_t slots)
{
	size_t recs_len = (size_t)ncpu * slots * sizeof(*c->recs);
	void *recs, *pos;

	memset(c, 0, sizeof(*c));
	recs = mmap(NULL, recs_len, PROT_READ, MAP_SHARED, recs_fd, 0);
	if (recs == MAP_FAILED)
		return -errno;
	pos = mmap(NULL, (size_t)ncpu * sizeof(*c->pos), PROT_READ | PROT_WRITE, MAP_SHARED,
		   pos_fd, 0);
	if (pos == MAP_FAILED) {
		int err = -errno;

		munmap(recs, recs_len);
		return err;
	}
	c->recs = recs;
	c->pos = pos;
	c->ncpu = ncpu;
	c->slots = slots;
	return 0;
}

int cpurings_keep(void *ctx, void *data, size_t size)
{
	struct cpurings *c = ctx;

	if (size < sizeof(*c->side))
		return 0;	/* not a record: the kernel side writes none */
	if (c->n_side == c->cap_side) {
		size_t cap = c->cap_side ? 2 * c->cap_side : 64;
		struct iotape_record *more = realloc(c->side, cap * sizeof(*more));

		if (!more)
			return -ENOMEM;
		c->side = more;
		c->cap_side = cap;
	}
	memcpy(&c->side[c->n_side++], data, sizeof(*c->side));
	return 0;
}

/* The kept records not yet handed out, from the side array's start. */
static void side_shift(struct cpurings *c, size_t handed)
{
	memmove(c->side, c->side + handed, (c->n_side - handed) * sizeof(*c->side));
	c->n_side -= handed;
}

int cpurings_drain(struct cpurings *c, cpurings_fn fn, void *ctx)
{
	uint64_t head[c->ncpu > 0 ? c->ncpu : 1], tail[c->ncpu > 0 ? c->ncpu : 1];
	size_t side = 0;
	int err = 0;

	/* The heads as of now: what the CPUs write meanwhile waits for the next
	 * drain, 10 ms later, which keeps this one's end in order. */
	for (int i = 0; i < c->ncpu; i++) {
		head[i] = __atomic_load_n(&c->pos[i].head, __ATOMIC_ACQUIRE);
		tail[i] = c->pos[i].tail;
	}
	for (;;) {
		const struct iotape_record *best = NULL;
		int from = -1;	/* the CPU of best; -1 the side array */

		/* A linear scan: a few CPUs have records in one drain's window. */
		for (int i = 0; i < c->ncpu; i++) {
			const struct iotape_record *r;

			if (tail[i] == head[i])
				continue;
			r = &c->recs[(size_t)i * c->slots + (tail[i] & (c->slots - 1))];
			if (!best || r->ts_complete_ns < best->ts_complete_ns) {
				best = r;
				from = i;
			}
		}
		if (side < c->n_side && (!best || c->side[side].ts_complete_ns < best->ts_complete_ns)) {
			best = &c->side[side];
			from = -1;
		}
		if (!best)
			break;
		/* Taken whatever FN says, as libbpf's ring buffer reader does: a
		 * failed write stops the capture, and no record is handed twice. */
		if (from < 0)
			side++;
		else
			tail[from]++;
		err = fn(ctx, (void *)best, sizeof(*best));
		if (err < 0)
			break;
	}
	/* The slots handed out are the kernel's again. */
	for (int i = 0; i < c->ncpu; i++)
		__atomic_store_n(&c->pos[i].tail, tail[i], __ATOMIC_RELEASE);
	side_shift(c, side);
	return err;
}

void cpurings_close(struct cpurings *c)
{
	if (c->recs)
		munmap((void *)c->recs, (size_t)c->ncpu * c->slots * sizeof(*c->recs));
	if (c->pos)
		munmap(c->pos, (size_t)c->ncpu * sizeof(*c->pos));
	free(c->side);
	memset(c, 0, sizeof(*c));
}
