/* The `delta-split` transform undone a column at a time, for ingest
 * (recorder/tracefile/planes.py loads this as build/libplanes.so).
 *
 * A compressed chunk stores each byte k of its records as plane k (all the
 * records' byte k in a row), with four fields as zigzagged deltas
 * (docs/trace-format.md; codec.py encodes). numpy transposes each field's planes
 * and then undoes the deltas in passes over the column (0.15 s per 2.4 M
 * records here); this gathers each field's bytes into its column in one pass
 * and undoes the deltas in one more, the same arithmetic (unsigned 64-bit,
 * wrapping) as codec.decode_records.
 *
 * fields[i] = {offset in the record, size in bytes}; cols[i] points at the
 * column of field i, written from element `at` on. delta = the field indexes
 * of ts_queue_ns, ts_issue_ns, ts_complete_ns, offset and bytes (u64, u64,
 * u64, u64, u32). Returns 0, or -1 for a field size it does not gather. */
#include <stdint.h>
#include <string.h>

#include <lz4.h>
#include <zstd.h>

#include "iotape_record.h"
#include "planes.h"

#if defined(__SSE2__)
#include <emmintrin.h>

/* Plane j's bytes of records i..i+15. */
static inline __m128i plane16(const uint8_t *p, int64_t count, int64_t j, int64_t i) {
    return _mm_loadu_si128((const __m128i *)(p + j * count + i));
}

/* Planes k..k+7 of records i..i+15 transposed by byte, word and double word
 * interleaves: out[q] holds the 8 bytes of records i+2q and i+2q+1. */
static inline void transpose16x8(const uint8_t *p, int64_t count, int64_t k, int64_t i,
                                 __m128i out[8]) {
    __m128i a[8], b[8];
    for (int j = 0; j < 8; j += 2) {
        __m128i x = plane16(p, count, k + j, i), y = plane16(p, count, k + j + 1, i);
        a[j] = _mm_unpacklo_epi8(x, y);     /* records 0..7: bytes j, j+1 */
        a[j + 1] = _mm_unpackhi_epi8(x, y); /* records 8..15 */
    }
    for (int h = 0; h < 2; h++) {       /* records 0..7, then 8..15 */
        for (int j = 0; j < 8; j += 4) { /* bytes 0..3, then 4..7 */
            b[4 * h + j / 2] = _mm_unpacklo_epi16(a[j + h], a[j + 2 + h]);
            b[4 * h + j / 2 + 1] = _mm_unpackhi_epi16(a[j + h], a[j + 2 + h]);
        }
    }
    /* b[4h + 0/1]: bytes 0..3 of records 8h+0..3 / 8h+4..7; b[4h + 2/3]: bytes 4..7. */
    for (int h = 0; h < 2; h++) {
        for (int g = 0; g < 2; g++) {
            out[4 * h + 2 * g] = _mm_unpacklo_epi32(b[4 * h + g], b[4 * h + 2 + g]);
            out[4 * h + 2 * g + 1] = _mm_unpackhi_epi32(b[4 * h + g], b[4 * h + 2 + g]);
        }
    }
}

/* `size` planes (2, 4, 8 or 16) of `count` records gathered into the column `o`,
 * 16 records at a time by SSE2 interleaves: a byte at a time, a field's bytes went
 * one by one to scattered planes (~0.1 s per 2.4 M records for the whole record).
 * Returns the first record not done. */
static int64_t gather_simd(const uint8_t *p, int64_t count, int64_t size, uint8_t *o) {
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) {
        uint8_t *r = o + i * size;
        if (size == 2) {
            __m128i x = plane16(p, count, 0, i), y = plane16(p, count, 1, i);
            _mm_storeu_si128((__m128i *)r, _mm_unpacklo_epi8(x, y));
            _mm_storeu_si128((__m128i *)(r + 16), _mm_unpackhi_epi8(x, y));
        } else if (size == 4) {
            __m128i a[4];
            for (int j = 0; j < 4; j += 2) {
                __m128i x = plane16(p, count, j, i), y = plane16(p, count, j + 1, i);
                a[j] = _mm_unpacklo_epi8(x, y);
                a[j + 1] = _mm_unpackhi_epi8(x, y);
            }
            _mm_storeu_si128((__m128i *)r, _mm_unpacklo_epi16(a[0], a[2]));
            _mm_storeu_si128((__m128i *)(r + 16), _mm_unpackhi_epi16(a[0], a[2]));
            _mm_storeu_si128((__m128i *)(r + 32), _mm_unpacklo_epi16(a[1], a[3]));
            _mm_storeu_si128((__m128i *)(r + 48), _mm_unpackhi_epi16(a[1], a[3]));
        } else if (size == 8) {
            __m128i w[8];
            transpose16x8(p, count, 0, i, w);
            for (int q = 0; q < 8; q++) _mm_storeu_si128((__m128i *)(r + 16 * q), w[q]);
        } else { /* 16: two halves, each record's put together */
            __m128i w[8], v[8];
            transpose16x8(p, count, 0, i, w);
            transpose16x8(p, count, 8, i, v);
            for (int q = 0; q < 8; q++) {
                _mm_storeu_si128((__m128i *)(r + 32 * q), _mm_unpacklo_epi64(w[q], v[q]));
                _mm_storeu_si128((__m128i *)(r + 32 * q + 16), _mm_unpackhi_epi64(w[q], v[q]));
            }
        }
    }
    return i;
}
#endif

