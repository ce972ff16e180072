/* iotape-hdd: an HDD-like file in user space, served over FUSE, for a loop device
 * to sit on (analyzer/lab/devices.py, HybridLab(slow="hdd")). Each read or write
 * takes a stated service time before its reply:
 *
 *   seek:     0 when the request starts where the spindle's last one ended, else
 *             SETTLE + (FULL - SETTLE) * sqrt(distance / span)
 *   rotation: 0 when sequential, else uniform in [0, 60 / RPM)
 *   transfer: bytes / MB_S
 *   writes:   + WRITE_EXTRA (a write's longer settle)
 *
 * One thread per spindle, each taking the next request from /dev/fuse: a request
 * waits for a free spindle (queueing), as on a set of disks serving random I/O.
 * The data lives in a memory-backed file (the backing), so only the modelled time
 * is spent. Why FUSE: the kernel here has neither device-mapper (dm-delay), nor
 * null_blk, nbd or ublk; blk-throttle gives the right rate but a bimodal latency
 * (docs/hybrid.md).
 *
 * Usage: iotape-hdd MOUNTPOINT BACKING SPINDLES RPM SETTLE_MS FULL_MS MB_S
 *        WRITE_EXTRA_MS SEED
 * Mounts MOUNTPOINT with one file, "disk", the backing's size; prints "ready"
 * when mounted; serves until unmounted. The caller unmounts it. SIGUSR1 serves
 * at memory speed from then on (making a database), SIGUSR2 models again. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_IO (1u << 20)
#define BUF (MAX_IO + 4096)
#define DISK_INO 2

static int fuse_fd, backing;
static uint64_t size;
static double settle_s, full_s, rot_s, mb_s, write_extra_s;
static pthread_mutex_t head_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_seq = UINT64_MAX; /* where the last request ended (any spindle) */
static _Atomic uint64_t seed;
static atomic_int modelled = 1;

static void on_signal(int sig)
{
	atomic_store(&modelled, sig == SIGUSR2);
}

