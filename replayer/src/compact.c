/* A recording's chunk as the columns fidelity and relabelling use, for
 * replayer/run/ordered.py (_compact; build/libpostreplay.so, run/native.py).
 *
 * numpy took a chunk's replayable requests (np.isin of the ops, a mask per
 * rule), their request times (two np.where) and copied six fields of 80-byte
 * records one column at a time: ~0.9 us a request, read four to six times per
 * `replay fidelity`. Here one pass over the records.
 *
 * The rules are replayer.plan.source's replayable() and request_times() and
 * ordered._keep's, per record r of the chunk:
 *   kept   op is read, write, flush, discard or write-zeroes (op_ok[op]), a
 *          data request (op != flush) has bytes > 0, and a device flush
 *          (flush with the device-flush flag, or pid 0) is dropped where the
 *          chunk holds a flush an application asked for (replayable() decides
 *          per chunk); where the whole file does (app_flush), every flush of
 *          pid 0 is dropped too.
 *   t      issue time, else queue time, else completion; minus t0 (0 untimed).
 * compact_rows writes the kept rows (ordered.COMPACT, `n` counting from first)
 * and returns how many (-1: out of memory); keep_rows marks them; scan_chunk tallies them as ordered.scan does (_Tally),
 * under both rules of the file's flushes at once.
 *
 * scan_planes and compact_planes take a compressed chunk as it is stored once
 * decompressed (codec.py's delta-split transform: byte k of every record in
 * plane k, times and offsets as zigzagged deltas) instead of its records: they
 * undo the transform for the planes these steps read alone (56 of 80 bytes a
 * record: not the cgroup or the command name), into narrow records held for
 * the chunk, and then do what scan_chunk and compact_rows do. Decoding whole
 * 80-byte records first (recorder/planes.c) was a third of reading a trace,
 * which `replay fidelity` does four times. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../recorder/planes.h"

/* ordered.COMPACT (run/native.py checks the layout before use). */
typedef struct {
    int64_t t, n;
    uint64_t offset;
    uint32_t bytes, dev, tid;
    uint8_t op, stream;
} compact_t;

/* Field offsets within a record, in this order. */
enum { F_QUEUE, F_ISSUE, F_COMPLETE, F_DEV, F_OFFSET, F_BYTES, F_OP, F_FLAGS, F_PID, F_TID,
       F_STREAM, F_COUNT };

#define GET(T, rec, f) (*(const T *)((rec) + offs[f]))

static int device_flush(const uint8_t *rec, const int64_t *offs, uint8_t op_flush,
                        uint16_t flag) {
    return GET(uint8_t, rec, F_OP) == op_flush &&
           ((GET(uint16_t, rec, F_FLAGS) & flag) != 0 || GET(uint32_t, rec, F_PID) == 0);
}

/* Whether the chunk holds a flush an application asked for (replayable()'s
 * per-chunk rule). */
static int chunk_app_flush(const uint8_t *recs, int64_t n, int64_t itemsize, const int64_t *offs,
                           uint8_t op_flush, uint16_t device_flag) {
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *rec = recs + i * itemsize;
        if (GET(uint8_t, rec, F_OP) == op_flush && !device_flush(rec, offs, op_flush, device_flag))
            return 1;
    }
    return 0;
}

/* replayable() of one record, given its chunk's rule. */
static int replayable(const uint8_t *rec, const int64_t *offs, const uint8_t *op_ok,
                      uint8_t op_flush, uint16_t device_flag, int chunk_app) {
    uint8_t op = GET(uint8_t, rec, F_OP);
    if (!op_ok[op]) return 0;
    if (op != op_flush && GET(uint32_t, rec, F_BYTES) == 0) return 0;
    return !(chunk_app && device_flush(rec, offs, op_flush, device_flag));
}

static int64_t request_time(const uint8_t *rec, const int64_t *offs) {
    int64_t t = (int64_t)GET(uint64_t, rec, F_ISSUE);
    if (t <= 0) t = (int64_t)GET(uint64_t, rec, F_QUEUE);
    if (t <= 0) t = (int64_t)GET(uint64_t, rec, F_COMPLETE);
    return t;
}

/* stats[rule * 5 + ...]: kept rows, least and greatest request time (INT64_MAX
 * and 0 when none), the first misaligned data request's place among the kept
 * rows (-1: none) and its offset; seen[rule * 256 + stream]: kept rows per
 * stream. Rule 0 keeps the replayable rows, rule 1 those less the flushes of
 * pid 0 (a file with a flush of a process). Returns whether the chunk holds a
 * flush of a process (pid != 0). */
int scan_chunk(const uint8_t *recs, int64_t n, int64_t itemsize, const int64_t *offs,
               const uint8_t *op_ok, uint8_t op_flush, uint16_t device_flag, int64_t *stats,
               int64_t *seen) {
    int chunk_app = chunk_app_flush(recs, n, itemsize, offs, op_flush, device_flag);
    int found = 0;
    for (int r = 0; r < 2; r++) {
        stats[r * 5 + 0] = 0;
        stats[r * 5 + 1] = INT64_MAX;
        stats[r * 5 + 2] = 0;
        stats[r * 5 + 3] = -1;
        stats[r * 5 + 4] = 0;
    }
    memset(seen, 0, 2 * 256 * sizeof *seen);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *rec = recs + i * itemsize;
        uint8_t op = GET(uint8_t, rec, F_OP);
        int pid0 = GET(uint32_t, rec, F_PID) == 0;
        if (op == op_flush && !pid0) found = 1;
        if (!replayable(rec, offs, op_ok, op_flush, device_flag, chunk_app)) continue;
        int64_t t = request_time(rec, offs);
        uint64_t off = GET(uint64_t, rec, F_OFFSET);
        int misaligned = op != op_flush && off % 512 != 0;
        for (int r = 0; r < 2; r++) {
            if (r == 1 && op == op_flush && pid0) continue;
            int64_t *st = stats + r * 5;
            if (misaligned && st[3] < 0) st[3] = st[0], st[4] = (int64_t)off;
            if (t < st[1]) st[1] = t;
            if (t > st[2]) st[2] = t;
            seen[r * 256 + GET(uint8_t, rec, F_STREAM)]++;
            st[0]++;
        }
    }
    return found;
}

