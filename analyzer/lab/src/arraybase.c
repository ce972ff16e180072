/* The array's model's base (arraymodel.c's model): its figures and what follows from
 * them, its counters, the event heap its time runs on, its random stream and the RAID 6
 * set's layout. Under the model's one lock, as everything in the model. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "arrayparts.h"

struct array_params P = {10, 512, 10000, 0.3, 3.8, 0.56, 4.4, 150, 0.3, 1600, 64, 0.5, 50, 4, 32, 0.1, 1,
       0, 4096, 5, 5, 60, 0.1, 0.1, 500, 4, 0, 0, 0};
int rt_priority;

/* derived */
int ndisks, ndata;
uint64_t chunk, ppc, span, dirty_limit, track_bytes;
double rot_s, full_read_s, full_write_s;

uint64_t rng;

struct event *heap;
size_t nheap;
static size_t capheap;
static uint64_t evseq;
double mnow, t0;
/* The tier's and the read cache's decisions, one a line, when set (array.c --replay:
 * tests/analyzer/test_lab_array_decisions.py holds them to the simulator's):
 * "a UNIT FAST" an access and the policy's placement of its unit then; "m T NP ND"
 * a migration at T s, units promoted and demoted; "c UNIT HIT SERVED" a read's look-up
 * in the read cache (the policy's hit; served by the SSDs: its copy done too); "f UNIT VICTIM" a fill decided, the unit it evicts (-1: none). */
FILE *decisions;
struct array_stats S;

double spindle_uniform(void)
{
	/* splitmix64, under the model's lock */
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* ---- the event heap ---- */
static int before(const struct event *a, const struct event *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

void ev_schedule(double t, int kind, void *p)
{
	if (nheap == capheap) {
		capheap = capheap ? 2 * capheap : 1024;
		heap = realloc(heap, capheap * sizeof *heap);
		if (!heap)
			exit(1);
	}
	size_t i = nheap++;
	heap[i] = (struct event){t, evseq++, kind, p};
	while (i && before(&heap[i], &heap[(i - 1) / 2])) {
		struct event x = heap[i];
		heap[i] = heap[(i - 1) / 2];
		heap[(i - 1) / 2] = x;
		i = (i - 1) / 2;
	}
}

struct event ev_pop(void)
{
	struct event top = heap[0];
	heap[0] = heap[--nheap];
	for (size_t i = 0;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < nheap && before(&heap[l], &heap[m]))
			m = l;
		if (r < nheap && before(&heap[r], &heap[m]))
			m = r;
		if (m == i)
			break;
		struct event x = heap[i];
		heap[i] = heap[m];
		heap[m] = x;
		i = m;
	}
	return top;
}

/* ---- layout: stripe s holds ndata chunks and P, Q, rotating (left-symmetric) ---- */
int disk_of(uint64_t s, int role) /* role: data 0..ndata-1, ndata = P, ndata+1 = Q */
{
	int p = ndisks - 1 - (int)(s % (uint64_t)ndisks), q = (p + 1) % ndisks;
	if (role == ndata)
		return p;
	if (role == ndata + 1)
		return q;
	return (q + 1 + role) % ndisks;
}
