/* iotape-lanes, dependent plans (`replay plan --timing dependent|afap`): each
 * request is issued when the requests it waits for have completed, plus its
 * think time, at its submitter's depth. fio 3.33 cannot express "after that
 * completion", so these plans run here only.
 *
 * A job's log (replayer/plan/dependent.py writes it):
 *   iotape dependent log 1
 *   open PATH
 *   ID AFTER THINK ACTION OFFSET LENGTH       one line a request, in issue order
 * ID: the request's number in the plan (every job's ids are the plan's);
 * AFTER: the ids it waits for, comma-separated, or - for none; THINK: microseconds
 * after the latest of them completed, or @US: at US after the start (no
 * predecessor); ACTION: read, write, trim or sync, a write with +fua (RWF_DSYNC)
 * and/or +preflush (fdatasync first). Lines starting with ; are comments.
 * A line may end `or AFTER THINK`: a second way to go, taken where it comes
 * first: a long think replayed on demand (replayer/plan/demand.py) waits for its
 * demand (the first AFTER and THINK) but never longer than the recorded plan
 * would have (the second; `- @US` where that had no predecessor).
 * A line may end `join IDS` (after any `or`): a log writer's write that may go
 * in the write before it once IDS have completed (group commit: groupcommit.c).
 *
 * The job's `iodepth` threads take its requests in order, so at most iodepth are
 * in flight. Each issue checks that every request it waited for (with `or`: of
 * one of its ways) had completed:
 * the count of those that had not (0 unless this program is wrong) is reported
 * as "dependencies": {"issued_before_predecessor": N}.
 *
 * Think time net of the host's delay (docs/replay.md "Think time net of the
 * host"): a recorded think time runs from the block completion to the next block
 * issue, so it holds the recording host's delay (the completion's interrupt
 * waking the thread, the next submission) besides the application's think; the
 * replay pays its own such delay on top. Each job's smallest relative think is an
 * upper bound of what its log's thinks hold of the recording host's delay (its
 * "floor"); calib.c measures this host's own delay before the start (a short
 * chain of reads of the target through deps_worker, less the device's own
 * service time). Each relative think is then replayed less min(job floor, own
 * delay) (net_think), never below 0: it takes out no more than the trace shows
 * was there, and no more than the replay adds.
 * IOTAPE_LANES_OWN_FLOOR_US gives this host's delay instead (0: thinks as logged).
 *
 * The spin rule (io.c): a request whose recorded think is under spin_think_ns
 * (the application stayed on a CPU through it) waits for its predecessor in
 * flight and for its think's end awake, and its think is net of the own delay
 * of such a wait (calib.c times both kinds); any other sleeps through both, as
 * the application slept, and is net of a slept wait's delay. The report counts
 * each kind ("thinks_awake", "thinks_asleep"). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lanes.h"

#define HEADER "iotape dependent log 1"

long long *done_ns; /* by id: completion time, 0 until then */
/* By id: DONE once done_ns is set; SLEEPER while not, with a thread asleep on it;
 * LOOPER, the event loop waits for it (evloop.c). A thread waits on its
 * predecessor's word alone (a futex): one condition variable broadcast at every
 * completion woke every waiting thread (a flusher's window of 32 threads, on 2
 * vCPUs) for each of the others' completions, and slowed an afap replay's
 * session chain ~4x. The completing thread wakes the word only where SLEEPER
 * says someone sleeps on it: no system call at a completion nobody waits for
 * (issue 34's hop cost); the loop's eventfd likewise only where LOOPER says. */
atomic_int *done_flag;
int deps_loop_fd = -1;
/* By id: 1 once issued. A wait for a request in flight is a device's service
 * time, worth spending awake (io.c's spin_ns); one not yet issued sleeps. */
atomic_uchar *issued;
atomic_llong spun_ns, early, waited_ns;
static long long n_ids, n_requests, n_with_pred, n_awake, n_asleep, n_fixed;
static int dependent;
static own_delay_t own; /* this host's delay in a dependent cycle (calib.c) */
static const job_t *jobs_of; /* for the report */
static int n_jobs;
/* How this thread's current request waited (HOP_* bits) and the latest
 * completion it waited for: for IOTAPE_LANES_HOPS (hops.c). */
static _Thread_local int hop_how;
static _Thread_local long long hop_ready;

