#include "rotation.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool rot_enabled(const struct rotation *r)
{
	return r->every_bytes || r->every_ns;
}

int rot_init(struct rotation *r, const char *out)
{
	size_t len = strlen(out);

	if (len >= 4 && !strcmp(out + len - 4, ".iot"))
		len -= 4;
	if (len + 16 >= sizeof(r->stem))
		return -ENAMETOOLONG;
	memcpy(r->stem, out, len);
	r->stem[len] = 0;
	return 0;
}

void rot_name(const struct rotation *r, uint32_t index, char *buf, size_t size)
{
	snprintf(buf, size, "%s-%06u.iot", r->stem, index);
}

bool rot_due(const struct rotation *r, uint64_t size, uint64_t age_ns)
{
	return (r->every_bytes && size >= r->every_bytes) || (r->every_ns && age_ns >= r->every_ns);
}

int rot_closed(struct rotation *r, uint64_t size, uint64_t end_ns)
{
	if (!r->index)
		return -EINVAL;
	if (r->index > r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		uint64_t *p = realloc(r->sizes, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		r->sizes = p;
		p = realloc(r->ends, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		r->ends = p;
		r->cap = cap;
	}
	r->sizes[r->index - 1] = size;
	r->ends[r->index - 1] = end_ns;
	r->on_disk += size;
	r->written += size;
	return 0;
}

uint64_t rot_end(const struct rotation *r, uint32_t index)
{
	return index < r->index && r->ends ? r->ends[index] : 0;
}

unsigned rot_prune(struct rotation *r, uint64_t cur_size, uint64_t now_ns)
{
	char name[sizeof(r->stem) + 16];
	unsigned n = 0;

	/* --ring: a file goes once its last record is older than the window, so the
	 * files on disk always cover the window (and at most one file more). */
	while (r->oldest < r->index &&
	       ((r->keep && r->index - r->oldest + 1 > r->keep) ||
		(r->keep_bytes && r->on_disk + cur_size > r->keep_bytes) ||
		(r->keep_ns && r->ends[r->oldest] + r->keep_ns < now_ns))) {
		rot_name(r, r->oldest, name, sizeof(name));
		/* Already gone (a user cleaned up) counts as deleted too. */
		if (unlink(name) && errno != ENOENT)
			break;
		r->on_disk -= r->sizes[r->oldest++];
		r->deleted++;
		n++;
	}
	return n;
}

void rot_free(struct rotation *r)
{
	free(r->sizes);
	free(r->ends);
	r->sizes = r->ends = NULL;
}
