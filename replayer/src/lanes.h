/* What lanes.c (the runner), io.c (issuing and timing a request), hist.c (latency
 * histograms), deps.c (dependent plans), evloop.c (their event loop), chain.c (the
 * calibration's chain), calib.c (their host's own delay) and report.c (the JSON)
 * share. */
#ifndef IOTAPE_LANES_H
#define IOTAPE_LANES_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

enum { READ, WRITE, TRIM, SYNC, NDIR };
/* iodepth: threads of a synchronous lane, requests in flight of an async one. */
#define MAX_SYNC_DEPTH 64
#define MAX_ASYNC_DEPTH 4096

/* Latency histograms: 16 buckets per power of two of nanoseconds (<= 4.5 %
 * error, finer than the 1 ms step this replaces), 2^0 .. 2^42 ns (73 min). */
#define SUB 16
#define OCTAVES 43
#define NBUCKET (OCTAVES * SUB)
typedef struct {
    uint32_t n[NBUCKET];
} hist_t;

typedef struct {
    uint64_t ios, bytes, lat_sum_ns, lat_min_ns, lat_max_ns;
    double lat_sq; /* sum of squared latencies, ns^2, for the deviation */
    hist_t lat;
} dirstat_t;

/* A dependent plan's request (deps.c reads it from its job's log). */
struct dreq {
    long long id, t_ns, off, len;
    int dir, flags, absolute, npred;
    int awake; /* the spin rule: waits awake (deps_start) */
    long long *pred;
    /* `or AFTER THINK`: the other way (`alt`: 0 without one) */
    int alt, alt_absolute, nalt;
    long long alt_t_ns, *alt_pred;
    /* `join IDS` (groupcommit.c): it may go in the write before it; `same-turn`
     * (joinable too): only after the write before it went in an earlier one */
    int joinable, njoin, same_turn;
    long long *join;
};
#define FUA_FLAG 1
#define PREFLUSH_FLAG 2

typedef struct {
    char name[256], log[4096];
    int depth, dsync;
    int async; /* ioengine io_uring or libaio: one thread, `depth` in flight (async.c) */
    uint64_t max_in_flight, submits; /* an async lane's, for the report */
    int fixed_bufs;                  /* its buffers registered with its ring */
    long long first_ns, last_ns; /* first issue, last completion */
    dirstat_t dir[NDIR];
    hist_t late;
    uint64_t requests, late_max_ns;
    pthread_mutex_t mu;
    /* A dependent plan's job (deps.c): its target, requests and next to hand out. */
    char target[4096];
    struct dreq *reqs;
    size_t nreq, next;
    long long think_floor_ns; /* its smallest relative think (deps_start) */
    long long think_floor_asleep_ns; /* its smallest one slept through (the spin rule) */
    long long think_net_ns;   /* the sum of its relative thinks as replayed */
    long long thinks_awake, thinks_asleep; /* its relative thinks by the spin rule */
    /* a fixed think (fixedthink.c): it (0: none), the thinks replayed at it, the
     * longer ones of them (the recording host's stalls) and their time over it */
    long long fixed_think_ns, thinks_fixed, stalls_fixed, stall_ns;
    /* a log writer's timer (lazywrite.c): its rest (0: none), the writes it made */
    long long lazy_rest_ns, lazy_writes, lazy_took;
    /* a job on its own clock (clockjob.c): its period (0: none), where its
     * requests go on (lo to hi), how many it made past its log */
    long long clock_period_ns, clock_lo, clock_hi, clock_requests;
    /* its CPU a cycle (cpubudget.c; 0: none), its thread's CPU time to reach
     * before its next request, the cycles it spent CPU before, the CPU so burnt,
     * the cycles its own work had spent it already, its thread's CPU at its end */
    long long cpu_cycle_ns, cpu_goal_ns, cpu_cycles, cpu_burned_ns, cpu_over, cpu_thread_ns;
    int reads_only;           /* a dependent job of reads alone: its target opened read-only */
    int in_loop;              /* driven by the event loop (evloop.c), not threads of its own */
} job_t;

typedef struct {
    job_t *job;
    int sub;
} worker_t;

