/* iotape-lanes, a dependent plan's event loop (issue 34): one thread and one
 * io_uring drive every job whose thinks are mostly short (the spin rule's, io.c:
 * at least as many of its relative thinks under spin_think_ns as over), a lane
 * for each of its iodepth (as its threads in deps.c: a lane takes the job's next
 * request, in order, when its own completed), and resolve their waits in the
 * loop: a request becomes ready when what it waits for has completed (its own
 * lane's last, another loop lane's, or a thread's), is due its think later, and
 * goes out when due, in due-time order (a min-heap of ready lanes). Jobs with
 * mostly long thinks keep a thread per request in flight (deps.c); every edge between the two
 * kinds is honoured both ways: a thread waiting on a loop request sleeps on its
 * word (the loop wakes it as deps_worker would), the loop waiting on a thread's
 * request marks its word LOOPER and the thread's completion writes the loop's
 * eventfd, whose read the loop keeps posted in its ring.
 *
 * Why: on the reference workload's plan a hop cost 20-26 us beyond its think
 * and service, against ~3 us in the isolated hop bench, and the time went to
 * run-queue waits behind the replay's own threads: each session and the log
 * writer a thread, each hop a futex hand-off or a timed sleep whose wake-up
 * costs ~20 us of CPU on the shared 2-vCPU VM, ~2 runs a request
 * (docs/benchmarks.md "Where the whole plan's hop goes"). Here a hop between two
 * loop lanes is a CQE and a heap entry: no thread is woken.
 *
 * How it waits: while an awake request (the spin rule) is due within spin_ns,
 * or a request is in flight that an awake lane waits for (within spin_ns of the
 * loop's last event: a device's service time), it polls its completion queue,
 * yielding the CPU at every turn (the loop device's worker and the lane threads
 * still run); otherwise it waits in io_uring_enter until the next due time (less
 * spin_ns where that request is awake) or a completion. A request's issue time
 * is its submit's; a trim is issued by the loop's thread synchronously, a sync
 * as IORING_OP_FSYNC, a FUA write with RWF_DSYNC, a PREFLUSH write after an
 * fdatasync linked before it. IOTAPE_LANES_EVLOOP=0 runs every job on threads. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lanes.h"

#define EVLOOP_DEFAULT 1
/* Completions' task work without an IPI (run at the loop's next system call: it
 * makes one at every turn); one thread submits. The loop's tx/s on the reference
 * plan: 19,010 with these against 17,872 without (one round each, paired; the
 * threads' 15,687: docs/benchmarks.md "One event loop"). */
#define EVLOOP_RING_FLAGS (IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER)
#define EFD_TAG UINT64_MAX
#define LINK_TAG (1ULL << 62) /* a preflush's fdatasync, linked before its write */
#define STOP_LOOK_NS 200000000LL

enum { L_WAIT, L_TIMED, L_FLIGHT, L_END };

/* A lane: one of a job's iodepth slots, as one of its threads (deps.c); a slot
 * takes the job's next request in order when its own has completed. */
typedef struct {
    job_t *job;
    int j, fd, state, how, final; /* final: its due cannot move earlier (both ways ready) */
    size_t i, last;               /* its request; the last it took with it (group commit) */
    long long len;                /* the bytes of its write: its own, or a group commit's */
    long long due, ready, noticed, at;
    unsigned gen; /* its heap entry's; older ones are stale */
    struct iovec iov;
    tally_t *ty;
} lane_t;

typedef struct {
    long long due;
    int lane;
    unsigned gen;
} hent_t;

typedef struct {
    struct io_uring ring;
    lane_t *lanes;
    int n, live, in_flight, waiting_awake, dirty, nstart;
    int *start; /* lanes prepared this turn, not yet submitted */
    hent_t *heap;
    int nheap, cap;
    long long g, last_event;
    uint64_t efd_buf;
} loop_t;

static int mode = -1; /* IOTAPE_LANES_EVLOOP: 1, 0; -1: not read yet */
static int efd = -1;
/* The last run's (the plan's where it has a job in the loop: the calibration's
 * chain runs before it) */
static long long st_requests, st_submits, st_polled_ns, st_blocked;

