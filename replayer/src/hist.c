/* iotape-lanes' latency histograms (lanes.h says their buckets): adding to one,
 * a bucket's edges, a percentile and merging two. Below io.c (a thread's tally),
 * report.c (the JSON), lanes.c and deps.c (merging tallies), which all use them:
 * in report.c, deps.c's merge had made report.c and deps.c call each other. */
#include <stdint.h>

#include "lanes.h"

/* The upper edge of bucket b, in ns. */
double bucket_ns(int b) {
    if (b < SUB)
        return b + 1;
    int shift = b / SUB - 1;
    return (double)((uint64_t)(SUB + b % SUB + 1) << shift);
}

/* The lower edge of bucket b, in ns (bucket_ns: its upper edge). */
double bucket_lo_ns(int b) {
    if (b < SUB)
        return b;
    int shift = b / SUB - 1;
    return (double)((uint64_t)(SUB + b % SUB) << shift);
}

double hist_pct(const hist_t *h, double pct) {
    uint64_t total = 0, seen = 0;
    for (int b = 0; b < NBUCKET; b++)
        total += h->n[b];
    if (!total)
        return 0;
    uint64_t want = (uint64_t)(pct / 100.0 * (double)total + 0.999999);
    if (want < 1)
        want = 1;
    for (int b = 0; b < NBUCKET; b++) {
        seen += h->n[b];
        if (seen >= want)
            return bucket_ns(b);
    }
    return bucket_ns(NBUCKET - 1);
}

void hist_merge(hist_t *into, const hist_t *from) {
    for (int b = 0; b < NBUCKET; b++)
        into->n[b] += from->n[b];
}

void hist_add(hist_t *h, uint64_t ns) {
    int b = 0;
    if (ns >= SUB) {
        int msb = 63 - __builtin_clzll(ns);
        int shift = msb - 4; /* log2(SUB) */
        b = (shift + 1) * SUB + (int)((ns >> shift) & (SUB - 1));
    } else {
        b = (int)ns;
    }
    if (b >= NBUCKET)
        b = NBUCKET - 1;
    h->n[b]++;
}
