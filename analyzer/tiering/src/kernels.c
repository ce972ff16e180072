/* The sequential cache simulations of analyzer.tiering (native.py loads this library
   with ctypes; its Python references are the results this code is held to).

   Every simulator takes dense unit ids (0..n_units-1) in access order and writes one
   flag byte per access: HIT, INSERTED (the unit was brought into the cache), EVICTED (a
   unit left the cache to make room). They return 0, -1 when memory runs out (tally:
   -2 for an access outside the report's intervals). */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { HIT = 1, INSERTED = 2, EVICTED = 4 };

/* LRU over a doubly linked list of unit ids; -1 ends it. */
int lru(int64_t n, const int32_t *ids, int32_t n_units, int64_t cap, uint8_t *flags) {
    int32_t *prev = malloc(sizeof(int32_t) * n_units), *next = malloc(sizeof(int32_t) * n_units);
    uint8_t *in = calloc(n_units, 1);
    if (!prev || !next || !in) { free(prev); free(next); free(in); return -1; }
    int32_t head = -1, tail = -1;
    int64_t size = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t u = ids[i];
        uint8_t f = 0;
        if (in[u]) {
            f = HIT;
            if (u != head) {  /* unlink, then push at the head */
                next[prev[u]] = next[u];
                if (next[u] >= 0) prev[next[u]] = prev[u]; else tail = prev[u];
                prev[u] = -1; next[u] = head; prev[head] = u; head = u;
            }
        } else if (cap > 0) {
            f = INSERTED;
            if (size == cap) {
                int32_t v = tail;
                tail = prev[v];
                if (tail >= 0) next[tail] = -1; else head = -1;
                in[v] = 0; size--; f |= EVICTED;
            }
            in[u] = 1; size++;
            prev[u] = -1; next[u] = head;
            if (head >= 0) prev[head] = u; else tail = u;
            head = u;
        }
        flags[i] = f;
    }
    free(prev); free(next); free(in);
    return 0;
}

/* LRU stack distance of every access (Mattson): the number of distinct units touched
   since the previous access to the same unit; -1 for a first access. A Fenwick tree
   over positions marks each unit's latest access, so a distance is one range sum. */
int stack_distances(int64_t n, const int32_t *ids, int32_t n_units, int64_t *out) {
    int64_t *last = malloc(sizeof(int64_t) * n_units);
    int32_t *bit = calloc(n + 1, sizeof(int32_t));
    if (!last || !bit) { free(last); free(bit); return -1; }
    for (int32_t u = 0; u < n_units; u++) last[u] = -1;
    for (int64_t i = 0; i < n; i++) {
        int32_t u = ids[i];
        int64_t p = last[u];
        if (p < 0) {
            out[i] = -1;
        } else {
            int64_t s = 0;  /* marks in (p, i): prefix(i) - prefix(p + 1) */
            for (int64_t k = i; k > 0; k -= k & -k) s += bit[k];
            for (int64_t k = p + 1; k > 0; k -= k & -k) s -= bit[k];
            out[i] = s;
            for (int64_t k = p + 1; k <= n; k += k & -k) bit[k]--;
        }
        for (int64_t k = i + 1; k <= n; k += k & -k) bit[k]++;
        last[u] = i;
    }
    free(last); free(bit);
    return 0;
}

/* S3-FIFO (Yang et al., SOSP'23): a small FIFO (10 %) that filters one-hit wonders,
   a main FIFO with 2-bit frequencies and reinsertion, and a ghost FIFO of ids
   evicted from the small queue (as many as the main queue holds). */
enum { NONE = 0, SMALL = 1, MAIN = 2 };
typedef struct { int32_t *buf; int64_t cap, head, len; } ring;
static void push(ring *r, int32_t u) { r->buf[(r->head + r->len++) % r->cap] = u; }
static int32_t pop(ring *r) {
    int32_t u = r->buf[r->head];
    r->head = (r->head + 1) % r->cap; r->len--;
    return u;
}