/* A relative think replayed net of the host's delay: less the smaller of the
 * job's floor (its smallest think) and this host's own, never below 0. */
long long net_think(long long think_ns, long long job_floor_ns, long long own_ns) {
    long long less = job_floor_ns < own_ns ? job_floor_ns : own_ns;
    return think_ns > less ? think_ns - less : 0;
}

static int action(const char *s, int *flags) {
    char base[32];
    const char *plus = strchr(s, '+');
    size_t n = plus ? (size_t)(plus - s) : strlen(s);
    if (n >= sizeof base)
        return -1;
    memcpy(base, s, n);
    base[n] = 0;
    *flags = (plus && strstr(plus, "+fua") ? FUA_FLAG : 0) |
             (plus && strstr(plus, "+preflush") ? PREFLUSH_FLAG : 0);
    if (!strcmp(base, "read"))
        return READ;
    if (!strcmp(base, "write"))
        return WRITE;
    if (!strcmp(base, "trim"))
        return TRIM;
    if (!strcmp(base, "sync"))
        return SYNC;
    return -1;
}

static int preds(long long id, char *after, long long **pred, int *npred) {
    if (!strcmp(after, "-"))
        return 0;
    int n = 1;
    for (char *c = after; *c; c++)
        n += *c == ',';
    *pred = calloc((size_t)n, sizeof **pred);
    if (!*pred)
        return -1;
    for (char *tok = strtok(after, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        long long p = strtoll(tok, &end, 10);
        if (*end || p < 0 || p >= id)
            return -1;
        (*pred)[(*npred)++] = p;
    }
    return 0;
}

/* THINK: microseconds, or @US where it waits for nothing (npred 0). */
static int think_of(const char *think, int npred, int *absolute, long long *t_ns) {
    *absolute = think[0] == '@';
    char *end;
    long long us = strtoll(think + *absolute, &end, 10);
    if (*end || us < 0 || (*absolute != !npred))
        return -1;
    *t_ns = us * 1000LL;
    return 0;
}

static int request(struct dreq *q, char *ln) {
    char after[8192], think[64], act[32], or_[4], alt_after[8192], alt_think[64];
    if (gc_parse(q, ln, preds))
        return -1;
    int got = sscanf(ln, "%lld %8191s %63s %31s %lld %lld %3s %8191s %63s", &q->id, after,
                     think, act, &q->off, &q->len, or_, alt_after, alt_think);
    if ((got != 6 && got != 9) || q->id < 0 || q->off < 0 || q->len < 0)
        return -1;
    if ((q->dir = action(act, &q->flags)) < 0 || preds(q->id, after, &q->pred, &q->npred))
        return -1;
    if (think_of(think, q->npred, &q->absolute, &q->t_ns))
        return -1;
    if (got == 6)
        return 0;
    q->alt = 1;
    if (strcmp(or_, "or") || q->absolute || preds(q->id, alt_after, &q->alt_pred, &q->nalt))
        return -1;
    return think_of(alt_think, q->nalt, &q->alt_absolute, &q->alt_t_ns);
}

int deps_load(job_t *job) {
    FILE *f = fopen(job->log, "r");
    if (!f)
        return 0; /* the worker says why */
    char ln[16384];
    size_t cap = 0;
    long ln_no = 0;
    while (fgets(ln, sizeof ln, f)) {
        ln_no++;
        ln[strcspn(ln, "\n")] = 0;
        if (ln_no == 1 && strcmp(ln, HEADER))
            break;
        if (ln_no == 1 || ln[0] == ';' || !ln[0])
            continue;
        if (!strncmp(ln, "open ", 5)) {
            if (strlen(ln + 5) >= sizeof job->target) {
                fprintf(stderr, "iotape-lanes: %s:%ld: path too long\n", job->log, ln_no);
                exit(2);
            }
            memcpy(job->target, ln + 5, strlen(ln + 5) + 1);
            continue;
        }
        /* a job's own lines from the target's recording: a timer, a clock */
        int lz = lazy_parse(job, ln), ck = lz ? 0 : clock_parse(job, ln);
        int cp = lz || ck ? 0 : cpu_parse(job, ln);
        if (lz < 0 || ck < 0 || cp < 0) {
            fprintf(stderr, "iotape-lanes: %s:%ld: not `%s`: %.80s\n", job->log, ln_no,
                    lz   ? "lazy REST_US (1 to 10000000)"
                    : ck ? "clock PERIOD_US LO HI"
                         : "cpu US (over 0, to 1000000)",
                    ln);
            exit(2);
        }
        if (lz || ck || cp)
            continue;
        if (job->nreq == cap) {
            cap = cap ? 2 * cap : 1024;
            job->reqs = realloc(job->reqs, cap * sizeof *job->reqs);
            if (!job->reqs) {
                fprintf(stderr, "iotape-lanes: out of memory\n");
                exit(1);
            }
        }
        struct dreq *q = &job->reqs[job->nreq];
        *q = (struct dreq){0};
        if (request(q, ln)) {
            fprintf(stderr, "iotape-lanes: %s:%ld: not a dependent log line: %.80s\n", job->log,
                    ln_no, ln);
            exit(2);
        }
        job->nreq++;
        if ((q->dir == READ || q->dir == WRITE) && q->len > max_bs)
            max_bs = q->len; /* the buffers are sized after every log is read */
        if (q->joinable && max_bs < GC_MAX_BYTES)
            max_bs = GC_MAX_BYTES; /* a group commit's write */
        if (q->id >= n_ids)
            n_ids = q->id + 1;
        n_with_pred += q->npred > 0 || q->nalt > 0;
    }
    fclose(f);
    if (ln_no && !job->reqs && job->target[0])
        job->reqs = calloc(1, sizeof *job->reqs); /* a log of no requests */
    if (!job->reqs)
        return 0;
    if (!job->target[0]) {
        fprintf(stderr, "iotape-lanes: %s: no `open PATH` line\n", job->log);
        exit(2);
    }
    dependent = 1;
    n_requests += (long long)job->nreq;
    return 1;
}

int deps_any(void) {
    return dependent;
}

/* The spin rule: a relative think under spin_think_ns, where anything spins. */
static int awake_think(const struct dreq *q) {
    return spin_ns > 0 && !q->absolute && q->t_ns < spin_think_ns;
}

int deps_awake_any(const job_t *jobs, int n) {
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < jobs[j].nreq; i++)
            if (awake_think(&jobs[j].reqs[i]))
                return 1;
    return 0;
}

