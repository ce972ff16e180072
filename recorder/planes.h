/* The `delta-split` transform undone (codec.py's encode_records; docs/trace-format.md),
 * the parts shared by recorder/planes.c (whole records, columns) and
 * replayer/src/compact.c (the narrow records of fidelity and relabelling). */
#ifndef IOTAPE_PLANES_H
#define IOTAPE_PLANES_H

#include <stdint.h>
#include <string.h>

static inline uint64_t unzigzag(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }
static inline uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* The 8 x 8 bytes in a[0..7] transposed: byte m of a[j] becomes byte j of a[m]
 * (three rounds of swapping blocks of 1, 2 and 4 bytes; little-endian words). */
static inline void transpose8(uint64_t a[8]) {
    static const uint64_t lo[3] = {0x00FF00FF00FF00FFull, 0x0000FFFF0000FFFFull,
                                   0x00000000FFFFFFFFull};
    for (int r = 0, w = 1; r < 3; r++, w *= 2) {
        for (int j = 0; j < 8; j++) {
            if (j & w) continue;
            uint64_t x = a[j], y = a[j + w];
            a[j] = (x & lo[r]) | ((y & lo[r]) << (8 * w));
            a[j + w] = ((x >> (8 * w)) & lo[r]) | (y & ~lo[r]);
        }
    }
}

/* The deltas undone in place in `n` records of `size` bytes (unsigned 64-bit,
 * wrapping, as codec._undelta): delta = the byte offsets in a record of
 * ts_queue_ns, ts_issue_ns, ts_complete_ns, offset and bytes. */
static inline void undelta_records(uint8_t *recs, int64_t n, int64_t size,
                                   const int64_t delta[5]) {
    uint64_t t = 0, pos = 0, prev_bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        uint8_t *r = recs + i * size;
        t += unzigzag(get64(r + delta[2]));
        uint64_t is = t - unzigzag(get64(r + delta[1]));
        put64(r + delta[0], is - unzigzag(get64(r + delta[0])));
        put64(r + delta[1], is);
        put64(r + delta[2], t);
        pos += unzigzag(get64(r + delta[3])) + prev_bytes;
        put64(r + delta[3], pos);
        uint32_t b;
        memcpy(&b, r + delta[4], 4);
        prev_bytes = b;
    }
}

#endif
