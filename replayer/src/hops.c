/* iotape-lanes: each dependent request's times as the runner saw them, written to
 * IOTAPE_LANES_HOPS=FILE at the end (issue 34: where a whole plan's hop goes,
 * bench/lanes_hop_split.py). Off unless the variable is set; then one slot a
 * request (48 bytes: a diagnostic's, not for hour-long plans), filled by the
 * thread that issues it, so nothing is shared while the replay runs.
 *
 * FILE: `iotape-lanes hops 1`, a line `job K NAME THREADS ONCPU RQWAIT RUNS` per
 * job (its threads' sums from /proc/thread-self/schedstat at their end: ns on a
 * CPU, ns runnable but waiting on a run queue, times put on a CPU), then a line per
 * issued request, times in ns from the plan's genesis:
 *   ID JOB TID READY NOTICED DUE AT DONE HOW
 * READY: the latest completion of what it waited for (its way's; 0 for an
 * absolute time); NOTICED: when its thread saw that (the wait's return); DUE:
 * READY plus its think as replayed, or its absolute time; AT: its issue; DONE:
 * its completion as the caller saw it; HOW: the HOP_* bits of lanes.h. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanes.h"

typedef struct {
    long long ready, noticed, due, at, done;
    int job, tid, how, used;
} hop_t;

static hop_t *hops;
static long long n_hops;
/* by job: threads, on-CPU ns, run-queue wait ns, runs */
static long long (*sched_of)[4];
static int n_sched;
static pthread_mutex_t sched_mu = PTHREAD_MUTEX_INITIALIZER;

void hops_init(long long n_ids, int n_jobs) {
    const char *path = getenv("IOTAPE_LANES_HOPS");
    if (!path || !*path)
        return;
    n_sched = n_jobs;
    if (!(hops = calloc((size_t)n_ids + 1, sizeof *hops)) ||
        !(sched_of = calloc((size_t)n_jobs + 1, sizeof *sched_of))) {
        fprintf(stderr, "iotape-lanes: out of memory for IOTAPE_LANES_HOPS\n");
        exit(1);
    }
    n_hops = n_ids;
}

int hops_on(void) {
    return hops != NULL;
}

void hops_note(long long id, int job, int tid, const long long t[5], int how) {
    if (!hops || id < 0 || id >= n_hops)
        return;
    hops[id] = (hop_t){t[0], t[1], t[2], t[3], t[4], job, tid, how, 1};
}

void hops_thread_end(int job) {
    if (!hops || job < 0 || job >= n_sched)
        return;
    long long on = 0, rq = 0, runs = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f) {
        if (fscanf(f, "%lld %lld %lld", &on, &rq, &runs) != 3)
            on = rq = runs = 0;
        fclose(f);
    }
    pthread_mutex_lock(&sched_mu);
    long long *s = sched_of[job];
    s[0]++, s[1] += on, s[2] += rq, s[3] += runs;
    pthread_mutex_unlock(&sched_mu);
}

void hops_write(const job_t *jobs, int n) {
    const char *path = getenv("IOTAPE_LANES_HOPS");
    if (!hops || !path)
        return;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "iotape-lanes: IOTAPE_LANES_HOPS=%s: cannot write it\n", path);
        atomic_store(&failed, 1);
        return;
    }
    long long g = (long long)genesis.tv_sec * 1000000000LL + genesis.tv_nsec;
    fprintf(f, "iotape-lanes hops 1\n");
    for (int j = 0; j < n; j++)
        fprintf(f, "job %d %s %lld %lld %lld %lld\n", j, jobs[j].name, sched_of[j][0],
                sched_of[j][1], sched_of[j][2], sched_of[j][3]);
    for (long long i = 0; i < n_hops; i++) {
        const hop_t *h = &hops[i];
        if (!h->used)
            continue;
        long long ready = h->ready ? h->ready - g : 0;
        fprintf(f, "%lld %d %d %lld %lld %lld %lld %lld %d\n", i, h->job, h->tid, ready,
                h->noticed - g, h->due - g, h->at - g, h->done - g, h->how);
    }
    if (fclose(f)) {
        fprintf(stderr, "iotape-lanes: IOTAPE_LANES_HOPS=%s: cannot write it\n", path);
        atomic_store(&failed, 1);
    }
}