/* ordered._keep's mask of the chunk (1: a request the replay issues); returns
 * how many. */
int64_t keep_rows(const uint8_t *recs, int64_t n, int64_t itemsize, const int64_t *offs,
                  const uint8_t *op_ok, uint8_t op_flush, uint16_t device_flag, int32_t app_flush,
                  uint8_t *keep) {
    int chunk_app = chunk_app_flush(recs, n, itemsize, offs, op_flush, device_flag);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *rec = recs + i * itemsize;
        uint8_t op = GET(uint8_t, rec, F_OP);
        keep[i] = replayable(rec, offs, op_ok, op_flush, device_flag, chunk_app) &&
                  !(app_flush && op == op_flush && GET(uint32_t, rec, F_PID) == 0);
        k += keep[i];
    }
    return k;
}

int64_t compact_rows(const uint8_t *recs, int64_t n, int64_t itemsize, const int64_t *offs,
                     const uint8_t *op_ok, uint8_t op_flush, uint16_t device_flag,
                     int32_t app_flush, int64_t first, int64_t t0, int32_t timed,
                     compact_t *out) {
    uint8_t *keep = malloc(n > 0 ? (size_t)n : 1);
    if (!keep) return -1;
    keep_rows(recs, n, itemsize, offs, op_ok, op_flush, device_flag, app_flush, keep);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!keep[i]) continue;
        const uint8_t *rec = recs + i * itemsize;
        int64_t t = request_time(rec, offs);
        compact_t *o = &out[k];
        memset(o, 0, sizeof *o);
        o->t = timed ? t - t0 : 0;
        o->n = first + k;
        o->offset = GET(uint64_t, rec, F_OFFSET);
        o->bytes = GET(uint32_t, rec, F_BYTES);
        o->dev = GET(uint32_t, rec, F_DEV);
        o->tid = GET(uint32_t, rec, F_TID);
        o->op = GET(uint8_t, rec, F_OP);
        o->stream = GET(uint8_t, rec, F_STREAM);
        k++;
    }
    free(keep);
    return k;
}

/* A chunk's planes as narrow records: for each g, the 8 planes from
 * groups[g] * 8 become bytes 8g..8g+7 of every narrow record (8 records and
 * 8 planes at a time as one 8 x 8 transpose of words, as planes.c does for
 * whole records). itemsize = 8 * ngroups. */
static void gather(const uint8_t *planes, int64_t n, const int64_t *groups, int64_t ngroups,
                   uint8_t *out) {
    int64_t size = 8 * ngroups;
    int words = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
    for (int64_t g = 0; g < ngroups; g++) {
        const uint8_t *p = planes + groups[g] * 8 * n;
        int64_t i = 0;
        for (; words && i + 8 <= n; i += 8) {
            uint64_t a[8];
            for (int j = 0; j < 8; j++) a[j] = get64(p + j * n + i);
            transpose8(a);
            for (int m = 0; m < 8; m++) put64(out + (i + m) * size + 8 * g, a[m]);
        }
        for (; i < n; i++)
            for (int j = 0; j < 8; j++) out[i * size + 8 * g + j] = p[j * n + i];
    }
}

/* The narrow records of `n` records' planes (malloc'd; NULL: out of memory);
 * offs are the fields' offsets in a narrow record. */
static uint8_t *narrow(const uint8_t *planes, int64_t n, const int64_t *groups, int64_t ngroups,
                       const int64_t *offs) {
    uint8_t *recs = malloc(n > 0 ? (size_t)(n * 8 * ngroups) : 1);
    if (!recs) return NULL;
    gather(planes, n, groups, ngroups, recs);
    const int64_t delta[5] = {offs[F_QUEUE], offs[F_ISSUE], offs[F_COMPLETE], offs[F_OFFSET],
                              offs[F_BYTES]};
    undelta_records(recs, n, 8 * ngroups, delta);
    return recs;
}

/* scan_chunk of a chunk's planes; -1: out of memory. */
int scan_planes(const uint8_t *planes, int64_t n, const int64_t *groups, int64_t ngroups,
                const int64_t *offs, const uint8_t *op_ok, uint8_t op_flush, uint16_t device_flag,
                int64_t *stats, int64_t *seen) {
    uint8_t *recs = narrow(planes, n, groups, ngroups, offs);
    if (!recs) return -1;
    int found = scan_chunk(recs, n, 8 * ngroups, offs, op_ok, op_flush, device_flag, stats, seen);
    free(recs);
    return found;
}

/* compact_rows of a chunk's planes; -1: out of memory. */
int64_t compact_planes(const uint8_t *planes, int64_t n, const int64_t *groups, int64_t ngroups,
                       const int64_t *offs, const uint8_t *op_ok, uint8_t op_flush,
                       uint16_t device_flag, int32_t app_flush, int64_t first, int64_t t0,
                       int32_t timed, compact_t *out) {
    uint8_t *recs = narrow(planes, n, groups, ngroups, offs);
    if (!recs) return -1;
    int64_t k = compact_rows(recs, n, 8 * ngroups, offs, op_ok, op_flush, device_flag, app_flush,
                             first, t0, timed, out);
    free(recs);
    return k;
}