typedef struct {
    hist_t late;
    dirstat_t dir[NDIR];
    uint64_t requests, late_max;
    long long first, last;
} tally_t;

extern struct timespec genesis;
extern atomic_int stop_all, failed;
extern char *rbuf, *wbuf;
extern long long max_bs;

/* json.c: a JSON string of s, to stdout */
void json_str(const char *s);

/* io.c */
long long now_ns(void);
void sleep_until(long long t_ns);
/* Waiting awake (dependent plans): the last spin_ns of a wait spent yielding,
 * not asleep, by a bounded number of threads at once (spin_take, 1: one of
 * them; spin_give when done). */
#define SPIN_MIN_NS 20000LL
#define SPIN_MAX_NS 200000LL
extern long long spin_ns;
/* The spin rule: only a request whose recorded think is under spin_think_ns waits
 * awake (IOTAPE_LANES_SPIN_THINK_US; io.c says why 200 us). */
#define SPIN_THINK_NS 200000LL
extern long long spin_think_ns;
/* A slept think's timer slack: the kernel's default, as the application's
 * (IOTAPE_LANES_THINK_SLACK_US; io.c says why) */
#define THINK_SLACK_NS 50000LL
extern long long think_slack_ns;
int cmp_ll(const void *a, const void *b); /* qsort of long longs */
/* io.c: a 0/1 switch from the environment, read once into *seen (-1 until then) */
int env_switch(int *seen, const char *name, int dflt, const char *on, const char *off);
/* fixedthink.c: a job's slept thinks at one value where they are one sleep; the
 * value (0: not such a job). Called with each request's `awake` set. */
long long fixed_think(job_t *job);
int fixed_think_on(void);
long long sleep_lateness(void); /* a 100 us sleep's median lateness, at 1 ns timer slack */
long long sleep_lateness_at(long long slack_ns); /* the same at that slack (1 ns after) */
/* IOTAPE_LANES_SPIN_US, else 2 x sleep_lateness, clamped; IOTAPE_LANES_SPIN_THINK_US */
long long spin_setup(void);
int spin_take(void);
void spin_give(void);
/* sleep_until; `awake`: the last spin_ns awake where a spinner is free. The
 * HOP_THINK_* and HOP_NO_SPINNER bits of how it waited. */
int wait_until(long long t_ns, int awake);
int issue(int fd, int dir, long long off, long long len);
void fail(const job_t *job, const char *fmt, ...);
void tally_io(tally_t *ty, int dir, long long bytes, long long due, long long at, long long done);

/* v2log.c: a version-2 iolog line */
enum { V2_BAD, V2_ADD, V2_OPEN, V2_CLOSE, V2_WAIT, V2_IO };
typedef struct {
    int kind, dir;    /* dir: READ .. SYNC for V2_IO */
    long long a, b;   /* wait: ms, us; an I/O: offset, length */
    char file[4096];
} v2line_t;
int v2_parse(const char *ln, v2line_t *out); /* its kind */

/* async.c: an async lane's thread, from its log's second line on */
void async_worker(worker_t *w, tally_t *ty, FILE *f);

/* hist.c */
void hist_add(hist_t *h, uint64_t ns);
double bucket_ns(int b);    /* a bucket's upper edge, ns */
double bucket_lo_ns(int b); /* its lower edge */
double hist_pct(const hist_t *h, double pct);
void hist_merge(hist_t *into, const hist_t *from);

/* report.c */
extern const char *const DIR_NAME[NDIR];
void report(const job_t *jobs, int n, long long epoch_ms);

/* One timed cycle (calib.c): the issue's lateness after its predecessor's
 * completion plus the think (the median round's); a read's time in the caller
 * beyond the device's own service time (the block layer's,
 * /sys/dev/block/M:m/stat), and that service time, over every round's reads, to
 * resolution_ns; their sum (never below 0) is the delay. */
typedef struct {
    long long ns, late_ns, wake_ns, service_ns, resolution_ns;
    int rounds, reads; /* rounds timed, reads in each; 0 rounds: not timed */
} cycle_t;

/* This host's own delay in a dependent cycle (calib.c): what a replayed think
 * time is net of (deps.c), one for a think slept through and one for a think
 * whose end is waited awake (the spin rule, io.c), and how it was found. */
