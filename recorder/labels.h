/* Stream labels applied while draining: thread-name rules (longest prefix
 * wins) and file extents (win over rules), each naming a stream per op. */
#ifndef LABELS_H
#define LABELS_H

#include <stddef.h>
#include <stdint.h>
#include "iotape_record.h"

#define LABELS_MAX_RULES 64
#define LABELS_PREFIX_LEN 16

struct label_rule {
	char prefix[LABELS_PREFIX_LEN];
	size_t len;
	/* The prefix as two words and the mask of its LEN bytes: a record's comm
	 * (16 NUL-padded bytes) starts with it iff (comm & mask) == word, as
	 * strncmp(comm, prefix, len) == 0 (the prefix holds no NUL), without a
	 * call per rule and record. */
	uint64_t word[2], mask[2];
	uint8_t read_stream, write_stream;
};

struct label_extent {
	uint32_t dev;
	uint64_t start, end;		/* disk bytes, half-open */
	uint8_t read_stream, write_stream;
};

struct labels {
	struct label_rule rules[LABELS_MAX_RULES];
	int n_rules;
	struct label_extent *extents;	/* sorted by (dev, start) */
	size_t n_extents;
};

/* "PREFIX:READ_STREAM:WRITE_STREAM". Returns 0, or -1 with ERR filled. */
int labels_add_rule(struct labels *l, const char *spec, char *err, size_t errlen);
/* Lines "DEV START END READ_STREAM WRITE_STREAM"; blank lines and '#' comments
 * allowed. Returns 0, or -1 with ERR naming the file and line. */
int labels_read_extents(struct labels *l, const char *path, char *err, size_t errlen);
/* The stream of a record, 0 when nothing matches. */
uint8_t labels_stream(const struct labels *l, const struct iotape_record *r);
void labels_free(struct labels *l);

static inline int labels_active(const struct labels *l)
{
	return l->n_rules || l->n_extents;
}

#endif /* LABELS_H */
