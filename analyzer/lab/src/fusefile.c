/* fusefile: see fusefile.h. */
#define _GNU_SOURCE
#include "fusefile.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

int ff_fd = -1;
uint64_t ff_size;
static ff_stats_fn stats_fn;

#define STATS_MAX 65536

void ff_reply(uint64_t unique, int error, const void *body, size_t n)
{
	struct fuse_out_header h = {.len = (uint32_t)(sizeof h + (error ? 0 : n)), .error = -error, .unique = unique};
	struct iovec iov[2] = {{&h, sizeof h}, {(void *)body, error ? 0 : n}};
	if (writev(ff_fd, iov, 2) < 0 && errno != ENOENT)
		perror("iotape lab disk: reply");
}

static void attr_of(uint64_t ino, struct fuse_attr *a)
{
	memset(a, 0, sizeof *a);
	a->ino = ino;
	a->nlink = 1;
	a->blksize = 4096;
	if (ino == FUSE_ROOT_ID) {
		a->mode = S_IFDIR | 0755;
		a->nlink = 2;
	} else {
		a->mode = S_IFREG | (ino == FF_STATS_INO ? 0400 : 0600);
		/* stats: a size that covers the text; a read past the text returns nothing */
		a->size = ino == FF_STATS_INO ? STATS_MAX : ff_size;
		a->blocks = a->size / 512;
	}
}

static void do_init(struct fuse_in_header *h, struct fuse_init_in *in)
{
	struct fuse_init_out o = {.major = FUSE_KERNEL_VERSION, .minor = FUSE_KERNEL_MINOR_VERSION};
	if (in->minor < o.minor)
		o.minor = in->minor;
	/* Async direct I/O: a loop device's requests reach the server together. */
	o.flags = in->flags & (FUSE_ASYNC_DIO | FUSE_BIG_WRITES | FUSE_MAX_PAGES);
	o.max_write = FF_MAX_IO;
	o.max_pages = FF_MAX_IO / 4096;
	o.max_background = 64;
	o.congestion_threshold = 48;
	ff_reply(h->unique, 0, &o, sizeof o);
}

static void read_stats(struct fuse_in_header *h, struct fuse_read_in *r)
{
	/* The text is made at offset 0 and later reads of the same pass continue that one
	 * text: made anew at each read, a counter gaining a digit in between would shift
	 * the rest and a reader would see the end twice. */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* readers share the text */
	static char text[STATS_MAX];
	static size_t n;
	pthread_mutex_lock(&lock);
	if (r->offset == 0 || !n)
		n = stats_fn(text, sizeof text);
	size_t off = r->offset < n ? (size_t)r->offset : n;
	size_t len = n - off < r->size ? n - off : r->size;
	ff_reply(h->unique, 0, text + off, len);
	pthread_mutex_unlock(&lock);
}

int ff_other(struct fuse_in_header *h, char *arg)
{
	switch (h->opcode) {
	case FUSE_INIT:
		do_init(h, (void *)arg);
		return 0;
	case FUSE_DESTROY:
		return 1;
	case FUSE_LOOKUP: {
		uint64_t ino = !strcmp(arg, "disk") ? FF_DISK_INO : (stats_fn && !strcmp(arg, "stats")) ? FF_STATS_INO : 0;
		if (h->nodeid != FUSE_ROOT_ID || !ino) {
			ff_reply(h->unique, ENOENT, NULL, 0);
			return 0;
		}
		struct fuse_entry_out e = {.nodeid = ino, .generation = 1};
		attr_of(ino, &e.attr);
		ff_reply(h->unique, 0, &e, sizeof e);
		return 0;
	}
	case FUSE_GETATTR: {
		struct fuse_attr_out a = {0};
		attr_of(h->nodeid, &a.attr);
		ff_reply(h->unique, 0, &a, sizeof a);
		return 0;
	}
	case FUSE_OPEN:
	case FUSE_OPENDIR: {
		/* Past the page cache: every read and write of the loop reaches the server. */
		struct fuse_open_out o = {.open_flags = h->opcode == FUSE_OPEN ? FOPEN_DIRECT_IO : 0};
		ff_reply(h->unique, 0, &o, sizeof o);
		return 0;
	}
	case FUSE_READ:
		if (h->nodeid == FF_STATS_INO && stats_fn) {
			read_stats(h, (void *)arg);
			return 0;
		}
		ff_reply(h->unique, EIO, NULL, 0);
		return 0;
	case FUSE_FLUSH:
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_FSYNC:
	case FUSE_ACCESS:
		ff_reply(h->unique, 0, NULL, 0);
		return 0;
	case FUSE_STATFS: {
		struct fuse_statfs_out s = {.st = {.bsize = 4096, .frsize = 4096, .namelen = 255}};
		ff_reply(h->unique, 0, &s, sizeof s);
		return 0;
	}
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
		return 0; /* no reply */
	default:
		ff_reply(h->unique, ENOSYS, NULL, 0);
		return 0;
	}
}

int ff_next(char *buf)
{
	for (;;) {
		ssize_t n = read(ff_fd, buf, FF_BUF);
		if (n >= 0)
			return 1;
		if (errno == EINTR || errno == ENOENT || errno == EAGAIN)
			continue;
		return errno == ENODEV ? 0 : -1; /* ENODEV: unmounted */
	}
}

int ff_mount(const char *mountpoint, const char *name, uint64_t size, ff_stats_fn stats)
{
	ff_size = size;
	stats_fn = stats;
	ff_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (ff_fd < 0) {
		fprintf(stderr, "%s: /dev/fuse: %s\n", name, strerror(errno));
		return -1;
	}
	char opts[128], type[64];
	snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", ff_fd);
	snprintf(type, sizeof type, "fuse.%s", name);
	if (mount(name, mountpoint, type, MS_NOSUID | MS_NODEV, opts)) {
		fprintf(stderr, "%s: mount %s: %s\n", name, mountpoint, strerror(errno));
		return -1;
	}
	return 0;
}

int ff_serve(int n, void *(*fn)(void *), const char *name)
{
	pthread_t t[64];
	if (n < 1 || n > 64)
		return 1;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, fn, NULL)) {
			fprintf(stderr, "%s: cannot start a serving thread\n", name);
			return 1;
		}
	printf("ready\n");
	fflush(stdout);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}
