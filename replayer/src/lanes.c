/* iotape-lanes: replays an iotape lanes plan (a fio job file whose jobs read
 * version-2 iologs) with each request issued at its own microsecond.
 *
 * Why beside fio: fio 3.33 sleeps a v2 `wait MS` until MS milliseconds after its
 * genesis, waking at the millisecond plus whatever sub-millisecond phase the job
 * had reached, so requests go out uniformly within ~1 ms after their time; its
 * v3 entries, timed in microseconds, wait from the previous issue and drift.
 * iotape's lanes logs carry the microseconds the millisecond rounded off in the
 * wait's last field (fio reads it into nothing): this program sleeps to
 * genesis + MS ms + US us on CLOCK_MONOTONIC, absolutely, with 1 ns timer slack.
 * The job file stays a stock fio job file; this reads the same files.
 *
 * Usage: iotape-lanes [--ahead-us N] JOBFILE   (in the plan's directory; JSON on stdout)
 *
 * --ahead-us N: the logs' times count from N us before this program's start. A
 * plan's logs put the trace's 0 where fio would have set up its jobs (seconds
 * for a plan of thousands of lanes); this program needs far less (its threads
 * and their files: plan.json's lanes_start_us), and `replay run` passes the
 * difference so that the replay starts soon after launch.
 *
 * A synchronous job (ioengine psync, the default) runs as `iodepth` threads,
 * thread k issuing the job's requests k, k + iodepth, ... (a lane's requests are
 * dealt >= 20 ms apart, so a thread is free well before its next one). An async
 * lane (ioengine io_uring or libaio) is one thread and one io_uring of `iodepth`
 * (async.c). A dependent plan's job: deps.c. Output: fio's JSON shape for what
 * `iotape replay run` reads (jobname, job_runtime, per direction total_ios,
 * iops, clat_ns mean and percentiles) plus "issue_late_ns": how late requests
 * were issued against their times, as this program saw it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lanes.h"

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("iotape-lanes: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

/* One line of a lane's log; returns 0 or stops the run. `t` is the time of the
 * last wait; `fd` the lane's open file; `idx` counts requests. */
static int line(worker_t *w, tally_t *ty, const char *ln, long ln_no, long long *t, int *fd,
                uint64_t *idx) {
    job_t *job = w->job;
    v2line_t l;
    switch (v2_parse(ln, &l)) {
    case V2_ADD:
        return 0;
    case V2_CLOSE:
        if (*fd >= 0) {
            close(*fd);
            *fd = -1;
        }
        return 0;
    case V2_OPEN: {
        int flags = O_RDWR | O_DIRECT | (job->dsync ? O_DSYNC : 0);
        if (*fd >= 0)
            close(*fd);
        *fd = open(l.file, flags);
        if (*fd < 0) {
            fail(job, "%s: %s", l.file, strerror(errno));
            return -1;
        }
        return 0;
    }
    case V2_WAIT:
        *t = l.a * 1000000LL + l.b * 1000LL;
        return 0;
    case V2_IO:
        break;
    default:
        fail(job, "%s:%ld: not an iolog v2 line this program replays: %.80s", job->log, ln_no,
             ln);
        return -1;
    }
    int dir = l.dir;
    long long a = l.a, b = l.b;
    if ((*idx)++ % (uint64_t)job->depth != (uint64_t)w->sub)
        return 0;
    if (*fd < 0) {
        fail(job, "%s:%ld: %s before the file's open", job->log, ln_no, DIR_NAME[dir]);
        return -1;
    }
    long long due = (long long)genesis.tv_sec * 1000000000LL + genesis.tv_nsec + *t;
    sleep_until(due);
    if (atomic_load(&stop_all))
        return -1;
    long long at = now_ns();
    int err = issue(*fd, dir, a, b);
    long long done = now_ns();
    if (err) {
        fail(job, "%s of %lld bytes at %lld in %s: %s", DIR_NAME[dir], b, a, l.file,
             strerror(err));
        return -1;
    }
    tally_io(ty, dir, b, due, at, done);
    return 0;
}

