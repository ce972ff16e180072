/* The read/write/trim entries of a block of fio iolog lines, for `replay run`'s
 * relabelling (replayer/run/logblocks.py loads this as build/liblogparse.so).
 *
 * Python split each line (about 2 us a line; a plan of lanes has a wait line
 * before most entries, 4.8 M lines for a 2.4 M-request replay). The rules are
 * iolog.iter_entry_times_us's:
 *   5 fields, the third an action:  an entry at the first field (v3);
 *   4 fields `FILE wait MS US`:     the time becomes MS * 1000 + US (v2);
 *   4 fields, the second an action: an entry at that time (v2);
 *   anything else is skipped.
 * and *now_io ends as relabel's reader left it: the value of a wait that is
 * the last line of 4 or 5 fields, else the time of the last entry (of any action).
 *
 * Returns the number of read/write/trim entries written, or -1 where the block
 * is not in the shape iotape writes (fields split by one space, numbers of at
 * most 18 plain digits, no tab or carriage return): the caller then parses it
 * line by line, so that its answer and its errors stay the loop's. */
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 6
#define MAX_DIGITS 18

enum { A_READ, A_WRITE, A_SYNC, A_TRIM, A_WAIT, A_NONE };

static int action(const char *s, int64_t n) {
    if (n == 4 && !memcmp(s, "read", 4)) return A_READ;
    if (n == 5 && !memcmp(s, "write", 5)) return A_WRITE;
    if (n == 4 && !memcmp(s, "sync", 4)) return A_SYNC;
    if (n == 4 && !memcmp(s, "trim", 4)) return A_TRIM;
    if (n == 4 && !memcmp(s, "wait", 4)) return A_WAIT;
    return A_NONE;
}

/* The unsigned decimal s[0:n]; -1 if it is not 1..18 plain digits. */
static int64_t number(const char *s, int64_t n) {
    if (n < 1 || n > MAX_DIGITS) return -1;
    int64_t v = 0;
    for (int64_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* op codes of the trace (replayer.plan.source.OP): read 0, write 1, discard 3. */
static const uint8_t OP_CODE[] = {0, 1, 0, 3};

int64_t iolog_entries(const char *buf, int64_t len, int64_t *now_io, int64_t *t, uint8_t *op,
                      uint64_t *offset, uint32_t *size) {
    int64_t now = *now_io, after = *now_io, out = 0, pos = 0;
    int64_t trail = -1; /* the value of a wait that is the last line of 4 or 5 fields */
    while (pos < len) {
        const char *line = buf + pos;
        const char *end = memchr(line, '\n', (size_t)(len - pos));
        if (!end) return -1; /* the caller passes whole lines */
        int64_t n = end - line;
        pos += n + 1;
        const char *f[MAX_FIELDS];
        int64_t fl[MAX_FIELDS];
        int nf = 0;
        int64_t start = 0;
        for (int64_t i = 0; i <= n; i++) {
            char c = i < n ? line[i] : ' ';
            /* What str.split() also splits at, or may: leave it to the loop. */
            if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f) return -1;
            if (c != ' ') continue;
            if (i == start && n > 0) return -1; /* a leading or doubled space */
            if (nf < MAX_FIELDS) {
                f[nf] = line + start;
                fl[nf] = i - start;
            }
            nf++;
            start = i + 1;
        }
        if (n == 0) continue; /* an empty line: no fields */
        if (n > 0 && line[n - 1] == ' ') return -1; /* a trailing space */
        if (nf == 4 || nf == 5) trail = -1;
        int a;
        int64_t when;
        const char *o, *z;
        int64_t ol, zl;
        if (nf == 5 && (a = action(f[2], fl[2])) < A_WAIT) {
            when = number(f[0], fl[0]);
            if (when < 0) return -1;
            o = f[3], ol = fl[3], z = f[4], zl = fl[4];
        } else if (nf == 4 && (a = action(f[1], fl[1])) <= A_WAIT) {
            if (a == A_WAIT) {
                int64_t ms = number(f[2], fl[2]), us = number(f[3], fl[3]);
                if (ms < 0 || us < 0) return -1;
                now = ms * 1000 + us;
                trail = now;
                continue;
            }
            when = now;
            o = f[2], ol = fl[2], z = f[3], zl = fl[3];
        } else {
            continue;
        }
        after = when;
        if (a == A_SYNC) continue;
        int64_t off = number(o, ol), sz = number(z, zl);
        if (off < 0 || sz < 0 || sz > UINT32_MAX) return -1;
        t[out] = when;
        op[out] = OP_CODE[a];
        offset[out] = (uint64_t)off;
        size[out] = (uint32_t)sz;
        out++;
    }
    *now_io = trail >= 0 ? trail : after;
    return out;
}
