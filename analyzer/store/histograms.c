/* A run's latency histograms, gathered as its row groups are written
 * (analyzer/store/event_histograms.py loads this, in build/libingest.so):
 * each key (dev, op, stream, metric, bucket packed in 64 bits) with its count,
 * sum, min and max.
 *
 * The rules are event_histograms.partial's: a row counts for a metric when
 * ts_complete_ns <= max_ns, earlier > 0 and later >= earlier (and, for device
 * time, its complete_unseen flag is clear); its value v = later - earlier; the
 * bucket is v below 64, else (e - 6) * 64 + (v >> (e - 6)) with e = floor(log2 v)
 * taken from v's exponent as a double.
 *
 * Layout: a (dev, op, stream, metric) group holds its buckets below `limit`
 * (2688 under 2^47 ns) as rows of 16 cells of 32 bytes, each made when a value
 * first falls in it; groups are found through a direct-mapped cache of recent
 * ones, then a hash. A row is then one update of one cell, and a block of rows'
 * cells are prefetched before they are updated. A keyed hash table of every
 * bucket (the previous layout: slot, key, count, sum, min and max in arrays of
 * their own) took six cache lines a row: a synthetic trace of every size, op and
 * stream has ~34,000 keys and missed on each (15-20 ns a row, now ~7).
 *
 * Each writer thread keeps one of these for the whole run (no partials to fold),
 * merged into one at the end; rows come out in key order. Memory is bounded:
 * past `max_bytes` of cells iot_hist_add stops and says where, the caller takes
 * the rows so far (iot_hist_rows), empties it (iot_hist_reset) and goes on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { ROW = 16, RECENT = 256, BLOCK = 64 };

typedef struct {
    int64_t n, s, lo, hi;
} cell;

typedef struct {
    uint64_t g;  /* dev << 32 | op << 24 | stream << 16 | metric << 15 */
    cell **rows; /* nrows of them, NULL until a value falls in one */
} group;

typedef struct {
    uint64_t limit;   /* no histogram at or past this value */
    int64_t nrows;    /* rows a group has room for: every bucket below the limit */
    group *groups;    /* in order of first sight */
    int64_t ngroups, cap;
    int64_t *slots;   /* the groups' hash: an index, -1 where empty */
    int64_t nslots;   /* a power of two, at least twice ngroups */
    int64_t keys;     /* cells with a count */
    int64_t bytes, max_bytes;
    uint64_t seen_g[RECENT]; /* recent groups, by their key's hash */
    cell **seen_rows[RECENT];
} hist;

static inline int64_t bucket_of(int64_t v) {
    if (v < 64) return v;
    union {
        double f;
        int64_t i;
    } u = {(double)v};
    int64_t e = (u.i >> 52) - 1023;
    return (e - 6) * 64 + (v >> (e - 6));
}

static inline uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static void forget(hist *h) {
    for (int64_t i = 0; i < h->ngroups; i++) {
        for (int64_t r = 0; r < h->nrows; r++) free(h->groups[i].rows[r]);
        free(h->groups[i].rows);
    }
    h->ngroups = 0;
    h->keys = 0;
    h->bytes = 0;
    memset(h->slots, 0xff, (size_t)h->nslots * sizeof *h->slots);
    memset(h->seen_g, 0xff, sizeof h->seen_g); /* no group has all bits set */
}

void iot_hist_close(void *p) {
    hist *h = p;
    if (!h) return;
    forget(h);
    free(h->groups);
    free(h->slots);
    free(h);
}

/* Empty again, its rows handed out first (iot_hist_rows). */
void iot_hist_reset(void *p) { forget(p); }

/* An empty histogram for values below `limit` (64 to 2^62), holding up to about
 * `max_bytes` of cells; NULL without memory. */
