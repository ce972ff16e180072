/* iotape-lanes, asynchronous lanes (a job with ioengine=io_uring or libaio): one
 * thread and one io_uring per lane. The thread reads the lane's log in order,
 * sleeps to each request's microsecond and submits it without waiting for it to
 * complete, up to the job's iodepth in flight: the recorded submitter's depth
 * (replayer/plan/lanes.py). At that depth the next request waits for a
 * completion, as the recorded application's did. While it waits for a request's
 * time the thread waits on the ring (with that time as the timeout), so
 * completions are taken as they come and their latency is the device's, not the
 * sleep's.
 *
 * Why: a synchronous lane is a thread per request in flight; the full-rate
 * capture of 2 x QD32 at ~400k IOPS needed 2,000 threads 20 ms apart, and 2 vCPUs
 * switching between them issued 92k IOPS. Two async lanes are two threads, as
 * the recorded fio's two jobs were.
 *
 * Requests due at once go out in one io_uring_enter (up to BATCH): the thread
 * submits what it has queued before it waits, and the issue time of each is the
 * submit's. The lane's file and the shared buffers are registered with the
 * ring (no per-request file reference or page pinning). A trim (no io_uring discard on a block device in 6.x's
 * liburing 2.3 API) is issued synchronously by the lane's thread; a sync is
 * IORING_OP_FSYNC, after whatever is in flight was submitted (fio's order; a
 * flush does not wait for earlier requests to complete, as in the kernel). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lanes.h"

#define BATCH 32

typedef struct {
    long long due, at, len;
    int dir;
} slot_t;

typedef struct {
    struct io_uring ring;
    slot_t *slots;
    int *free, nfree;     /* free slot numbers, a stack */
    int *queued, nqueued; /* prepared, not yet submitted */
    int in_flight, depth, registered, fixed_bufs;
    job_t *job;
    tally_t *ty;
} lane_t;

static int wait_one(lane_t *l, long long until_ns);

static int submit(lane_t *l) {
    if (!l->nqueued)
        return 0;
    long long at = now_ns();
    for (int i = 0; i < l->nqueued; i++)
        l->slots[l->queued[i]].at = at;
    int left = l->nqueued;
    while (left > 0) {
        int r = io_uring_submit(&l->ring);
        if (r == -EAGAIN || r == -EBUSY) {
            /* The kernel is short of something a completion frees: take them. */
            if (l->in_flight && wait_one(l, now_ns() + 1000000LL))
                return -1;
            continue;
        }
        if (r < 0 && r != -EINTR) {
            fail(l->job, "io_uring submit: %s", strerror(-r));
            return -1;
        }
        left -= r > 0 ? r : 0;
    }
    l->job->submits++;
    l->in_flight += l->nqueued;
    if ((uint64_t)l->in_flight > l->job->max_in_flight)
        l->job->max_in_flight = (uint64_t)l->in_flight;
    l->nqueued = 0;
    return 0;
}

/* Every completion the ring holds, tallied at this instant. */
static int reap(lane_t *l) {
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    long long done = now_ns();
    int err = 0;
    io_uring_for_each_cqe(&l->ring, head, cqe) {
        int k = (int)cqe->user_data;
        slot_t *s = &l->slots[k];
        long long want = s->dir == READ || s->dir == WRITE ? s->len : 0;
        if (!err && (cqe->res < 0 || cqe->res != want)) {
            fail(l->job, "%s of %lld bytes: %s", DIR_NAME[s->dir], s->len,
                 cqe->res < 0 ? strerror(-cqe->res) : "short transfer");
            err = -1;
        }
        tally_io(l->ty, s->dir, s->len, s->due, s->at, done);
        l->free[l->nfree++] = k;
        n++;
    }
    io_uring_cq_advance(&l->ring, n);
    l->in_flight -= (int)n;
    return err;
}

/* Wait for one completion (or until `until_ns`, 0: however long), then reap. */
static int wait_one(lane_t *l, long long until_ns) {
    struct io_uring_cqe *cqe;
    int r;
    if (until_ns) {
        long long left = until_ns - now_ns();
        if (left <= 0)
            return reap(l);
        struct __kernel_timespec ts = {left / 1000000000LL, left % 1000000000LL};
        r = io_uring_wait_cqe_timeout(&l->ring, &cqe, &ts);
    } else {
        r = io_uring_wait_cqe(&l->ring, &cqe);
    }
    if (r < 0 && r != -ETIME && r != -EINTR && r != -EAGAIN) {
        fail(l->job, "io_uring wait: %s", strerror(-r));
        return -1;
    }
    return reap(l);
}

/* Submit what is queued and wait until nothing is in flight. */
static int drain(lane_t *l) {
    if (submit(l))
        return -1;
    while (l->in_flight > 0)
        if (wait_one(l, 0))
            return -1;
    return 0;
}

static int reopen(lane_t *l, int *fd, const char *file) {
    if (drain(l))
        return -1;
    if (l->registered)
        io_uring_unregister_files(&l->ring);
    l->registered = 0;
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    if (!file)
        return 0;
    *fd = open(file, O_RDWR | O_DIRECT | (l->job->dsync ? O_DSYNC : 0));
    if (*fd < 0) {
        fail(l->job, "%s: %s", file, strerror(errno));
        return -1;
    }
    l->registered = io_uring_register_files(&l->ring, fd, 1) == 0;
    return 0;
}

