/* User sessions (ese-user-N-T): the Jetstress operation mix against per-mailbox
 * key ranges.
 *
 * A mailbox owns a contiguous range of pages. An operation touches runs of
 * neighbouring pages at random places in its mailbox (a B-tree seek lands on a
 * leaf; with chance preread-cont the next leaf is needed too): a read only
 * reads them, a delete or replace also dirties them, an insert appends its
 * message to the mailbox's tail page (a new page when it is full: no read) and
 * updates index runs. Modifications log a record and commit, lazily or durably.
 *
 * In performance and stress modes the sessions of a database hold its target
 * transactional IOPS. Operations arrive as a Poisson process whose mean gap is
 * (I/Os per operation so far) / target, corrected by the I/O still owed: the
 * database's completed transactional I/O is steered towards target x (time
 * since start + PACE_LEAD_S), catching up a shortfall within PACE_CATCH_S.
 * Writes lag the operations that cause them (the cache absorbs them until the
 * checkpoint or the scavenger writes), so an open-loop pace from the I/Os per
 * operation alone ran 2-4 % short (58.3 of 60 over 30 s on a loop device);
 * steering by what completed makes up the warm-up's shortfall, and the
 * lead keeps a run stopped at any moment at or above its target. In throughput
 * mode they run flat out.
 *
 * With --transactions N each session stops after N operations. Its choices
 * (kind, mailbox, pages, record sizes, lazy or durable) come from its own RNG,
 * seeded by --seed and its name (util.c), so the same N and seed give each
 * session the same sequence on any device; what the device changes is the I/O
 * they cause (cache hits, group commits, an insert's tail page shared with the
 * other sessions of its mailbox).
 */
#include <math.h>
#include <string.h>

#include "ese.h"

#define REC_MAGIC 0x31434552u /* "REC1" */
#define MAX_RUNS 8
#define PACE_LEAD_S 0.25 /* seconds of I/O the pace runs ahead of the target */
#define PACE_CATCH_S 2.0 /* a shortfall is made up within about this */

enum op { OP_INSERT, OP_DELETE, OP_REPLACE, OP_READ };

struct rec {
	uint32_t magic, len, op, nruns; /* op: the operation, and the database from bit REC_OP_DB_SHIFT */
	int64_t run[MAX_RUNS][2]; /* first page, pages */
	uint64_t dbtime[MAX_RUNS]; /* the modification number each run's pages now carry */
};

static int run_len(struct worker *w)
{
	int n = 1;
	while (n < E.cfg.preread_max && rng_unit(w->rng) < E.cfg.preread_cont)
		n++;
	return n;
}

static int64_t random_run(struct worker *w, int64_t mb, int n)
{
	struct db *d = w->db;
	int64_t span = d->pages_per_mb - n + 1;
	return mb * d->pages_per_mb + (int64_t)(rng_next(w->rng) % (uint64_t)(span > 0 ? span : 1));
}

static uint32_t uniform(struct worker *w, int lo, int hi)
{
	if (hi <= lo)
		return (uint32_t)lo;
	return (uint32_t)lo + (uint32_t)(rng_next(w->rng) % (uint64_t)(hi - lo + 1));
}

/* Touch a run and note it in the log record. 0 if the run stopped before the
 * pages were in the cache: the operation is left unfinished, not logged. */
static int touch(struct worker *w, struct rec *r, int64_t page, int n, int flags)
{
	uint64_t t = cache_access(w, page, n, flags);
	if (t == CA_CUT)
		return 0;
	if ((flags & CA_DIRTY) && r->nruns < MAX_RUNS) {
		r->run[r->nruns][0] = page;
		r->run[r->nruns][1] = n;
		r->dbtime[r->nruns] = t;
		r->nruns++;
	}
	return 1;
}

/* The mailbox's tail page after appending `bytes`; a new page when it fills. */
static int64_t tail_page(struct db *d, int64_t mb, uint32_t bytes, int *fresh)
{
	pthread_mutex_lock(&d->mu);
	int64_t p = d->tail[mb];
	*fresh = 0;
	if (d->tail_fill[mb] + bytes > (uint32_t)d->page) {
		p = mb * d->pages_per_mb + (p + 1 - mb * d->pages_per_mb) % d->pages_per_mb;
		d->tail[mb] = p;
		d->tail_fill[mb] = 0;
		*fresh = 1;
	}
	d->tail_fill[mb] += bytes;
	pthread_mutex_unlock(&d->mu);
	return p;
}

/* FNV-1a over one operation's choices, folded into a session's digest. */
static uint64_t digest_step(uint64_t h, uint64_t op, uint64_t mb, uint64_t n, uint64_t page)
{
	const uint64_t x[4] = {op, mb, n, page};
	if (!h)
		h = 0xcbf29ce484222325ull;
	for (int i = 0; i < 4; i++)
		for (int b = 0; b < 64; b += 8)
			h = (h ^ ((x[i] >> b) & 0xff)) * 0x100000001b3ull;
	return h;
}

