/* A batch's per-second and size tallies for `replay fidelity`
 * (replayer/run/fidstream.py's Side.tally; build/libpostreplay.so, run/native.py).
 *
 * numpy took them in about a dozen passes over each batch (the second of each
 * request by an int64 floor division, masks, copies of the rows kept, two
 * bincounts, the op tests, the sizes' table) for every request of both traces
 * and again for the replay's per stream: the largest of fidelity's per-request
 * steps in Python. Here one pass, with the same sums in the same order: per
 * second, the count and the bytes (as double, added request by request in row
 * order, as np.bincount's weights are), the data requests (op != flush) and
 * the reads among them, and the data requests' sizes with their counts.
 *
 * Columns are given with their strides in bytes (fields of structured rows);
 * `mask` (NULL: every row) picks the rows. A request counts in second
 * t / 1e9 where 0 <= that < nbins. counts = {rows, data, reads}. Returns the
 * number of distinct sizes written to sizes/size_counts in ascending order, or
 * -1 where there are more than `cap` (numpy counts the sizes then). */
#include <stdint.h>
#include <string.h>

static int64_t load_i64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }
static uint32_t load_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

int64_t side_tally(const uint8_t *t, int64_t t_step, const uint8_t *bytes, int64_t b_step,
                   const uint8_t *op, int64_t op_step, const uint8_t *mask, int64_t n,
                   int64_t nbins, uint8_t op_flush, uint8_t op_read, int64_t *iops, double *mb,
                   int64_t *counts, uint32_t *sizes, int64_t *size_counts, int64_t cap) {
    memset(iops, 0, (size_t)nbins * sizeof *iops);
    for (int64_t s = 0; s < nbins; s++) mb[s] = 0.0;
    int64_t rows = 0, data = 0, reads = 0, distinct = 0;
    uint32_t last = 0;
    int64_t last_at = -1; /* the place of `last` in sizes (runs of one size) */
    for (int64_t i = 0; i < n; i++) {
        if (mask && !mask[i]) continue;
        rows++;
        int64_t ti = load_i64(t + i * t_step);
        uint32_t b = load_u32(bytes + i * b_step);
        if (ti >= 0) {
            int64_t sec = ti / 1000000000;
            if (sec < nbins) {
                iops[sec]++;
                mb[sec] += (double)b;
            }
        }
        uint8_t o = op[i * op_step];
        if (o == op_flush) continue;
        data++;
        reads += o == op_read;
        if (distinct < 0) continue;
        if (last_at >= 0 && b == last) {
            size_counts[last_at]++;
            continue;
        }
        /* Sorted insertion (few distinct sizes; a batch of many stops at cap). */
        int64_t lo = 0, hi = distinct;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (sizes[mid] < b) lo = mid + 1;
            else hi = mid;
        }
        if (lo < distinct && sizes[lo] == b) {
            size_counts[lo]++;
        } else if (distinct == cap) {
            distinct = -1;
            continue;
        } else {
            memmove(sizes + lo + 1, sizes + lo, (size_t)(distinct - lo) * sizeof *sizes);
            memmove(size_counts + lo + 1, size_counts + lo,
                    (size_t)(distinct - lo) * sizeof *size_counts);
            sizes[lo] = b;
            size_counts[lo] = 1;
            distinct++;
        }
        last = b;
        last_at = lo;
    }
    counts[0] = rows;
    counts[1] = data;
    counts[2] = reads;
    return distinct;
}

/* timewindows.Windows.times: each request at time t >= 0 (ns; a column with its
 * stride in bytes) counted in `counts` (int64, nwin x width: its window t / w,
 * and its second t / 1e9 counted from the first second the window touches),
 * where its window is < nwin; numpy's np.bincount of the same places, added. */
void window_times(const uint8_t *t, int64_t t_step, int64_t n, int64_t w, int64_t nwin,
                  int64_t width, int64_t *counts) {
    for (int64_t i = 0; i < n; i++) {
        int64_t ti = load_i64(t + i * t_step);
        if (ti < 0) continue;
        int64_t k = ti / w;
        if (k >= nwin) continue;
        counts[k * width + (ti / 1000000000 - (k * w) / 1000000000)]++;
    }
}
