/* One step's matching of a replay's requests to its original's, for
 * replayer/run/pairing.py (Pairer._match; build/libpostreplay.so, through
 * run/pairmatch.py). numpy did it with stable argsorts of both sides' keys, an
 * intersection of the unique keys and up to 33 rounds of each: ~0.4 us a held
 * request per step, the largest cost of relabelling and fidelity at NVMe rates.
 * Here one hash table of the keys, a list of each side's rows per key in row
 * order, and each key settled on its own.
 *
 * The rules are _match's, per key (each key's rounds depend on nothing else):
 * the i-th row of a (not yet gone) pairs with the i-th of b; while some pair is
 * more than the horizon apart, the one with the earliest min(ta, tb) (the first
 * in pair order among ties) loses its older row (gone), and the key is matched
 * again; after MAX_ROUNDS such drops, every pair still too far apart loses its
 * older row and is left out.
 *
 * Writes the pairs (row of a, row of b) in the order of a's rows (a's rows come
 * in time order, so the pairs do too: the ordered sinks' sort is then nearly
 * free), and the gone flags; returns the number of pairs, or -1 when memory
 * runs out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 32

/* Rows are int32 here (a step holds far fewer than 2^31: the caller checks). */
typedef struct {
    uint64_t key;
    int32_t head_a, tail_a, head_b, tail_b; /* -1: none; head_a -1: slot unused */
} slot_t;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* The key's slot: where it is, or the free one where it would go. */
static slot_t *find(slot_t *tab, uint64_t mask, uint64_t key) {
    uint64_t h = mix(key) & mask;
    while (tab[h].head_a >= 0 && tab[h].key != key) h = (h + 1) & mask;
    return &tab[h];
}

static int64_t dist(int64_t x, int64_t y) { return x > y ? x - y : y - x; }

/* One key: rows of a chained by next_a from ha, of b by next_b from hb. Sets
 * mate[i] to the row of b that row i of a pairs with. */
static void settle(int64_t ha, int64_t hb, const int64_t *next_a, const int64_t *next_b,
                   const int64_t *ta, const int64_t *tb, int64_t horizon, uint8_t *gone_a,
                   uint8_t *gone_b, int64_t *mate) {
    for (int rounds = 0;; rounds++) {
        int last = rounds == MAX_ROUNDS;
        int64_t worst_a = -1, worst_b = -1, worst_t = 0;
        int64_t i = ha, j = hb;
        for (;;) {
            while (i >= 0 && gone_a[i]) i = next_a[i];
            while (j >= 0 && gone_b[j]) j = next_b[j];
            if (i < 0 || j < 0) break;
            if (dist(ta[i], tb[j]) > horizon) {
                int64_t m = ta[i] < tb[j] ? ta[i] : tb[j];
                if (last) {
                    /* Every pair still too far apart loses its older row and
                     * is left out; the others stand as matched this round. */
                    if (ta[i] < tb[j]) gone_a[i] = 1;
                    else gone_b[j] = 1;
                } else if (worst_a < 0 || m < worst_t) {
                    worst_a = i, worst_b = j, worst_t = m;
                }
            } else if (last) {
                mate[i] = j;
            }
            i = next_a[i];
            j = next_b[j];
        }
        if (last) return;
        if (worst_a < 0) break;
        if (ta[worst_a] < tb[worst_b]) gone_a[worst_a] = 1;
        else gone_b[worst_b] = 1;
    }
    int64_t i = ha, j = hb;
    for (;;) {
        while (i >= 0 && gone_a[i]) i = next_a[i];
        while (j >= 0 && gone_b[j]) j = next_b[j];
        if (i < 0 || j < 0) break;
        mate[i] = j;
        i = next_a[i];
        j = next_b[j];
    }
}

int64_t pair_match(const uint64_t *ka, const int64_t *ta, int64_t na, const uint64_t *kb,
                   const int64_t *tb, int64_t nb, int64_t horizon, uint8_t *gone_a,
                   uint8_t *gone_b, int64_t *out_a, int64_t *out_b) {
    memset(gone_a, 0, (size_t)na);
    memset(gone_b, 0, (size_t)nb);
    if (!na || !nb) return 0;
    if (na >= INT32_MAX || nb >= INT32_MAX) return -1;
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)na) cap <<= 1;
    slot_t *tab = malloc(cap * sizeof *tab);
    int64_t *next_a = malloc((size_t)na * sizeof *next_a);
    int64_t *next_b = malloc((size_t)nb * sizeof *next_b);
    if (!tab || !next_a || !next_b) {
        free(tab), free(next_a), free(next_b);
        return -1;
    }
    memset(tab, 0xff, cap * sizeof *tab); /* every row field -1 */
    for (int64_t i = 0; i < na; i++) {
        slot_t *s = find(tab, cap - 1, ka[i]);
        next_a[i] = -1;
        if (s->head_a < 0) {
            s->key = ka[i];
            s->head_a = (int32_t)i;
        } else {
            next_a[s->tail_a] = i;
        }
        s->tail_a = (int32_t)i;
    }
    for (int64_t j = 0; j < nb; j++) {
        slot_t *s = find(tab, cap - 1, kb[j]);
        next_b[j] = -1;
        if (s->head_a < 0) continue; /* a key a lacks pairs with nothing */
        if (s->head_b < 0) s->head_b = (int32_t)j;
        else next_b[s->tail_b] = j;
        s->tail_b = (int32_t)j;
    }
    int64_t *mate = malloc((size_t)na * sizeof *mate);
    if (!mate) {
        free(tab), free(next_a), free(next_b);
        return -1;
    }
    for (int64_t i = 0; i < na; i++) mate[i] = -1;
    for (uint64_t h = 0; h < cap; h++) {
        if (tab[h].head_a >= 0 && tab[h].head_b >= 0)
            settle(tab[h].head_a, tab[h].head_b, next_a, next_b, ta, tb, horizon, gone_a, gone_b,
                   mate);
    }
    int64_t n = 0;
    for (int64_t i = 0; i < na; i++) {
        if (mate[i] >= 0) out_a[n] = i, out_b[n] = mate[i], n++;
    }
    free(tab), free(next_a), free(next_b), free(mate);
    return n;
}