int evloop_on(void) {
    if (mode >= 0)
        return mode;
    env_switch(&mode, "IOTAPE_LANES_EVLOOP", EVLOOP_DEFAULT,
                      "one event loop drives the short-think jobs", "a thread each");
    /* blocking: io_uring polls it (a non-blocking file's read fails with EAGAIN) */
    if (mode && (efd = eventfd(0, EFD_CLOEXEC)) < 0) {
        fprintf(stderr, "iotape-lanes: eventfd: %s\n", strerror(errno));
        exit(1);
    }
    deps_loop_fd = efd; /* never closed: a thread may write it after the loop ended */
    return mode;
}

int evloop_takes(const job_t *job) {
    /* a log writer's timer (lazywrite.c), a clock (clockjob.c) and a job's CPU a
     * cycle (cpubudget.c) go on threads of their own */
    return evloop_on() && job->reqs && job->nreq && !job->async && job->thinks_awake > 0 &&
           !(job->lazy_rest_ns && lazy_on()) && !clock_job(job) && !cpu_job(job) &&
           job->thinks_awake >= job->thinks_asleep;
}

static void heap_pop(loop_t *L) {
    hent_t last = L->heap[--L->nheap];
    int k = 0;
    for (int c; (c = 2 * k + 1) < L->nheap; k = c) {
        if (c + 1 < L->nheap && L->heap[c + 1].due < L->heap[c].due)
            c++;
        if (last.due <= L->heap[c].due)
            break;
        L->heap[k] = L->heap[c];
    }
    if (L->nheap)
        L->heap[k] = last;
}

static void heap_push(loop_t *L, int lane) {
    if (L->nheap == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 64;
        if (!(L->heap = realloc(L->heap, (size_t)L->cap * sizeof *L->heap))) {
            fprintf(stderr, "iotape-lanes: out of memory\n");
            exit(1);
        }
    }
    lane_t *l = &L->lanes[lane];
    int k = L->nheap++;
    for (int p; k > 0 && L->heap[p = (k - 1) / 2].due > l->due; k = p)
        L->heap[k] = L->heap[p];
    L->heap[k] = (hent_t){l->due, lane, ++l->gen};
}

/* The earliest live entry (stale ones dropped), or NULL. */
static const hent_t *heap_top(loop_t *L) {
    while (L->nheap) {
        const lane_t *l = &L->lanes[L->heap[0].lane];
        if (l->state == L_TIMED && l->gen == L->heap[0].gen)
            return &L->heap[0];
        heap_pop(L);
    }
    return NULL;
}

/* 1 where all n requests `p` completed (*latest: the latest completion). */
static int way_done(const long long *p, int n, long long *latest) {
    *latest = 0;
    for (int k = 0; k < n; k++) {
        if (!(atomic_load_explicit(&done_flag[p[k]], memory_order_acquire) & DONE))
            return 0;
        long long d = __atomic_load_n(&done_ns[p[k]], __ATOMIC_ACQUIRE);
        *latest = d > *latest ? d : *latest;
    }
    return 1;
}

/* When `q` may go, without waiting (deps.c's due_of and due_either, as a state):
 * 0 not yet (neither way ready), 1 its due, final, 2 its due by one way while
 * the other, not yet ready, could still make it earlier. */
static int due_now(const struct dreq *q, long long g, long long *due, long long *ready) {
    long long l1 = 0, l2 = 0;
    *ready = 0;
    if (q->absolute) {
        *due = g + q->t_ns;
        return 1;
    }
    int a1 = way_done(q->pred, q->npred, &l1);
    int a2 = q->alt && (q->alt_absolute || way_done(q->alt_pred, q->nalt, &l2));
    if (!a1 && !a2)
        return 0;
    long long d1 = a1 ? l1 + q->t_ns : LLONG_MAX;
    long long d2 = !a2 ? LLONG_MAX : q->alt_absolute ? g + q->alt_t_ns : l2 + q->alt_t_ns;
    *due = d1 <= d2 ? d1 : d2;
    *ready = d1 <= d2 ? l1 : (q->alt_absolute ? 0 : l2);
    return !q->alt || (a1 && a2) ? 1 : 2;
}

/* Mark the words of what `q` waits for that are not done LOOPER: a thread's
 * completion of one then writes the loop's eventfd. */
static void watch(const long long *p, int n) {
    for (int k = 0; k < n; k++) {
        int f = atomic_load(&done_flag[p[k]]);
        while (!(f & (DONE | LOOPER)) &&
               !atomic_compare_exchange_weak(&done_flag[p[k]], &f, f | LOOPER))
            ;
    }
}

