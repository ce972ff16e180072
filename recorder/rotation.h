/* A capture as a sequence of trace files (iotape record --rotate): their names,
 * when the next one starts, and the ring on disk (--keep, --keep-bytes). Each
 * file is a complete trace; recorder/tracefile/sequence.py reads them as one.
 * Names: OUT.iot -> OUT-000000.iot, OUT-000001.iot, ... (sorted by name = by time). */
#ifndef ROTATION_H
#define ROTATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rotation {
	uint64_t every_bytes;	/* start the next file at this size, or 0 */
	uint64_t every_ns;	/* ... or after this long, or 0 */
	uint64_t keep;		/* files kept on disk, the current one included, or 0 */
	uint64_t keep_bytes;	/* bytes kept on disk, or 0 */
	uint64_t keep_ns;	/* files that ended this long ago go (--ring), or 0 */
	uint64_t max_bytes;	/* the capture stops when its files reach this, or 0 */
	char stem[4096];	/* OUT without ".iot" */
	uint32_t index;		/* the current file's index */
	uint32_t oldest;	/* the oldest file still on disk */
	uint64_t *sizes;	/* closed files' sizes by index */
	uint64_t *ends;		/* ... and their end times (CLOCK_MONOTONIC ns) */
	size_t cap;
	uint64_t on_disk;	/* bytes of closed files still on disk */
	uint64_t written;	/* bytes of all closed files, deleted ones included */
	uint64_t deleted;	/* files deleted by the ring */
};

bool rot_enabled(const struct rotation *r);
/* Sets the stem from OUT. Returns 0 or -ENAMETOOLONG. */
int rot_init(struct rotation *r, const char *out);
/* The name of file INDEX. */
void rot_name(const struct rotation *r, uint32_t index, char *buf, size_t size);
/* Whether the current file, SIZE bytes and open for AGE_NS, is done. */
bool rot_due(const struct rotation *r, uint64_t size, uint64_t age_ns);
/* The file before the current one (index - 1) was closed at SIZE bytes, at END_NS
 * (CLOCK_MONOTONIC). 0 or -errno. */
int rot_closed(struct rotation *r, uint64_t size, uint64_t end_ns);
/* Deletes the oldest closed files while the ring holds more than it may, the
 * current file counted at CUR_SIZE, NOW_NS for --ring's window. Returns how many
 * it deleted. */
unsigned rot_prune(struct rotation *r, uint64_t cur_size, uint64_t now_ns);
/* When closed file INDEX ended, or 0 if it is not a closed file. */
uint64_t rot_end(const struct rotation *r, uint32_t index);
void rot_free(struct rotation *r);

#endif /* ROTATION_H */
