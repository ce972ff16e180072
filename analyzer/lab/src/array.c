/* iotape-array: a disk array in user space, served over FUSE for a loop device to sit
 * on (analyzer/lab/array.py). One controller of an MSA-like array: a write-back cache
 * in front of a RAID-6 set of HDD-like disks, optionally an SSD tier or read cache;
 * the model is arraymodel.c, its parameters and their sources
 * analyzer/lab/array_model.toml and docs/hybrid.md. Here: the server. READERS threads
 * take requests off /dev/fuse, move the data (a memory-backed file: only modelled
 * time is spent) and hand each read and write to the model, which replies when its
 * time is done. A read of MOUNT/stats gives the model's counters (JSON).
 *
 * Usage: iotape-array MOUNTPOINT BACKING KEY=VALUE...  (keys: see `params` below)
 * Prints "ready" once mounted; serves until unmounted. SIGUSR1 serves at memory
 * speed (making a database), SIGUSR2 models again.
 *
 *        iotape-array --replay SIZE_BYTES KEY=VALUE...
 * Offline, no FUSE: the model of a disk of SIZE_BYTES fed the requests on stdin, one
 * "T_NS OP OFFSET BYTES" a line (OP 0 read, 1 write; in arrival order, times from
 * 0), on its own clock; writes the tier's and read cache's decisions to stdout
 * (arraybase.c), then the counters. A recorded trace through the array's policies,
 * for tests/analyzer/test_lab_array_decisions.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arraymodel.h"
#include "fusefile.h"

#define READERS 4

static const struct {
	const char *key;
	double *v;
} params[] = {
	{"disks", &P.disks}, {"chunk_kb", &P.chunk_kb}, {"rpm", &P.rpm},
	{"settle_read_ms", &P.settle_read_ms}, {"avg_read_ms", &P.avg_read_ms},
	{"settle_write_ms", &P.settle_write_ms}, {"avg_write_ms", &P.avg_write_ms},
	{"mb_s", &P.mb_s}, {"ack_ms", &P.ack_ms}, {"cache_mb_s", &P.cache_mb_s},
	{"dirty_mb", &P.dirty_mb}, {"watermark", &P.watermark},
	{"destage_delay_ms", &P.destage_delay_ms}, {"destage_depth", &P.destage_depth},
	{"ncq_window", &P.ncq_window}, {"age_weight", &P.age_weight}, {"seed", &P.seed},
	{"tier_mb", &P.tier_mb}, {"tier_unit_kb", &P.tier_unit_kb}, {"tier_stats_s", &P.tier_stats_s},
	{"tier_migrate_s", &P.tier_migrate_s}, {"tier_half_life_s", &P.tier_half_life_s},
	{"ssd_read_ms", &P.ssd_read_ms}, {"ssd_write_ms", &P.ssd_write_ms}, {"ssd_mb_s", &P.ssd_mb_s},
	{"ssd_parallel", &P.ssd_parallel}, {"cache_ssd_mb", &P.cache_ssd_mb},
	{"rt_priority", &P.rt_priority}, {"reader_batch", &P.reader_batch},
};

static int backing;
static atomic_int modelled = 1;

/* ---- readers: take requests off /dev/fuse, move the data, hand them to the model ---- */
static void on_signal(int sig)
{
	atomic_store(&modelled, sig == SIGUSR2);
}

static void io(struct fuse_in_header *in, char *arg, double recv)
{
	struct host *h = calloc(1, sizeof *h);
	if (!h)
		exit(1);
	h->unique = in->unique;
	h->t_recv = recv;
	h->arrive = mono();
	if (in->opcode == FUSE_READ) {
		struct fuse_read_in *r = (void *)arg;
		h->off = r->offset;
		h->len = r->size > FF_MAX_IO ? FF_MAX_IO : r->size;
		if (!(h->data = malloc(h->len ? h->len : 1)))
			exit(1);
		ssize_t got = pread(backing, h->data, h->len, (off_t)h->off);
		h->err = got < 0 ? errno : 0;
		h->got = got < 0 ? 0 : (size_t)got;
	} else {
		struct fuse_write_in *w = (void *)arg;
		h->write = 1;
		h->off = w->offset;
		h->len = w->size;
		ssize_t put = pwrite(backing, arg + sizeof *w, w->size, (off_t)w->offset);
		h->err = put < 0 ? errno : 0;
		if (put >= 0)
			h->len = (uint32_t)put;
	}
	if (!atomic_load(&modelled) || h->err || !h->len) {
		/* At memory speed (or failed): replied at once, outside the model and its counts. */
		struct fuse_write_out o = {.size = h->len};
		if (h->write)
			ff_reply(h->unique, h->err, &o, sizeof o);
		else
			ff_reply(h->unique, h->err, h->data, h->got);
		free(h->data);
		free(h);
		return;
	}
	h->t_submit = host_trace ? mono() : 0;
	model_submit(h);
}

static void *reader(void *arg)
{
	(void)arg;
	char *buf = malloc(FF_BUF);
	if (!buf)
		exit(1);
	for (;;) {
		int got = ff_next(buf);
		if (got <= 0)
			exit(got < 0);
		double recv = host_trace ? mono() : 0;
		struct fuse_in_header *h = (void *)buf;
		char *a = buf + sizeof *h;
		if ((h->opcode == FUSE_READ || h->opcode == FUSE_WRITE) && h->nodeid == FF_DISK_INO)
			io(h, a, recv);
		else if (ff_other(h, a))
			exit(0);
	}
	return NULL;
}