/* Lane k's next request: into the heap where it is ready (again where its due
 * moved earlier), else left waiting, its predecessors watched. */
static void evaluate(loop_t *L, int k) {
    lane_t *l = &L->lanes[k];
    const struct dreq *q = &l->job->reqs[l->i];
    long long due, ready;
    int r = due_now(q, L->g, &due, &ready);
    if (!r) {
        watch(q->pred, q->npred);
        watch(q->alt_pred, q->nalt);
        r = due_now(q, L->g, &due, &ready); /* one may have completed before its mark */
    }
    if (!r) {
        L->waiting_awake += q->awake;
        return;
    }
    if (l->state == L_TIMED && due >= l->due) {
        l->final = r == 1;
        return;
    }
    if (l->state == L_WAIT)
        l->noticed = hops_on() ? now_ns() : 0;
    l->due = due, l->ready = ready, l->final = r == 1, l->state = L_TIMED;
    heap_push(L, k);
}

static void reevaluate(loop_t *L) {
    L->waiting_awake = 0;
    for (int k = 0; k < L->n; k++)
        if (L->lanes[k].state == L_WAIT || (L->lanes[k].state == L_TIMED && !L->lanes[k].final))
            evaluate(L, k);
    L->dirty = 0;
}

/* The lane's job's next request, in order (the loop's thread alone takes them):
 * waiting, or none left. */
static void take(lane_t *l) {
    job_t *job = l->job;
    l->state = job->next < job->nreq ? L_WAIT : L_END;
    if (l->state == L_WAIT)
        l->i = job->next++;
}

/* Lane k's request ended at `done` (err: an errno, 0): tallied, published, the
 * lane on to its next. */
static void complete(loop_t *L, int k, int err, long long done) {
    lane_t *l = &L->lanes[k];
    const struct dreq *q = &l->job->reqs[l->i];
    if (err) {
        fail(l->job, "request %lld (%lld bytes at %lld in %s): %s", q->id, q->len, q->off,
             l->job->target, strerror(err));
        l->state = L_END;
        L->live--;
        return;
    }
    tally_io(l->ty, q->dir, l->len, l->due, l->at, done);
    if (hops_on()) {
        long long t[5] = {l->ready, l->noticed, l->due, l->at, done};
        int how = l->how | HOP_LOOP | (q->awake ? HOP_AWAKE : 0);
        hops_note(q->id, l->j, -1 - k, t, how);
        for (size_t m = l->i + 1; m <= l->last; m++) /* group commit: went with it */
            hops_note(l->job->reqs[m].id, l->j, -1 - k, t, how);
    }
    for (size_t m = l->i + 1; m <= l->last; m++)
        deps_done(l->job->reqs[m].id, done, 1);
    deps_done(q->id, done, 1);
    st_requests++;
    l->how = 0;
    take(l);
    L->live -= l->state == L_END;
    L->dirty = 1;
}

static void arm_efd(loop_t *L) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&L->ring);
    io_uring_prep_read(sqe, efd, &L->efd_buf, sizeof L->efd_buf, 0);
    io_uring_sqe_set_data64(sqe, EFD_TAG);
}

/* Every completion the ring holds, at this instant; how many there were. */
static int reap(loop_t *L) {
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    int rearm = 0;
    long long done = 0;
    io_uring_for_each_cqe(&L->ring, head, cqe) {
        uint64_t u = cqe->user_data;
        done = done ? done : now_ns();
        n++;
        if (u == EFD_TAG) {
            rearm = 1;
            continue;
        }
        if (u & LINK_TAG) /* its write's own completion says whether it failed */
            continue;
        const struct dreq *q = &L->lanes[u].job->reqs[L->lanes[u].i];
        long long want = q->dir == READ || q->dir == WRITE ? L->lanes[u].len : 0;
        L->in_flight--;
        complete(L, (int)u, cqe->res < 0 ? -cqe->res : cqe->res != want ? EIO : 0, done);
    }
    io_uring_cq_advance(&L->ring, n);
    if (rearm) {
        arm_efd(L);
        L->dirty = 1;
    }
    if (n)
        L->last_event = done;
    return (int)n;
}

