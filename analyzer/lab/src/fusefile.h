/* fusefile: the FUSE plumbing the lab's emulated disks share (hdd.c, array.c). One
 * mount with the file "disk" (the backing's size) and, when a server asks for it,
 * "stats" (a text the server writes on each read of it). Both opened direct-I/O, so
 * every read and write of a loop device over "disk" reaches the server. */
#ifndef IOTAPE_LAB_FUSEFILE_H
#define IOTAPE_LAB_FUSEFILE_H

#include <linux/fuse.h>
#include <stddef.h>
#include <stdint.h>

#define FF_MAX_IO (1u << 20)
#define FF_BUF (FF_MAX_IO + 8192 + sizeof(struct fuse_in_header))
#define FF_DISK_INO 2
#define FF_STATS_INO 3

/* The server's text for "stats" (its length), written into buf (at most n bytes). */
typedef size_t (*ff_stats_fn)(char *buf, size_t n);

extern int ff_fd;
extern uint64_t ff_size;

/* Opens /dev/fuse and mounts MOUNTPOINT as fuse.NAME; -1 with a message on failure.
 * stats: NULL for no "stats" file. */
int ff_mount(const char *mountpoint, const char *name, uint64_t size, ff_stats_fn stats);
void ff_reply(uint64_t unique, int error, const void *body, size_t n);
/* Reads the next request into buf (FF_BUF bytes); 0 when the mount is gone (exit 0),
 * -1 on an error (exit 1). Retries interruptions. */
int ff_next(char *buf);
/* Answers INIT, lookups, attributes, opens, reads of "stats" and the rest; READ and
 * WRITE of "disk" are the server's. Returns 1 on DESTROY (the server exits). */
int ff_other(struct fuse_in_header *h, char *arg);

/* Starts n threads running fn, prints "ready" (the caller waits for it), and joins
 * them (they exit the process when the mount goes). 1 if a thread cannot start. */
int ff_serve(int n, void *(*fn)(void *), const char *name);

#endif
