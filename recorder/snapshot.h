/* Snapshots of a rotated capture (iotape record --ring, docs/recording.md): the
 * files that cover the window before a request and those written until the window
 * after it ends, hard-linked into OUT.snapshots/<UTC time>-<reason>/ under their
 * own names. A hard link is the same file: it costs no copy, a file still being
 * written is linked whole (its footer included once it is closed), and the ring
 * deleting its own name leaves the snapshot's. The directory reads as one trace;
 * snapshot.json in it says what asked for it and whether it is complete. */
#ifndef SNAPSHOT_H
#define SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "rotation.h"

struct snapshot {
	char root[sizeof(((struct rotation *)0)->stem) + 16];	/* OUT.snapshots */
	char dir[sizeof(((struct rotation *)0)->stem) + 64];	/* the one being taken */
	uint64_t before_ns, after_ns;	/* the window around a request */
	bool active;
	uint64_t req_mono, req_wall;	/* when it was asked for */
	uint64_t until_mono;		/* the window after ends */
	uint64_t latency_ns;		/* condition (or request) to the files linked */
	uint64_t saved_mono;		/* when the window before's files were linked */
	uint32_t first, next;		/* files linked: [first, next) */
	char reason[16];		/* signal, command, trigger */
	char detail[160];		/* the trigger's expression and value */
	unsigned taken;			/* snapshots begun */
};

/* Sets the root from the rotation's stem. */
void snap_init(struct snapshot *s, const struct rotation *r, uint64_t before_ns,
	       uint64_t after_ns);
/* Begins a snapshot at NOW (the capture just rotated, so the window before is in
 * closed files): makes its directory and links the files from the oldest that
 * ends within the window before up to the current one. SINCE is when the
 * condition or request arose, for latency_ns. Returns 0 or -errno. */
int snap_begin(struct snapshot *s, const struct rotation *r, uint64_t now, uint64_t wall,
	       uint64_t since, const char *reason, const char *detail);
/* Links the files the capture has begun since. Returns 0 or -errno. */
int snap_link(struct snapshot *s, const struct rotation *r);
/* Writes snapshot.json (atomically), COMPLETE when the window after has been
 * written and closed; STOPPED names why a capture ended before that, or NULL. */
int snap_manifest(const struct snapshot *s, const struct rotation *r, bool complete,
		  const char *stopped);

#endif /* SNAPSHOT_H */
