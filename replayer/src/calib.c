/* iotape-lanes: this host's own delay in a dependent cycle, what each replayed
 * think time is net of (deps.c, docs/replay.md "Think time net of the host").
 *
 * In a dependent replay a request goes out `think` after its predecessor's
 * read or write returned; the device sees a cycle of its own service time, the
 * think, and what this host adds: the completion waking the thread that waited
 * in the kernel (inside the caller's read time, outside the device's), the
 * wake-up of the thread that issues next and its sleep's lateness, and the
 * submission path back to the block layer. That is timed here on the target
 * itself, before the start: rounds of a chain of reads (read-only; a few of the
 * plan's own blocks, its reads' or else its writes'; never a write) through
 * deps_worker on two threads, each read `CAL_THINK_NS` after the other thread's
 * completed, as a plan's request waits for its predecessor. The delay is the
 * issue's lateness after (completion + think) (a round's mean cycle, first issue
 * to last completion, less its reads' time in the caller and the thinks: a mean,
 * so this host's stalls count as often as a replay meets them; the median
 * round's), plus a read's mean time in the caller beyond the device's own
 * service time over every round's reads (the block layer's accounting,
 * /sys/dev/block/M:m/stat, in whole milliseconds: so many reads that 1 ms is
 * small against them).
 *
 * An earlier estimate, twice the median lateness of short sleeps (the wake-up at
 * a completion and the sleep of the think; once where the think's end is waited
 * awake, io.c), came out at 43-47 us on the shared
 * 2-vCPU VM where a real cycle added ~90 us; it stays as the fallback where the
 * target cannot be timed so (no block statistics, say a file on tmpfs; a read
 * failed; other reads on the device at the same time), with the reason in the
 * report. IOTAPE_LANES_OWN_FLOOR_US=US gives the delay instead.
 *
 * Two kinds (the spin rule, io.c): a think slept through pays the sleep's
 * lateness and the wake-up, one whose end is waited awake pays neither (on this
 * VM 44-59 us against 11-18 us). Each is timed alike, the chain's thinks slept
 * and then waited awake (the latter only where some request of the plan waits
 * awake), and deps.c nets each think of the kind it is replayed as. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "lanes.h"

#define CAL_THINK_NS 100000LL      /* the think of the timed chain */
#define CAL_ROUNDS 5
#define CAL_ROUND_NS 60000000LL    /* what a round aims to take (each kind's) */
#define CAL_MAX_NS 1500000000LL    /* no round starts past this */
#define CAL_MIN_READS 16
#define CAL_MAX_READS 400
#define CAL_BLOCKS 8

/* The median lateness of 101 sleeps of 100 us at 1 ns timer slack (as the
 * workers'), and at a slept think's (io.c's think_slack_ns): for a slept think
 * one of each (one wake-up at a completion, one for the sleep of the think), for
 * one whose end is waited awake the first alone. */
static void timer_delay(own_delay_t *od, int awake) {
    long long late = sleep_lateness();
    long long think = think_slack_ns > 1 ? sleep_lateness_at(think_slack_ns) : late;
    od->timer_ns = late + think;
    od->timer_awake_ns = awake ? late : od->timer_ns;
}

static int why(own_delay_t *od, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(od->reason, sizeof od->reason, fmt, ap);
    va_end(ap);
    return -1;
}

/* Reads completed and the milliseconds they took, from a block device's stat. */
static int disk_reads(const char *stat, unsigned long long *reads, unsigned long long *ms) {
    FILE *f = fopen(stat, "r");
    if (!f)
        return -1;
    int ok = fscanf(f, "%llu %*u %*u %llu", reads, ms) == 2;
    fclose(f);
    return ok ? 0 : -1;
}

/* Rounds of a chain of `reads` reads of the blocks, each CAL_THINK_NS after the
 * previous one completed (its end waited awake or not), timed into *c. */
