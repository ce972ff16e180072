/* iotape-lanes, group commit in a dependent plan (issue 34): a log writer's
 * write may take the writes after it that a faster device would have grouped.
 *
 * A log writer (ESE's, a database's WAL writer) writes, at each turn, whatever
 * the sessions appended since its last write; commits that arrive while a write
 * is in flight share the next one. So how many log writes a run makes depends
 * on the device: on a faster one more commits arrive per turn and there are
 * fewer, larger writes (the reference workload: 0.27 log writes a transactional
 * request on the HDD-like device, 0.20 on the SSD-like one). A replay that
 * issues every recorded write, each after its recorded wait, keeps the slow
 * device's count, and the sessions that wait for those writes (durable commits)
 * keep its pace.
 *
 * The plan (replayer/plan/groupcommit.py) marks a log writer's write `join IDS`:
 * the same thread's write before it is the one it follows on (contiguous or
 * overlapping, nothing of its thread between), and IDS are, for each other
 * thread's request that waits for this write (a session's durable commit), that
 * request's own predecessor: the session's last I/O before it committed. When
 * a job of one slot is about to issue a write, it takes the marked writes after
 * it whose IDS have completed in the replay, and whose own waits (but for the
 * write before them) are met: the sessions whose commits the recording's later
 * write carried have committed already, so the writer takes their records now,
 * as the application would have. A commit that waited for the write before (a
 * session the writer holds) cannot be in it, and stays for a later one. One
 * write covers them all (their byte ranges' union, at most GC_MAX_BYTES); each
 * is complete when it completes.
 * A turn's second write (`same-turn`: its partial segment after its full ones,
 * two writes on any device) goes only with its turn's first, where that one was
 * taken; the plan puts the committers' clause on the first. It takes nothing
 * itself: a turn writes what was appended before it began.
 * IOTAPE_LANES_GROUP_COMMIT=0 writes every request as logged. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanes.h"

static int mode = -1; /* IOTAPE_LANES_GROUP_COMMIT: 1, 0; -1 not read */
static atomic_llong heads, merged, candidates;

int gc_on(void) {
    return env_switch(&mode, "IOTAPE_LANES_GROUP_COMMIT", 1,
                      "a log writer's write takes the writes its sessions have already produced",
                      "each as logged");
}

/* Where the line ends in ` join IDS`: the ids (comma-separated, before q's own)
 * into q, the line cut before it; in ` same-turn`, q marked so. 0, or -1 where
 * the clause is malformed. */
int gc_parse(struct dreq *q, char *ln, int (*ids)(long long, char *, long long **, int *)) {
    char *at = strstr(ln, " same-turn");
    if (at) {
        if (at[10] && at[10] != '\n')
            return -1;
        *at = 0;
        q->joinable = q->same_turn = 1;
        return 0;
    }
    at = strstr(ln, " join ");
    if (!at)
        return 0;
    char list[8192], extra[4];
    if (sscanf(at + 6, "%8191s %3s", list, extra) != 1)
        return -1;
    *at = 0;
    long long id;
    if (sscanf(ln, "%lld", &id) != 1 || id < 0 || !strcmp(list, "-"))
        return -1;
    q->joinable = 1;
    if (ids(id, list, &q->join, &q->njoin))
        return -1;
    atomic_fetch_add(&candidates, 1);
    return 0;
}

static int done(long long p) {
    return atomic_load_explicit(&done_flag[p], memory_order_acquire) & DONE;
}

/* Whether n is a plain write that follows on [off, end) and could go in it now:
 * its own waits, but for `prev` (the write it would join), met; its committers'
 * last I/O before their commits, done. A turn's second write (`same-turn`) goes
 * only after its turn's first one, taken (`taking`: the write before it was);
 * the writer that issues that first write itself writes it alone after it. */
static int joins(const struct dreq *n, long long prev, long long off, long long end,
                 int taking) {
    if (!n->joinable || n->dir != WRITE || n->flags || n->off < off || n->off > end)
        return 0;
    if (n->same_turn && !taking)
        return 0;
    long long to = n->off + n->len > end ? n->off + n->len : end;
    if (to - off > GC_MAX_BYTES)
        return 0;
    for (int k = 0; k < n->npred; k++)
        if (n->pred[k] != prev && !done(n->pred[k]))
            return 0;
    for (int k = 0; k < n->njoin; k++)
        if (!done(n->join[k]))
            return 0;
    return 1;
}

int gc_may_take(const job_t *job, size_t i) {
    /* A turn's second write takes nothing: what a turn writes was gathered at its
     * start, before its first write; a commit during that write waits for the
     * next turn, on any device. And a run starts with a write that is not one. */
    return i + 1 < job->nreq && job->reqs[i + 1].joinable && !job->reqs[i + 1].same_turn &&
           !job->reqs[i].same_turn;
}

size_t gc_take(job_t *job, size_t i, long long *len) {
    const struct dreq *q = &job->reqs[i];
    *len = q->len;
    if (!gc_on() || q->dir != WRITE || q->flags || !gc_may_take(job, i) || job->depth > 1 ||
        job->next != i + 1)
        return i;
    long long off = q->off, end = q->off + q->len;
    size_t last = i;
    while (last + 1 < job->nreq &&
           joins(&job->reqs[last + 1], job->reqs[last].id, off, end, last > i)) {
        const struct dreq *n = &job->reqs[++last];
        end = n->off + n->len > end ? n->off + n->len : end;
        atomic_store_explicit(&issued[n->id], 1, memory_order_relaxed);
    }
    if (last > i) {
        job->next = last + 1;
        atomic_fetch_add(&heads, 1);
        atomic_fetch_add(&merged, (long long)(last - i));
    }
    *len = end - off;
    return last;
}

void gc_report(void) {
    printf(", \"group_commit\": {\"on\": %s, \"joinable\": %lld, \"writes_taking_others\": %lld, "
           "\"taken\": %lld}",
           gc_on() ? "true" : "false", (long long)atomic_load(&candidates),
           (long long)atomic_load(&heads), (long long)atomic_load(&merged));
}