/* Lane k's request, due: prepared (a trim: issued and completed here). */
static void prepare(loop_t *L, int k) {
    lane_t *l = &L->lanes[k];
    const struct dreq *q = &l->job->reqs[l->i];
    l->state = L_FLIGHT;
    l->last = l->i, l->len = q->len;
    if (q->dir == TRIM) {
        l->at = now_ns();
        deps_early(q, l->at);
        atomic_store_explicit(&issued[q->id], 1, memory_order_relaxed);
        int err = issue(l->fd, TRIM, q->off, q->len);
        complete(L, k, err, now_ns());
        return;
    }
    struct io_uring_sqe *sqe;
    if (q->dir == WRITE && q->flags & PREFLUSH_FLAG) {
        sqe = io_uring_get_sqe(&L->ring);
        io_uring_prep_fsync(sqe, l->fd, IORING_FSYNC_DATASYNC);
        io_uring_sqe_set_flags(sqe, IOSQE_IO_LINK);
        io_uring_sqe_set_data64(sqe, LINK_TAG | (uint64_t)k);
    }
    if (q->dir == WRITE) /* issued at the submit, after this turn's: its time, near enough */
        l->last = gc_take(l->job, l->i, &l->len);
    sqe = io_uring_get_sqe(&L->ring);
    l->iov = (struct iovec){q->dir == READ ? rbuf : wbuf, (size_t)l->len};
    if (q->dir == READ)
        io_uring_prep_read(sqe, l->fd, rbuf, (unsigned)q->len, (uint64_t)q->off);
    else if (q->dir == WRITE)
        io_uring_prep_writev2(sqe, l->fd, &l->iov, 1, (uint64_t)q->off,
                              q->flags & FUA_FLAG ? RWF_DSYNC : 0);
    else
        io_uring_prep_fsync(sqe, l->fd, 0);
    io_uring_sqe_set_data64(sqe, (uint64_t)k);
    L->start[L->nstart++] = k;
}

/* What was prepared, out in one io_uring_enter; its issue time the submit's. */
static int submit(loop_t *L) {
    long long at = now_ns();
    for (int s = 0; s < L->nstart; s++) {
        lane_t *l = &L->lanes[L->start[s]];
        const struct dreq *q = &l->job->reqs[l->i];
        l->at = at;
        deps_early(q, at);
        atomic_store_explicit(&issued[q->id], 1, memory_order_relaxed);
    }
    int r;
    while ((r = io_uring_submit(&L->ring)) == -EINTR || r == -EAGAIN || r == -EBUSY)
        ;
    if (r < 0) {
        fail(L->lanes[L->start[0]].job, "io_uring submit: %s", strerror(-r));
        return -1;
    }
    L->in_flight += L->nstart;
    L->nstart = 0;
    L->last_event = at;
    st_submits++;
    return 0;
}

/* Until something may have changed: polled (awake) or in io_uring_enter. */
static void wait_next(loop_t *L) {
    const hent_t *t = heap_top(L);
    long long now = now_ns(), until = now + STOP_LOOK_NS;
    lane_t *top = t ? &L->lanes[t->lane] : NULL;
    int awake = top && top->job->reqs[top->i].awake;
    if (top && t->due - (awake ? spin_ns : 0) < until)
        until = t->due - (awake ? spin_ns : 0);
    int soon = awake && t->due - now <= spin_ns;
    /* a request in flight: its completion a device's service time away */
    if (soon || (L->in_flight && now - L->last_event < spin_ns)) {
        if (soon)
            top->how |= HOP_THINK_SPUN;
        sched_yield();
        st_polled_ns += now_ns() - now;
        return;
    }
    if (until <= now)
        return;
    if (top)
        top->how |= HOP_THINK_SLEPT;
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {(until - now) / 1000000000LL, (until - now) % 1000000000LL};
    /* Submits what is queued: the eventfd's read, re-armed by reap() in a turn
     * that had no request to submit. Waiting without it (io_uring_wait_cqe_timeout
     * does not submit) left the loop deaf to threads' completions until its
     * 200 ms look: 200 s for a 1000-hop chain across threads and loop (CI, stop 47). */
    io_uring_submit_and_wait_timeout(&L->ring, &cqe, 1, &ts, NULL);
    st_blocked++;
}

static void turn(loop_t *L) {
    reap(L);
    if (L->dirty || L->waiting_awake)
        reevaluate(L);
    const hent_t *t;
    for (long long now = now_ns(); (t = heap_top(L)) && t->due <= now;) {
        int k = t->lane;
        heap_pop(L);
        prepare(L, k);
        if (L->dirty) /* a trim completed: who waits for it may go now */
            reevaluate(L);
    }
    if (L->nstart && submit(L))
        return;
    if (L->live && !L->dirty)
        wait_next(L);
}