void *iot_hist_open(uint64_t limit, int64_t max_bytes) {
    if (limit < 64 || limit > ((uint64_t)1 << 62)) return NULL;
    hist *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->limit = limit;
    h->nrows = (bucket_of((int64_t)(limit - 1)) + ROW) / ROW;
    h->max_bytes = max_bytes;
    h->nslots = 64;
    h->slots = malloc((size_t)h->nslots * sizeof *h->slots);
    if (!h->slots) {
        free(h);
        return NULL;
    }
    forget(h);
    return h;
}

static int rehash(hist *h, int64_t nslots) {
    int64_t *slots = malloc((size_t)nslots * sizeof *slots);
    if (!slots) return -1;
    memset(slots, 0xff, (size_t)nslots * sizeof *slots);
    uint64_t mask = (uint64_t)(nslots - 1);
    for (int64_t i = 0; i < h->ngroups; i++) {
        uint64_t s = mix(h->groups[i].g) & mask;
        while (slots[s] >= 0) s = (s + 1) & mask;
        slots[s] = i;
    }
    free(h->slots);
    h->slots = slots;
    h->nslots = nslots;
    return 0;
}

/* The rows of group g, made if new; NULL without memory. */
static cell **rows_of(hist *h, uint64_t g) {
    uint64_t mask = (uint64_t)(h->nslots - 1);
    uint64_t s = mix(g) & mask;
    for (;;) {
        int64_t i = h->slots[s];
        if (i < 0) break;
        if (h->groups[i].g == g) return h->groups[i].rows;
        s = (s + 1) & mask;
    }
    if (h->ngroups == h->cap) {
        int64_t cap = h->cap ? 2 * h->cap : 16;
        group *gs = realloc(h->groups, (size_t)cap * sizeof *gs);
        if (!gs) return NULL;
        h->groups = gs;
        h->cap = cap;
    }
    cell **rows = calloc((size_t)h->nrows, sizeof *rows);
    if (!rows) return NULL;
    h->bytes += h->nrows * (int64_t)sizeof *rows;
    h->groups[h->ngroups] = (group){g, rows};
    h->slots[s] = h->ngroups++;
    if (2 * h->ngroups > h->nslots && rehash(h, 2 * h->nslots) < 0) return NULL;
    return rows;
}

/* The cell of bucket b in `rows`, its row made if new; NULL without memory. */
static inline cell *cell_of(hist *h, cell **rows, int64_t b) {
    cell *r = rows[b / ROW];
    if (!r) {
        r = rows[b / ROW] = calloc(ROW, sizeof *r);
        if (!r) return NULL;
        h->bytes += ROW * (int64_t)sizeof *r;
    }
    return &r[b % ROW];
}

static inline void put(hist *h, cell *c, int64_t v) {
    if (c->n == 0) {
        h->keys++;
        c->lo = v;
        c->hi = v;
    } else {
        if (v < c->lo) c->lo = v;
        if (v > c->hi) c->hi = v;
    }
    c->n += 1;
    c->s = (int64_t)((uint64_t)c->s + (uint64_t)v);
}

/* Adds n rows' values of one metric (flags: the rows' flags where rows with
 * `unseen` set do not count, or NULL). Returns the keys now held; -1 when a
 * value is at or past the limit (no histogram for the run); -2 when its cells
 * reached max_bytes, the first *done rows added; -3 without memory. */