int iot_decode_columns(const uint8_t *planes, int64_t count, int64_t nfields,
                       const int64_t *fields, void *const *cols, int64_t at,
                       const int64_t *delta) {
    for (int64_t f = 0; f < nfields; f++) {
        const uint8_t *p = planes + fields[2 * f] * count;
        int64_t size = fields[2 * f + 1];
        uint8_t *o = (uint8_t *)cols[f] + at * size;
        int64_t i = 0;
        if (size == 1) {
            memcpy(o, p, (size_t)count);
            continue;
        }
#if defined(__SSE2__)
        if (size == 2 || size == 4 || size == 8 || size == 16) i = gather_simd(p, count, size, o);
#endif
        /* The last records (fewer than 16), other sizes, or a machine without SSE2:
         * a byte at a time, little-endian (char[N] such as comm: its bytes as they are). */
        for (; i < count; i++)
            for (int64_t b = 0; b < size; b++) o[i * size + b] = p[b * count + i];
    }
    uint64_t *queue = (uint64_t *)cols[delta[0]] + at;
    uint64_t *issue = (uint64_t *)cols[delta[1]] + at;
    uint64_t *done = (uint64_t *)cols[delta[2]] + at;
    uint64_t *offset = (uint64_t *)cols[delta[3]] + at;
    const uint32_t *bytes = (const uint32_t *)cols[delta[4]] + at;
    uint64_t t = 0, pos = 0, prev_bytes = 0;
    for (int64_t i = 0; i < count; i++) {
        t += unzigzag(done[i]);
        uint64_t is = t - unzigzag(issue[i]);
        queue[i] = is - unzigzag(queue[i]);
        issue[i] = is;
        done[i] = t;
        pos += unzigzag(offset[i]) + prev_bytes;
        offset[i] = pos;
        prev_bytes = bytes[i];
    }
    return 0;
}

/* codec.decode_records in C: the planes of `count` records of `size` bytes
 * transposed back into records at `out`, then the deltas undone in place.
 * delta = the byte offsets in a record of ts_queue_ns, ts_issue_ns,
 * ts_complete_ns, offset and bytes. */
int iot_decode_records(const uint8_t *planes, int64_t count, int64_t size, uint8_t *out,
                       const int64_t *delta) {
    /* A block of records at a time, so that its rows stay in cache while every
     * plane is written into them; 8 planes and 8 records at a time as one 8 x 8
     * transpose of words (a byte at a time, each record's bytes were stored
     * one by one, ~0.1 us a record). */
    enum { BLOCK = 256 };
    int words = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
    for (int64_t i0 = 0; i0 < count; i0 += BLOCK) {
        int64_t n = count - i0 < BLOCK ? count - i0 : BLOCK;
        int64_t k = 0;
        for (; words && k + 8 <= size; k += 8) {
            int64_t i = 0;
            for (; i + 8 <= n; i += 8) {
                uint64_t a[8];
                for (int j = 0; j < 8; j++) a[j] = get64(planes + (k + j) * count + i0 + i);
                transpose8(a);
                for (int m = 0; m < 8; m++) put64(out + (i0 + i + m) * size + k, a[m]);
            }
            for (; i < n; i++)
                for (int j = 0; j < 8; j++)
                    out[(i0 + i) * size + k + j] = planes[(k + j) * count + i0 + i];
        }
        for (; k < size; k++) {
            const uint8_t *p = planes + k * count + i0;
            uint8_t *o = out + i0 * size + k;
            for (int64_t i = 0; i < n; i++) o[i * size] = p[i];
        }
    }
    undelta_records(out, count, size, delta);
    return 0;
}

/* A compressed chunk's payload back to its `size` bytes (codec.decompress): a
 * zstd frame or an lz4 block (IOTAPE_CODEC_*), the codecs the C loader
 * writes with the same libraries (tracewriter.c). Returns the bytes written,
 * or -1 where the payload does not decompress (the reason in `why`, `n` bytes
 * at most). In C, a reader of a compressed trace need not import pyarrow for
 * its codecs (~0.1 s of `replay fidelity`'s start). */
int64_t iot_decompress(int32_t codec, const void *src, int64_t srclen, void *dst, int64_t size,
                       char *why, int64_t n) {
    const char *err = "unknown codec";
    if (codec == IOTAPE_CODEC_ZSTD) {
        size_t got = ZSTD_decompress(dst, (size_t)size, src, (size_t)srclen);
        if (!ZSTD_isError(got)) return (int64_t)got;
        err = ZSTD_getErrorName(got);
    } else if (codec == IOTAPE_CODEC_LZ4 && srclen <= INT32_MAX && size <= INT32_MAX) {
        int got = LZ4_decompress_safe(src, dst, (int)srclen, (int)size);
        if (got >= 0) return got;
        err = "corrupt lz4 block";
    }
    if (n > 0) {
        strncpy(why, err, (size_t)n - 1);
        why[n - 1] = 0;
    }
    return -1;
}
