/* The plan's entries in _plan_requests' order (time, then op, offset, size and
 * stream), for replayer/run/relabel.py's planned_batches (build/libpostreplay.so,
 * run/native.py).
 *
 * np.lexsort of the five keys was ~0.13 us an entry, the largest part of merging
 * the plan's iologs. The rows come nearly in time order (each log is), so numpy's
 * stable argsort by time alone is cheap; what is left is the order among rows of
 * the same time, which in a plan of lanes is most rows (a wait line times the
 * 30-700 entries after it). Each such run is put in order here by a stable merge
 * sort on the other four keys: the whole is lexsort's order, ties in input order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ordered.COMPACT (run/native.py checks the layout before use). */
typedef struct {
    int64_t t, n;
    uint64_t offset;
    uint32_t bytes, dev, tid;
    uint8_t op, stream;
} row_t;

static int before(const row_t *x, const row_t *y) {
    if (x->op != y->op) return x->op < y->op;
    if (x->offset != y->offset) return x->offset < y->offset;
    if (x->bytes != y->bytes) return x->bytes < y->bytes;
    return x->stream < y->stream;
}

/* Stable merge sort of idx[0:n] (row numbers) by `before`, tmp of n. */
static void msort(const row_t *rows, int64_t *idx, int64_t *tmp, int64_t n) {
    if (n < 2) return;
    if (n <= 16) {
        for (int64_t i = 1; i < n; i++) {
            int64_t v = idx[i], j = i;
            while (j > 0 && before(&rows[v], &rows[idx[j - 1]])) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = v;
        }
        return;
    }
    int64_t h = n / 2;
    msort(rows, idx, tmp, h);
    msort(rows, idx + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = before(&rows[idx[j]], &rows[idx[i]]) ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
}

/* order: rows' numbers by time, ties in input order (a stable argsort of t);
 * each run of one time is put in the order of the other keys. Returns 0, or -1
 * when memory runs out. */
int plan_order(const row_t *rows, int64_t n, int64_t *order) {
    int64_t *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return -1;
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && rows[order[j]].t == rows[order[i]].t) j++;
        msort(rows, order + i, tmp, j - i);
        i = j;
    }
    free(tmp);
    return 0;
}