int s3fifo(int64_t n, const int32_t *ids, int32_t n_units, int64_t cap, uint8_t *flags) {
    if (cap <= 0) { memset(flags, 0, n); return 0; }
    int64_t s_cap = cap / 10 > 0 ? cap / 10 : 1;
    int64_t m_cap = cap - s_cap > 0 ? cap - s_cap : 1;
    uint8_t *where = calloc(n_units, 1), *freq = calloc(n_units, 1);
    int64_t *ghost_seq = malloc(sizeof(int64_t) * n_units);
    /* Units coming back from the ghost go straight to main, so main may briefly
       hold more than m_cap: both rings can hold the whole cache. */
    ring S = {malloc(sizeof(int32_t) * (cap + 1)), cap + 1, 0, 0};
    ring M = {malloc(sizeof(int32_t) * (cap + 1)), cap + 1, 0, 0};
    if (!where || !freq || !ghost_seq || !S.buf || !M.buf) {
        free(where); free(freq); free(ghost_seq); free(S.buf); free(M.buf); return -1;
    }
    for (int32_t u = 0; u < n_units; u++) ghost_seq[u] = -1;
    int64_t ghosts = 0;  /* ids sent to the ghost so far; the last m_cap are remembered */
    for (int64_t i = 0; i < n; i++) {
        int32_t u = ids[i];
        if (where[u] != NONE) { if (freq[u] < 3) freq[u]++; flags[i] = HIT; continue; }
        uint8_t f = INSERTED;
        int in_ghost = ghost_seq[u] >= 0 && ghosts - ghost_seq[u] <= m_cap;
        /* make room for one: until one unit has left the cache */
        while (S.len + M.len >= cap) {
            if (S.len > 0 && (S.len >= s_cap || M.len == 0)) {
                int32_t v = pop(&S);
                if (freq[v] > 0) {  /* accessed again while small: to main */
                    freq[v] = 0; where[v] = MAIN;
                    if (M.len >= m_cap) {  /* main is full: evict from it first */
                        for (;;) {
                            int32_t w = pop(&M);
                            if (freq[w] > 0) { freq[w]--; push(&M, w); continue; }
                            where[w] = NONE; f |= EVICTED; break;
                        }
                    }
                    push(&M, v);
                    if (f & EVICTED) break;
                } else {
                    where[v] = NONE; ghost_seq[v] = ghosts++; f |= EVICTED; break;
                }
            } else {
                int32_t w = pop(&M);
                if (freq[w] > 0) { freq[w]--; push(&M, w); continue; }
                where[w] = NONE; f |= EVICTED; break;
            }
        }
        freq[u] = 0;
        if (in_ghost) { where[u] = MAIN; push(&M, u); ghost_seq[u] = -1; }
        else { where[u] = SMALL; push(&S, u); }
        flags[i] = f;
    }
    free(where); free(freq); free(ghost_seq); free(S.buf); free(M.buf);
    return 0;
}

/* Belady's MIN with bypass: on a miss with a full cache, the unit whose next use is
   furthest away (the newcomer included) is the one left out. A max-heap of
   (next use, unit) with stale entries skipped; next[i] is the index of the next
   access to ids[i], or INT64_MAX. */
typedef struct { int64_t key; int32_t u; } item;
static void up(item *h, int64_t k) {
    item x = h[k];
    while (k > 0 && h[(k - 1) / 2].key < x.key) { h[k] = h[(k - 1) / 2]; k = (k - 1) / 2; }
    h[k] = x;
}
static void down(item *h, int64_t len, int64_t k) {
    item x = h[k];
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= len) break;
        if (c + 1 < len && h[c + 1].key > h[c].key) c++;
        if (h[c].key <= x.key) break;
        h[k] = h[c]; k = c;
    }
    h[k] = x;
}

int belady(int64_t n, const int32_t *ids, const int64_t *next, int32_t n_units, int64_t cap,
           uint8_t *flags) {
    int64_t *cur = malloc(sizeof(int64_t) * n_units);  /* next use of a cached unit; -1 if out */
    item *h = malloc(sizeof(item) * (n + 1));
    if (!cur || !h) { free(cur); free(h); return -1; }
    for (int32_t u = 0; u < n_units; u++) cur[u] = -1;
    int64_t len = 0, size = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t u = ids[i];
        int64_t nx = next[i];
        if (cur[u] >= 0) {
            flags[i] = HIT;
            cur[u] = nx; h[len] = (item){nx, u}; up(h, len++);
            continue;
        }
        flags[i] = 0;
        if (cap <= 0) continue;
        if (size == cap) {
            while (len > 0 && cur[h[0].u] != h[0].key) { h[0] = h[--len]; down(h, len, 0); }
            if (h[0].key <= nx) continue;  /* the newcomer is needed last: bypass */
            cur[h[0].u] = -1; h[0] = h[--len]; down(h, len, 0); size--;
            flags[i] |= EVICTED;
        }
        flags[i] |= INSERTED;
        cur[u] = nx; size++;
        h[len] = (item){nx, u}; up(h, len++);
        if (len > 2 * cap + 1024) {  /* drop stale entries so the heap stays small */
            int64_t k = 0;
            for (int64_t j = 0; j < len; j++) if (cur[h[j].u] == h[j].key) h[k++] = h[j];
            len = k;
            for (int64_t j = len / 2; j-- > 0;) down(h, len, j);
        }
    }
    free(cur); free(h);
    return 0;
}

/* The report's counts in one pass: per access, key = interval * 16 + op * 8 + hit * 4
   + (inserted | evicted << 1); the accesses and their bytes per key. */
int tally(int64_t n, const int64_t *t, int64_t t0, int64_t step, const int8_t *op,
          const uint8_t *hit, const uint8_t *flags, const int64_t *nbytes, int64_t n_keys,
          int64_t *count, int64_t *bytes) {
    for (int64_t i = 0; i < n; i++) {
        int64_t k = (t[i] - t0) / step * 16 + op[i] * 8 + (hit[i] ? 4 : 0) + ((flags[i] >> 1) & 3);
        if (k < 0 || k >= n_keys) return -2;
        count[k]++;
        bytes[k] += nbytes[i];
    }
    return 0;
}

/* Accesses and bytes per unit (the skew curve). */
void unit_tally(int64_t n, const int32_t *uid, const int64_t *nbytes, int64_t *count,
                int64_t *bytes) {
    for (int64_t i = 0; i < n; i++) {
        count[uid[i]]++;
        bytes[uid[i]] += nbytes[i];
    }
}