/* A thread's tally into its job's figures. */
static void job_add(job_t *job, const tally_t *ty) {
    pthread_mutex_lock(&job->mu);
    for (int d = 0; d < NDIR; d++) {
        job->dir[d].ios += ty->dir[d].ios;
        job->dir[d].bytes += ty->dir[d].bytes;
        job->dir[d].lat_sum_ns += ty->dir[d].lat_sum_ns;
        job->dir[d].lat_sq += ty->dir[d].lat_sq;
        if (ty->dir[d].ios && (!job->dir[d].lat_min_ns || ty->dir[d].lat_min_ns < job->dir[d].lat_min_ns))
            job->dir[d].lat_min_ns = ty->dir[d].lat_min_ns;
        if (ty->dir[d].lat_max_ns > job->dir[d].lat_max_ns)
            job->dir[d].lat_max_ns = ty->dir[d].lat_max_ns;
        hist_merge(&job->dir[d].lat, &ty->dir[d].lat);
    }
    hist_merge(&job->late, &ty->late);
    job->requests += ty->requests;
    if (ty->late_max > job->late_max_ns)
        job->late_max_ns = ty->late_max;
    if (ty->first && (!job->first_ns || ty->first < job->first_ns))
        job->first_ns = ty->first;
    if (ty->last > job->last_ns)
        job->last_ns = ty->last;
    pthread_mutex_unlock(&job->mu);
}

static void *worker(void *arg) {
    worker_t *w = arg;
    job_t *job = w->job;
    /* Timer slack is per thread: 50 us by default, which every sleep would add. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    tally_t *ty = calloc(1, sizeof *ty);
    FILE *f = job->reqs || !ty ? NULL : fopen(job->log, "r");
    if (!ty || (!f && !job->reqs)) {
        fail(job, "%s: %s", job->log, strerror(errno));
        free(ty);
        return NULL;
    }
    if (job->reqs)
        deps_worker(w, ty);
    char ln[8192];
    long ln_no = 0;
    long long t = 0;
    int fd = -1;
    uint64_t idx = 0;
    while (f && !atomic_load(&stop_all) && fgets(ln, sizeof ln, f)) {
        ln_no++;
        if (ln_no == 1) {
            if (strncmp(ln, "fio version 2 iolog", 19)) {
                fail(job, "%s: not a version-2 iolog (iotape-lanes replays lanes plans)",
                     job->log);
                break;
            }
            if (job->async) {
                async_worker(w, ty, f);
                break;
            }
            continue;
        }
        if (line(w, ty, ln, ln_no, &t, &fd, &idx))
            break;
    }
    if (f)
        fclose(f);
    if (fd >= 0)
        close(fd);
    job_add(job, ty);
    free(ty);
    if (!clock_job(job)) /* one fewer for a job on its own clock to outlive */
        atomic_fetch_sub(&fg_running, 1);
    return NULL;
}

/* The event loop (evloop.c) over the jobs it drives: jobs[0..n) with in_loop. */
typedef struct {
    job_t *jobs;
    int n;
} loop_arg_t;

static void *loop_thread(void *arg) {
    loop_arg_t *a = arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    tally_t *ty = calloc((size_t)a->n, sizeof *ty);
    if (!ty) {
        fail(&a->jobs[0], "out of memory");
        return NULL;
    }
    evloop_run(a->jobs, a->n, ty);
    int first = -1;
    for (int j = 0; j < a->n; j++)
        if (a->jobs[j].in_loop) {
            job_add(&a->jobs[j], &ty[j]);
            first = first < 0 ? j : first;
        }
    if (hops_on() && first >= 0)
        hops_thread_end(first); /* the loop's thread, counted with its first job's */
    free(ty);
    atomic_fetch_sub(&fg_running, 1);
    return NULL;
}

static void on_signal(int sig) {
    (void)sig;
    atomic_store(&stop_all, 1);
}

static long long number(const char *path, long ln_no, const char *key, const char *v) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 0)
        die(2, "%s:%ld: %s=%s is not a whole number of bytes or requests", path, ln_no, key, v);
    return x;
}

/* Global and per-job options of a lanes plan; anything else could change what
 * fio would do, so it is refused rather than ignored. */
static const char *const IGNORED[] = {"thread",     "clocksource",
                                      "allow_file_create", "invalidate",
                                      "read_iolog_chunked", NULL};

static int is_ignored(const char *key) {
    for (int i = 0; IGNORED[i]; i++)
        if (!strcmp(key, IGNORED[i]))
            return 1;
    return 0;
}

