/* One step's matching of a replay's requests to its original's, for
 * replayer/run/pairing.py (Pairer._match; build/libpostreplay.so, through
 * run/pairmatch.py). numpy did it with stable argsorts of both sides' keys, an
 * intersection of the unique keys and up to 33 rounds of each: ~0.4 us a held
 * request per step, the largest cost of relabelling and fidelity at NVMe rates.
 * Here one hash table of the keys and one pass over b: each row of b pairs with
 * its key's next row of a (the i-th with the i-th), which is _match's answer
 * for every key whose pairs all lie within the horizon. A key with a pair
 * beyond it is settled again from the start by _match's rounds (below).
 *
 * The rules are _match's, per key (each key's rounds depend on nothing else):
 * the i-th row of a (not yet gone) pairs with the i-th of b; while some pair is
 * more than the horizon apart, the one with the earliest min(ta, tb) (the first
 * in pair order among ties) loses its older row (gone), and the key is matched
 * again; after MAX_ROUNDS such drops, every pair still too far apart loses its
 * older row and is left out.
 *
 * Writes the pairs (row of a, row of b) in the order of a's rows (a's rows come
 * in time order, so the pairs do too), and the gone flags; returns the number
 * of pairs, or -1 when memory runs out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 32

/* Rows are int32 here (a step holds far fewer than 2^31: the caller checks). */
typedef struct {
    uint64_t key;
    int32_t head_a; /* the key's first row of a; -1: slot unused */
    int32_t next;   /* the key's next row of a to pair (-1: none left) */
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
static int64_t find(const slot_t *tab, uint64_t mask, uint64_t key) {
    uint64_t h = mix(key) & mask;
    while (tab[h].head_a >= 0 && tab[h].key != key) h = (h + 1) & mask;
    return (int64_t)h;
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
    int64_t *mate = malloc((size_t)na * sizeof *mate);
    int32_t *slot_b = malloc((size_t)nb * sizeof *slot_b);
    uint8_t *far = calloc(cap, 1);
    int64_t *fars = malloc(cap * sizeof *fars); /* slots of keys with a far pair */
    int64_t *head_b = NULL, *tail_b = NULL, *next_b = NULL;
    int64_t n = -1, nfar = 0;
    if (!tab || !next_a || !mate || !slot_b || !far || !fars) goto out;
    memset(tab, 0xff, cap * sizeof *tab); /* every head_a -1 */
    /* Each key's rows of a, chained in row order (pushed on the front from the end). */
    for (int64_t i = na - 1; i >= 0; i--) {
        slot_t *s = &tab[find(tab, cap - 1, ka[i])];
        next_a[i] = s->head_a >= 0 ? s->head_a : -1;
        s->key = ka[i];
        s->head_a = s->next = (int32_t)i;
        mate[i] = -1;
    }
    /* The j-th row of b of a key with the key's j-th row of a. */
    for (int64_t j = 0; j < nb; j++) {
        int64_t h = find(tab, cap - 1, kb[j]);
        slot_t *s = &tab[h];
        slot_b[j] = s->head_a >= 0 ? (int32_t)h : -1;
        if (s->head_a < 0 || far[h] || s->next < 0) continue;
        int64_t i = s->next;
        if (dist(ta[i], tb[j]) > horizon) {
            far[h] = 1;
            fars[nfar++] = h;
            continue;
        }
        mate[i] = j;
        s->next = (int32_t)next_a[i];
    }
    if (nfar) {
        /* The keys with a far pair, settled from the start: their rows of b chained. */
        head_b = malloc(cap * sizeof *head_b);
        tail_b = malloc(cap * sizeof *tail_b);
        next_b = malloc((size_t)nb * sizeof *next_b);
        if (!head_b || !tail_b || !next_b) goto out;
        for (int64_t k = 0; k < nfar; k++) head_b[fars[k]] = -1;
        for (int64_t j = 0; j < nb; j++) {
            int64_t h = slot_b[j];
            if (h < 0 || !far[h]) continue;
            next_b[j] = -1;
            if (head_b[h] < 0) head_b[h] = j;
            else next_b[tail_b[h]] = j;
            tail_b[h] = j;
        }
        for (int64_t k = 0; k < nfar; k++) {
            int64_t h = fars[k];
            for (int64_t i = tab[h].head_a; i >= 0; i = next_a[i]) mate[i] = -1;
            settle(tab[h].head_a, head_b[h], next_a, next_b, ta, tb, horizon, gone_a, gone_b,
                   mate);
        }
    }
    n = 0;
    for (int64_t i = 0; i < na; i++) {
        if (mate[i] >= 0) out_a[n] = i, out_b[n] = mate[i], n++;
    }
out:
    free(tab), free(next_a), free(mate), free(slot_b), free(far), free(fars);
    free(head_b), free(tail_b), free(next_b);
    return n;
}