/* IOTAPE_ARRAY_TRACE=DIR (a debug option, off by default): each reply's host-path
 * times to DIR/array-PID.trace (arraymodel.h, host_trace), for
 * bench/array_host_path.py to set beside a recording of the same run. Flushed as the
 * buffer fills and at exit (the mount gone). */
static int open_host_trace(void)
{
	const char *dir = getenv("IOTAPE_ARRAY_TRACE");
	if (!dir || !*dir)
		return 0;
	char path[4096];
	snprintf(path, sizeof path, "%s/array-%d.trace", dir, (int)getpid());
	if (!(host_trace = fopen(path, "w"))) {
		fprintf(stderr, "iotape-array: IOTAPE_ARRAY_TRACE: %s: %s\n", path, strerror(errno));
		return 1;
	}
	setvbuf(host_trace, NULL, _IOFBF, 1 << 20);
	return 0;
}

/* The model's thread at real-time round robin (rt_priority > 0; array_model.toml):
 * set on the main thread just before it starts the model's thread (which inherits it)
 * and taken back before the FUSE readers start, so they stay at the default
 * scheduling: with the readers at real-time priority too, completions waited longer
 * (measured; most likely a woken reader preempts the loop device's submitter before
 * it lets go of the request: docs/hybrid.md, "The host's path"). Without the privilege
 * the server runs on at the default scheduling and says so (stats: rt_priority 0). */
static void realtime(int on)
{
	if (P.rt_priority <= 0)
		return;
	struct sched_param sp = {.sched_priority = on ? (int)P.rt_priority : 0};
	if (sched_setscheduler(0, on ? SCHED_RR : SCHED_OTHER, &sp)) {
		fprintf(stderr, "iotape-array: SCHED_RR %d: %s; at the default scheduling\n", (int)P.rt_priority,
			strerror(errno));
		return;
	}
	if (on)
		rt_priority = sp.sched_priority;
}

static int set_param(const char *kv)
{
	const char *eq = strchr(kv, '=');
	if (!eq)
		return -1;
	for (size_t i = 0; i < sizeof params / sizeof *params; i++)
		if (strlen(params[i].key) == (size_t)(eq - kv) && !strncmp(kv, params[i].key, (size_t)(eq - kv))) {
			char *end;
			*params[i].v = strtod(eq + 1, &end);
			return *end ? -1 : 0;
		}
	return -1;
}

static int replay(const char *size_arg)
{
	char *end;
	unsigned long long size = strtoull(size_arg, &end, 10);
	if (*end || !size) {
		fprintf(stderr, "iotape-array: --replay %s: not a size in bytes\n", size_arg);
		return 2;
	}
	int bad = model_setup(size);
	if (bad)
		return bad;
	decisions = stdout;
	model_replay_start();
	unsigned long long t_ns, off, len;
	int op;
	double last = 0;
	for (unsigned long n = 1;; n++) {
		int got = scanf("%llu %d %llu %llu", &t_ns, &op, &off, &len);
		if (got == EOF)
			break;
		double t = (double)t_ns / 1e9;
		if (got != 4 || op < 0 || op > 1 || !len || len > UINT32_MAX || off + len > size || t < last) {
			fprintf(stderr, "iotape-array: stdin line %lu: not T_NS OP OFFSET BYTES in time order, "
					"inside %llu bytes\n", n, size);
			return 2;
		}
		struct host *h = calloc(1, sizeof *h);
		if (!h)
			return 1;
		h->write = op;
		h->off = off;
		h->len = (uint32_t)len;
		h->arrive = last = t;
		model_replay_arrive(h);
	}
	/* The migrations due at the last request's interval, and the copies under way. */
	model_replay_until(last + (P.tier_migrate_s > 0 ? P.tier_migrate_s : 0) + 60);
	char buf[8192];
	fwrite(buf, 1, model_stats(buf, sizeof buf), stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "--replay")) {
		for (int i = 3; i < argc; i++)
			if (set_param(argv[i])) {
				fprintf(stderr, "iotape-array: %s: not KEY=NUMBER with a known key\n", argv[i]);
				return 2;
			}
		return replay(argv[2]);
	}
	if (argc < 3) {
		fprintf(stderr, "usage: %s MOUNTPOINT BACKING KEY=VALUE...\n", argv[0]);
		return 2;
	}
	for (int i = 3; i < argc; i++)
		if (set_param(argv[i])) {
			fprintf(stderr, "iotape-array: %s: not KEY=NUMBER with a known key\n", argv[i]);
			return 2;
		}
	struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	backing = open(argv[2], O_RDWR);
	struct stat st;
	if (backing < 0 || fstat(backing, &st)) {
		fprintf(stderr, "iotape-array: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	int bad = model_setup((uint64_t)st.st_size);
	if (bad)
		return bad;
	if (open_host_trace())
		return 1;
	if (ff_mount(argv[1], "iotape-array", (uint64_t)st.st_size, model_stats))
		return 1;
	realtime(1);
	int started = model_start();
	realtime(0);
	if (started)
		return 1;
	if (P.reader_batch > 0) {
		/* The readers inherit it: no preemption on their wakeup, a fair share otherwise
		 * (array_model.toml reader_batch). Before they start, so "ready" means set. */
		struct sched_param sp = {0};
		if (sched_setscheduler(0, SCHED_BATCH, &sp))
			fprintf(stderr, "iotape-array: SCHED_BATCH: %s; readers at the default\n", strerror(errno));
	}
	return ff_serve(READERS, reader, "iotape-array");
}
