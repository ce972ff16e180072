/* A thread that sleeps the same think every time (issue 34, docs/replay.md "A
 * fixed think"): fio's `thinktime`, a poller, a paced client. Its recorded
 * slept thinks are that sleep plus the recording host's lateness in waking it
 * (the timer's slack, the wake-up), which varies request by request. Replayed
 * as recorded, that variation is noise in each thread's phase: on the target
 * the application's threads, each sleeping the same time with the kernel's
 * timer slack, wake together whenever their timers fall within the slack of
 * one another, stay together, and meet at the device. fio's four threads of 1 ms
 * on the memory-backed loop device issued within 20 us of another's issue in
 * 53-70 % of their reads, the replay with the recorded thinks in 33-36 %, and a
 * read that met another's took 24-30 us against 9-14 alone: the replay's read
 * p50 was x0.44-0.95 of fio's at the same IOPS. With each such thread's slept
 * thinks replayed at one value, x0.95-1.12 of the mean of fio's two runs in a
 * round, 6 rounds (docs/benchmarks.md "A fixed think").
 *
 * The rule: a job whose slept relative thinks (the spin rule's other side; not
 * a demand's `or` line) number at least FIXED_MIN, at least FIXED_SHARE of them
 * within FIXED_BAND_NS of their median, replays each of them from FIXED_BAND_NS
 * under that median up at the median: the thread's jitter is left to this
 * host's timers. The few longer ones of such a thread are the recording host's
 * stalls (this VM's vCPUs stall 1-13 ms a few times a second; fio's 1 ms thinks
 * held 10-13 of 1,499 over 1.1 ms, up to 3.9 ms), which the target adds again of
 * its own; replayed as recorded, each moved its thread out of step with the
 * others for good (read p50 x0.67-0.97 of fio's with them, x0.95-1.10 without:
 * docs/benchmarks.md). They are counted apart (`stalls_fixed`, `stall_ms`). A
 * think further under the median is another wait and stays. The reference
 * workload's threads never qualify (their slept thinks spread over milliseconds).
 * IOTAPE_LANES_FIXED_THINK=0 replays every think as recorded (the replay before). */
#include <stdio.h>
#include <stdlib.h>

#include "lanes.h"

enum { FIXED_MIN = 50 };
#define FIXED_BAND_NS 100000LL
#define FIXED_SHARE 0.95

static int fixed_on = -1; /* IOTAPE_LANES_FIXED_THINK; -1 not read */

int fixed_think_on(void) {
    return env_switch(&fixed_on, "IOTAPE_LANES_FIXED_THINK", 1,
                      "a fixed sleeper's slept thinks at their median", "every think as recorded");
}

/* Whether the job's request `q` is a slept relative think of the rule. */
static int slept(const struct dreq *q) {
    return !q->absolute && !q->awake && !q->alt;
}

long long fixed_think(job_t *job) {
    job->fixed_think_ns = job->thinks_fixed = job->stalls_fixed = job->stall_ns = 0;
    if (!fixed_think_on())
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < job->nreq; i++)
        n += (size_t)slept(&job->reqs[i]);
    if (n < FIXED_MIN)
        return 0;
    long long *t = malloc(n * sizeof *t);
    if (!t) {
        fprintf(stderr, "iotape-lanes: out of memory\n");
        exit(1);
    }
    for (size_t i = 0, k = 0; i < job->nreq; i++)
        if (slept(&job->reqs[i]))
            t[k++] = job->reqs[i].t_ns;
    qsort(t, n, sizeof *t, cmp_ll);
    long long mid = t[n / 2];
    size_t in = 0;
    for (size_t k = 0; k < n; k++)
        in += (size_t)(llabs(t[k] - mid) <= FIXED_BAND_NS);
    free(t);
    if ((double)in < FIXED_SHARE * (double)n)
        return 0;
    for (size_t i = 0; i < job->nreq; i++) {
        struct dreq *q = &job->reqs[i];
        if (!slept(q) || q->t_ns < mid - FIXED_BAND_NS)
            continue;
        if (q->t_ns > mid + FIXED_BAND_NS) {
            job->stalls_fixed++;
            job->stall_ns += q->t_ns - mid;
        }
        q->t_ns = mid;
        job->thinks_fixed++;
    }
    return job->fixed_think_ns = mid;
}
