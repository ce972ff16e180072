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
 * Writes the kept rows (ordered.COMPACT, `n` counting from first) and returns
 * how many. */
#include <stdint.h>
#include <string.h>

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

int64_t compact_rows(const uint8_t *recs, int64_t n, int64_t itemsize, const int64_t *offs,
                     const uint8_t *op_ok, uint8_t op_flush, uint16_t device_flag,
                     int32_t app_flush, int64_t first, int64_t t0, int32_t timed,
                     compact_t *out) {
    int chunk_app = 0;
    for (int64_t i = 0; i < n && !chunk_app; i++) {
        const uint8_t *rec = recs + i * itemsize;
        chunk_app = GET(uint8_t, rec, F_OP) == op_flush && !device_flush(rec, offs, op_flush,
                                                                         device_flag);
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *rec = recs + i * itemsize;
        uint8_t op = GET(uint8_t, rec, F_OP);
        if (!op_ok[op]) continue;
        if (op != op_flush && GET(uint32_t, rec, F_BYTES) == 0) continue;
        if (chunk_app && device_flush(rec, offs, op_flush, device_flag)) continue;
        if (app_flush && op == op_flush && GET(uint32_t, rec, F_PID) == 0) continue;
        int64_t t = (int64_t)GET(uint64_t, rec, F_ISSUE);
        if (t <= 0) t = (int64_t)GET(uint64_t, rec, F_QUEUE);
        if (t <= 0) t = (int64_t)GET(uint64_t, rec, F_COMPLETE);
        compact_t *o = &out[k];
        memset(o, 0, sizeof *o);
        o->t = timed ? t - t0 : 0;
        o->n = first + k;
        o->offset = GET(uint64_t, rec, F_OFFSET);
        o->bytes = GET(uint32_t, rec, F_BYTES);
        o->dev = GET(uint32_t, rec, F_DEV);
        o->tid = GET(uint32_t, rec, F_TID);
        o->op = op;
        o->stream = GET(uint8_t, rec, F_STREAM);
        k++;
    }
    return k;
}