void deps_start(job_t *jobs, int n, const own_delay_t *od) {
    if (!dependent)
        return;
    own = *od;
    jobs_of = jobs;
    gc_on(); /* its switch read here, before any thread asks */
    n_jobs = n;
    for (int j = 0; j < n; j++) {
        job_t *job = &jobs[j];
        /* A floor for each kind of wait: a think slept through holds a sleep's
         * wake-up (the application's, and this replay's again), which the job's
         * smallest think, often 0 (a hop after another thread's completion), does
         * not bound: its smallest slept think does. Without a think awake (no
         * spin) the two are one, the floor of before the spin rule. */
        long long floor = LLONG_MAX, floor_asleep = LLONG_MAX;
        int spends = cpu_job(job);
        for (size_t i = 0; i < job->nreq; i++) {
            struct dreq *q = &job->reqs[i];
            if (!q->absolute && q->t_ns < floor)
                floor = q->t_ns;
            /* a spending job's think of 0 held no sleep (its CPU is spent): no wake */
            if (!q->absolute && (spends ? q->t_ns > 0 : !awake_think(q)) && q->t_ns < floor_asleep)
                floor_asleep = q->t_ns;
        }
        job->think_floor_ns = floor == LLONG_MAX ? 0 : floor;
        job->think_floor_asleep_ns = floor_asleep == LLONG_MAX ? 0 : floor_asleep;
        job->think_net_ns = 0;
        job->reads_only = job->nreq > 0;
        for (size_t i = 0; i < job->nreq; i++)
            job->reads_only &= job->reqs[i].dir == READ;
        job->thinks_awake = job->thinks_asleep = 0;
        /* by its recorded think; a job's think beyond its CPU a cycle is a sleep
         * (cpubudget.c: the burn is its time awake) */
        for (size_t i = 0; i < job->nreq; i++)
            job->reqs[i].awake =
                !spends && !job->reqs[i].absolute && awake_think(&job->reqs[i]);
        n_fixed += fixed_think(job) > 0;
        for (size_t i = 0; i < job->nreq; i++) {
            struct dreq *q = &job->reqs[i];
            if (q->absolute)
                continue;
            /* net of the own delay of its kind of wait */
            long long od_ns = q->awake ? own.awake_ns : own.ns;
            long long fl = q->awake ? job->think_floor_ns : job->think_floor_asleep_ns;
            *(q->awake ? &job->thinks_awake : &job->thinks_asleep) += 1;
            q->t_ns = net_think(q->t_ns, fl, od_ns);
            if (q->alt && !q->alt_absolute)
                q->alt_t_ns = net_think(q->alt_t_ns, fl, od_ns);
            job->think_net_ns += q->t_ns;
        }
        n_awake += job->thinks_awake;
        n_asleep += job->thinks_asleep;
    }
    if (dependent && (!(done_ns = calloc((size_t)n_ids + 1, sizeof *done_ns)) ||
                      !(done_flag = calloc((size_t)n_ids + 1, sizeof *done_flag)) ||
                      !(issued = calloc((size_t)n_ids + 1, sizeof *issued)))) {
        fprintf(stderr, "iotape-lanes: out of memory\n");
        exit(1);
    }
    if (dependent)
        hops_init(n_ids, n);
}