/* One request: at its time, with a slot free. */
static int request(lane_t *l, int fd, const v2line_t *q, long long due) {
    while (l->in_flight + l->nqueued >= l->depth) {
        if (submit(l) || wait_one(l, 0))
            return -1;
    }
    for (long long now; (now = now_ns()) < due && !atomic_load(&stop_all);) {
        if (submit(l))
            return -1;
        if (l->in_flight) {
            if (wait_one(l, due))
                return -1;
        } else {
            sleep_until(due);
        }
    }
    if (atomic_load(&stop_all))
        return -1;
    if (l->in_flight && reap(l))
        return -1;
    if (q->dir == TRIM) {
        if (submit(l)) /* what came before it goes first */
            return -1;
        long long at = now_ns();
        int err = issue(fd, TRIM, q->a, q->b);
        if (err) {
            fail(l->job, "trim of %lld bytes at %lld in %s: %s", q->b, q->a, q->file,
                 strerror(err));
            return -1;
        }
        tally_io(l->ty, TRIM, q->b, due, at, now_ns());
        return 0;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
    if (!sqe) {
        if (submit(l) || !(sqe = io_uring_get_sqe(&l->ring))) {
            fail(l->job, "io_uring: no submission entry");
            return -1;
        }
    }
    int target = l->registered ? 0 : fd;
    if (q->dir == READ && l->fixed_bufs)
        io_uring_prep_read_fixed(sqe, target, rbuf, (unsigned)q->b, (unsigned long long)q->a, 0);
    else if (q->dir == READ)
        io_uring_prep_read(sqe, target, rbuf, (unsigned)q->b, (unsigned long long)q->a);
    else if (q->dir == WRITE && l->fixed_bufs)
        io_uring_prep_write_fixed(sqe, target, wbuf, (unsigned)q->b, (unsigned long long)q->a,
                                  1);
    else if (q->dir == WRITE)
        io_uring_prep_write(sqe, target, wbuf, (unsigned)q->b, (unsigned long long)q->a);
    else
        io_uring_prep_fsync(sqe, target, 0);
    if (l->registered)
        sqe->flags |= IOSQE_FIXED_FILE;
    int k = l->free[--l->nfree];
    l->slots[k] = (slot_t){.due = due, .len = q->dir == SYNC ? 0 : q->b, .dir = q->dir};
    io_uring_sqe_set_data64(sqe, (uint64_t)k);
    l->queued[l->nqueued++] = k;
    return l->nqueued >= BATCH ? submit(l) : 0;
}

void async_worker(worker_t *w, tally_t *ty, FILE *f) {
    job_t *job = w->job;
    lane_t l = {.depth = job->depth, .job = job, .ty = ty};
    unsigned entries = 1;
    while (entries < (unsigned)job->depth)
        entries <<= 1;
    int r = io_uring_queue_init(entries, &l.ring, 0);
    if (r < 0) {
        fail(job, "io_uring_setup of %u entries: %s (kernel.io_uring_disabled? plan "
             "with --engine psync for synchronous lanes)", entries, strerror(-r));
        return;
    }
    l.slots = calloc((size_t)job->depth, sizeof *l.slots);
    l.free = calloc((size_t)job->depth, sizeof *l.free);
    l.queued = calloc((size_t)job->depth, sizeof *l.queued);
    if (!l.slots || !l.free || !l.queued) {
        fail(job, "out of memory");
        goto out;
    }
    for (int k = job->depth - 1; k >= 0; k--)
        l.free[l.nfree++] = k;
    /* The shared read and write buffers registered with the ring: the kernel
     * then pins their pages once, not at every request (where the memlock
     * limit refuses, plain reads and writes). */
    size_t bs = (size_t)((max_bs + 4095) / 4096 * 4096);
    struct iovec bufs[2] = {{rbuf, bs}, {wbuf, bs}};
    l.fixed_bufs = job->fixed_bufs = io_uring_register_buffers(&l.ring, bufs, 2) == 0;
    long long g0 = (long long)genesis.tv_sec * 1000000000LL + genesis.tv_nsec, t = 0;
    int fd = -1;
    char ln[8192];
    long ln_no = 1;
    v2line_t q;
    while (!atomic_load(&stop_all) && fgets(ln, sizeof ln, f)) {
        ln_no++;
        int kind = v2_parse(ln, &q);
        if (kind == V2_WAIT) {
            t = q.a * 1000000LL + q.b * 1000LL;
        } else if (kind == V2_OPEN || kind == V2_CLOSE) {
            if (reopen(&l, &fd, kind == V2_OPEN ? q.file : NULL))
                break;
        } else if (kind == V2_IO) {
            if (fd < 0) {
                fail(job, "%s:%ld: %s before the file's open", job->log, ln_no, DIR_NAME[q.dir]);
                break;
            }
            if (request(&l, fd, &q, g0 + t))
                break;
        } else if (kind != V2_ADD) {
            fail(job, "%s:%ld: not an iolog v2 line this program replays: %.80s", job->log,
                 ln_no, ln);
            break;
        }
    }
    /* What was submitted completes, also on a stop: its buffers are in use. */
    if (!atomic_load(&stop_all))
        drain(&l);
    while (l.in_flight > 0 && wait_one(&l, now_ns() + 1000000000LL) == 0)
        ;
    if (fd >= 0)
        close(fd);
out:
    io_uring_queue_exit(&l.ring);
    free(l.slots);
    free(l.free);
    free(l.queued);
}
