/* iotape-lanes: the own-delay calibration's chain (calib.c times it): a chain of
 * reads of the target, each a think after the previous one completed, run as the
 * replay runs its requests: by two lane threads taking turns (deps_worker: each
 * read issued by the thread the other's completion wakes), or, where the event
 * loop drives the plan's awake thinks (evloop.c), an awake chain by the loop, so
 * each kind of think is net of the delay of the path that replays it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "lanes.h"

struct chain_thread {
    worker_t w;
    tally_t ty;
};

static void *chain_thread(void *arg) {
    struct chain_thread *c = arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* as lanes.c's workers */
    deps_worker(&c->w, &c->ty);
    return NULL;
}

/* Its two threads (th[0..1]), or the loop on th[0]'s tally (a job of depth 1:
 * the loop has no thread to hand a hop to); how many of the two ran. */
static int run_chain(struct chain_thread *th, int loop) {
    job_t *cj = th[0].w.job;
    if (loop) {
        cj->depth = 1;
        cj->in_loop = 1;
        return evloop_run(cj, 1, &th[0].ty) ? 0 : 2;
    }
    pthread_t t[2];
    int started = 0;
    for (; started < 2; started++)
        if (pthread_create(&t[started], NULL, chain_thread, &th[started]))
            break;
    for (int k = 0; k < started; k++)
        pthread_join(t[k], NULL);
    return started;
}

int deps_chain(const char *target, const long long (*blk)[2], int nb, int n, long long think_ns,
               int awake, tally_t *out) {
    static job_t cj; /* large (its paths and histograms): not on the stack */
    cj = (job_t){.depth = 2, .reads_only = 1, .nreq = (size_t)n};
    snprintf(cj.name, sizeof cj.name, "own-delay calibration");
    snprintf(cj.target, sizeof cj.target, "%s", target);
    struct dreq *reqs = calloc((size_t)n, sizeof *reqs);
    long long *pred = calloc((size_t)n, sizeof *pred);
    struct chain_thread *th = calloc(2, sizeof *th);
    long long *saved_done = done_ns;
    atomic_int *saved_flag = done_flag;
    atomic_uchar *saved_issued = issued;
    done_ns = calloc((size_t)n, sizeof *done_ns);
    done_flag = calloc((size_t)n, sizeof *done_flag);
    issued = calloc((size_t)n, sizeof *issued);
    long long spun0 = atomic_load(&spun_ns);
    int rc = -1;
    if (!reqs || !pred || !th || !done_ns || !done_flag || !issued)
        goto out;
    for (int i = 0; i < n; i++) {
        pred[i] = i - 1;
        reqs[i] = (struct dreq){.id = i, .off = blk[i % nb][0], .len = blk[i % nb][1],
                                .dir = READ, .absolute = i == 0, .t_ns = i ? think_ns : 0,
                                .npred = i > 0, .pred = &pred[i], .awake = i && awake};
    }
    cj.reqs = reqs;
    for (int k = 0; k < 2; k++)
        th[k].w = (worker_t){&cj, k};
    pthread_mutex_init(&cj.mu, NULL);
    /* The chain's first read is due at once (its absolute time 0 from now). */
    clock_gettime(CLOCK_MONOTONIC, &genesis);
    long long early0 = atomic_load(&early), waited0 = atomic_load(&waited_ns);
    int started = run_chain(th, awake && evloop_on());
    pthread_mutex_destroy(&cj.mu);
    /* Not the plan's: its counters as they were, and a failed read stops nothing. */
    int early_here = atomic_load(&early) != early0;
    atomic_store(&early, early0);
    atomic_store(&waited_ns, waited0);
    int bad = atomic_exchange(&failed, 0);
    atomic_store(&stop_all, 0);
    if (started < 2 || bad || early_here)
        goto out;
    for (int k = 0; k < 2; k++) {
        out->dir[READ].ios += th[k].ty.dir[READ].ios;
        out->dir[READ].lat_sum_ns += th[k].ty.dir[READ].lat_sum_ns;
        hist_merge(&out->late, &th[k].ty.late);
        if (th[k].ty.first && (!out->first || th[k].ty.first < out->first))
            out->first = th[k].ty.first;
        if (th[k].ty.last > out->last)
            out->last = th[k].ty.last;
    }
    rc = 0;
out:
    free(reqs);
    free(pred);
    free(th);
    free(done_ns);
    free(done_flag);
    free(issued);
    done_ns = saved_done;
    done_flag = saved_flag;
    issued = saved_issued;
    atomic_store(&spun_ns, spun0);
    return rc;
}