int64_t iot_hist_add(void *p, int64_t n, const uint32_t *dev, const uint8_t *op,
                     const uint8_t *stream, const uint64_t *later, const uint64_t *earlier,
                     const uint64_t *complete, const uint16_t *flags, uint16_t unseen,
                     int64_t metric, uint64_t max_ns, int64_t *done) {
    hist *h = p;
    cell *at[BLOCK];
    int64_t val[BLOCK];
    *done = 0;
    for (int64_t start = 0; start < n; start += BLOCK) {
        /* A block's cells found (made) first: a block stopped at max_bytes has
         * none of its values added yet, and its misses overlap. */
        if (h->bytes >= h->max_bytes) {
            *done = start;
            return -2;
        }
        int64_t end = n - start < BLOCK ? n : start + BLOCK, m = 0;
        for (int64_t i = start; i < end; i++) {
            uint64_t a = later[i], b = earlier[i];
            if (complete[i] > max_ns || b == 0 || a < b) continue;
            if (flags && (flags[i] & unseen)) continue;
            uint64_t d = a - b;
            if (d >= h->limit) return -1;
            uint64_t g = ((uint64_t)dev[i] << 32) | ((uint64_t)op[i] << 24) |
                         ((uint64_t)stream[i] << 16) | ((uint64_t)metric << 15);
            unsigned slot = (unsigned)(((g >> 15) * 0x9E3779B97F4A7C15ULL) >> 56) % RECENT;
            cell **rows = h->seen_rows[slot];
            if (h->seen_g[slot] != g) {
                rows = rows_of(h, g);
                if (!rows) return -3;
                h->seen_g[slot] = g;
                h->seen_rows[slot] = rows;
            }
            at[m] = cell_of(h, rows, bucket_of((int64_t)d));
            if (!at[m]) return -3;
            __builtin_prefetch(at[m], 1);
            val[m++] = (int64_t)d;
        }
        for (int64_t j = 0; j < m; j++) put(h, at[j], val[j]);
    }
    *done = n;
    return h->keys;
}

/* Adds src's cells to dst's (both opened with the same limit; dst may pass its
 * max_bytes here). Returns dst's keys, -3 without memory. */
int64_t iot_hist_merge(void *dstp, const void *srcp) {
    hist *dst = dstp;
    const hist *src = srcp;
    if (dst->nrows != src->nrows) return -3;
    for (int64_t i = 0; i < src->ngroups; i++) {
        cell **to = rows_of(dst, src->groups[i].g);
        if (!to) return -3;
        for (int64_t r = 0; r < src->nrows; r++) {
            const cell *from = src->groups[i].rows[r];
            if (!from) continue;
            for (int64_t c = 0; c < ROW; c++) {
                if (from[c].n == 0) continue;
                cell *t = cell_of(dst, to, r * ROW + c);
                if (!t) return -3;
                if (t->n == 0) {
                    dst->keys++;
                    *t = from[c];
                    continue;
                }
                t->n += from[c].n;
                t->s = (int64_t)((uint64_t)t->s + (uint64_t)from[c].s);
                if (from[c].lo < t->lo) t->lo = from[c].lo;
                if (from[c].hi > t->hi) t->hi = from[c].hi;
            }
        }
    }
    return dst->keys;
}

/* The keys held: cells with a count. */
int64_t iot_hist_keys(const void *p) { return ((const hist *)p)->keys; }

static int by_group(const void *a, const void *b) {
    uint64_t x = ((const group *)a)->g, y = ((const group *)b)->g;
    return (x > y) - (x < y);
}

/* The rows, in key order, into arrays of iot_hist_keys' length. Returns the rows
 * written, -3 without memory. */
int64_t iot_hist_rows(const void *p, uint64_t *keys, int64_t *n, int64_t *s, int64_t *lo,
                      int64_t *hi) {
    const hist *h = p;
    group *order = malloc((size_t)(h->ngroups ? h->ngroups : 1) * sizeof *order);
    if (!order) return -3;
    if (h->ngroups) memcpy(order, h->groups, (size_t)h->ngroups * sizeof *order);
    qsort(order, (size_t)h->ngroups, sizeof *order, by_group);
    int64_t k = 0;
    for (int64_t i = 0; i < h->ngroups; i++) {
        for (int64_t r = 0; r < h->nrows; r++) {
            const cell *c = order[i].rows[r];
            if (!c) continue;
            for (int64_t j = 0; j < ROW; j++) {
                if (c[j].n == 0) continue;
                keys[k] = order[i].g | (uint64_t)(r * ROW + j);
                n[k] = c[j].n;
                s[k] = c[j].s;
                lo[k] = c[j].lo;
                hi[k] = c[j].hi;
                k++;
            }
        }
    }
    free(order);
    return k;
}
