/* iotape-lanes' output: fio's JSON shape for what `iotape replay run` reads
 * (lanes.c says which fields), and the latency histograms' percentiles. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "lanes.h"

const char *const DIR_NAME[NDIR] = {"read", "write", "trim", "sync"};

/* A histogram's non-empty buckets, [lower ns, upper ns, count] each: what `replay
 * fidelity` merges into a stream's percentiles (a stream has several jobs). */
static void hist_json(const hist_t *h) {
    printf(", \"lat_hist_ns\": [");
    int first = 1;
    for (int b = 0; b < NBUCKET; b++) {
        if (!h->n[b])
            continue;
        printf("%s[%.0f, %.0f, %u]", first ? "" : ", ", bucket_lo_ns(b), bucket_ns(b), h->n[b]);
        first = 0;
    }
    printf("]");
}

/* One direction in fio's shape: total latency (lat_ns) and, for a synchronous
 * issue, the same figures as completion latency (clat_ns). */
static void dir_json(const dirstat_t *s, const char *name, long long run_ms, double secs) {
    double mean = s->ios ? (double)s->lat_sum_ns / (double)s->ios : 0;
    double var = s->ios ? s->lat_sq / (double)s->ios - mean * mean : 0;
    char pct[160];
    snprintf(pct, sizeof pct,
             "\"percentile\": {\"50.000000\": %.0f, \"99.000000\": %.0f, \"99.900000\": %.0f}",
             hist_pct(&s->lat, 50), hist_pct(&s->lat, 99), hist_pct(&s->lat, 99.9));
    printf(", \"%s\": {\"total_ios\": %llu, \"io_bytes\": %llu, \"runtime\": %lld, "
           "\"iops\": %.3f, \"bw_bytes\": %.0f, \"lat_ns\": {\"min\": %llu, \"max\": %llu, "
           "\"mean\": %.1f, \"stddev\": %.1f, %s}, \"clat_ns\": {\"mean\": %.1f, %s}",
           name, (unsigned long long)s->ios, (unsigned long long)s->bytes, run_ms,
           (double)s->ios / secs, (double)s->bytes / secs, (unsigned long long)s->lat_min_ns,
           (unsigned long long)s->lat_max_ns, mean, var > 0 ? sqrt(var) : 0, pct, mean, pct);
    hist_json(&s->lat);
    printf("}");
}

void report(const job_t *jobs, int n, long long epoch_ms) {
    hist_t *late = calloc(1, sizeof *late);
    long long g0 = (long long)genesis.tv_sec * 1000000000LL + genesis.tv_nsec;
    uint64_t requests = 0, late_max = 0;
    /* The run's own span, across all jobs: a job's runtime is from its own first
     * issue, and jobs start at their pieces' times, so the longest job is not it. */
    long long first = 0, last = 0;
    for (int i = 0; i < n; i++) {
        if (jobs[i].first_ns && (!first || jobs[i].first_ns < first))
            first = jobs[i].first_ns;
        if (jobs[i].last_ns > last)
            last = jobs[i].last_ns;
    }
    printf("{\n\"fio version\": \"iotape-lanes\",\n\"timestamp_ms\": %lld,\n"
           "\"elapsed_ms\": %lld,\n\"jobs\": [",
           epoch_ms, last > first ? (last - first) / 1000000 : 0);
    for (int i = 0; i < n; i++) {
        const job_t *j = &jobs[i];
        long long run_ms = j->last_ns > j->first_ns ? (j->last_ns - j->first_ns) / 1000000 : 0;
        double secs = run_ms > 0 ? run_ms / 1000.0 : 1e-3;
        printf("%s\n{\"jobname\": ", i ? "," : "");
        json_str(j->name);
        printf(", \"job_runtime\": %lld", run_ms);
        /* The job's first issue and last completion after the start (genesis): a
         * stream's span over all its jobs (`replay fidelity` of a dependent plan). */
        if (j->first_ns)
            printf(", \"first_ns\": %lld, \"last_ns\": %lld", j->first_ns - g0,
                   j->last_ns - g0);
        /* An async lane (async.c): its ring's depth, the most it had in flight, and
         * how many submits (io_uring_enter calls) carried its requests. */
        if (j->async && !j->reqs)
            printf(", \"async\": {\"depth\": %d, \"max_in_flight\": %llu, \"submits\": %llu, "
                   "\"fixed_buffers\": %s}",
                   j->depth, (unsigned long long)j->max_in_flight,
                   (unsigned long long)j->submits, j->fixed_bufs ? "true" : "false");
        for (int d = 0; d < NDIR; d++)
            dir_json(&j->dir[d], DIR_NAME[d], run_ms, secs);
        printf("}");
        if (late)
            hist_merge(late, &j->late);
        requests += j->requests;
        if (j->late_max_ns > late_max)
            late_max = j->late_max_ns;
    }
    printf("\n],\n\"issue_late_ns\": {\"requests\": %llu", (unsigned long long)requests);
    if (late)
        printf(", \"p50\": %.0f, \"p90\": %.0f, \"p99\": %.0f, \"p999\": %.0f",
               hist_pct(late, 50), hist_pct(late, 90), hist_pct(late, 99), hist_pct(late, 99.9));
    printf(", \"max\": %llu}", (unsigned long long)late_max);
    /* The CPU the replay took (every thread; the kernel's work for the device,
     * such as a loop device's workers, is not in it): what limits a lane. */
    struct rusage ru;
    if (!getrusage(RUSAGE_SELF, &ru))
        printf(",\n\"cpu_s\": {\"user\": %.3f, \"system\": %.3f}",
               (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
    deps_report();
    evloop_report(jobs, n);
    printf("\n}\n");
    free(late);
}

