/* The loader's side of the completion records' per-CPU rings (bpf/iotape.h):
 * mapped, and drained in completion order across the CPUs. */
#ifndef CPURINGS_H
#define CPURINGS_H

#include <stddef.h>
#include <stdint.h>
#include "iotape_record.h"
#include "bpf/iotape.h"

typedef int (*cpurings_fn)(void *ctx, void *data, size_t size);

struct cpurings {
	int ncpu;				/* 0: no per-CPU rings (--wakes) */
	uint32_t slots;				/* records per CPU, a power of two */
	const struct iotape_record *recs;	/* ncpu * slots, read only */
	struct iotape_cpupos *pos;		/* ncpu, the loader writes tail */
	/* Records of the shared ring buffer, taken by cpurings_keep() and merged
	 * with the CPUs' at the next drain (a request completed unseen). */
	struct iotape_record *side;
	size_t n_side, cap_side;
};

/* Slots per CPU for RING_BYTES shared by NCPU: the largest power of two that fits. */
uint32_t cpurings_slots(uint64_t ring_bytes, int ncpu);
/* Maps the two arrays (map fds). Returns 0 or -errno. */
int cpurings_open(struct cpurings *c, int recs_fd, int pos_fd, int ncpu, uint32_t slots);
/* A ring buffer callback (ctx: the struct cpurings): keeps a copy for cpurings_drain. */
int cpurings_keep(void *ctx, void *data, size_t size);
/* Hands FN every record written so far, the CPUs' and the kept ones merged by
 * completion time. Returns 0, or FN's first negative return (the drain stops
 * there; the records after that one stay for the next call). */
int cpurings_drain(struct cpurings *c, cpurings_fn fn, void *ctx);
void cpurings_close(struct cpurings *c);

#endif /* CPURINGS_H */