/* A job's lanes: its iodepth, no more than it has requests (at least one). */
static int slots(const job_t *job) {
    return job->depth < 1 || job->nreq < 2 ? 1
           : (size_t)job->depth < job->nreq ? job->depth : (int)job->nreq;
}

static int setup(loop_t *L, job_t *jobs, int n, tally_t *ty, int *ring) {
    for (int j = 0; j < n; j++)
        L->n += jobs[j].in_loop ? slots(&jobs[j]) : 0;
    L->lanes = calloc((size_t)L->n, sizeof *L->lanes);
    L->start = calloc((size_t)L->n, sizeof *L->start);
    unsigned entries = 8;
    while (entries < 2u * (unsigned)L->n + 2)
        entries *= 2;
    *ring = L->lanes && L->start && io_uring_queue_init(entries, &L->ring, EVLOOP_RING_FLAGS) == 0;
    if (!*ring) {
        fprintf(stderr, "iotape-lanes: cannot set up the event loop's io_uring\n");
        return -1;
    }
    for (int j = 0, k = 0; j < n; j++) {
        if (!jobs[j].in_loop)
            continue;
        job_t *job = &jobs[j];
        job->next = 0;
        for (int s = 0; s < slots(job); s++, k++) {
            int fd = open(job->target, (job->reads_only ? O_RDONLY : O_RDWR) | O_DIRECT |
                                           (job->dsync ? O_DSYNC : 0));
            if (fd < 0) {
                fail(job, "%s: %s", job->target, strerror(errno));
                return -1;
            }
            L->lanes[k] = (lane_t){.job = job, .j = j, .fd = fd, .ty = &ty[j]};
            take(&L->lanes[k]);
            L->live += L->lanes[k].state != L_END;
        }
    }
    L->g = (long long)genesis.tv_sec * 1000000000LL + genesis.tv_nsec;
    L->dirty = 1;
    /* The loop stands for its jobs' submitters, one a job (a deeper job's
     * lanes are one submitter's window, as the engine's flusher: one thread, 32
     * writes in flight): the scheduler's weight of that many threads (each nice
     * level 1.25x), the share of the CPUs they had beside the replay's other
     * threads (where the process may raise it: CAP_SYS_NICE; else as is). */
    int subs = 0;
    for (int j = 0; j < n; j++)
        subs += jobs[j].in_loop;
    if (subs > 1) {
        int nice = -(int)(log((double)subs) / log(1.25) + 0.5);
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice < -19 ? -19 : nice);
    }
    arm_efd(L);
    return 0;
}

int evloop_run(job_t *jobs, int n, tally_t *ty) {
    evloop_on();
    loop_t L = {0};
    int ring = 0;
    st_requests = st_submits = st_polled_ns = st_blocked = 0;
    int rc = setup(&L, jobs, n, ty, &ring);
    if (rc)
        atomic_store(&failed, 1), atomic_store(&stop_all, 1);
    while (!rc && L.live && !atomic_load(&stop_all))
        turn(&L);
    /* what is in flight completes before its buffers and files go */
    for (int k = 0; !rc && L.in_flight && k < 100; k++) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {0, 100000000};
        io_uring_wait_cqe_timeout(&L.ring, &cqe, &ts);
        reap(&L);
    }
    for (int k = 0; L.lanes && k < L.n; k++)
        if (L.lanes[k].job)
            close(L.lanes[k].fd);
    if (ring)
        io_uring_queue_exit(&L.ring);
    free(L.lanes);
    free(L.start);
    free(L.heap);
    return rc;
}

void evloop_report(const job_t *jobs, int n) {
    if (!deps_any())
        return;
    int k = 0;
    for (int j = 0; j < n; j++)
        k += jobs[j].in_loop;
    printf(",\n\"evloop\": {\"on\": %s, \"jobs\": %d, \"requests\": %lld, \"submits\": %lld, "
           "\"polled_ms\": %.3f, \"waits\": %lld, \"names\": [",
           mode > 0 ? "true" : "false", k, k ? st_requests : 0, k ? st_submits : 0,
           k ? (double)st_polled_ns / 1e6 : 0.0, k ? st_blocked : 0);
    for (int j = 0, m = 0; j < n; j++)
        if (jobs[j].in_loop) {
            printf("%s", m++ ? ", " : "");
            json_str(jobs[j].name);
        }
    printf("]}");
}
