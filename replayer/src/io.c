/* What the iotape-lanes runner (lanes.c) and its dependent plans (deps.c) both
 * issue requests with: the clock and its genesis, sleeping to an absolute time,
 * one synchronous request, the stop flag, and a thread's tally of what it did.
 * Apart from both, so neither includes the other's internals. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lanes.h"

struct timespec genesis;
atomic_int stop_all;
atomic_int failed;
char *rbuf, *wbuf;
long long max_bs = 4096;

long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Sleep until the absolute monotonic time t_ns, in steps of at most 200 ms so
 * that a stop is seen. */
void sleep_until(long long t_ns) {
    for (;;) {
        if (atomic_load(&stop_all))
            return;
        long long now = now_ns(), until = t_ns;
        if (now >= t_ns)
            return;
        if (until - now > 200000000LL)
            until = now + 200000000LL;
        struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
}

/* Waiting awake (dependent plans, issue 34): on the shared 2-vCPU VM a
 * clock_nanosleep of a few tens of microseconds wakes 20-60 us late, and a futex
 * wake-up of a thread on another lane costs as much; a dependent replay pays one
 * of them at every hop of its chains (a session's read after its think, after
 * the log writer's completion), which on a 20 us device is most of the cycle.
 * So the last `spin_ns` of such a wait are spent awake, yielding the CPU to
 * whatever else is runnable (the loop device's worker, the lane that issues
 * the predecessor) at each turn, by at most `spin_max` threads at once (one
 * fewer than the CPUs, at least one): the others sleep as before.
 *
 * Only where the application stayed on a CPU (the spin rule): a request whose
 * recorded think is under `spin_think_ns` (deps.c). In the reference workload's
 * HDD-like recordings 88-100 % of the thinks under 200 us held no sleep (the
 * thread was put on a CPU once between its issues: its wake-up at the
 * completion; sched records' `runs`), 67-79 % of those of 0.5-3 ms and 1-2 %
 * above 3 ms (docs/benchmarks.md "The spin rule"); fio's `thinktime` sleeps. A
 * longer think is slept through whole, and its wake-up paid, as the application
 * paid it. IOTAPE_LANES_SPIN_THINK_US=US moves the line (0: nothing awake).
 * (bench/think_sleeps.py: in the SSD-like recording only 21-55 % of the thinks
 * of 25-200 us held no sleep; onto the HDD-like disk a wake-up is lost in the
 * device's milliseconds.) */
long long spin_ns;
long long spin_think_ns = SPIN_THINK_NS;
static atomic_int spinners;
static int spin_max = 1;

int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

long long sleep_lateness_at(long long slack_ns) {
    enum { N = 101 };
    long long late[N];
    prctl(PR_SET_TIMERSLACK, (unsigned long)(slack_ns < 1 ? 1 : slack_ns), 0UL, 0UL, 0UL);
    for (int i = 0; i < N; i++) {
        long long due = now_ns() + 100000LL;
        struct timespec ts = {due / 1000000000LL, due % 1000000000LL};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        late[i] = now_ns() - due;
    }
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    qsort(late, N, sizeof *late, cmp_ll);
    return late[N / 2] > 0 ? late[N / 2] : 0;
}

long long sleep_lateness(void) {
    return sleep_lateness_at(1);
}

/* A switch from the environment variable `name`: 1 or 0, `dflt` where it is unset
 * or empty; exit 2 with a line naming it and what each value does (`on`, `off`)
 * where it is anything else. Read once: kept in *seen (-1 until then). */
int env_switch(int *seen, const char *name, int dflt, const char *on, const char *off) {
    if (*seen >= 0)
        return *seen;
    const char *v = getenv(name);
    if (v && *v && strcmp(v, "0") && strcmp(v, "1")) {
        fprintf(stderr, "iotape-lanes: %s=%s: 1 (%s) or 0 (%s)\n", name, v, on, off);
        exit(2);
    }
    return *seen = v && *v ? v[0] == '1' : dflt;
}

/* Microseconds from the environment variable `name` (0 to 1 s), as ns, or -1
 * where it is unset; exit 2 with a line naming it where it is not such. */
static long long env_us(const char *name, const char *what) {
    const char *given = getenv(name);
    if (!given || !*given)
        return -1;
    char *end;
    double us = strtod(given, &end);
    if (*end || !(us >= 0) || us > 1e6) {
        fprintf(stderr, "iotape-lanes: %s=%s: not microseconds (0 to 1000000; %s)\n", name,
                given, what);
        exit(2);
    }
    return (long long)(us * 1000);
}

long long spin_setup(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    spin_max = cpus > 2 ? (int)cpus - 1 : 1;
    long long slack_given = env_us("IOTAPE_LANES_THINK_SLACK_US", "0: 1 ns, as other sleeps");
    if (slack_given >= 0)
        think_slack_ns = slack_given;
    long long think = env_us("IOTAPE_LANES_SPIN_THINK_US", "0: no think awake");
    if (think >= 0)
        spin_think_ns = think;
    long long given = env_us("IOTAPE_LANES_SPIN_US", "0: sleep only");
    if (given >= 0)
        return spin_ns = given;
    /* Twice a short sleep's median lateness: most sleeps wake within it. */
    long long w = 2 * sleep_lateness();
    return spin_ns = w < SPIN_MIN_NS ? SPIN_MIN_NS : w > SPIN_MAX_NS ? SPIN_MAX_NS : w;
}

int spin_take(void) {
    if (!spin_ns)
        return 0;
    int n = atomic_load_explicit(&spinners, memory_order_relaxed);
    while (n < spin_max)
        if (atomic_compare_exchange_weak(&spinners, &n, n + 1))
            return 1;
    return 0;
}

void spin_give(void) {
    atomic_fetch_sub(&spinners, 1);
}

/* A slept think's timer slack (issue 34, docs/benchmarks.md "The application's
 * timer slack"): the application slept its think with its own slack, the
 * kernel's default of 50 us unless it set another (fio does not): its sleep
 * ended anywhere within that of its time, on the expiry of any timer of its CPU
 * due in that range, so the application's threads woke together more often than
 * at 1 ns. A slept think is replayed with THINK_SLACK_NS
 * (IOTAPE_LANES_THINK_SLACK_US; 0: 1 ns, the replay before), and so is the
 * own-delay cycle's (calib.c), so the lateness it adds is netted as before; every
 * other wait keeps 1 ns (lanes.c's workers), set back before it. */
long long think_slack_ns = THINK_SLACK_NS;

/* The calling thread's timer slack, by a system call only where it changes. */
static void thread_slack(long long ns) {
    static _Thread_local long long set = -1;
    if (ns < 1)
        ns = 1; /* 0 would give the thread its default back */
    if (ns != set)
        prctl(PR_SET_TIMERSLACK, (unsigned long)ns, 0UL, 0UL, 0UL);
    set = ns;
}

int wait_until(long long t_ns, int awake) {
    long long now = now_ns();
    int how = 0;
    if (now >= t_ns)
        return 0;
    if (!awake) {
        thread_slack(think_slack_ns);
        sleep_until(t_ns);
        return HOP_THINK_SLEPT;
    }
    thread_slack(1);
    if (spin_ns && t_ns - now > spin_ns) {
        sleep_until(t_ns - spin_ns);
        how |= HOP_THINK_SLEPT;
    }
    if (!spin_take()) {
        sleep_until(t_ns);
        return how | HOP_THINK_SLEPT | HOP_NO_SPINNER;
    }
    while (now_ns() < t_ns && !atomic_load_explicit(&stop_all, memory_order_relaxed))
        sched_yield();
    spin_give();
    return how | HOP_THINK_SPUN;
}

int issue(int fd, int dir, long long off, long long len) {
    ssize_t r;
    switch (dir) {
    case READ:
        r = pread(fd, rbuf, (size_t)len, off);
        return r == len ? 0 : (r < 0 ? errno : EIO);
    case WRITE:
        r = pwrite(fd, wbuf, (size_t)len, off);
        return r == len ? 0 : (r < 0 ? errno : EIO);
    case SYNC:
        return fsync(fd) ? errno : 0;
    default: {
        struct stat st;
        if (fstat(fd, &st))
            return errno;
        if (S_ISBLK(st.st_mode)) {
            uint64_t range[2] = {(uint64_t)off, (uint64_t)len};
            return ioctl(fd, BLKDISCARD, range) ? errno : 0;
        }
        return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) ? errno : 0;
    }
    }
}

void fail(const job_t *job, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    flockfile(stderr);
    fprintf(stderr, "iotape-lanes: job %s: ", job->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    funlockfile(stderr);
    va_end(ap);
    atomic_store(&failed, 1);
    atomic_store(&stop_all, 1);
}


/* One request's figures into a thread's tally: issued at `at` against `due`,
 * completed at `done`. */
void tally_io(tally_t *ty, int dir, long long bytes, long long due, long long at, long long done) {
    uint64_t late = at > due ? (uint64_t)(at - due) : 0;
    hist_add(&ty->late, late);
    if (late > ty->late_max)
        ty->late_max = late;
    ty->requests++;
    dirstat_t *d = &ty->dir[dir];
    d->ios++;
    d->bytes += (uint64_t)bytes;
    uint64_t lat = (uint64_t)(done - at);
    d->lat_sum_ns += lat;
    d->lat_sq += (double)lat * (double)lat;
    if (!d->lat_min_ns || lat < d->lat_min_ns)
        d->lat_min_ns = lat;
    if (lat > d->lat_max_ns)
        d->lat_max_ns = lat;
    hist_add(&d->lat, lat);
    if (!ty->first)
        ty->first = at;
    ty->last = done;
}