static int is_done(long long p) {
    return atomic_load_explicit(&done_flag[p], memory_order_acquire) & DONE;
}

/* Whether every one of the n requests `p` has completed; *latest: the latest
 * completion of them (0 for none), *pending: one that has not. */
static int all_done(const long long *p, int n, long long *latest, long long *pending) {
    *latest = 0;
    for (int k = 0; k < n; k++) {
        if (!is_done(p[k])) {
            *pending = p[k];
            return 0;
        }
        long long d = __atomic_load_n(&done_ns[p[k]], __ATOMIC_ACQUIRE);
        if (d > *latest)
            *latest = d;
    }
    return 1;
}

/* Wait on request p's word until it completes, or until `until_ns` (0: a while,
 * to see a stop). Awake first, for up to *spin_left (the request's budget,
 * spent as it goes), while p is in flight and a spinner is free (io.c). */
static void wait_done(long long p, long long until_ns, long long *spin_left) {
    int in_flight = atomic_load_explicit(&issued[p], memory_order_relaxed);
    if (*spin_left > 0 && in_flight && !spin_take())
        hop_how |= HOP_NO_SPINNER;
    else if (*spin_left > 0 && in_flight) {
        hop_how |= HOP_PRED_SPUN;
        long long t0 = now_ns(), end = t0 + *spin_left, t = t0;
        if (until_ns && until_ns < end)
            end = until_ns;
        while (!is_done(p) && !atomic_load_explicit(&stop_all, memory_order_relaxed) &&
               (t = now_ns()) < end)
            sched_yield();
        spin_give();
        *spin_left -= t - t0;
        atomic_fetch_add_explicit(&spun_ns, t - t0, memory_order_relaxed);
        if (is_done(p) || (until_ns && t >= until_ns))
            return;
    }
    long long wait = 200000000L, now = now_ns(); /* see a stop */
    if (until_ns && until_ns - now < wait)
        wait = until_ns > now ? until_ns - now : 0;
    if (!wait)
        return;
    struct timespec ts = {wait / 1000000000LL, wait % 1000000000LL};
    /* say a thread sleeps on it (unless done meanwhile); the wait returns at once
     * where the word changed (DONE, or LOOPER added: the caller looks again) */
    int was = atomic_load(&done_flag[p]);
    while (!(was & (DONE | SLEEPER)) &&
           !atomic_compare_exchange_weak(&done_flag[p], &was, was | SLEEPER))
        ;
    if (was & DONE)
        return;
    hop_how |= HOP_PRED_SLEPT;
    syscall(SYS_futex, (int *)&done_flag[p], FUTEX_WAIT_PRIVATE, was | SLEEPER, &ts, NULL, 0);
}

/* When `q` may go with its `or`: the earlier of its two ways, each the latest
 * completion of its list plus its think (or its absolute time). It waits on a
 * request of the way not yet ready, no longer than the other's time. */