static void option(job_t *g, job_t *j, const char *path, long ln_no, char *key, char *v) {
    job_t *o = j ? j : g;
    if (is_ignored(key))
        return;
    if (!strcmp(key, "direct")) {
        if (strcmp(v, "1"))
            die(2, "%s:%ld: direct=%s: iotape-lanes replays with direct I/O only", path, ln_no, v);
    } else if (!strcmp(key, "ioengine")) {
        if (!strcmp(v, "io_uring") || !strcmp(v, "libaio"))
            o->async = 1;
        else if (!strcmp(v, "psync") || !strcmp(v, "sync") || !strcmp(v, "pvsync") ||
                 !strcmp(v, "pvsync2") || !strcmp(v, "vsync"))
            o->async = 0;
        else
            die(2, "%s:%ld: ioengine=%s: iotape-lanes replays psync (a thread per request "
                "in flight) or io_uring / libaio (one io_uring a lane)", path, ln_no, v);
    } else if (!strcmp(key, "iodepth")) {
        o->depth = (int)number(path, ln_no, key, v);
        if (o->depth < 1 || o->depth > MAX_ASYNC_DEPTH)
            die(2, "%s:%ld: iodepth=%s: 1 to %d", path, ln_no, v, MAX_ASYNC_DEPTH);
    } else if (!strcmp(key, "bs")) {
        long long bs = number(path, ln_no, key, v);
        if (bs > max_bs)
            max_bs = bs;
    } else if (!strcmp(key, "sync")) {
        if (strcmp(v, "dsync") && strcmp(v, "0"))
            die(2, "%s:%ld: sync=%s: iotape-lanes knows sync=dsync only", path, ln_no, v);
        o->dsync = !strcmp(v, "dsync");
    } else if (!strcmp(key, "read_iolog") && j) {
        if (snprintf(j->log, sizeof j->log, "%s", v) >= (int)sizeof j->log)
            die(2, "%s:%ld: read_iolog path too long", path, ln_no);
    } else if (!strcmp(key, "startdelay") && !strcmp(v, "0")) {
        return;
    } else {
        die(2, "%s:%ld: option %s is not one iotape-lanes replays (plan with --layout lanes)",
            path, ln_no, key);
    }
}

static job_t *parse(const char *path, int *njobs) {
    FILE *f = fopen(path, "r");
    if (!f)
        die(2, "%s: %s", path, strerror(errno));
    job_t g = {.depth = 1}, *jobs = NULL;
    int n = 0, cap = 0;
    char ln[8192];
    long ln_no = 0;
    while (fgets(ln, sizeof ln, f)) {
        ln_no++;
        char *s = ln, *e;
        while (*s == ' ' || *s == '\t')
            s++;
        for (e = s + strlen(s); e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ');)
            *--e = 0;
        if (!*s || *s == ';' || *s == '#')
            continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close || close == s + 1 || close - s > 255)
                die(2, "%s:%ld: bad section name", path, ln_no);
            *close = 0;
            if (!strcmp(s + 1, "global")) {
                if (n)
                    die(2, "%s:%ld: [global] after a job", path, ln_no);
                continue;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                jobs = realloc(jobs, (size_t)cap * sizeof *jobs);
                if (!jobs)
                    die(1, "out of memory");
            }
            job_t *j = &jobs[n++];
            *j = (job_t){.depth = g.depth, .dsync = g.dsync, .async = g.async};
            snprintf(j->name, sizeof j->name, "%s", s + 1);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq)
            die(2, "%s:%ld: not KEY=VALUE: %.80s", path, ln_no, s);
        *eq = 0;
        option(&g, n ? &jobs[n - 1] : NULL, path, ln_no, s, eq + 1);
    }
    fclose(f);
    if (!n)
        die(2, "%s: no jobs", path);
    for (int i = 0; i < n; i++) {
        if (!jobs[i].log[0])
            die(2, "%s: job %s has no read_iolog", path, jobs[i].name);
        pthread_mutex_init(&jobs[i].mu, NULL);
    }
    *njobs = n;
    return jobs;
}

/* A dependent plan's job (deps.c) and a synchronous lane: a thread per request
 * in flight; an async lane: one thread and its io_uring; a job the event loop
 * drives (evloop.c): none of its own. */
static int threads_of(const job_t *j) {
    return j->in_loop ? 0 : j->async && !j->reqs ? 1 : j->depth;
}

