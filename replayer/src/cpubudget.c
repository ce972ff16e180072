/* iotape-lanes, a job's CPU a cycle (issue 34; the plan: replayer/plan/cpucycle.py).
 *
 * A synchronous thread spends CPU between its requests: the application's work
 * after a completion, its system calls. Where the target's device runs on the
 * host's CPUs (a loop device's worker, a FUSE disk model, a software RAID), or
 * the application's threads outnumber the CPUs, that CPU decides how fast the
 * requests go and how long each is served: fio's 8 processes with 100 us thinks
 * fill this VM's 2 vCPUs, and the replay's threads, which spend a fraction of
 * that, ran x1.23-1.56 fio's IOPS; fio's 2 processes without a think keep both
 * vCPUs busy beside the loop device's worker, and the replay's one event loop
 * read in half fio's time. A think replayed as a time waited holds none of this.
 *
 * So a job whose log says `cpu US` (the plan's, with --cycle-cpu target: the
 * mean CPU a cycle of its role's threads in the target's recording, from their
 * sched records) spends that much of its thread's CPU time between one issue and
 * the next: it waits the request's think, which the plan made the think's time
 * beyond its CPU (a sleep, as the application's; 0 where it held none), then burns
 * CPU (CLOCK_THREAD_CPUTIME_ID) until its thread has used US a cycle since its
 * first issue, its own system calls and that sleep's counted (the application's
 * CPU a cycle holds its sleep's system call too), and issues. Where
 * the CPUs are free the burn takes US; where threads queue for them it takes
 * longer, as the application's work did. A job of depth 1 on a thread of its own
 * (evloop.c leaves it). IOTAPE_LANES_CPU=0: thinks as logged, no burn. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lanes.h"

static int mode = -1; /* IOTAPE_LANES_CPU: 1, 0; -1 not read */
#define CPU_AHEAD 8LL /* the most cycles' CPU a job's own work may be ahead by */

int cpu_on(void) {
    return env_switch(&mode, "IOTAPE_LANES_CPU", 1,
                      "a `cpu` job spends its CPU a cycle before each request",
                      "thinks as logged, no CPU spent");
}

int cpu_job(const job_t *job) {
    return job->cpu_cycle_ns > 0 && !job->async && job->depth == 1 && cpu_on();
}

int cpu_parse(job_t *job, const char *ln) {
    if (strncmp(ln, "cpu ", 4))
        return 0;
    double us;
    char end;
    if (sscanf(ln + 4, "%lf%c", &us, &end) != 1 || !(us > 0) || us > 1e6)
        return -1;
    job->cpu_cycle_ns = (long long)(us * 1000.0 + 0.5);
    return 1;
}

long long cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void cpu_spend(job_t *job) {
    long long t = cpu_now(), t0 = t;
    if (!job->cpu_goal_ns) { /* its first request: no cycle before it */
        job->cpu_goal_ns = t;
        return;
    }
    /* US a cycle on average, as the application's mean: a cycle whose own work
     * went over it leaves the next ones less to burn (each burnt up to US alone
     * would spend more than US a cycle, the runner's cycles varying as they do),
     * at most CPU_AHEAD cycles' worth */
    job->cpu_goal_ns += job->cpu_cycle_ns;
    if (job->cpu_goal_ns < t - CPU_AHEAD * job->cpu_cycle_ns)
        job->cpu_goal_ns = t - CPU_AHEAD * job->cpu_cycle_ns;
    while (t < job->cpu_goal_ns && !atomic_load(&stop_all))
        t = cpu_now();
    /* depth 1: this thread's alone */
    job->cpu_cycles++;
    job->cpu_burned_ns += t - t0;
    job->cpu_over += t0 >= job->cpu_goal_ns; /* its own work had spent it already */
}

void cpu_report(const job_t *jobs, int n) {
    int any = 0;
    for (int j = 0; j < n; j++)
        any |= jobs[j].cpu_cycle_ns > 0;
    if (!any)
        return;
    printf(", \"cpu_cycle\": {\"on\": %s, \"jobs\": {", cpu_on() ? "true" : "false");
    for (int j = 0, k = 0; j < n; j++)
        if (jobs[j].cpu_cycle_ns) {
            printf("%s", k++ ? ", " : "");
            json_str(jobs[j].name);
            printf(": {\"cpu_us\": %.3f, \"cycles\": %lld, \"burned_ms\": %.3f, "
                   "\"cycles_over\": %lld, \"thread_cpu_ms\": %.3f}",
                   (double)jobs[j].cpu_cycle_ns / 1e3, jobs[j].cpu_cycles,
                   (double)jobs[j].cpu_burned_ns / 1e6, jobs[j].cpu_over,
                   (double)jobs[j].cpu_thread_ns / 1e6);
        }
    printf("}}");
}