static long long due_either(const struct dreq *q, long long g) {
    long long spin_left = q->awake ? spin_ns : 0;
    /* first what both ways wait for (its own predecessor): no need to look twice */
    for (int k = 0; k < q->npred && !atomic_load(&stop_all); k++)
        for (int m = 0; m < q->nalt; m++)
            while (q->alt_pred[m] == q->pred[k] && !atomic_load(&stop_all) &&
                   !is_done(q->pred[k]))
                wait_done(q->pred[k], 0, &spin_left);
    for (;;) {
        long long l1, l2, p1 = -1, p2 = -1, due = LLONG_MAX;
        int a1 = all_done(q->pred, q->npred, &l1, &p1);
        int a2 = q->alt_absolute || all_done(q->alt_pred, q->nalt, &l2, &p2);
        if (a1)
            due = l1 + q->t_ns;
        if (a2) {
            long long d2 = q->alt_absolute ? g + q->alt_t_ns : l2 + q->alt_t_ns;
            due = d2 < due ? d2 : due;
        }
        if ((a1 && a2) || due <= now_ns() || atomic_load(&stop_all)) {
            hop_ready = a1 && due == l1 + q->t_ns ? l1 : (a2 && !q->alt_absolute ? l2 : 0);
            return due;
        }
        /* neither ready: the first way's request, for a short while (the other's
         * may complete first); else the one way's, until the other's time */
        if (!a1 && !a2)
            wait_done(p1, now_ns() + 100000, &spin_left);
        else
            wait_done(a1 ? p2 : p1, due, &spin_left);
    }
}

/* When `q` may go: the latest completion of what it waits for plus its think
 * time, or its absolute time. */
static long long due_of(const struct dreq *q) {
    long long g = (long long)genesis.tv_sec * 1000000000LL + genesis.tv_nsec;
    hop_ready = 0;
    if (q->absolute)
        return g + q->t_ns;
    long long latest = 0, t0 = now_ns(), spin_left = q->awake ? spin_ns : 0;
    if (q->alt) {
        latest = due_either(q, g);
        atomic_fetch_add(&waited_ns, now_ns() - t0);
        return latest;
    }
    for (int k = 0; k < q->npred && !atomic_load(&stop_all);) {
        long long p = q->pred[k];
        if (!is_done(p)) {
            wait_done(p, 0, &spin_left);
            continue;
        }
        long long d = __atomic_load_n(&done_ns[p], __ATOMIC_ACQUIRE);
        if (d > latest)
            latest = d;
        k++;
    }
    atomic_fetch_add(&waited_ns, now_ns() - t0);
    hop_ready = latest;
    return latest + q->t_ns;
}

/* 1 once what `q` waits for (either way, with `or`) has completed; 0 where it
 * had not by until_ns (lazywrite.c's timer) */
static int ready_by(const struct dreq *q, long long until_ns) {
    long long latest, pending = -1, spin_left = 0;
    while (!atomic_load(&stop_all)) {
        if (all_done(q->pred, q->npred, &latest, &pending))
            return 1;
        if (q->alt && (q->alt_absolute || all_done(q->alt_pred, q->nalt, &latest, &pending)))
            return 1;
        if (now_ns() >= until_ns)
            return 0;
        wait_done(pending, until_ns, &spin_left);
    }
    return 1;
}

/* Whether every request of the n `p` had completed by `at`. */
static int done_by(const long long *p, int n, long long at) {
    for (int k = 0; k < n; k++) {
        long long d = __atomic_load_n(&done_ns[p[k]], __ATOMIC_ACQUIRE);
        if (!d || d > at)
            return 0;
    }
    return 1;
}

int deps_early(const struct dreq *q, long long at) {
    int bad = 0;
    if (!q->alt) {
        for (int k = 0; k < q->npred; k++) {
            long long d = __atomic_load_n(&done_ns[q->pred[k]], __ATOMIC_ACQUIRE);
            bad += !d || d > at;
        }
    } else {
        bad = !done_by(q->pred, q->npred, at) &&
              !(q->alt_absolute || done_by(q->alt_pred, q->nalt, at)); /* neither way */
    }
    if (bad)
        atomic_fetch_add(&early, bad);
    return bad > 0;
}

