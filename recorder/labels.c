// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "labels.h"

static int parse_id(const char *s, size_t len, uint8_t *out)
{
	unsigned long v = 0;

	if (!len || len > 3)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v > 255)
		return -1;
	*out = (uint8_t)v;
	return 0;
}

/* Split from the right, so a prefix may itself hold ':'. */
int labels_add_rule(struct labels *l, const char *spec, char *err, size_t errlen)
{
	const char *w = strrchr(spec, ':'), *r = NULL;
	struct label_rule *ru;

	if (l->n_rules == LABELS_MAX_RULES) {
		snprintf(err, errlen, "--rule: at most %d rules", LABELS_MAX_RULES);
		return -1;
	}
	if (w && w > spec)
		for (r = w - 1; r >= spec && *r != ':'; r--)
			;
	ru = &l->rules[l->n_rules];
	if (!w || !r || r <= spec || (size_t)(r - spec) >= LABELS_PREFIX_LEN ||
	    parse_id(r + 1, w - r - 1, &ru->read_stream) ||
	    parse_id(w + 1, strlen(w + 1), &ru->write_stream)) {
		snprintf(err, errlen, "--rule: '%s' is not PREFIX:READ_STREAM:WRITE_STREAM "
			 "(prefix 1..15 characters, streams 0..255)", spec);
		return -1;
	}
	ru->len = r - spec;
	memset(ru->prefix, 0, sizeof(ru->prefix));
	memcpy(ru->prefix, spec, ru->len);
	memcpy(ru->word, ru->prefix, sizeof(ru->word));
	memset(ru->mask, 0, sizeof(ru->mask));
	memset(ru->mask, 0xff, ru->len);
	l->n_rules++;
	return 0;
}

static int cmp_extent(const void *a, const void *b)
{
	const struct label_extent *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

int labels_read_extents(struct labels *l, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char line[256];
	size_t cap = 0;
	int lineno = 0;

	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long dev, start, end, rs, ws;
		char c;

		lineno++;
		if (sscanf(line, " %c", &c) < 1 || c == '#')
			continue;
		if (sscanf(line, "%llu %llu %llu %llu %llu %c", &dev, &start, &end, &rs, &ws, &c) != 5 ||
		    dev > UINT32_MAX || start >= end || rs > 255 || ws > 255) {
			snprintf(err, errlen, "%s: line %d: expected 'DEV START END READ_STREAM "
				 "WRITE_STREAM' with START < END and streams 0..255", path, lineno);
			goto fail;
		}
		if (l->n_extents == cap) {
			struct label_extent *n;

			cap = cap ? cap * 2 : 256;
			n = realloc(l->extents, cap * sizeof(*n));
			if (!n) {
				snprintf(err, errlen, "%s: line %d: out of memory", path, lineno);
				goto fail;
			}
			l->extents = n;
		}
		l->extents[l->n_extents++] = (struct label_extent){ dev, start, end, rs, ws };
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: line %d: read error", path, lineno + 1);
		goto fail;
	}
	fclose(f);
	qsort(l->extents, l->n_extents, sizeof(*l->extents), cmp_extent);
	return 0;
fail:
	fclose(f);
	return -1;
}

static const struct label_extent *find_extent(const struct labels *l, uint32_t dev, uint64_t off)
{
	size_t lo = 0, hi = l->n_extents;

	/* The last extent starting at or before (dev, off). */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct label_extent *x = &l->extents[mid];

		if (x->dev < dev || (x->dev == dev && x->start <= off))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo && l->extents[lo - 1].dev == dev && off < l->extents[lo - 1].end)
		return &l->extents[lo - 1];
	return NULL;
}

/* Flushes, discards and zeroing belong with the writes of the same thread or file. */
static uint8_t by_op(uint8_t op, uint8_t read_stream, uint8_t write_stream)
{
	return op == IOTAPE_OP_READ ? read_stream : write_stream;
}

uint8_t labels_stream(const struct labels *l, const struct iotape_record *r)
{
	const struct label_rule *best = NULL;
	const struct label_extent *x;
	uint64_t comm[2];

	if (l->n_extents && r->bytes && (x = find_extent(l, r->dev, r->offset)))
		return by_op(r->op, x->read_stream, x->write_stream);
	_Static_assert(sizeof(comm) == sizeof(r->comm), "comm is two words");
	memcpy(comm, r->comm, sizeof(comm));
	for (int i = 0; i < l->n_rules; i++) {
		const struct label_rule *ru = &l->rules[i];

		if ((comm[0] & ru->mask[0]) == ru->word[0] && (comm[1] & ru->mask[1]) == ru->word[1] &&
		    (!best || ru->len > best->len))
			best = ru;
	}
	return best ? by_op(r->op, best->read_stream, best->write_stream) : 0;
}

void labels_free(struct labels *l)
{
	free(l->extents);
	l->extents = NULL;
	l->n_extents = 0;
}