int main(int argc, char **argv) {
    long long ahead_us = 0;
    if (argc == 4 && !strcmp(argv[1], "--ahead-us")) {
        char *end;
        errno = 0;
        ahead_us = strtoll(argv[2], &end, 10);
        if (errno || end == argv[2] || *end || ahead_us < 0)
            die(2, "--ahead-us %s: expected a whole number of microseconds", argv[2]);
        argv += 2;
        argc -= 2;
    }
    if (argc != 2 || argv[1][0] == '-')
        die(2, "usage: iotape-lanes [--ahead-us N] JOBFILE (in the plan's directory; JSON on "
               "stdout)");
    int n;
    job_t *jobs = parse(argv[1], &n);
    for (int i = 0; i < n; i++) {
        deps_load(&jobs[i]);
        if (threads_of(&jobs[i]) > MAX_SYNC_DEPTH)
            die(2, "%s: job %s: iodepth=%d where each request in flight is a thread "
                "(a synchronous ioengine, or a dependent plan): 1 to %d",
                argv[1], jobs[i].name, jobs[i].depth, MAX_SYNC_DEPTH);
    }
    /* Each lane holds its log and its target open: raise the file limit. */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* One read and one write buffer for every thread: O_DIRECT reads may land in
     * the same buffer at once (nobody looks at the data), and writes only read it. */
    size_t bs = (size_t)((max_bs + 4095) / 4096 * 4096);
    if (posix_memalign((void **)&rbuf, 4096, bs) || posix_memalign((void **)&wbuf, 4096, bs))
        die(1, "out of memory for %zu-byte buffers", bs);
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i + 8 <= bs; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(wbuf + i, &x, 8);
    }
    /* This host's delay in a dependent cycle, timed on the target (its reads use
     * the buffers), and each think net of it. */
    own_delay_t od;
    if (deps_any()) {
        spin_setup(); /* before own_delay: its chain waits as the replay will */
        evloop_on();  /* and through the loop where it drives awake thinks */
    }
    own_delay(jobs, n, &od);
    deps_start(jobs, n, &od);
    int in_loop = 0;
    for (int i = 0; i < n && deps_any(); i++)
        in_loop += jobs[i].in_loop = evloop_takes(&jobs[i]);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int total = 0, fg = in_loop > 0;
    for (int i = 0; i < n; i++) {
        total += threads_of(&jobs[i]);
        fg += clock_job(&jobs[i]) ? 0 : threads_of(&jobs[i]);
    }
    atomic_store(&fg_running, fg);
    worker_t *ws = calloc((size_t)total + 1, sizeof *ws);
    pthread_t *ts = calloc((size_t)total + 1, sizeof *ts);
    if (!ws || !ts)
        die(1, "out of memory");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    /* The plan's times count from here, as fio's count from its genesis, which it
     * takes before it sets its jobs up; --ahead-us moves it that far back. */
    clock_gettime(CLOCK_MONOTONIC, &genesis);
    long long g = (long long)genesis.tv_sec * 1000000000LL + genesis.tv_nsec - ahead_us * 1000;
    genesis.tv_sec = (time_t)(g / 1000000000LL);
    genesis.tv_nsec = (long)(g % 1000000000LL);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    long long epoch_ms = (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
    int started = 0;
    loop_arg_t la = {jobs, n};
    if (in_loop && pthread_create(&ts[started++], &attr, loop_thread, &la))
        die(1, "cannot start the event loop's thread");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < threads_of(&jobs[i]); k++) {
            ws[started] = (worker_t){&jobs[i], k};
            int err = pthread_create(&ts[started], &attr, worker, &ws[started]);
            if (err) {
                fprintf(stderr, "iotape-lanes: cannot start thread %d: %s\n", started,
                        strerror(err));
                atomic_store(&failed, 1);
                atomic_store(&stop_all, 1);
                break;
            }
            started++;
        }
    for (int i = 0; i < started; i++)
        pthread_join(ts[i], NULL);
    report(jobs, n, epoch_ms);
    hops_write(jobs, n);
    if (atomic_load(&failed))
        return 1;
    if (atomic_load(&stop_all)) {
        fprintf(stderr, "iotape-lanes: interrupted\n");
        return 130;
    }
    return 0;
}
