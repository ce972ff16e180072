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
#include <sys/ioctl.h>
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

