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
 * (docs/hybrid.md). The FUSE plumbing is fusefile.c, shared with array.c.
 *
 * Usage: iotape-hdd MOUNTPOINT BACKING SPINDLES RPM SETTLE_MS FULL_MS MB_S
 *        WRITE_EXTRA_MS SEED
 * Mounts MOUNTPOINT with one file, "disk", the backing's size; prints "ready"
 * when mounted; serves until unmounted. The caller unmounts it. SIGUSR1 serves
 * at memory speed from then on (making a database), SIGUSR2 models again. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fusefile.h"


static int backing;
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

static void do_io(struct fuse_in_header *h, char *arg, char *data)
{
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	if (h->opcode == FUSE_READ) {
		struct fuse_read_in *r = (void *)arg;
		uint32_t n = r->size > FF_MAX_IO ? FF_MAX_IO : r->size;
		double s = service_s(r->offset, n, 0);
		ssize_t got = pread(backing, data, n, (off_t)r->offset);
		sleep_until(&start, s);
		ff_reply(h->unique, got < 0 ? errno : 0, data, got < 0 ? 0 : (size_t)got);
		return;
	}
	struct fuse_write_in *w = (void *)arg;
	double s = service_s(w->offset, w->size, 1);
	ssize_t put = pwrite(backing, arg + sizeof *w, w->size, (off_t)w->offset);
	sleep_until(&start, s);
	struct fuse_write_out o = {.size = put < 0 ? 0 : (uint32_t)put};
	ff_reply(h->unique, put < 0 ? errno : 0, &o, sizeof o);
}

static void *spindle(void *arg)
{
	(void)arg;
	char *buf = malloc(FF_BUF), *data = malloc(FF_MAX_IO);
	if (!buf || !data)
		exit(1);
	for (;;) {
		int got = ff_next(buf);
		if (got <= 0)
			exit(got < 0);
		struct fuse_in_header *h = (void *)buf;
		char *a = buf + sizeof *h;
		if ((h->opcode == FUSE_READ || h->opcode == FUSE_WRITE) && h->nodeid == FF_DISK_INO)
			do_io(h, a, data);
		else if (ff_other(h, a))
			exit(0);
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
	if (ff_mount(argv[1], "iotape-hdd", size, NULL))
		return 1;
	return ff_serve(spindles, spindle, "iotape-hdd");
}
