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


int iot_decode_columns(const uint8_t *planes, int64_t count, int64_t nfields,
                       const int64_t *fields, void *const *cols, int64_t at,
                       const int64_t *delta) {
    for (int64_t f = 0; f < nfields; f++) {
        const uint8_t *p = planes + fields[2 * f] * count;
        int64_t size = fields[2 * f + 1];
        switch (size) {
        case 1: {
            memcpy((uint8_t *)cols[f] + at, p, (size_t)count);
            break;
        }
        case 2: {
            uint16_t *o = (uint16_t *)cols[f] + at;
            for (int64_t i = 0; i < count; i++)
                o[i] = (uint16_t)(p[i] | (uint16_t)p[count + i] << 8);
            break;
        }
        case 4: {
            uint32_t *o = (uint32_t *)cols[f] + at;
            for (int64_t i = 0; i < count; i++)
                o[i] = (uint32_t)p[i] | (uint32_t)p[count + i] << 8 |
                       (uint32_t)p[2 * count + i] << 16 | (uint32_t)p[3 * count + i] << 24;
            break;
        }
        case 8: {
            uint64_t *o = (uint64_t *)cols[f] + at;
            for (int64_t i = 0; i < count; i++) {
                uint64_t v = 0;
                for (int b = 0; b < 8; b++) v |= (uint64_t)p[b * count + i] << (8 * b);
                o[i] = v;
            }
            break;
        }
        default: {
            /* char[N] (comm): the bytes as they are. */
            uint8_t *o = (uint8_t *)cols[f] + at * size;
            for (int64_t i = 0; i < count; i++)
                for (int64_t b = 0; b < size; b++) o[i * size + b] = p[b * count + i];
            break;
        }
        }
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
