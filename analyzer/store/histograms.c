/* A row group's latency histograms (analyzer/store/event_histograms.py loads
 * this as build/libhist.so): each row's key (dev, op, stream, metric, bucket
 * packed in 64 bits) and its count, sum, min and max, in one pass per metric
 * over the columns and a small hash table, where numpy took a dozen passes
 * and Arrow's hash aggregation another (0.2 s per 2.4 M events here).
 *
 * The rules are event_histograms.partial's: a row counts for a metric when
 * ts_complete_ns <= max_ns, earlier > 0 and later >= earlier (and, for device
 * time, its complete_unseen flag is clear); its value v = later - earlier; the
 * bucket is v below 64, else (e - 6) * 64 + (v >> (e - 6)) with e = floor(log2 v)
 * taken from v's exponent as a double. Keys come out in the order of their first
 * row (metric 0's rows first), as Arrow's single-threaded group_by gives them.
 *
 * iot_hist_add adds one chunk's rows for one metric to the table (keys, n, s,
 * lo, hi: `used` entries; slots: 2 * cap entries, -1 where empty) and returns
 * the entries now used; -1 when a value is at or past `limit` (no histogram for
 * the run), -2 when the table is full (the caller takes numpy's way). */
#include <stdint.h>

static inline uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

int64_t iot_hist_add(int64_t n, const uint32_t *dev, const uint8_t *op, const uint8_t *stream,
                     const uint64_t *later, const uint64_t *earlier, const uint64_t *complete,
                     const uint16_t *flags, uint16_t unseen, int64_t metric, uint64_t max_ns,
                     uint64_t limit, uint64_t *keys, int64_t *cnt, int64_t *sum, int64_t *lo,
                     int64_t *hi, int64_t used, int64_t cap, int64_t *slots) {
    uint64_t mask = (uint64_t)(2 * cap - 1); /* 2 * cap is a power of two */
    for (int64_t i = 0; i < n; i++) {
        uint64_t a = later[i], b = earlier[i];
        if (complete[i] > max_ns || b == 0 || a < b) continue;
        if (flags && (flags[i] & unseen)) continue;
        uint64_t d = a - b;
        if (d >= limit) return -1;
        int64_t v = (int64_t)d;
        int64_t bucket;
        if (v < 64) {
            bucket = v;
        } else {
            double f = (double)v;
            union { double f; int64_t i; } u = {f};
            int64_t e = (u.i >> 52) - 1023;
            bucket = (e - 6) * 64 + (v >> (e - 6));
        }
        uint64_t key = ((uint64_t)dev[i] << 32) | ((uint64_t)op[i] << 24) |
                       ((uint64_t)stream[i] << 16) | (uint64_t)bucket | ((uint64_t)metric << 15);
        uint64_t h = mix(key) & mask;
        for (;;) {
            int64_t s = slots[h];
            if (s < 0) {
                if (used == cap) return -2;
                slots[h] = used;
                keys[used] = key;
                cnt[used] = 1;
                sum[used] = v;
                lo[used] = v;
                hi[used] = v;
                used++;
                break;
            }
            if (keys[s] == key) {
                cnt[s] += 1;
                sum[s] = (int64_t)((uint64_t)sum[s] + (uint64_t)v);
                if (v < lo[s]) lo[s] = v;
                if (v > hi[s]) hi[s] = v;
                break;
            }
            h = (h + 1) & mask;
        }
    }
    return used;
}
