/* The array's SSD performance tier or SSD read cache (arraymodel.c's model): the
 * policies are the engine's (workload/src/tierpolicy.c, cachepolicy.c), this file
 * counts the accesses, keeps where each unit's data is and moves units, one at a
 * time, between the set and the SSD pair. Figures: analyzer/lab/array_model.toml. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrayparts.h"

int tiered, rcache; /* an SSD tier, or an SSD read cache (cachepolicy.c) */
struct cp cp;
uint8_t *filled; /* the read cache's units whose copy is done */
uint64_t unit_bytes;
int64_t nunits;
struct tp tp;
uint8_t *where;
uint32_t *window;
int64_t *promote_buf, *demote_buf;
static struct move *moves, **moves_tail = &moves;
static int moving;

/* A read of unit u in the read cache (once per read and unit it touches): a hit when
 * its copy is there (the LRU's most recent now), else a miss queued for a fill
 * (cachepolicy.c: the simulator's lru). A unit the policy holds whose copy is not
 * done yet is served by the disks, and counted a miss. */
int rcache_read(int64_t u)
{
	if (u >= nunits)
		return 0;
	int hit = cp_read(&cp, u);
	if (decisions)
		fprintf(decisions, "c %lld %d %d\n", (long long)u, hit, hit && filled[u]);
	if (hit && filled[u]) {
		S.rcache_hits++;
		return 1;
	}
	S.rcache_misses++;
	return 0;
}

/* ---- the tier's mover: one unit at a time, demotions first (as the engine's) ---- */
static struct move *move_add(int64_t unit, int promote)
{
	struct move *m = calloc(1, sizeof *m);
	if (!m)
		exit(1);
	m->unit = unit;
	m->promote = promote;
	*moves_tail = m;
	moves_tail = &m->next;
	return m;
}

/* The unit on the set: per stripe, each data chunk (reads) or all N chunks (a full
 * stripe written: data, P and Q). */
static void move_set_ops(struct move *m, int write, double t)
{
	uint64_t first = (uint64_t)m->unit * unit_bytes / (ndata * chunk), n = unit_bytes / (ndata * chunk);
	struct dop *list = NULL;
	for (uint64_t s = first; s < first + n; s++)
		for (int role = 0; role < (write ? ndata + 2 : ndata); role++) {
			struct dop *op = new_op(disk_of(s, role), s * chunk, (uint32_t)chunk, write);
			op->move = m;
			op->next = list;
			list = op;
			m->pending++;
		}
	issue(list, t);
}

static void move_ssd_op(struct move *m, int write, double t)
{
	struct dop *op = new_op(SSD, (uint64_t)m->unit * unit_bytes, (uint32_t)unit_bytes, write);
	op->move = m;
	m->pending = 1;
	issue(op, t);
}

void move_next(double t)
{
	if (moving || !moves)
		return;
	struct move *m = moves;
	moves = m->next;
	if (!moves)
		moves_tail = &moves;
	moving = 1;
	m->phase = 1;
	if (m->promote)
		move_set_ops(m, 0, t);
	else
		move_ssd_op(m, 0, t);
}

void move_op_done(struct move *m, double t)
{
	if (--m->pending)
		return;
	if (m->phase == 1) {
		m->phase = 2;
		if (m->promote)
			move_ssd_op(m, 1, t);
		else
			move_set_ops(m, 1, t);
		return;
	}
	S.migrated_bytes += unit_bytes;
	if (m->fill) {
		cp_admitted(&cp, m->unit);
		filled[m->unit] = 1;
		S.fills++;
	} else {
		where[m->unit] = (uint8_t)m->promote; /* the data's place switches when copied */
		if (m->promote)
			S.promoted++;
		else
			S.demoted++;
	}
	free(m);
	moving = 0;
	if (rcache)
		fill_next(t);
	else
		move_next(t);
}

/* The read cache's next fill, one at a time: the victim leaves at once (its copy is
 * clean: nothing to write back), the unit is read from the disks and written to the
 * SSDs, and is a hit once that is done. */
void fill_next(double t)
{
	int64_t u, victim;
	if (moving || !cp_next(&cp, &u, &victim))
		return;
	if (decisions)
		fprintf(decisions, "f %lld %lld\n", (long long)u, (long long)victim);
	if (victim >= 0) {
		filled[victim] = 0;
		S.evictions++;
	}
	move_add(u, 1)->fill = 1;
	move_next(t);
}

/* A statistics boundary (t0 + n x tier_stats_s): the window's accesses to the
 * policy (workload/src/tierpolicy.c, the simulator's arithmetic); a migration's
 * decisions queued for the mover. */
void stats_boundary(double t)
{
	S.windows++;
	if (tp_window(&tp, window)) {
		int64_t np, nd;
		tp_migrate(&tp, promote_buf, &np, demote_buf, &nd);
		if (np || nd)
			S.migrations++;
		if (decisions)
			fprintf(decisions, "m %.9f %lld %lld\n", t - t0, (long long)np, (long long)nd);
		for (int64_t i = 0; i < nd; i++)
			move_add(demote_buf[i], 0);
		for (int64_t i = 0; i < np; i++)
			move_add(promote_buf[i], 1);
		move_next(t);
	}
	memset(window, 0, (size_t)nunits * sizeof *window);
	ev_schedule(t0 + (double)(S.windows + 1) * P.tier_stats_s, EV_STATS, NULL);
}