static int time_cycle(const char *target, const char *stat, const long long (*blk)[2], int nb,
                      long long reads, int awake, cycle_t *c, own_delay_t *od) {
    long long late[CAL_ROUNDS], in_caller = 0, svc_ms = 0;
    unsigned long long r0, ms0, r1, ms1;
    int r = 0;
    for (long long start = now_ns(); r < CAL_ROUNDS && (!r || now_ns() - start < CAL_MAX_NS);
         r++) {
        static tally_t ty; /* large: not on the stack */
        memset(&ty, 0, sizeof ty);
        if (disk_reads(stat, &r0, &ms0) ||
            deps_chain(target, blk, nb, (int)reads, CAL_THINK_NS, awake, &ty) ||
            disk_reads(stat, &r1, &ms1))
            return why(od, "%s: a calibration read failed", target);
        if (r1 - r0 != (unsigned long long)reads || ty.dir[READ].ios != (uint64_t)reads)
            return why(od, "%s: the device completed %llu reads while the calibration issued "
                           "%lld (a sparse file's holes, or another user of it?)",
                       target, r1 - r0, reads);
        /* The round's span (first issue to last completion: every read's time in
         * the caller, and a think and a lateness between each two) less those: the
         * issue's mean lateness. A mean, so this host's stalls count as often as a
         * replay meets them. */
        long long caller = (long long)ty.dir[READ].lat_sum_ns;
        late[r] = (ty.last - ty.first - caller) / (reads - 1) - CAL_THINK_NS;
        in_caller += caller;
        svc_ms += (long long)(ms1 - ms0);
    }
    /* A read's time in the caller beyond the device's, over every round's reads:
     * the device's total comes in whole milliseconds. The lateness: the median
     * round's. */
    long long all = (long long)r * reads;
    c->service_ns = svc_ms * 1000000LL / all;
    c->wake_ns = in_caller / all - c->service_ns;
    qsort(late, (size_t)r, sizeof *late, cmp_ll);
    c->late_ns = late[r / 2];
    c->ns = c->late_ns + c->wake_ns > 0 ? c->late_ns + c->wake_ns : 0;
    c->resolution_ns = 1000000LL / all;
    c->rounds = r;
    c->reads = (int)reads;
    return 0;
}

static int cycle_delay(const job_t *jobs, int n, int awake, own_delay_t *od) {
    long long blk[CAL_BLOCKS][2];
    const char *target = NULL;
    int nb = deps_blocks(jobs, n, blk, CAL_BLOCKS, &target);
    if (!nb)
        return why(od, "the plan reads and writes no whole sectors to time a cycle with");
    int fd = open(target, O_RDONLY | O_DIRECT);
    if (fd < 0)
        return why(od, "%s: %s", target, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        close(fd);
        return why(od, "%s: %s", target, strerror(errno));
    }
    dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
    char stat[96];
    snprintf(stat, sizeof stat, "/sys/dev/block/%u:%u/stat", major(dev), minor(dev));
    unsigned long long r0, ms0;
    if (disk_reads(stat, &r0, &ms0)) {
        close(fd);
        return why(od, "%s: no block device statistics (%s) to take its service time from",
                   target, stat);
    }
    /* A probe: the reads work, and how long one takes, to size the rounds. */
    long long t0 = now_ns();
    for (int i = 0; i < nb; i++) {
        ssize_t got = pread(fd, rbuf, (size_t)blk[i][1], blk[i][0]);
        if (got != blk[i][1]) {
            int e = got < 0 ? errno : EIO;
            close(fd);
            return why(od, "%s: a read of %lld bytes at %lld: %s", target, blk[i][1], blk[i][0],
                       strerror(e));
        }
    }
    long long per_read = (now_ns() - t0) / nb;
    close(fd);
    long long reads = CAL_ROUND_NS / (per_read + CAL_THINK_NS);
    reads = reads < CAL_MIN_READS ? CAL_MIN_READS : reads > CAL_MAX_READS ? CAL_MAX_READS : reads;
    od->blocks = nb;
    const long long(*b)[2] = (const long long(*)[2])blk;
    if (time_cycle(target, stat, b, nb, reads, 0, &od->asleep, od) ||
        (awake && time_cycle(target, stat, b, nb, reads, 1, &od->awake, od)))
        return -1;
    od->ns = od->asleep.ns;
    od->awake_ns = awake ? od->awake.ns : od->ns;
    return 0;
}

void own_delay(const job_t *jobs, int n, own_delay_t *od) {
    *od = (own_delay_t){.from = "given"};
    if (!deps_any())
        return;
    /* IOTAPE_LANES_OWN_FLOOR_US=US[,AWAKE_US]: this host's delay given instead of
     * measured (0: the recorded thinks as they are, the replay before
     * think_net), a slept think's and an awake one's (the same where one). */
    const char *given = getenv("IOTAPE_LANES_OWN_FLOOR_US");
    if (given && *given) {
        char *end, *end2;
        double us = strtod(given, &end), awake_us = us;
        if (*end == ',')
            awake_us = strtod(end + 1, &end2), end = end2 == end + 1 ? end : end2;
        if (*end || !(us >= 0) || us > 1e9 || !(awake_us >= 0) || awake_us > 1e9) {
            fprintf(stderr, "iotape-lanes: IOTAPE_LANES_OWN_FLOOR_US=%s: not microseconds "
                            "(0 or more; a slept think's[,an awake one's])\n", given);
            exit(2);
        }
        od->ns = (long long)(us * 1000);
        od->awake_ns = (long long)(awake_us * 1000);
        return;
    }
    int awake = deps_awake_any(jobs, n);
    timer_delay(od, awake);
    if (!cycle_delay(jobs, n, awake, od)) {
        od->from = "cycle";
        return;
    }
    od->from = "timer";
    od->ns = od->timer_ns;
    od->awake_ns = od->timer_awake_ns;
    od->asleep.rounds = od->awake.rounds = 0;
}