static double uniform(void)
{
	/* splitmix64: one shared stream, good enough for rotational positions */
	uint64_t z = atomic_fetch_add(&seed, 0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static double service_s(uint64_t off, uint32_t len, int write)
{
	pthread_mutex_lock(&head_mu);
	int seq = off == next_seq;
	uint64_t from = next_seq == UINT64_MAX ? 0 : next_seq;
	next_seq = off + len;
	pthread_mutex_unlock(&head_mu);
	if (!atomic_load(&modelled))
		return 0;
	double t = len / (mb_s * 1e6);
	if (!seq) {
		double d = (double)(off > from ? off - from : from - off) / (double)size;
		t += settle_s + (full_s - settle_s) * sqrt(d) + rot_s * uniform();
	}
	return t + (write ? write_extra_s : 0);
}

static void sleep_until(const struct timespec *start, double s)
{
	struct timespec t = *start;
	long long ns = t.tv_nsec + (long long)(s * 1e9);
	t.tv_sec += ns / 1000000000;
	t.tv_nsec = ns % 1000000000;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
		;
}

static void reply(uint64_t unique, int error, const void *body, size_t n)
{
	struct fuse_out_header h = {.len = (uint32_t)(sizeof h + (error ? 0 : n)), .error = -error, .unique = unique};
	struct iovec iov[2] = {{&h, sizeof h}, {(void *)body, error ? 0 : n}};
	if (writev(fuse_fd, iov, 2) < 0 && errno != ENOENT)
		perror("iotape-hdd: reply");
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
		a->mode = S_IFREG | 0600;
		a->size = size;
		a->blocks = size / 512;
	}
}

static void do_io(struct fuse_in_header *h, char *arg, char *data)
{
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	if (h->opcode == FUSE_READ) {
		struct fuse_read_in *r = (void *)arg;
		uint32_t n = r->size > MAX_IO ? MAX_IO : r->size;
		double s = service_s(r->offset, n, 0);
		ssize_t got = pread(backing, data, n, (off_t)r->offset);
		sleep_until(&start, s);
		reply(h->unique, got < 0 ? errno : 0, data, got < 0 ? 0 : (size_t)got);
		return;
	}
	struct fuse_write_in *w = (void *)arg;
	double s = service_s(w->offset, w->size, 1);
	ssize_t put = pwrite(backing, arg + sizeof *w, w->size, (off_t)w->offset);
	sleep_until(&start, s);
	struct fuse_write_out o = {.size = put < 0 ? 0 : (uint32_t)put};
	reply(h->unique, put < 0 ? errno : 0, &o, sizeof o);
}

static void do_init(struct fuse_in_header *h, struct fuse_init_in *in)
{
	struct fuse_init_out o = {.major = FUSE_KERNEL_VERSION, .minor = FUSE_KERNEL_MINOR_VERSION};
	if (in->minor < o.minor)
		o.minor = in->minor;
	/* Async direct I/O: a loop device's requests reach the spindles together. */
	o.flags = in->flags & (FUSE_ASYNC_DIO | FUSE_BIG_WRITES | FUSE_MAX_PAGES);
	o.max_write = MAX_IO;
	o.max_pages = MAX_IO / 4096;
	o.max_background = 64;
	o.congestion_threshold = 48;
	reply(h->unique, 0, &o, sizeof o);
}

static void do_meta(struct fuse_in_header *h, char *arg)
{
	switch (h->opcode) {
	case FUSE_LOOKUP: {
		if (h->nodeid != FUSE_ROOT_ID || strcmp(arg, "disk")) {
			reply(h->unique, ENOENT, NULL, 0);
			return;
		}
		struct fuse_entry_out e = {.nodeid = DISK_INO, .generation = 1};
		attr_of(DISK_INO, &e.attr);
		reply(h->unique, 0, &e, sizeof e);
		return;
	}
	case FUSE_GETATTR: {
		struct fuse_attr_out a = {0};
		attr_of(h->nodeid, &a.attr);
		reply(h->unique, 0, &a, sizeof a);
		return;
	}
	case FUSE_OPEN:
	case FUSE_OPENDIR: {
		/* Past the page cache: every read and write of the loop reaches a spindle. */
		struct fuse_open_out o = {.open_flags = h->opcode == FUSE_OPEN ? FOPEN_DIRECT_IO : 0};
		reply(h->unique, 0, &o, sizeof o);
		return;
	}
	case FUSE_FLUSH:
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_FSYNC:
	case FUSE_ACCESS:
		reply(h->unique, 0, NULL, 0);
		return;
	case FUSE_STATFS: {
		struct fuse_statfs_out s = {.st = {.bsize = 4096, .frsize = 4096, .namelen = 255}};
		reply(h->unique, 0, &s, sizeof s);
		return;
	}
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
		return; /* no reply */
	default:
		reply(h->unique, ENOSYS, NULL, 0);
	}
}

static void *spindle(void *arg)
{
	(void)arg;
	char *buf = malloc(BUF + sizeof(struct fuse_in_header) + 4096), *data = malloc(MAX_IO);
	if (!buf || !data)
		exit(1);
	for (;;) {
		ssize_t n = read(fuse_fd, buf, BUF + sizeof(struct fuse_in_header) + 4096);
		if (n < 0) {
			if (errno == EINTR || errno == ENOENT || errno == EAGAIN)
				continue;
			exit(errno == ENODEV ? 0 : 1); /* ENODEV: unmounted */
		}
		struct fuse_in_header *h = (void *)buf;
		char *a = buf + sizeof *h;
		if (h->opcode == FUSE_READ || h->opcode == FUSE_WRITE)
			do_io(h, a, data);
		else if (h->opcode == FUSE_INIT)
			do_init(h, (void *)a);
		else if (h->opcode == FUSE_DESTROY)
			exit(0);
		else
			do_meta(h, a);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 10) {
		fprintf(stderr, "usage: %s MOUNTPOINT BACKING SPINDLES RPM SETTLE_MS FULL_MS MB_S "
				"WRITE_EXTRA_MS SEED\n", argv[0]);
		return 2;
	}
	int spindles = atoi(argv[3]);
	double rpm = atof(argv[4]);
	settle_s = atof(argv[5]) / 1e3;
	full_s = atof(argv[6]) / 1e3;
	mb_s = atof(argv[7]);
	write_extra_s = atof(argv[8]) / 1e3;
	seed = strtoull(argv[9], NULL, 10);
	if (spindles < 1 || spindles > 64 || rpm <= 0 || mb_s <= 0 || full_s < settle_s) {
		fprintf(stderr, "iotape-hdd: bad model (spindles 1-64, rpm and MB/s positive, full >= settle)\n");
		return 2;
	}
	rot_s = 60.0 / rpm;
	struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	backing = open(argv[2], O_RDWR);
	struct stat st;
	if (backing < 0 || fstat(backing, &st)) {
		fprintf(stderr, "iotape-hdd: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	size = (uint64_t)st.st_size;
	fuse_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fuse_fd < 0) {
		fprintf(stderr, "iotape-hdd: /dev/fuse: %s\n", strerror(errno));
		return 1;
	}
	char opts[128];
	snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fuse_fd);
	if (mount("iotape-hdd", argv[1], "fuse.iotape-hdd", MS_NOSUID | MS_NODEV, opts)) {
		fprintf(stderr, "iotape-hdd: mount %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	pthread_t t[64];
	for (int i = 0; i < spindles; i++)
		if (pthread_create(&t[i], NULL, spindle, NULL)) {
			fprintf(stderr, "iotape-hdd: cannot start a spindle thread\n");
			return 1;
		}
	printf("ready\n");
	fflush(stdout);
	for (int i = 0; i < spindles; i++)
		pthread_join(t[i], NULL);
	return 0;
}
