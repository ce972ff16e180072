/* cold_cpu: a fixed CPU work unit timed warm and after sleeping S (issue 34;
 * bench/cold_cpu.py runs it). A unit walks FOOTPRINT KiB of 64-byte nodes in a
 * random cycle, reading and writing each (a dependent chain: the prefetcher
 * cannot hide a miss), or, for a negative FOOTPRINT, makes that many 8 KiB
 * preads from a memfd (the kernel's code and data). Units and sleeps are drawn
 * in random order, each (unit, sleep) REPS times; each timed run follows a run
 * of the same unit and the sleep (none: warm).
 *
 *     cold_cpu REPS FOOTPRINT[,FOOTPRINT...] SLEEP_US...
 *
 * prints one line per (unit, sleep): footprint sleep_us reps p25 p50 p75 (ns). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct node {
    struct node *next;
    uint64_t n;
    char pad[48];
};

struct unit {
    long footprint;
    struct node *head;
    size_t nodes;
    size_t preads;
};

static uint64_t rng = 88172645463325252ull;
static int fd = -1;
static char buf[8192];

static uint64_t xr(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t run(const struct unit *u)
{
    uint64_t s = 0;
    for (size_t i = 0; i < u->preads; i++) {
        s += (uint64_t)pread(fd, buf, sizeof buf, (off_t)((xr() % 64) * 8192));
        s += (uint64_t)buf[i % sizeof buf];
    }
    struct node *p = u->head;
    for (size_t i = 0; i < u->nodes; i++) {
        p->n++;
        s += p->n;
        p = p->next;
    }
    return s;
}

static int make(struct unit *u, long footprint)
{
    u->footprint = footprint;
    u->preads = footprint < 0 ? (size_t)-footprint : 0;
    u->nodes = footprint > 0 ? (size_t)footprint * 1024 / sizeof(struct node) : 0;
    u->head = NULL;
    if (!u->nodes)
        return 0;
    struct node *v = aligned_alloc(64, u->nodes * sizeof *v);
    size_t *perm = malloc(u->nodes * sizeof *perm);
    if (!v || !perm)
        return -1;
    for (size_t i = 0; i < u->nodes; i++)
        perm[i] = i;
    for (size_t i = u->nodes - 1; i > 0; i--) {
        size_t j = xr() % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < u->nodes; i++) {
        v[perm[i]].next = &v[perm[(i + 1) % u->nodes]];
        v[perm[i]].n = 0;
    }
    free(perm);
    u->head = v;
    return 0;
}

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: cold_cpu REPS FOOTPRINT[,FOOTPRINT...] SLEEP_US...\n");
        return 2;
    }
    int reps = atoi(argv[1]);
    int nu = 0, ns = argc - 3;
    struct unit units[32];
    for (char *tok = strtok(argv[2], ","); tok && nu < 32; tok = strtok(NULL, ","))
        if (make(&units[nu++], atol(tok)) < 0)
            return 1;
    fd = memfd_create("cold_cpu", 0);
    memset(buf, 1, sizeof buf);
    for (int i = 0; i < 64; i++)
        if (fd < 0 || write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
            return 1;
    long sleep_us[64];
    for (int k = 0; k < ns && k < 64; k++)
        sleep_us[k] = atol(argv[3 + k]);
    if (reps < 4 || ns > 64)
        return 2;
    size_t cells = (size_t)nu * (size_t)ns;
    uint64_t *t = malloc(cells * (size_t)reps * sizeof *t);
    int *cnt = calloc(cells, sizeof *cnt);
    if (!t || !cnt)
        return 1;
    volatile uint64_t sink = 0;
    for (int u = 0; u < nu; u++)
        for (int w = 0; w < 20; w++)
            sink += run(&units[u]);
    for (size_t i = 0; i < cells * (size_t)reps; i++) {
        size_t c = xr() % cells;
        while (cnt[c] >= reps)
            c = (c + 1) % cells;
        const struct unit *u = &units[c / (size_t)ns];
        long s = sleep_us[c % (size_t)ns];
        sink += run(u); /* the unit itself is the last thing touched before the sleep */
        if (s > 0) {
            struct timespec d = {s / 1000000, (s % 1000000) * 1000};
            clock_nanosleep(CLOCK_MONOTONIC, 0, &d, NULL);
        }
        uint64_t a = now_ns();
        sink += run(u);
        t[c * (size_t)reps + (size_t)cnt[c]++] = now_ns() - a;
    }
    for (size_t c = 0; c < cells; c++) {
        uint64_t *x = t + c * (size_t)reps;
        qsort(x, (size_t)reps, sizeof *x, cmp);
        printf("%ld %ld %d %lu %lu %lu\n", units[c / (size_t)ns].footprint, sleep_us[c % (size_t)ns],
               reps, (unsigned long)x[reps / 4], (unsigned long)x[reps / 2],
               (unsigned long)x[3 * reps / 4]);
    }
    return (int)(sink & 0);
}
