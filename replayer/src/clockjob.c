/* iotape-lanes, a thread on its own clock that outlives its trace (issue 34; the
 * plan: replayer/plan/clockjobs.py).
 *
 * Some I/O comes because time passed, not because other I/O completed: the
 * engine's database maintenance reads its database front to back, 256 KiB 23.6
 * times a second on an absolute schedule, on any device. A trace holds as many of
 * them as its run's length made, and a dependent replay issues exactly the trace's
 * requests: the reference workload's SSD-like trace (0.1 s) has 2 of them, and its
 * replay onto the HDD-like disk model at 1 spindle runs ~45 s, where the engine's
 * own run there read 1,132 times, each a seek away from the sessions' pages.
 *
 * So a job whose log says `clock PERIOD_US LO HI` (the plan's, where the
 * target's recording shows the job's role on a clock: sequential requests at a
 * regular period) goes on after its last logged request: the same kind and size,
 * each where the one before ended (from LO again where it would pass HI), every
 * PERIOD_US after the one before was due (an absolute schedule, as the
 * application's; far behind, over a second, it starts again from now rather
 * than catch up in a burst), until every other job of the plan has finished. A
 * job of depth 1 on a thread of its own (evloop.c leaves it). IOTAPE_LANES_CLOCK=0:
 * only its logged requests. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanes.h"

atomic_int fg_running;
static int mode = -1; /* IOTAPE_LANES_CLOCK: 1, 0; -1 not read */
/* How long a clocked job sleeps at most before it looks whether the others are done */
#define CLOCK_LOOK_NS 20000000LL

int clock_on(void) {
    return env_switch(&mode, "IOTAPE_LANES_CLOCK", 1,
                      "a `clock` job goes on at its period until the others finish",
                      "only its logged requests");
}

int clock_job(const job_t *job) {
    return job->clock_period_ns > 0 && clock_on();
}

int clock_parse(job_t *job, const char *ln) {
    if (strncmp(ln, "clock ", 6))
        return 0;
    long long us, lo, hi;
    char end;
    if (sscanf(ln + 6, "%lld %lld %lld%c", &us, &lo, &hi, &end) != 3 || us <= 0 ||
        us > 100000000LL || lo < 0 || hi <= lo)
        return -1;
    job->clock_period_ns = us * 1000LL;
    job->clock_lo = lo;
    job->clock_hi = hi;
    return 1;
}

int clock_run(job_t *job, int fd, tally_t *ty, long long due) {
    if (!clock_job(job) || !job->nreq || job->depth != 1)
        return 0;
    const struct dreq *last = &job->reqs[job->nreq - 1];
    if (last->dir != READ && last->dir != WRITE)
        return 0;
    long long len = last->len, off = last->off + len;
    if (len <= 0 || len > job->clock_hi - job->clock_lo)
        return 0;
    while (!atomic_load(&stop_all) && atomic_load(&fg_running) > 0) {
        due += job->clock_period_ns;
        long long now = now_ns();
        if (now > due + 1000000000LL)
            due = now; /* far behind (a stall): no burst to catch up */
        while (now < due && atomic_load(&fg_running) > 0 && !atomic_load(&stop_all)) {
            sleep_until(due - now > CLOCK_LOOK_NS ? now + CLOCK_LOOK_NS : due);
            now = now_ns();
        }
        if (atomic_load(&fg_running) <= 0 || atomic_load(&stop_all))
            break;
        if (off + len > job->clock_hi)
            off = job->clock_lo;
        long long at = now_ns();
        int err = issue(fd, last->dir, off, len);
        long long done = now_ns();
        if (err) {
            fail(job, "a clocked %s (%lld bytes at %lld in %s): %s", DIR_NAME[last->dir], len,
                 off, job->target, strerror(err));
            return -1;
        }
        tally_io(ty, last->dir, len, due, at, done);
        job->clock_requests++; /* depth 1: this thread's alone */
        off += len;
    }
    return 0;
}

void clock_report(const job_t *jobs, int n) {
    int any = 0;
    for (int j = 0; j < n; j++)
        any |= jobs[j].clock_period_ns > 0;
    if (!any)
        return;
    long long total = 0;
    for (int j = 0; j < n; j++)
        total += jobs[j].clock_requests;
    printf(", \"clock_jobs\": {\"on\": %s, \"requests\": %lld, \"jobs\": {",
           clock_on() ? "true" : "false", total);
    for (int j = 0, k = 0; j < n; j++)
        if (jobs[j].clock_period_ns) {
            printf("%s", k++ ? ", " : "");
            json_str(jobs[j].name);
            printf(": {\"period_us\": %.3f, \"requests\": %lld}",
                   (double)jobs[j].clock_period_ns / 1e3, jobs[j].clock_requests);
        }
    printf("}}");
}