typedef struct {
    long long ns;        /* the delay of a slept think */
    long long awake_ns;  /* of a think waited awake (ns where nothing waits awake) */
    const char *from;    /* "cycle": timed on the target; "timer": sleeps; "given": the env */
    char reason[320];    /* why not "cycle", where it is not */
    long long timer_ns;  /* the sleeps' estimate (twice a 100 us sleep's median lateness) */
    long long timer_awake_ns; /* once, where the think's end is waited awake */
    cycle_t asleep, awake;    /* "cycle": each kind's, timed (awake: where some think is) */
    int blocks;               /* the plan's blocks read in turn */
} own_delay_t;

/* calib.c: after every job's deps_load and with the I/O buffers allocated */
void own_delay(const job_t *jobs, int n, own_delay_t *od);

/* hops.c: each dependent request's times (IOTAPE_LANES_HOPS=FILE); HOW bits: */
#define HOP_PRED_SPUN 1    /* waited for a predecessor in flight awake */
#define HOP_PRED_SLEPT 2   /* slept on a predecessor's futex word */
#define HOP_AWAKE 4        /* the spin rule: its think is waited awake */
#define HOP_THINK_SPUN 8   /* its think's end waited awake */
#define HOP_THINK_SLEPT 16 /* its think (or part of it) slept */
#define HOP_NO_SPINNER 32  /* it would have waited awake, but no spinner was free */
#define HOP_LOOP 64        /* issued by the event loop (evloop.c); its TID: -1 - its lane */
void hops_init(long long n_ids, int n_jobs);
void hops_thread_end(int job); /* a worker's schedstat into its job's */
int hops_on(void);
/* t: ready, noticed, due, at, done (CLOCK_MONOTONIC ns) */
void hops_note(long long id, int job, int tid, const long long t[5], int how);
void hops_write(const job_t *jobs, int n);

/* deps.c */
int deps_load(job_t *job);            /* 1: a dependent log, loaded; 0: not one */
int deps_any(void);                   /* 1: some job is a dependent one */
/* after own_delay: each relative think net of od->ns (od is kept for the report) */
void deps_start(job_t *jobs, int n, const own_delay_t *od);
/* Up to `max` (offset, length) of the plan's reads (else its writes), and their
 * target: the blocks own_delay times. Their count. */
int deps_blocks(const job_t *jobs, int n, long long (*blk)[2], int max, const char **target);
/* 1: some request of the plan waits awake (the spin rule), before deps_start */
int deps_awake_any(const job_t *jobs, int n);
void deps_worker(worker_t *w, tally_t *ty);
long long net_think(long long think_ns, long long job_floor_ns, long long own_ns);
void deps_report(void);               /* its JSON key, if the plan is dependent */
/* The run's state by request id: completion time (0 until then), its word (the
 * DONE bit once done; SLEEPER: a thread sleeps on its futex; LOOPER: the event
 * loop waits for it, on deps_loop_fd), and whether it was issued. */
enum { DONE = 1, SLEEPER = 2, LOOPER = 4 };
extern long long *done_ns;
extern atomic_int *done_flag;
extern atomic_uchar *issued;
extern atomic_llong early, waited_ns, spun_ns;
extern int deps_loop_fd; /* the event loop's eventfd, -1 without one */
/* Request `id` completed at `done`: its time, its word, whoever waits on it
 * (`by_loop`: the loop itself completed it, and sees that without its eventfd). */
void deps_done(long long id, long long done, int by_loop);
/* 1 where `q`, issued at `at`, went before what it waited for had completed (it
 * is counted: "issued_before_predecessor"). */
int deps_early(const struct dreq *q, long long at);

/* lazywrite.c: a log writer's writes by its own clock (the plan's `lazy REST_US`
 * line), before its request i while that waits (depth 1): 0, or -1 where one
 * failed (said by fail()). IOTAPE_LANES_LAZY=0: none. */
#define LAZY_SEGMENT 4096LL /* a log segment: what one such write takes */
int lazy_on(void);
int lazy_parse(job_t *job, const char *ln); /* 1: a `lazy` line (-1: malformed) */
/* the segments of request i so written (its first ones), or -1. `ready_by(q, t)`:
 * 1 once what q waits for has completed, 0 where it had not by t (deps.c's: passed
 * in, as groupcommit.c's parser takes deps.c's, so the calls go one way) */