static void one_op(struct worker *w)
{
	struct db *d = w->db;
	const struct config *c = &E.cfg;
	struct rec r = {.magic = REC_MAGIC};
	int64_t mb = (int64_t)(rng_next(w->rng) % (uint64_t)d->mailboxes);
	double u = rng_unit(w->rng) * 100.0;
	enum op op = u < c->mix_insert ? OP_INSERT
		     : u < c->mix_insert + c->mix_delete ? OP_DELETE
		     : u < c->mix_insert + c->mix_delete + c->mix_replace ? OP_REPLACE
									   : OP_READ;
	int n = run_len(w);
	int64_t page = random_run(w, mb, n);
	w->ops_done++;
	w->op_kinds[op]++;
	w->op_digest = digest_step(w->op_digest, (uint64_t)op, (uint64_t)mb, (uint64_t)n, (uint64_t)page);
	atomic_fetch_add(&d->tx_ops, 1);
	r.op = (uint32_t)op | (uint32_t)d->idx << REC_OP_DB_SHIFT; /* whose pages, in a group's log */
	switch (op) {
	case OP_READ:
		touch(w, &r, page, n, 0);
		return;
	case OP_DELETE:
		if (!touch(w, &r, page, n, CA_DIRTY))
			return;
		r.len = (uint32_t)c->log_delete;
		break;
	case OP_REPLACE:
		if (!touch(w, &r, page, n, CA_DIRTY))
			return;
		r.len = uniform(w, c->log_rec_min, c->log_replace_max);
		break;
	case OP_INSERT: {
		r.len = uniform(w, c->log_rec_min, c->log_insert_max);
		int fresh;
		int64_t tp = tail_page(d, mb, r.len, &fresh);
		if (!touch(w, &r, tp, 1, CA_DIRTY | (fresh ? CA_NEW : 0)))
			return;
		double k = c->insert_index_runs;
		int runs = (int)k + (rng_unit(w->rng) < k - floor(k));
		for (int i = 0; i < runs; i++) {
			int m = i ? run_len(w) : n;
			if (!touch(w, &r, i ? random_run(w, mb, m) : page, m, CA_DIRTY))
				return;
		}
		break;
	}
	}
	if (r.len < sizeof(r))
		r.len = sizeof(r);
	if (r.len > 262144)
		r.len = 262144;
	char buf[sizeof(r) > 262144 ? sizeof(r) : 262144];
	memcpy(buf, &r, sizeof(r));
	memset(buf + sizeof(r), 0x5a, r.len - sizeof(r));
	uint64_t lsn = log_append(d->g, buf, r.len);
	w->commits++;
	int durable = rng_unit(w->rng) * 100.0 >= c->lazy_pct;
	w->durable_commits += (uint64_t)durable;
	log_commit(d->g, lsn, durable);
}

void *session_main(void *arg)
{
	struct worker *w = arg;
	struct db *d = w->db;
	const struct config *c = &E.cfg;
	int paced = c->mode == M_PERFORMANCE || c->mode == M_STRESS;
	double target = (double)d->mailboxes * c->iops_per_mailbox, per_thread = target / c->threads;
	uint64_t next = now_ns();
	while (!atomic_load(&E.stop)) {
		if (c->transactions && w->ops_done >= (uint64_t)c->transactions)
			break;
		if (w->index >= atomic_load(&E.active_threads)) {
			sleep_ns(10000000ull); /* parked by the throughput auto-tuner */
			next = now_ns();
			continue;
		}
		if (paced) {
			uint64_t t = now_ns();
			if (t < next) {
				uint64_t nap = next - t < 20000000ull ? next - t : 20000000ull;
				sleep_ns(nap);
				continue;
			}
			uint64_t ops = atomic_load(&d->tx_ops), ios = atomic_load(&d->tx_ios);
			double per_op = ops > 50 && ios ? (double)ios / (double)ops : 1.7;
			double owed = target * ((double)(t - E.t0_ns) / 1e9 + PACE_LEAD_S) - (double)ios;
			double speed = 1.0 + owed / (target * PACE_CATCH_S);
			speed = speed < 0.5 ? 0.5 : speed > 2.0 ? 2.0 : speed;
			/* Poisson arrivals: exponential gaps with the mean the target asks for. */
			double gap = -log(1.0 - rng_unit(w->rng)) * per_op / per_thread / speed;
			next += (uint64_t)(gap * 1e9);
			if (t > next + 1000000000ull)
				next = t;
		}
		one_op(w);
	}
	if (c->transactions)
		session_done();
	return NULL;
}

/* --transactions: one session has done its share; the last one ends the load. */
void session_done(void)
{
	pthread_mutex_lock(&E.done_mu);
	if (atomic_fetch_sub(&E.sessions_left, 1) == 1) {
		E.work_end_ns = now_ns();
		pthread_cond_signal(&E.done_cv);
	}
	pthread_mutex_unlock(&E.done_mu);
}
