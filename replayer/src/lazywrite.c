/* iotape-lanes, a log writer's writes by its own clock (issue 34; the plan:
 * replayer/plan/timerwrites.py).
 *
 * A log writer writes when a commit waits for it (the writes a trace shows other
 * threads waiting for) and also on a timer: ESE's lazy commits ask for a write
 * within --lazy-flush-ms, and at the deadline the writer writes the full log
 * segments it holds, a write nobody waits for. How many such writes a run makes
 * is the device's: on the SSD-like device a durable commit comes within ~100 us
 * and takes every segment first (1 timer write in 798 log writes), on the
 * HDD-like disk model the writer is idle long enough between commits for the
 * timer to fire (373 of 1,100 at 2 spindles), and those writes take the spindle
 * from the sessions' reads. A dependent replay of the fast device's trace issues
 * only the recorded writes, and onto the slow device runs faster than the
 * application would (+35 % at 1 spindle).
 *
 * So a job whose log says `lazy REST_US` (the plan's, from a recording on the
 * target: the writer's rest before its timer writes there) does what the
 * writer's timer would: while its next write (a turn) waits for its committers,
 * once REST_US have passed since its last write completed, it writes the turn's
 * full segments the application has filled by then, from where the turn starts,
 * in one write; then again, REST_US after that one, as segments fill. A turn's
 * full segments are its length where the write after it follows on it (the
 * turn's partial segment in a write of its own; a turn of only a partial
 * segment has none), and they fill as the plan's requests between the writer's
 * last request and the turn complete (the recording's threads did those while the
 * log grew to the turn's end: the engine appends a transaction's records at its
 * commit), in proportion (the partial segment counted half full). Writing one
 * segment every REST_US instead, whether filled or not, made 1,300-1,342 log
 * writes where the engine on the target made 1,071-1,180 (1-4 spindles); by the
 * fill, 1,115-1,222 against 1,029-1,183. The recorded write then writes what the
 * timer left of it (its segments after those), and where the timer wrote them
 * all, nothing: its turn writes the partial segment alone, as the application's
 * would have (deps.c counts it done when it would have gone). A job of depth 1 on
 * threads of its own (evloop.c leaves it). IOTAPE_LANES_LAZY=0: none. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanes.h"

static int mode = -1; /* IOTAPE_LANES_LAZY: 1, 0; -1 not read */
static atomic_llong total, took;
/* How often a waiting writer looks whether a segment has filled: a tenth of the
 * HDD-like device's 5 ms service, and a wake-up a writer costs the host while its
 * turn waits, no more often. */
#define LAZY_POLL_NS 500000LL

int lazy_on(void) {
    return env_switch(&mode, "IOTAPE_LANES_LAZY", 1,
                      "a log writer's `lazy` timer writes its full segments while it waits",
                      "only the logged writes");
}

int lazy_parse(job_t *job, const char *ln) {
    if (strncmp(ln, "lazy ", 5))
        return 0;
    char *end;
    long long us = strtoll(ln + 5, &end, 10);
    if (*end || us <= 0 || us > 10000000LL)
        return -1;
    job->lazy_rest_ns = us * 1000LL;
    return 1;
}

/* The full segments of the job's write i: its length where the job's next
 * request is a write that starts where it ends (the turn's partial segment on
 * its own), else none. */
static long long full_segments(const job_t *job, size_t i) {
    const struct dreq *q = &job->reqs[i], *n = i + 1 < job->nreq ? &job->reqs[i + 1] : NULL;
    if (!n || n->dir != WRITE || n->off != q->off + q->len)
        return 0;
    return q->len / LAZY_SEGMENT;
}

/* How many of the turn's `segs` full segments the application has filled by now:
 * the share of the plan's requests between the job's previous request and its
 * request i (what the recording's threads did while the log grew to the turn's end)
 * that have completed, of the turn's bytes (its partial segment's counted half).
 * At most LAZY_LOOK of them are looked at, evenly spread: it runs at each look of
 * a waiting writer, and a writer that writes rarely in a busy plan has many. */
#define LAZY_LOOK 1024LL
static long long filled(const job_t *job, size_t i, long long segs) {
    long long lo = job->reqs[i - 1].id + 1, hi = job->reqs[i].id, n = 0, seen = 0;
    if (hi <= lo)
        return segs;
    long long step = (hi - lo + LAZY_LOOK - 1) / LAZY_LOOK;
    for (long long p = lo; p < hi; p += step, seen++)
        n += (atomic_load_explicit(&done_flag[p], memory_order_acquire) & DONE) != 0;
    return n * (2 * segs + 1) / (2 * seen);
}

void lazy_took(job_t *job) {
    pthread_mutex_lock(&job->mu);
    job->lazy_took++;
    pthread_mutex_unlock(&job->mu);
    atomic_fetch_add(&took, 1);
}

long long lazy_before(job_t *job, size_t i, int fd, tally_t *ty,
                      int (*ready_by)(const struct dreq *, long long)) {
    if (!job->lazy_rest_ns || !lazy_on() || !i || job->depth != 1)
        return 0;
    const struct dreq *q = &job->reqs[i];
    if (q->dir != WRITE || q->same_turn || q->absolute)
        return 0;
    long long segs = full_segments(job, i), k = 0;
    long long last = __atomic_load_n(&done_ns[job->reqs[i - 1].id], __ATOMIC_ACQUIRE);
    while (k < segs && last && !atomic_load(&stop_all)) {
        long long due = last + job->lazy_rest_ns;
        if (ready_by(q, due))
            return k;
        long long f = filled(job, i, segs);
        if (f <= k) { /* no new full segment yet: look again in a while */
            if (ready_by(q, now_ns() + LAZY_POLL_NS))
                return k;
            continue;
        }
        long long at = now_ns(), off = q->off + k * LAZY_SEGMENT, len = (f - k) * LAZY_SEGMENT;
        int err = issue(fd, WRITE, off, len);
        last = now_ns();
        if (err) {
            fail(job, "a timer write (%lld bytes at %lld in %s, before request %lld): %s",
                 len, off, job->target, q->id, strerror(err));
            return -1;
        }
        k = f;
        tally_io(ty, WRITE, len, due, at, last);
        pthread_mutex_lock(&job->mu);
        job->lazy_writes++;
        pthread_mutex_unlock(&job->mu);
        atomic_fetch_add(&total, 1);
    }
    return k;
}

void lazy_report(const job_t *jobs, int n) {
    int any = 0;
    for (int j = 0; j < n; j++)
        any |= jobs[j].lazy_rest_ns > 0;
    if (!any)
        return;
    printf(", \"lazy_writes\": {\"on\": %s, \"writes\": %lld, \"took\": %lld, \"jobs\": {",
           lazy_on() ? "true" : "false", (long long)atomic_load(&total),
           (long long)atomic_load(&took));
    for (int j = 0, k = 0; j < n; j++)
        if (jobs[j].lazy_rest_ns) {
            printf("%s", k++ ? ", " : "");
            json_str(jobs[j].name);
            printf(": {\"rest_us\": %.3f, \"writes\": %lld, \"took\": %lld}",
                   (double)jobs[j].lazy_rest_ns / 1e3, jobs[j].lazy_writes, jobs[j].lazy_took);
        }
    printf("}}");
}