void deps_done(long long id, long long done, int by_loop) {
    __atomic_store_n(&done_ns[id], done, __ATOMIC_RELEASE);
    int was = atomic_exchange_explicit(&done_flag[id], DONE, memory_order_acq_rel);
    if (was & SLEEPER)
        syscall(SYS_futex, (int *)&done_flag[id], FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    uint64_t one = 1; /* the loop's eventfd (never closed): it cannot fail but at 2^64 - 1 */
    if (was & LOOPER && !by_loop && deps_loop_fd >= 0)
        (void)!write(deps_loop_fd, &one, sizeof one);
}

int deps_issue(int fd, const struct dreq *q, long long len) {
    if (q->flags & PREFLUSH_FLAG && fdatasync(fd))
        return errno;
    if (q->dir == WRITE && q->flags & FUA_FLAG) {
        struct iovec v = {wbuf, (size_t)len};
        ssize_t r = pwritev2(fd, &v, 1, q->off, RWF_DSYNC);
        return r == len ? 0 : (r < 0 ? errno : EIO);
    }
    return issue(fd, q->dir, q->off, len);
}

void deps_worker(worker_t *w, tally_t *ty) {
    job_t *job = w->job;
    int fd = open(job->target, (job->reads_only ? O_RDONLY : O_RDWR) | O_DIRECT |
                                   (job->dsync ? O_DSYNC : 0));
    if (fd < 0) {
        fail(job, "%s: %s", job->target, strerror(errno));
        return;
    }
    int tid = (int)syscall(SYS_gettid);
    long long last_due = 0;
    int spend = cpu_job(job);
    while (!atomic_load(&stop_all)) {
        pthread_mutex_lock(&job->mu);
        size_t i = job->next < job->nreq ? job->next++ : job->nreq;
        pthread_mutex_unlock(&job->mu);
        if (i >= job->nreq) {
            if (last_due) /* on its own clock: on until the others finish (clockjob.c) */
                clock_run(job, fd, ty, last_due);
            break;
        }
        const struct dreq *q = &job->reqs[i];
        long long taken = lazy_before(job, i, fd, ty, ready_by); /* its segments the timer wrote */
        if (taken < 0)
            break;
        hop_how = q->awake ? HOP_AWAKE : 0;
        long long due = due_of(q), noticed = hops_on() ? now_ns() : 0;
        last_due = due;
        hop_how |= wait_until(due, q->awake);
        if (spend) /* its think beyond its CPU waited, then the rest of that CPU (cpubudget.c) */
            cpu_spend(job);
        if (atomic_load(&stop_all))
            break;
        long long at = now_ns(), len = q->len;
        deps_early(q, at);
        atomic_store_explicit(&issued[q->id], 1, memory_order_relaxed);
        size_t last = i;
        if (gc_may_take(job, i)) {
            /* group commit: the writes it takes with it (the lock only where one may) */
            pthread_mutex_lock(&job->mu);
            last = gc_take(job, i, &len);
            pthread_mutex_unlock(&job->mu);
        }
        struct dreq rest; /* what a log writer's timer writes left of it */
        if (taken) {
            rest = *q;
            rest.off += taken * LAZY_SEGMENT;
            len -= taken * LAZY_SEGMENT;
            q = &rest;
        }
        if (taken && len <= 0) { /* all written already: the turn's partial goes alone */
            lazy_took(job);
            deps_done(rest.id, at, 0);
            continue;
        }
        int err = deps_issue(fd, q, len);
        long long done = now_ns();
        if (err) {
            fail(job, "request %lld (%lld bytes at %lld in %s): %s", q->id, len, q->off,
                 job->target, strerror(err));
            break;
        }
        tally_io(ty, q->dir, len, due, at, done);
        if (hops_on()) {
            long long t[5] = {hop_ready, noticed, due, at, done};
            hops_note(q->id, (int)(job - jobs_of), tid, t, hop_how);
            for (size_t m = i + 1; m <= last; m++) /* group commit: went with it */
                hops_note(job->reqs[m].id, (int)(job - jobs_of), tid, t, hop_how);
        }
        for (size_t m = i + 1; m <= last; m++)
            deps_done(job->reqs[m].id, done, 0);
        deps_done(q->id, done, 0);
    }
    if (spend)
        job->cpu_thread_ns = cpu_now(); /* depth 1: its one thread's */
    if (hops_on())
        hops_thread_end((int)(job - jobs_of));
    close(fd);
}

int deps_blocks(const job_t *jobs, int n, long long (*blk)[2], int max, const char **target) {
    for (int want = READ; want <= WRITE; want++) /* reads first: the writes' blocks else */
        for (int j = 0; j < n; j++) {
            int nb = 0;
            for (size_t i = 0; i < jobs[j].nreq && nb < max; i++) {
                const struct dreq *q = &jobs[j].reqs[i];
                if (q->dir == want && q->len > 0 && q->len <= max_bs && q->len % 512 == 0 &&
                    q->off % 512 == 0) {
                    blk[nb][0] = q->off;
                    blk[nb++][1] = q->len;
                }
            }
            if (nb) {
                *target = jobs[j].target;
                return nb;
            }
        }
    return 0;
}

/* A timed cycle's figures (calib.c), where it was timed. */
static void cycle_report(const char *key, const cycle_t *c) {
    if (!c->rounds)
        return;
    printf(", \"%s\": {\"blocks\": %d, \"rounds\": %d, \"reads\": %d, \"late_us\": %.3f, "
           "\"wake_us\": %.3f, \"service_us\": %.3f, \"service_resolution_us\": %.3f}",
           key, own.blocks, c->rounds, c->reads, (double)c->late_ns / 1e3,
           (double)c->wake_ns / 1e3, (double)c->service_ns / 1e3,
           (double)c->resolution_ns / 1e3);
}

void deps_report(void) {
    if (!dependent)
        return;
    printf(",\n\"dependencies\": {\"requests\": %lld, \"with_predecessor\": %lld, "
           "\"issued_before_predecessor\": %lld, \"waited_ms\": %.3f, \"spin_us\": %.3f, "
           "\"spun_ms\": %.3f, \"spin_think_us\": %.3f, \"think_slack_us\": %.3f, "
           "\"thinks_awake\": %lld, "
           "\"thinks_asleep\": %lld, \"fixed_think\": %s, \"fixed_think_jobs\": %lld",
           n_requests, n_with_pred, (long long)atomic_load(&early),
           (double)atomic_load(&waited_ns) / 1e6, (double)spin_ns / 1e3,
           (double)atomic_load(&spun_ns) / 1e6, (double)spin_think_ns / 1e3,
           (double)think_slack_ns / 1e3, n_awake, n_asleep,
           fixed_think_on() ? "true" : "false", n_fixed);
    gc_report();
    lazy_report(jobs_of, n_jobs);
    clock_report(jobs_of, n_jobs);
    cpu_report(jobs_of, n_jobs);
    printf(", \"think_net\": {\"own_floor_us\": %.3f, \"own_awake_us\": %.3f, "
           "\"own_floor_from\": \"%s\"",
           (double)own.ns / 1e3, (double)own.awake_ns / 1e3, own.from);
    if (strcmp(own.from, "given"))
        printf(", \"timer_us\": %.3f, \"timer_awake_us\": %.3f", (double)own.timer_ns / 1e3,
               (double)own.timer_awake_ns / 1e3);
    if (own.reason[0]) {
        printf(", \"reason\": ");
        json_str(own.reason);
    }
    cycle_report("cycle", &own.asleep);
    cycle_report("cycle_awake", &own.awake);
    printf(", \"jobs\": {");
    for (int j = 0, k = 0; j < n_jobs; j++)
        if (jobs_of[j].nreq) {
            printf("%s", k++ ? ", " : "");
            json_str(jobs_of[j].name);
            printf(": {\"floor_us\": %.3f, \"floor_asleep_us\": %.3f, \"replayed_think_us\": "
                   "%.3f, \"thinks_awake\": %lld, \"thinks_asleep\": %lld, "
                   "\"fixed_think_us\": ",
                   (double)jobs_of[j].think_floor_ns / 1e3,
                   (double)jobs_of[j].think_floor_asleep_ns / 1e3,
                   (double)jobs_of[j].think_net_ns / 1e3, jobs_of[j].thinks_awake,
                   jobs_of[j].thinks_asleep);
            if (jobs_of[j].fixed_think_ns)
                printf("%.3f", (double)jobs_of[j].fixed_think_ns / 1e3);
            else
                printf("null");
            printf(", \"thinks_fixed\": %lld, \"stalls_fixed\": %lld, \"stall_ms\": %.3f}",
                   jobs_of[j].thinks_fixed, jobs_of[j].stalls_fixed,
                   (double)jobs_of[j].stall_ns / 1e6);
        }
    printf("}}}");
}