long long lazy_before(job_t *job, size_t i, int fd, tally_t *ty,
                      int (*ready_by)(const struct dreq *, long long));
void lazy_took(job_t *job); /* a request the timer's writes took whole, counted */
void lazy_report(const job_t *jobs, int n);

/* clockjob.c: a job on its own clock (the plan's `clock PERIOD_US LO HI` line)
 * going on after its log until the others finish (fg_running: the threads of the
 * others, the event loop's among them, still running). IOTAPE_LANES_CLOCK=0: no. */
extern atomic_int fg_running;
int clock_on(void);
int clock_job(const job_t *job); /* 1: it has a clock, and clocks are on */
int clock_parse(job_t *job, const char *ln); /* 1: a `clock` line (-1: malformed) */
/* after the job's last logged request (due at `due`): 0, or -1 where one failed */
int clock_run(job_t *job, int fd, tally_t *ty, long long due);
void clock_report(const job_t *jobs, int n);

/* cpubudget.c: a job's CPU a cycle (the plan's `cpu US` line), spent on its thread
 * before each request. IOTAPE_LANES_CPU=0: no. */
int cpu_on(void);
int cpu_job(const job_t *job); /* 1: it has a CPU a cycle (depth 1), and it is on */
int cpu_parse(job_t *job, const char *ln); /* 1: a `cpu` line (-1: malformed) */
long long cpu_now(void);                   /* the calling thread's CPU time, ns */
/* before a request (depth 1: on the job's one thread): burn CPU until the thread
 * has spent the job's CPU a cycle for each cycle since its first request */
void cpu_spend(job_t *job);
void cpu_report(const job_t *jobs, int n);

/* groupcommit.c: a log writer's write taking the writes after it that the
 * replay's sessions have already produced (IOTAPE_LANES_GROUP_COMMIT=0: none). */
#define GC_MAX_BYTES (1LL << 20) /* ESE's log buffer: the most one write takes */
int gc_on(void);
/* The ` join IDS` clause at the end of a dependent log line, into q
 * (`ids` parses a list as AFTER's), cut from the line: 0, or -1 where malformed. */
int gc_parse(struct dreq *q, char *ln, int (*ids)(long long, char *, long long **, int *));
/* The job's request i about to go, the job's lock held and job->next == i + 1:
 * the last request it takes with it (i where none; job->next moved past them,
 * each marked issued) and the one write's length in *len (from reqs[i].off). */
size_t gc_take(job_t *job, size_t i, long long *len);
/* Whether the job's request i may take any (gc_take's cheap test, for the lock). */
int gc_may_take(const job_t *job, size_t i);
void gc_report(void);
/* a request by a system call, of len bytes (its own, or a group commit's): 0 or errno */
int deps_issue(int fd, const struct dreq *q, long long len);

/* chain.c: a chain of n reads of `target` (blk, in turn), each `think_ns` after the
 * previous one completed (waited awake, as the spin rule does a short think's, or
 * not), so each is issued by the thread the other's completion wakes (deps_worker
 * on 2 threads), or, where the event loop drives awake thinks (evloop_on), by the
 * loop; their tally into *out. 0, or -1 where one failed (said on stderr). */
int deps_chain(const char *target, const long long (*blk)[2], int nb, int n, long long think_ns,
               int awake, tally_t *out);

/* evloop.c: one thread and one io_uring driving the dependent jobs whose thinks
 * are mostly short (the spin rule's; a lane per iodepth), their waits resolved in the
 * loop. IOTAPE_LANES_EVLOOP=1|0 (0: every job on threads of its own). */
int evloop_on(void);
int evloop_takes(const job_t *job); /* after deps_start: whether the loop drives it */
/* Every job of jobs[0..n) with in_loop, run to its end; each one's figures into
 * ty[j]. 0, or -1 where the loop could not start (said on stderr; failed set). */
int evloop_run(job_t *jobs, int n, tally_t *ty);
void evloop_report(const job_t *jobs, int n); /* its JSON key, in a dependent plan */

#endif
