/* One line of a lanes plan's version-2 iolog, parsed: what the synchronous lanes
 * (lanes.c) and the asynchronous ones (async.c) both read. By hand rather than
 * sscanf: an async lane parses ~250k lines a second on one vCPU. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lanes.h"

static int dir_of(const char *act, size_t n) {
    if (n == 4 && !memcmp(act, "read", 4))
        return READ;
    if (n == 5 && !memcmp(act, "write", 5))
        return WRITE;
    if (n == 4 && !memcmp(act, "trim", 4))
        return TRIM;
    if ((n == 4 && !memcmp(act, "sync", 4)) || (n == 8 && !memcmp(act, "datasync", 8)))
        return SYNC;
    return -1;
}

static int number(const char *s, size_t n, long long *out) {
    char buf[32], *end;
    if (!n || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    errno = 0;
    *out = strtoll(buf, &end, 10);
    return errno || *end ? -1 : 0;
}

int v2_parse(const char *ln, v2line_t *out) {
    const char *tok[4];
    size_t len[4];
    int n = 0;
    for (const char *s = ln; *s && n < 4;) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            s++;
        if (!*s)
            break;
        const char *e = s;
        while (*e && *e != ' ' && *e != '\t' && *e != '\n' && *e != '\r')
            e++;
        tok[n] = s, len[n] = (size_t)(e - s), n++;
        s = e;
    }
    *out = (v2line_t){.kind = V2_BAD, .dir = -1};
    if (n < 2 || len[0] >= sizeof out->file)
        return V2_BAD;
    memcpy(out->file, tok[0], len[0]);
    out->file[len[0]] = 0;
    if (n == 2) {
        if (len[1] == 3 && !memcmp(tok[1], "add", 3))
            out->kind = V2_ADD;
        else if (len[1] == 4 && !memcmp(tok[1], "open", 4))
            out->kind = V2_OPEN;
        else if (len[1] == 5 && !memcmp(tok[1], "close", 5))
            out->kind = V2_CLOSE;
        return out->kind;
    }
    if (n != 4 || number(tok[2], len[2], &out->a) || number(tok[3], len[3], &out->b) ||
        out->a < 0 || out->b < 0)
        return V2_BAD;
    if (len[1] == 4 && !memcmp(tok[1], "wait", 4))
        return out->kind = V2_WAIT;
    out->dir = dir_of(tok[1], len[1]);
    if (out->dir < 0 || ((out->dir == READ || out->dir == WRITE) && out->b > max_bs))
        return V2_BAD;
    return out->kind = V2_IO;
}
