// SPDX-License-Identifier: Apache-2.0
/* iotape-rec: loads the iotape BPF programs, drains their ring buffer into a
 * trace file (docs/trace-format.md) and reports progress as JSON lines.
 * `iotape record` (Python) runs it; see usage() for the command line. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "iotape_record.h"
#include "iotape.h"
#include "iotape.skel.h"
#include "labels.h"
#include "control.h"
#include "cpurings.h"
#include "rotation.h"
#include "snapshot.h"
#include "tracewriter.h"
#include "trigger.h"

#define NSEC_PER_SEC 1000000000ull
#define SETTLE_MS 100

static struct opts {
	const char *out, *meta, *extents_path;
	uint32_t devs[IOTAPE_MAX_DEVS];
	uint8_t dev_is_part[IOTAPE_MAX_DEVS];
	int n_devs;
	uint32_t pids[IOTAPE_MAX_PIDS];
	int n_pids;
	uint64_t cgroups[IOTAPE_MAX_CGROUPS];
	int n_cgroups;
	char comms[IOTAPE_MAX_COMMS][IOTAPE_COMM_LEN];
	int n_comms;
	uint32_t op_mask;
	double duration_s;
	struct rotation rot;
	uint32_t chunk_records, ring_mb, inflight, status_ms, drain_ms;
	/* The drain timer: the ring buffer is read every timer_ms, or sooner when
	 * the kernel side wakes the loader (a ring past half full). */
	uint32_t timer_ms;
	int codec;			/* IOTAPE_CODEC_*, 0: plain chunks */
	bool bpf_stats;
	bool wakes;			/* --wakes: wake records (a version 3 file) */
	/* The per-CPU rings, from --ring-mb and --wakes (configure()); ncpu 0: none. */
	int ncpu;
	uint32_t cpu_slots;
	/* The flight recorder: snapshots (--snapshot-*), their triggers. */
	uint64_t snap_before_ns, snap_after_ns;
	bool snapshots;
	struct trigger trig[TRIG_MAX];
	int n_trig;
} o = {
	.chunk_records = 8192,
	.codec = TW_CODEC_AUTO,
	.ring_mb = 32,
	.timer_ms = 10,
	.inflight = 65536,
	.status_ms = 1000,
	.drain_ms = 2000,
};

/* Everything the drain callback needs. */
static struct state {
	struct tracewriter tw;
	uint64_t mono_start;
	struct labels labels;
	uint64_t short_records;
	uint64_t unseen_at_stop;	/* records written by in_flight() at stop */
	/* The current file of a rotated capture (--rotate-*): its name, start, and
	 * the counters when it started, so that its footer counts its own losses. */
	char path[sizeof(o.rot.stem) + 16];
	uint64_t file_start, base_cnt[IOTAPE_CNT_MAX], base_misses;
	uint64_t prior_events, prior_chunks;	/* in the files before it */
	uint64_t file_wakes, prior_wakes;	/* --wakes: wake records, this file's and before */
	uint64_t file_sched, prior_sched;	/* --wakes: sched records, likewise */
	uint64_t wall_start, seen_misses;	/* seen_misses: by the last footer_json() */
	int rot_err;				/* errno of a rotation that failed, or 0 */
	const char *rot_what;			/* what it could not do */
	char rot_failed[sizeof(o.rot.stem) + 16];	/* the file it could not make */
	char reserve[sizeof(o.rot.stem) + 32];	/* room kept for the last footer */
	struct snapshot snap;
	int ctl_fd;				/* the control socket, or -1 */
	char ctl_path[sizeof(o.rot.stem) + 8];
} st = { .ctl_fd = -1 };

/* A disk that fills exactly at a chunk's end leaves no room for the footer: a
 * small file beside the output holds that room, and goes when the footer needs it
 * (or at exit). Best effort: a directory already too full to hold it records all
 * the same, as before. */
#define RESERVE_BYTES (8 * 1024) /* a footer (<= 4 KiB) across two pages */

static void reserve_make(const char *out)
{
	static const char zero[4096];
	const char *slash = strrchr(out, '/');
	int fd, len = slash ? (int)(slash - out + 1) : 0;

	snprintf(st.reserve, sizeof(st.reserve), "%.*s.%s.reserve", len, out,
		 slash ? slash + 1 : out);
	fd = open(st.reserve, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		st.reserve[0] = 0;
		return;
	}
	for (int i = 0; i < RESERVE_BYTES / (int)sizeof(zero); i++)
		if (write(fd, zero, sizeof(zero)) != (ssize_t)sizeof(zero))
			break;
	fsync(fd);
	close(fd);
}

/* Frees the reserve; true if there was one. */
static bool reserve_free(void)
{
	bool had = st.reserve[0] && unlink(st.reserve) == 0;

	st.reserve[0] = 0;
	return had;
}

static volatile sig_atomic_t stop_signal, n_signals, snap_signal, hup_signal;

static const char *const op_names[] = {
	[IOTAPE_OP_READ] = "read", [IOTAPE_OP_WRITE] = "write",
	[IOTAPE_OP_FLUSH] = "flush", [IOTAPE_OP_DISCARD] = "discard",
	[IOTAPE_OP_WRITE_ZEROES] = "write-zeroes", [IOTAPE_OP_OTHER] = "other",
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: iotape-rec -o OUT.iot --meta META.json --dev MAJ:MIN[:part] [--dev ...]\n"
"                  [--pid N]... [--cgroup ID]... [--comm NAME]...\n"
"                  [--op read|write|flush|discard|write-zeroes|other]...\n"
"                  [--rule PREFIX:READ_STREAM:WRITE_STREAM]... [--extents FILE]\n"
"                  [--duration SEC] [--chunk-records N] [--ring-mb N] [--inflight N]\n"
"                  [--bpf-stats] [--status-interval-ms N] [--drain-ms N]\n"
"                  [--compress auto|zstd|lz4|none] [--wakes] [--timer-ms N]\n"
"                  [--rotate-bytes N] [--rotate-ms N] [--keep N] [--keep-bytes N]\n"
"                  [--max-bytes N] [--keep-ms N]\n"
"                  [--snapshot-before-ms N --snapshot-after-ms N] [--trigger EXPR]...\n"
"       iotape-rec --check-trigger EXPR\n"
"Records every completed block request on the devices into OUT.iot.\n"
"Stops on SIGINT/SIGTERM (SIGUSR2: the traced command exited) or after --duration,\n"
"then waits up to --drain-ms (default 2000) for requests still in flight to complete.\n"
"--rotate-*: OUT-000000.iot, OUT-000001.iot, ... each a complete trace; --keep,\n"
"--keep-bytes and --keep-ms delete the oldest; --max-bytes stops the capture when its\n"
"files reach N; SIGHUP starts the next file. --snapshot-*: SIGUSR1, a request on the\n"
"control socket OUT.ctl, or a --trigger links the files around it into\n"
"OUT.snapshots/ (recorder/snapshot.h, recorder/trigger.h). --wakes: also a wake\n"
"record whenever a thread that submitted traced I/O wakes another, and a sched\n"
"record per request (its thread's run-queue wait, CPU time; a version 4 file;\n"
"docs/trace-format.md). --timer-ms: the drain timer (default 10); the kernel side\n"
"also wakes the loader when a ring is half full.\n");
}

static void errorf(const char *fmt, ...)
{
	va_list ap;

	fputs("iotape-rec: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

#define usage_error(...) do { errorf(__VA_ARGS__); exit(2); } while (0)

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	/* libbpf explains load failures (verifier log) at WARN; the rest is noise. */
	if (level > LIBBPF_WARN && !getenv("IOTAPE_REC_DEBUG"))
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static void on_signal(int sig)
{
	if (sig == SIGUSR1) {
		snap_signal = 1;
		return;
	}
	if (sig == SIGHUP) {
		hup_signal = 1;
		return;
	}
	if (!stop_signal)
		stop_signal = sig;
	n_signals++;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

static uint64_t parse_u64(const char *opt, const char *s, uint64_t max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end || *s == '-' || v > max)
		usage_error("%s: '%s' is not a number in 0..%" PRIu64, opt, s, max);
	return v;
}

static void parse_dev(const char *s)
{
	unsigned int maj, min;
	char part[8] = "";
	int n = 0;

	if (o.n_devs == IOTAPE_MAX_DEVS)
		usage_error("--dev: at most %d devices", IOTAPE_MAX_DEVS);
	if (sscanf(s, "%u:%u%n:%7s%n", &maj, &min, &n, part, &n) < 2 || s[n] ||
	    (part[0] && strcmp(part, "part")) || maj >= (1u << 12) || min >= (1u << 20))
		usage_error("--dev: '%s' is not MAJ:MIN or MAJ:MIN:part", s);
	o.devs[o.n_devs] = maj << 20 | min;
	o.dev_is_part[o.n_devs++] = part[0] != 0;
}

static void parse_op(const char *s)
{
	for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++) {
		if (!strcmp(s, op_names[i])) {
			o.op_mask |= 1u << i;
			return;
		}
	}
	usage_error("--op: unknown operation '%s' (read, write, flush, discard, write-zeroes, other)", s);
}

static const char *const codec_names[] = {
	[0] = "none", [IOTAPE_CODEC_ZSTD] = "zstd", [IOTAPE_CODEC_LZ4] = "lz4",
};

static const char *codec_name(int codec)
{
	return codec == TW_CODEC_AUTO ? "auto" : codec_names[codec];
}

static int parse_codec(const char *arg)
{
	for (size_t i = 0; i < sizeof(codec_names) / sizeof(codec_names[0]); i++)
		if (codec_names[i] && !strcmp(arg, codec_names[i]))
			return i;
	if (strcmp(arg, "auto"))
		usage_error("--compress: '%s' is not auto, zstd, lz4 or none", arg);
	return TW_CODEC_AUTO;
}

enum { O_META = 256, O_DEV, O_PID, O_CGROUP, O_COMM, O_OP, O_RULE, O_EXTENTS,
       O_DURATION, O_CHUNK, O_RING, O_INFLIGHT, O_STATS, O_STATUS, O_DRAIN,
       O_ROT_BYTES, O_ROT_MS, O_KEEP, O_KEEP_BYTES, O_MAX_BYTES, O_COMPRESS,
       O_KEEP_MS, O_SNAP_BEFORE, O_SNAP_AFTER, O_TRIGGER, O_CHECK_TRIGGER, O_WAKES,
       O_TIMER };

/* The flight recorder's options: snapshots and their triggers. */
static void parse_flight(int opt, const char *arg)
{
	char msg[256];

	switch (opt) {
	case O_SNAP_BEFORE:
		o.snap_before_ns = parse_u64("--snapshot-before-ms", arg, UINT64_MAX / 1000000) * 1000000;
		o.snapshots = true;
		break;
	case O_SNAP_AFTER:
		o.snap_after_ns = parse_u64("--snapshot-after-ms", arg, UINT64_MAX / 1000000) * 1000000;
		o.snapshots = true;
		break;
	case O_TRIGGER:
	case O_CHECK_TRIGGER:
		if (o.n_trig == TRIG_MAX)
			usage_error("--trigger: at most %d", TRIG_MAX);
		if (trig_parse(&o.trig[o.n_trig], arg, msg, sizeof(msg)))
			usage_error("%s", msg);
		if (opt == O_CHECK_TRIGGER)
			exit(0);
		o.n_trig++;
		break;
	default: usage_error("unknown option (see --help)");
	}
}

/* The options of a rotated, bounded capture (OPT is parse_args' code for them). */
static void parse_rotation(int opt, const char *arg)
{
	switch (opt) {
	case O_ROT_BYTES:
		o.rot.every_bytes = parse_u64("--rotate-bytes", arg, UINT64_MAX);
		if (o.rot.every_bytes < 4096)
			usage_error("--rotate-bytes: at least 4096");
		break;
	case O_ROT_MS:
		o.rot.every_ns = parse_u64("--rotate-ms", arg, UINT64_MAX / 1000000) * 1000000;
		if (!o.rot.every_ns)
			usage_error("--rotate-ms: at least 1");
		break;
	case O_KEEP:
		o.rot.keep = parse_u64("--keep", arg, UINT32_MAX);
		if (!o.rot.keep)
			usage_error("--keep: at least 1 (the file being written)");
		break;
	case O_KEEP_BYTES: o.rot.keep_bytes = parse_u64("--keep-bytes", arg, UINT64_MAX); break;
	case O_MAX_BYTES: o.rot.max_bytes = parse_u64("--max-bytes", arg, UINT64_MAX); break;
	case O_KEEP_MS:
		o.rot.keep_ns = parse_u64("--keep-ms", arg, UINT64_MAX / 1000000) * 1000000;
		break;
	default: parse_flight(opt, arg);
	}
}

static void parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "meta", required_argument, NULL, O_META },
		{ "dev", required_argument, NULL, O_DEV },
		{ "pid", required_argument, NULL, O_PID },
		{ "cgroup", required_argument, NULL, O_CGROUP },
		{ "comm", required_argument, NULL, O_COMM },
		{ "op", required_argument, NULL, O_OP },
		{ "rule", required_argument, NULL, O_RULE },
		{ "extents", required_argument, NULL, O_EXTENTS },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "chunk-records", required_argument, NULL, O_CHUNK },
		{ "ring-mb", required_argument, NULL, O_RING },
		{ "inflight", required_argument, NULL, O_INFLIGHT },
		{ "bpf-stats", no_argument, NULL, O_STATS },
		{ "status-interval-ms", required_argument, NULL, O_STATUS },
		{ "drain-ms", required_argument, NULL, O_DRAIN },
		{ "compress", required_argument, NULL, O_COMPRESS },
		{ "rotate-bytes", required_argument, NULL, O_ROT_BYTES },
		{ "rotate-ms", required_argument, NULL, O_ROT_MS },
		{ "keep", required_argument, NULL, O_KEEP },
		{ "keep-bytes", required_argument, NULL, O_KEEP_BYTES },
		{ "max-bytes", required_argument, NULL, O_MAX_BYTES },
		{ "keep-ms", required_argument, NULL, O_KEEP_MS },
		{ "snapshot-before-ms", required_argument, NULL, O_SNAP_BEFORE },
		{ "snapshot-after-ms", required_argument, NULL, O_SNAP_AFTER },
		{ "trigger", required_argument, NULL, O_TRIGGER },
		{ "check-trigger", required_argument, NULL, O_CHECK_TRIGGER },
		{ "wakes", no_argument, NULL, O_WAKES },
		{ "timer-ms", required_argument, NULL, O_TIMER },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	char *end, msg[256];
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': o.out = optarg; break;
		case O_META: o.meta = optarg; break;
		case O_DEV: parse_dev(optarg); break;
		case O_PID:
			if (o.n_pids == IOTAPE_MAX_PIDS)
				usage_error("--pid: at most %d pids", IOTAPE_MAX_PIDS);
			o.pids[o.n_pids++] = parse_u64("--pid", optarg, INT_MAX);
			break;
		case O_CGROUP:
			if (o.n_cgroups == IOTAPE_MAX_CGROUPS)
				usage_error("--cgroup: at most %d cgroups", IOTAPE_MAX_CGROUPS);
			o.cgroups[o.n_cgroups++] = parse_u64("--cgroup", optarg, UINT64_MAX);
			break;
		case O_COMM:
			if (o.n_comms == IOTAPE_MAX_COMMS)
				usage_error("--comm: at most %d names", IOTAPE_MAX_COMMS);
			if (!optarg[0] || strlen(optarg) >= IOTAPE_COMM_LEN)
				usage_error("--comm: '%s' must be 1..15 characters (the kernel's comm)", optarg);
			strncpy(o.comms[o.n_comms++], optarg, IOTAPE_COMM_LEN);
			break;
		case O_OP: parse_op(optarg); break;
		case O_RULE:
			if (labels_add_rule(&st.labels, optarg, msg, sizeof(msg)))
				usage_error("%s", msg);
			break;
		case O_EXTENTS: o.extents_path = optarg; break;
		case O_DURATION:
			o.duration_s = strtod(optarg, &end);
			if (end == optarg || *end || !(o.duration_s > 0) || o.duration_s > 1e9)
				usage_error("--duration: '%s' is not a positive number of seconds", optarg);
			break;
		case O_CHUNK:
			o.chunk_records = parse_u64("--chunk-records", optarg, IOTAPE_MAX_CHUNK_RECORDS);
			if (!o.chunk_records)
				usage_error("--chunk-records: must be 1..%d", IOTAPE_MAX_CHUNK_RECORDS);
			break;
		case O_RING:
			o.ring_mb = parse_u64("--ring-mb", optarg, 1024);
			/* The kernel wants a power-of-two ring size. */
			if (!o.ring_mb || (o.ring_mb & (o.ring_mb - 1)))
				usage_error("--ring-mb: %s is not a power of two in 1..1024", optarg);
			break;
		case O_INFLIGHT:
			o.inflight = parse_u64("--inflight", optarg, 1u << 24);
			if (o.inflight < 64)
				usage_error("--inflight: must be 64..%u", 1u << 24);
			break;
		case O_STATS: o.bpf_stats = true; break;
		case O_WAKES: o.wakes = true; break;
		case O_COMPRESS: o.codec = parse_codec(optarg); break;
		case O_STATUS:
			o.status_ms = parse_u64("--status-interval-ms", optarg, 3600000);
			if (!o.status_ms)
				usage_error("--status-interval-ms: must be at least 1");
			break;
		case O_DRAIN:
			o.drain_ms = parse_u64("--drain-ms", optarg, 600000);
			break;
		case O_TIMER:
			o.timer_ms = parse_u64("--timer-ms", optarg, 60000);
			if (!o.timer_ms)
				usage_error("--timer-ms: must be 1..60000");
			break;
		default:
			parse_rotation(c, optarg);
			break;
		case 'h': usage(stdout); exit(0);
		case ':': usage_error("%s needs a value", argv[optind - 1]);
		case '?': usage_error("unknown option '%s' (see --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (!o.out)
		usage_error("-o OUT.iot is required");
	if (!o.meta)
		usage_error("--meta META.json is required");
	if (!o.n_devs)
		usage_error("--dev is required: name the devices to trace");
	if (!o.op_mask)
		o.op_mask = 0xffffffff;
	if ((o.rot.keep || o.rot.keep_bytes || o.rot.keep_ns) && !rot_enabled(&o.rot))
		usage_error("--keep, --keep-bytes and --keep-ms need --rotate-bytes or --rotate-ms");
	if ((o.snapshots || o.n_trig) && !rot_enabled(&o.rot))
		usage_error("--snapshot-* and --trigger need --rotate-bytes or --rotate-ms");
	if (o.n_trig && !o.snapshots)
		usage_error("--trigger needs --snapshot-after-ms (what a trigger saves)");
	if (o.rot.keep_ns && o.snap_before_ns > o.rot.keep_ns)
		usage_error("--snapshot-before-ms: more than --keep-ms keeps on disk");
	if (rot_init(&o.rot, o.out))
		usage_error("-o: '%s' is too long a name", o.out);
}

/* META.json holds the header's members beyond the ones only we know. */
static char *read_meta(const char *path, size_t *body_len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL, *p, *e;
	long len;

	if (!f) {
		errorf("%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		errorf("%s: cannot read: %s", path, strerror(errno));
		goto fail;
	}
	if (len > IOTAPE_MAX_JSON_BYTES - 4096) {
		errorf("%s: %ld bytes is more than a header may hold", path, len);
		goto fail;
	}
	buf = malloc(len + 1);
	if (!buf || fread(buf, 1, len, f) != (size_t)len) {
		errorf("%s: cannot read: %s", path, strerror(errno ? errno : EIO));
		goto fail;
	}
	buf[len] = 0;
	for (p = buf; *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'; p++)
		;
	for (e = buf + len; e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'); e--)
		;
	if (*p != '{' || e - p < 2 || e[-1] != '}') {
		errorf("%s: line 1: not a JSON object", path);
		goto fail;
	}
	*body_len = e - p - 1;
	memmove(buf, p + 1, *body_len);
	buf[*body_len] = 0;
	fclose(f);
	return buf;
fail:
	fclose(f);
	free(buf);
	return NULL;
}

/* blk_status_t (include/linux/blk_types.h, blk_errors[]) to -errno. */
static int16_t blk_errno(uint8_t sts)
{
	static const int16_t map[] = {
		[0] = 0, [1] = EOPNOTSUPP, [2] = ETIMEDOUT, [3] = ENOSPC, [4] = ENOLINK,
		[5] = EREMOTEIO, [6] = EBADE, [7] = ENODATA, [8] = EILSEQ, [9] = ENOMEM,
		[10] = EIO, [11] = EREMCHG, [12] = EAGAIN, [13] = EBUSY, [14] = ETOOMANYREFS,
		[15] = EOVERFLOW, [16] = ENODEV, [17] = ETIME, [19] = EINVAL,
	};

	if (!sts)
		return 0;
	if (sts < sizeof(map) / sizeof(map[0]) && map[sts])
		return -map[sts];
	return -EIO;
}

static uint64_t rel(uint64_t t)
{
	/* 0 means unknown and stays so; the kernel leaves out pre-start times. */
	return t > st.mono_start ? t - st.mono_start : 0;
}

struct run;
static struct run *running;	/* the capture, for a rotation at a chunk's end */
static int rotate(struct run *r, uint64_t now);
static uint64_t cur_size(void);

#define ROT_GRACE_NS NSEC_PER_SEC	/* how long a record may take to be read */

/* The start of the --rotate DURATION window that holds monotonic time T, at or
 * after the current file's start: files cover whole windows of the capture. */
static uint64_t window_of(uint64_t t)
{
	return st.file_start + (t - st.file_start) / o.rot.every_ns * o.rot.every_ns;
}

/* The next file, from NOW, while records are being read. 0, or -ECANCELED. */
static int rotate_in_drain(uint64_t now)
{
	if (rotate(running, now))
		return -ECANCELED;	/* finish() reports what failed */
	/* A snapshot holds every file of its window: link this one before a drain
	 * of many files lets --keep prune it. */
	if (st.snap.active)
		snap_link(&st.snap, &o.rot);
	return 0;
}

/* Commits the record in the open chunk. The file rotates here, not at the drain's
 * end: one drain after the loader was kept off the CPU (or in a slow fdatasync) can
 * hold most of the rings, and its file would outgrow --rotate SIZE by all of it, or
 * hold records past its DURATION window. A record completed past the window goes
 * into the next file, whose window starts at the boundary; a chunk that brings the
 * file to SIZE closes it. */
static int commit(void)
{
	struct iotape_record *r = tw_slot(&st.tw);
	int err;

	if (running && o.rot.every_ns && !st.rot_err && r->ts_complete_ns &&
	    st.mono_start + r->ts_complete_ns >= st.file_start + o.rot.every_ns) {
		struct iotape_record keep = *r;

		if ((err = rotate_in_drain(window_of(st.mono_start + r->ts_complete_ns))))
			return err;
		*tw_slot(&st.tw) = keep;
	}
	err = tw_commit(&st.tw);
	if (err || st.tw.n || !running || !o.rot.every_bytes || st.rot_err ||
	    cur_size() < o.rot.every_bytes)
		return err;
	return rotate_in_drain(clock_ns(CLOCK_MONOTONIC));
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct iotape_record *r = tw_slot(&st.tw);

	(void)ctx;
	if (size < sizeof(*r)) {
		st.short_records++;
		return 0;
	}
	memcpy(r, data, sizeof(*r));
	r->ts_queue_ns = rel(r->ts_queue_ns);
	r->ts_issue_ns = rel(r->ts_issue_ns);
	r->ts_complete_ns = rel(r->ts_complete_ns);
	if (r->op == IOTAPE_WAKE_OP || r->op == IOTAPE_SCHED_OP) {
		/* Not a request: no stream, no trigger. */
		if (r->op == IOTAPE_WAKE_OP)
			st.file_wakes++;
		else
			st.file_sched++;
		return commit();
	}
	r->error = blk_errno((uint8_t)r->error);
	r->stream = labels_active(&st.labels) ? labels_stream(&st.labels, r) : 0;
	for (int i = 0; i < o.n_trig; i++)
		trig_add(&o.trig[i], r);
	/* A failed write stops ring_buffer__consume(); the caller reports it. */
	return commit();
}

static void read_counters(struct iotape_bpf *skel, uint64_t sum[IOTAPE_CNT_MAX])
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t vals[ncpu > 0 ? ncpu : 1];

	for (uint32_t i = 0; i < IOTAPE_CNT_MAX; i++) {
		sum[i] = 0;
		if (ncpu <= 0 || bpf_map_lookup_elem(bpf_map__fd(skel->maps.counters), &i, vals))
			continue;
		for (int c = 0; c < ncpu; c++)
			sum[i] += vals[c];
	}
}

static int prog_info(struct bpf_program *p, struct bpf_prog_info *info)
{
	__u32 len = sizeof(*info);

	memset(info, 0, sizeof(*info));
	if (!bpf_program__autoload(p) || bpf_program__fd(p) < 0)
		return -1;
	return bpf_obj_get_info_by_fd(bpf_program__fd(p), info, &len);
}

/* The kernel skips a tracing program that would nest in itself on one CPU
 * (a completion in soft-IRQ interrupting one in process context); a skipped
 * completion is a lost record. */
static uint64_t complete_misses(struct iotape_bpf *skel)
{
	struct bpf_prog_info info;

	return prog_info(skel->progs.on_complete, &info) ? 0 : info.recursion_misses;
}

/* Whether the kernel has nothing dispatched and unfinished on DEV (a whole
 * disk, the record's encoding), by its own count, asked once per disk per call.
 * Without I/O statistics on the queue the count is always 0: not idle then. */
struct idle_disks {
	uint32_t dev[IOTAPE_MAX_DEVS];
	bool idle[IOTAPE_MAX_DEVS];
	int n;
};

static bool read_two(const char *path, unsigned long long *a, unsigned long long *b)
{
	FILE *f = fopen(path, "r");
	int n;

	if (!f)
		return false;
	n = fscanf(f, "%llu %llu", a, b);
	fclose(f);
	return n >= 1;
}

static bool disk_idle(struct idle_disks *c, uint32_t dev)
{
	unsigned long long rd = 1, wr = 1, stat = 0, unused;
	char path[80];
	bool idle;

	for (int i = 0; i < c->n; i++)
		if (c->dev[i] == dev)
			return c->idle[i];
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/queue/iostats", dev >> 20,
		 dev & 0xfffffu);
	idle = read_two(path, &stat, &unused) && stat;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/inflight", dev >> 20, dev & 0xfffffu);
	idle = idle && read_two(path, &rd, &wr) && rd == 0 && wr == 0;
	if (c->n < IOTAPE_MAX_DEVS) {
		c->dev[c->n] = dev;
		c->idle[c->n++] = idle;
	}
	return idle;
}

/* A request we hold that was dispatched on a disk where the kernel has nothing
 * in flight has completed without block_rq_complete reaching us. */
static bool completed_unseen(struct idle_disks *c, const struct iotape_inflight *e)
{
	return e->ts_issue && disk_idle(c, e->dev);
}

/* The record of such a request, as the BPF program's recover() writes it at tag
 * reuse: flagged, with NOW as the latest its completion can have been. */
static int write_unseen(const struct iotape_inflight *e, uint64_t now)
{
	struct iotape_record *r = tw_slot(&st.tw);

	memset(r, 0, sizeof(*r));
	r->ts_queue_ns = rel(e->ts_queue);
	r->ts_issue_ns = rel(e->ts_issue);
	r->ts_complete_ns = rel(now);
	r->offset = e->sector * 512;
	r->dev = e->dev;
	r->bytes = e->bytes;
	r->flags = e->flags | IOTAPE_FLAG_COMPLETE_UNSEEN;
	r->op = e->op;
	r->pid = e->pid;
	r->tid = e->tid;
	r->cgroup_id = e->cgroup_id;
	memcpy(r->comm, e->comm, sizeof(r->comm));
	r->stream = labels_active(&st.labels) ? labels_stream(&st.labels, r) : 0;
	return tw_commit(&st.tw);
}

/* Requests the programs saw start that have not completed: owned slots plus
 * hash entries. The slot array is mapped read-only, so counting is a memory
 * scan; the hash walk is bounded because deletions can restart it. With
 * UNSEEN, also how many of them completed unseen; with WRITE, their records
 * are written (at stop, the programs detached). */
static uint64_t in_flight(struct iotape_bpf *skel, const volatile struct iotape_inflight *slots,
			  size_t n_slots, uint64_t *unseen, bool write)
{
	int fd = bpf_map__fd(skel->maps.inflight);
	__u64 key, next, *prev = NULL;
	struct iotape_inflight e;
	struct idle_disks idle = { .n = 0 };
	uint64_t n = 0, now = clock_ns(CLOCK_MONOTONIC);

	if (unseen)
		*unseen = 0;
	for (size_t i = 0; slots && i < n_slots; i++) {
		if (!slots[i].rq || slots[i].state) /* a flush sequence's tail: recorded */
			continue;
		n++;
		if (!unseen)
			continue;
		memcpy(&e, (const void *)&slots[i], sizeof(e));
		if (e.rq && completed_unseen(&idle, &e) && !(write && write_unseen(&e, now)))
			++*unseen;
	}
	for (uint32_t i = 0; i < o.inflight && !bpf_map_get_next_key(fd, prev, &next); i++) {
		key = next;
		prev = &key;
		n++;
		if (unseen && !bpf_map_lookup_elem(fd, &key, &e) && completed_unseen(&idle, &e) &&
		    !(write && write_unseen(&e, now)))
			++*unseen;
	}
	return n;
}

/* The footer JSON of the current file, or with TOTAL the whole capture's (the
 * "done" line; the same for a capture in one file). Returns its length. */
static int footer_json(char *buf, size_t size, struct iotape_bpf *skel, const uint64_t *now_cnt,
		       uint64_t end_mono, uint64_t end_wall, const char *reason, uint64_t left,
		       bool total)
{
	uint64_t cnt[IOTAPE_CNT_MAX], misses = complete_misses(skel);
	uint64_t start = total ? st.mono_start : st.file_start;
	char files[160] = "", wk[192] = "";

	struct bpf_program *progs[] = { skel->progs.on_io_start, skel->progs.on_rq_insert,
					skel->progs.on_issue, skel->progs.on_complete,
					skel->progs.on_rq_merge, skel->progs.on_waking };
	struct bpf_prog_info info;
	struct rusage ru;
	uint64_t bpf_ns = 0;
	char bpf[768] = "";
	size_t pl = 0;

	for (int i = 0; i < IOTAPE_CNT_MAX; i++)
		cnt[i] = now_cnt[i] - (total ? 0 : st.base_cnt[i]);
	st.seen_misses = misses;
	if (!total)
		misses -= st.base_misses;
	if (total && rot_enabled(&o.rot))
		snprintf(files, sizeof(files), ",\"files\":{\"first\":%u,\"last\":%u,"
			 "\"deleted\":%" PRIu64 ",\"bytes_written\":%" PRIu64 "}",
			 o.rot.oldest, o.rot.index, o.rot.deleted, o.rot.written + st.tw.good_end);
	if (o.wakes)
		snprintf(wk, sizeof(wk), ",\"wakes\":%" PRIu64 ",\"wakes_lost\":%" PRIu64
			 ",\"sched\":%" PRIu64 ",\"sched_lost\":%" PRIu64,
			 st.file_wakes + (total ? st.prior_wakes : 0), cnt[IOTAPE_CNT_WAKE_LOST],
			 st.file_sched + (total ? st.prior_sched : 0), cnt[IOTAPE_CNT_SCHED_LOST]);
	getrusage(RUSAGE_SELF, &ru);
	if (o.bpf_stats) {
		pl = snprintf(bpf, sizeof(bpf), ",\"bpf_progs\":{");
		for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
			if (prog_info(progs[i], &info))
				continue;
			bpf_ns += info.run_time_ns;
			pl += snprintf(bpf + pl, sizeof(bpf) - pl,
				       "%s\"%s\":{\"run_time_ns\":%llu,\"run_cnt\":%llu,"
				       "\"recursion_misses\":%llu}", bpf[pl - 1] == '{' ? "" : ",",
				       bpf_program__name(progs[i]), (unsigned long long)info.run_time_ns,
				       (unsigned long long)info.run_cnt,
				       (unsigned long long)info.recursion_misses);
		}
		snprintf(bpf + pl, sizeof(bpf) - pl, "},\"bpf_ns\":%" PRIu64, bpf_ns);
	}
	return snprintf(buf, size,
		"{\"events\":%" PRIu64 ",\"chunks\":%" PRIu64
		",\"lost\":{\"ringbuf_full\":%" PRIu64 ",\"inflight_full\":%" PRIu64
		",\"recursion\":%" PRIu64 "}"
		",\"completion_unseen\":%" PRIu64 ",\"unattributed\":%" PRIu64
		",\"pre_start\":%" PRIu64 ",\"in_flight_at_stop\":%" PRIu64
		",\"device_flushes\":{\"issued\":%" PRIu64 ",\"linked\":%" PRIu64 "}"
		",\"end_mono_ns\":%" PRIu64 ",\"end_wall_ns\":%" PRIu64
		",\"duration_ns\":%" PRIu64 ",\"stop_reason\":\"%s\""
		",\"cpu\":{\"user_s\":%.6f,\"sys_s\":%.6f%s}"
		",\"compression\":{\"codec\":\"%s\",\"raw_bytes\":%" PRIu64
		",\"stored_bytes\":%" PRIu64 ",\"cpu_ns\":%" PRIu64 "}"
		"%s%s,\"repaired\":false}",
		st.tw.events + (total ? st.prior_events : 0),
		st.tw.chunks + (total ? st.prior_chunks : 0), cnt[IOTAPE_CNT_RINGBUF_FULL],
		cnt[IOTAPE_CNT_INFLIGHT_FULL], misses,
		cnt[IOTAPE_CNT_COMPLETION_UNSEEN] + st.unseen_at_stop,
		cnt[IOTAPE_CNT_NO_START], cnt[IOTAPE_CNT_PRE_START],
		left, cnt[IOTAPE_CNT_DEVICE_FLUSH], cnt[IOTAPE_CNT_FLUSH_LINKED], end_mono, end_wall,
		end_mono - start, reason,
		ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
		ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, bpf,
		codec_name(o.codec),
		st.tw.raw_bytes, st.tw.stored_bytes, st.tw.compress_ns, files, wk);
}

/* Every file of a rotated capture has the capture's start (its records' times run
 * on across files) and its place in the sequence: "segment". */
static char *header_json(const char *meta_body, size_t meta_len, int version, uint64_t mono,
			 uint64_t wall, size_t *len)
{
	size_t cap = meta_len + 384;
	char *h = malloc(cap);
	char seg[128] = "";
	int n;

	if (!h)
		return NULL;
	if (rot_enabled(&o.rot))
		snprintf(seg, sizeof(seg), "\"segment\":{\"index\":%u,\"start_ns\":%" PRIu64 "},",
			 o.rot.index, st.file_start - mono);
	n = snprintf(h, cap,
		     "{\"format\":\"" IOTAPE_FILE_FORMAT "\",\"version\":%d,\"record\":{\"size\":%d,"
		     "\"layout_version\":%d},\"mono_start_ns\":%" PRIu64 ",\"wall_start_ns\":%" PRIu64
		     ",%s", version, IOTAPE_RECORD_SIZE, IOTAPE_LAYOUT_VERSION, mono, wall, seg);
	/* META "{}" has no members: drop the comma we just wrote. */
	if (strspn(meta_body, " \t\r\n}") == meta_len)
		n--;
	memcpy(h + n, meta_body, meta_len);
	*len = n + meta_len;
	h[*len] = 0;
	return h;
}

static void emit(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

static void configure(struct iotape_bpf *skel)
{
	struct iotape_bpf__rodata *ro = skel->rodata;
	/* block_io_start (6.5+) fires once per new request in the submitter's
	 * context; older kernels only have block_rq_insert for that. */
	bool io_start = libbpf_find_vmlinux_btf_id("block_io_start", BPF_TRACE_RAW_TP) >= 0;
	uint32_t shared_mb;
	int ncpu;

	ro->n_devs = o.n_devs;
	for (int i = 0; i < o.n_devs; i++) {
		ro->devs[i] = o.devs[i];
		ro->dev_is_part[i] = o.dev_is_part[i];
		ro->any_part |= o.dev_is_part[i];
	}
	ro->n_pids = o.n_pids;
	memcpy((void *)ro->pids, o.pids, sizeof(o.pids));
	ro->n_cgroups = o.n_cgroups;
	memcpy((void *)ro->cgroups, o.cgroups, sizeof(o.cgroups));
	ro->n_comms = o.n_comms;
	memcpy((void *)ro->comms, o.comms, sizeof(o.comms));
	ro->op_mask = o.op_mask;
	ro->wakes = o.wakes;
	bpf_program__set_autoload(skel->progs.on_waking, o.wakes);
	/* Completions go to per-CPU rings of --ring-mb in all (bpf/iotape.h), but
	 * with --wakes, whose wake and sched records the file keeps in time order
	 * among them; the shared ring buffer then holds only the rare record of a
	 * request completed unseen. */
	ncpu = libbpf_num_possible_cpus();
	if (!o.wakes && ncpu > 0) {
		o.cpu_slots = cpurings_slots((uint64_t)o.ring_mb << 20, ncpu);
		o.ncpu = ncpu;
		ro->cpu_slots = o.cpu_slots;
		/* Wake-ups from half full on (bpf/iotape.bpf.c, cpu_wake). */
		ro->cpu_wake_at = o.cpu_slots / 2 ? o.cpu_slots / 2 : 1;
		ro->cpu_wake_mask = o.cpu_slots / 8 ? o.cpu_slots / 8 - 1 : 0;
		bpf_map__set_max_entries(skel->maps.cpurecs, (uint32_t)ncpu * o.cpu_slots);
		bpf_map__set_max_entries(skel->maps.cpupos, (uint32_t)ncpu);
	}
	shared_mb = o.ncpu ? 1 : o.ring_mb;
	ro->ring_half = (uint64_t)shared_mb << 19;
	bpf_map__set_max_entries(skel->maps.events, shared_mb << 20);
	bpf_map__set_max_entries(skel->maps.slots, o.n_devs * IOTAPE_SLOTS_PER_DEV);
	bpf_map__set_max_entries(skel->maps.inflight, o.inflight);
	/* The floor variant without block_io_start (bpf/iotape.bpf.c, IOTAPE_FLOOR). */
	bpf_program__set_autoload(skel->progs.on_io_start,
				  io_start && IOTAPE_FLOOR != 3 && IOTAPE_FLOOR != 5);
	bpf_program__set_autoload(skel->progs.on_rq_insert, !io_start);
	bpf_program__set_autoload(skel->progs.on_issue, IOTAPE_FLOOR != 6);
}

/* Completion first, start last: a request started before its completion
 * program is attached would leave a stale in-flight entry. */
static int attach(struct iotape_bpf *skel)
{
	struct bpf_program *order[] = { skel->progs.on_complete, skel->progs.on_rq_merge,
					skel->progs.on_issue, skel->progs.on_io_start,
					skel->progs.on_rq_insert, skel->progs.on_waking };
	struct bpf_link **links[] = { &skel->links.on_complete, &skel->links.on_rq_merge,
				      &skel->links.on_issue, &skel->links.on_io_start,
				      &skel->links.on_rq_insert, &skel->links.on_waking };

	if (IOTAPE_FLOOR == 4)
		return 0;	/* the floor variant that attaches nothing (bpf/iotape.bpf.c) */
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		if (!bpf_program__autoload(order[i]))
			continue;
		*links[i] = bpf_program__attach(order[i]);
		if (!*links[i]) {
			int err = -errno;

			errorf("attaching %s: %s", bpf_program__name(order[i]), strerror(-err));
			return err;
		}
	}
	return 0;
}

/* What main's steps share, released by run_free() whatever step failed. */
struct run {
	struct iotape_bpf *skel;
	struct ring_buffer *rb;
	struct cpurings cr;		/* ncpu 0: none, every record in rb */
	char *meta, *header;
	size_t meta_len;
	volatile struct iotape_inflight *slots;
	size_t n_slots;
	int stats_fd;
	bool created;		/* this run made the output file */
	uint64_t cnt[IOTAPE_CNT_MAX];
};

/* The metadata, the extents, signals, and the BPF programs loaded (not attached). */
static int setup(struct run *r)
{
	struct sigaction sa = { .sa_handler = on_signal };
	char msg[2048];
	int err;

	r->meta = read_meta(o.meta, &r->meta_len);
	if (!r->meta)
		return -1;
	if (o.extents_path && labels_read_extents(&st.labels, o.extents_path, msg, sizeof(msg))) {
		errorf("%s", msg);
		return -1;
	}

	libbpf_set_print(libbpf_print);
	signal(SIGPIPE, SIG_IGN);	/* a closed stdout must not cost the trace */
	/* No SA_RESTART: a signal must cut the poll short. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	r->skel = iotape_bpf__open();
	if (!r->skel) {
		errorf("opening the BPF object: %s", strerror(errno));
		return -1;
	}
	configure(r->skel);
	err = iotape_bpf__load(r->skel);
	if (err) {
		errorf("loading the BPF programs: %s (are you root, is BTF at "
		       "/sys/kernel/btf/vmlinux?)", strerror(-err));
		return -1;
	}
	if (o.bpf_stats) {
		/* Counted only while this fd is open; no global sysctl to restore. */
		r->stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
		if (r->stats_fd < 0) {
			errorf("--bpf-stats: %s", strerror(errno));
			return -1;
		}
	}
	r->n_slots = bpf_map__max_entries(r->skel->maps.slots);
	r->slots = mmap(NULL, r->n_slots * sizeof(*r->slots), PROT_READ, MAP_SHARED,
			bpf_map__fd(r->skel->maps.slots), 0);
	if (r->slots == MAP_FAILED) {
		errorf("mapping the in-flight table: %s", strerror(errno));
		return -1;
	}
	if (o.ncpu) {
		err = cpurings_open(&r->cr, bpf_map__fd(r->skel->maps.cpurecs),
				    bpf_map__fd(r->skel->maps.cpupos), o.ncpu, o.cpu_slots);
		if (err) {
			errorf("mapping the per-CPU rings: %s", strerror(-err));
			return -1;
		}
	}
	/* With per-CPU rings, the shared ring's records wait to be merged with theirs. */
	r->rb = ring_buffer__new(bpf_map__fd(r->skel->maps.events),
				 o.ncpu ? cpurings_keep : on_event, o.ncpu ? &r->cr : NULL, NULL);
	if (!r->rb) {
		errorf("creating the ring buffer reader: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Makes PATH with its header. Returns 0, -1 when it could not be made (nothing to
 * remove) or -2 when it was made and holds no header (the caller removes it). */
static int open_file(struct run *r, struct tracewriter *tw, const char *path)
{
	size_t header_len;
	int err = tw_open(tw, path, o.chunk_records);

	/* Before the header: the file's format version follows from the codec. */
	if (!err)
		err = tw_set_codec(tw, o.codec);
	tw->wakes = o.wakes;
	if (err) {
		errorf("%s: %s", path, err == -EBUSY ? "another capture is writing this file" :
		       strerror(-err));
		st.rot_err = -err;
		return -1;
	}
	free(r->header);
	r->header = header_json(r->meta, r->meta_len, tw_version(tw), st.mono_start, st.wall_start,
				&header_len);
	err = r->header ? tw_write_header(tw, r->header, header_len) : -ENOMEM;
	if (err) {
		errorf("%s: writing the header: %s", path, strerror(-err));
		st.rot_err = -err;
		return -2;
	}
	return 0;
}

/* The output file with its header, then the programs attached: recording starts. */
static int start(struct run *r)
{
	int err;

	if (rot_enabled(&o.rot))
		rot_name(&o.rot, 0, st.path, sizeof(st.path));
	else
		snprintf(st.path, sizeof(st.path), "%s", o.out);
	/* Before attaching, so no recorded time precedes the start. */
	st.mono_start = st.file_start = clock_ns(CLOCK_MONOTONIC);
	st.wall_start = clock_ns(CLOCK_REALTIME);
	err = open_file(r, &st.tw, st.path);
	if (err == -1)
		return -1;
	r->created = true;
	if (err)
		return -1;
	st.rot_err = 0;
	reserve_make(o.out);
	if (rot_enabled(&o.rot)) {
		char msg[sizeof(st.ctl_path) + 128];

		snprintf(st.ctl_path, sizeof(st.ctl_path), "%s.ctl", o.rot.stem);
		st.ctl_fd = ctl_listen(st.ctl_path, msg, sizeof(msg));
		/* A flight recorder promises snapshots on request; a plain rotated capture
		 * goes on without (`record --status` then says there is no socket). */
		if (st.ctl_fd < 0 && o.snapshots) {
			errorf("%s", msg);
			return -1;
		}
		snap_init(&st.snap, &o.rot, o.snap_before_ns ? o.snap_before_ns : o.rot.keep_ns,
			  o.snap_after_ns);
	}
	r->skel->bss->mono_start = st.mono_start;
	if (attach(r->skel))
		return -1;
	emit("{\"type\":\"ready\",\"mono_start_ns\":%" PRIu64 ",\"file\":\"%s\"}\n",
	     st.mono_start, st.path);
	return 0;
}

static uint64_t cur_size(void)
{
	return st.tw.good_end + (uint64_t)st.tw.n * IOTAPE_RECORD_SIZE;
}

/* One chunk: the ring deletes this far ahead, and --max-bytes stops this far short. */
static uint64_t chunk_bytes(void)
{
	return IOTAPE_CHUNK_HEADER_SIZE + (uint64_t)o.chunk_records * IOTAPE_RECORD_SIZE;
}

/* The current file done, the next one takes the records: made before the current
 * one gets its footer (stop reason "rotate"), so that a next file that cannot be
 * made stops the capture in the current one. Returns 0, or -1 to stop. */
static int rotate(struct run *r, uint64_t now)
{
	struct tracewriter next = { .fd = -1 };
	char path[sizeof(st.path)], footer[4096], old[sizeof(st.path)];
	uint64_t old_start = st.file_start, events;
	int n, err;

	if (tw_flush(&st.tw))
		return -1;	/* finish() reports the failed write */
	read_counters(r->skel, r->cnt);
	n = footer_json(footer, sizeof(footer), r->skel, r->cnt, now, clock_ns(CLOCK_REALTIME),
			"rotate", 0, false);
	if (n < 0 || (size_t)n >= sizeof(footer))
		return -1;
	rot_name(&o.rot, o.rot.index + 1, path, sizeof(path));
	o.rot.index++;
	st.file_start = now;
	err = open_file(r, &next, path);
	if (err) {
		if (err == -2)
			unlink(path);
		tw_close(&next);
		o.rot.index--;
		st.file_start = old_start;
		snprintf(st.rot_failed, sizeof(st.rot_failed), "%s", path);
		st.rot_what = "cannot write the next file";
		return -1;
	}
	err = tw_finish(&st.tw, footer, n);
	if (err) {
		/* The disk filled between the next file's header and this footer: the
		 * next file holds no record yet, so it goes and its blocks make room;
		 * the capture stops in this file, whose footer the stop writes. */
		tw_close(&next);
		unlink(path);
		o.rot.index--;
		st.file_start = old_start;
		st.rot_err = -err;
		snprintf(st.rot_failed, sizeof(st.rot_failed), "%s", path);
		st.rot_what = "cannot write the next file";
		return -1;
	}
	events = st.tw.events;
	st.prior_events += events;
	st.prior_chunks += st.tw.chunks;
	st.prior_wakes += st.file_wakes;
	st.file_wakes = 0;
	st.prior_sched += st.file_sched;
	st.file_sched = 0;
	rot_closed(&o.rot, (uint64_t)lseek(st.tw.fd, 0, SEEK_END), now);
	tw_close(&st.tw);
	st.tw = next;
	memcpy(st.base_cnt, r->cnt, sizeof(st.base_cnt));
	st.base_misses = st.seen_misses;
	memcpy(old, st.path, sizeof(old));
	memcpy(st.path, path, sizeof(st.path));
	n = rot_prune(&o.rot, cur_size() + chunk_bytes(), now);
	emit("{\"type\":\"rotate\",\"closed\":\"%s\",\"events\":%" PRIu64 ",\"file\":\"%s\","
	     "\"deleted\":%d}\n", old, events, st.path, n);
	return st.rot_err ? -1 : 0;
}

/* Whether a rotated or bounded capture goes on: rotates when due, keeps the ring,
 * and says "max-bytes" when the files reach --max-bytes (one chunk and a footer
 * short of it, so that what the stop still writes fits). */
static const char *rotation_step(struct run *r, uint64_t now)
{
	if (rot_enabled(&o.rot)) {
		/* Records rotate the file themselves (commit()). With none past its
		 * DURATION window (an idle disk), the file closes once the window has
		 * been over for ROT_GRACE_NS: no record of it can still be unread
		 * then, to land in a file whose window starts after it. */
		bool idle = o.rot.every_ns &&
			    now - st.file_start >= o.rot.every_ns + ROT_GRACE_NS;

		if (idle && rotate(r, window_of(now - ROT_GRACE_NS)))
			return "error";
		if (rot_due(&o.rot, cur_size(), 0) && rotate(r, now))
			return "error";
		rot_prune(&o.rot, cur_size() + chunk_bytes(), now);
	}
	if (o.rot.max_bytes && o.rot.written + cur_size() + chunk_bytes() + 4096 >= o.rot.max_bytes)
		return "max-bytes";
	return NULL;
}

/* The recorder's own cost, for the status line and the control socket's status:
 * CPU seconds so far, resident memory now and at its peak (KiB). */
static void self_usage(double *cpu_s, long *rss_kb, long *peak_kb)
{
	struct rusage ru;
	long pages = 0, size;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &size, &pages) != 2)
			pages = 0;
		fclose(f);
	}
	getrusage(RUSAGE_SELF, &ru);
	*cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
		 ru.ru_stime.tv_usec / 1e6;
	*rss_kb = pages * (sysconf(_SC_PAGESIZE) / 1024);
	*peak_kb = ru.ru_maxrss;
}

/* The status JSON members shared by the progress line and `record --status`. */
static int status_members(char *buf, size_t size, struct run *r)
{
	uint64_t *cnt = r->cnt;
	double cpu_s;
	long rss_kb, peak_kb;

	read_counters(r->skel, cnt);
	self_usage(&cpu_s, &rss_kb, &peak_kb);
	return snprintf(buf, size,
		"\"events\":%" PRIu64 ",\"bytes_written\":%" PRIu64 ",\"lost\":%" PRIu64
		",\"pre_start\":%" PRIu64 ",\"file\":\"%s\",\"files_on_disk\":%u"
		",\"bytes_on_disk\":%" PRIu64 ",\"snapshots\":%u,\"cpu_s\":%.3f"
		",\"rss_kb\":%ld,\"peak_rss_kb\":%ld",
		st.prior_events + st.tw.events + st.tw.n, o.rot.written + st.tw.good_end,
		cnt[IOTAPE_CNT_RINGBUF_FULL] + cnt[IOTAPE_CNT_INFLIGHT_FULL] + complete_misses(r->skel),
		cnt[IOTAPE_CNT_PRE_START], st.path, o.rot.index - o.rot.oldest + 1,
		o.rot.on_disk + cur_size(), st.snap.taken, cpu_s, rss_kb, peak_kb);
}

/* A snapshot asked for at NOW (the condition or request arose at SINCE): the
 * capture rotates, so that the window before is in closed, complete files, and
 * they are linked into the snapshot's directory. Returns -1 when the capture must
 * stop (the rotation failed); a snapshot that cannot be made is one line on
 * stderr, and the capture goes on. */
static int snapshot(struct run *r, uint64_t now, uint64_t since, const char *reason,
		    const char *detail)
{
	int err;

	if (st.snap.active)
		return 0;
	if (rotate(r, now))
		return -1;
	err = snap_begin(&st.snap, &o.rot, now, clock_ns(CLOCK_REALTIME), since, reason, detail);
	if (err) {
		errorf("%s: cannot save the snapshot: %s (the capture goes on)", st.snap.dir,
		       strerror(-err));
		st.snap.active = false;
		return 0;
	}
	emit("{\"type\":\"snapshot\",\"dir\":\"%s\",\"reason\":\"%s\",\"latency_ns\":%" PRIu64
	     ",\"first_index\":%u,\"until_mono_ns\":%" PRIu64 "}\n", st.snap.dir, reason,
	     st.snap.latency_ns, st.snap.first, st.snap.until_mono);
	return 0;
}

/* The snapshot's window after has passed: the file holding its end is closed and
 * the snapshot marked complete. */
static int snapshot_end(struct run *r, uint64_t now)
{
	/* Every file up to the one holding the window's end, which the rotation closes;
	 * the file it begins is after the window, not the snapshot's. */
	int err = snap_link(&st.snap, &o.rot);

	if (rotate(r, now))
		return -1;
	if (!err)
		err = snap_manifest(&st.snap, &o.rot, true, NULL);
	if (err)
		errorf("%s: cannot complete the snapshot: %s", st.snap.dir, strerror(-err));
	st.snap.active = false;
	emit("{\"type\":\"snapshot-done\",\"dir\":\"%s\",\"files\":%u}\n", st.snap.dir,
	     st.snap.next - st.snap.first);
	return 0;
}

/* One request on the control socket: "snapshot" or "status". */
static int control(struct run *r, uint64_t now)
{
	char line[128], reply[1024 + sizeof(st.snap.dir)];
	int fd = ctl_accept(st.ctl_fd, line, sizeof(line)), n;

	if (fd < 0)
		return 0;
	if (!strcmp(line, "snapshot") && o.snapshots) {
		bool already = st.snap.active;

		if (!already && snapshot(r, now, now, "command", ""))
			n = snprintf(reply, sizeof(reply), "{\"error\":\"the capture stopped\"}\n");
		else if (!st.snap.active)
			n = snprintf(reply, sizeof(reply), "{\"error\":\"cannot save the snapshot\"}\n");
		else
			n = snprintf(reply, sizeof(reply), "{\"snapshot\":\"%s\",\"already\":%s,"
				     "\"latency_ns\":%" PRIu64 ",\"complete_in_ns\":%" PRIu64 "}\n",
				     st.snap.dir, already ? "true" : "false", st.snap.latency_ns,
				     st.snap.until_mono - now);
	} else if (!strcmp(line, "snapshot")) {
		n = snprintf(reply, sizeof(reply), "{\"error\":\"this capture takes no snapshots "
			     "(it was started without --ring)\"}\n");
	} else if (!strcmp(line, "status")) {
		n = snprintf(reply, sizeof(reply), "{\"type\":\"status\",");
		n += status_members(reply + n, sizeof(reply) - n - 2, r);
		n += snprintf(reply + n, sizeof(reply) - n, "}\n");
	} else {
		n = snprintf(reply, sizeof(reply), "{\"error\":\"unknown request (snapshot, status)\"}\n");
	}
	(void)n;
	ctl_reply(fd, reply);
	return st.tw.err ? -1 : 0;
}

/* The flight recorder's turn in the drain loop: SIGHUP, SIGUSR1, the control
 * socket, the triggers, the end of a snapshot's window. Returns -1 to stop. */
static int flight_step(struct run *r, uint64_t now)
{
	char detail[160];

	if (hup_signal) {
		hup_signal = 0;
		if (rot_enabled(&o.rot) && rotate(r, now))
			return -1;
	}
	if (st.ctl_fd >= 0 && control(r, now))
		return -1;
	if (snap_signal) {
		snap_signal = 0;
		if (o.snapshots && snapshot(r, now, now, "signal", ""))
			return -1;
	}
	for (int i = 0; i < o.n_trig; i++) {
		struct trigger *t = &o.trig[i];

		if (!trig_eval(t, now - st.mono_start)) {
			t->last_false_ns = now;
			t->armed = true;
		} else if (t->armed && !st.snap.active) {
			t->armed = false;
			if (t->metric <= TRIG_AVG)
				snprintf(detail, sizeof(detail), "%s (was %.3f ms)", t->text, t->last / 1e6);
			else
				snprintf(detail, sizeof(detail), "%s (was %.1f)", t->text, t->last);
			if (snapshot(r, now, t->last_false_ns ? t->last_false_ns : st.mono_start,
				     "trigger", detail))
				return -1;
		}
	}
	if (st.snap.active) {
		if (now >= st.snap.until_mono)
			return snapshot_end(r, now);
		int err = snap_link(&st.snap, &o.rot);

		/* Ends it where it is: a hole would make it unreadable as one trace. */
		if (err) {
			errorf("%s: cannot link the next file: %s (the snapshot ends before it)",
			       st.snap.dir, strerror(-err));
			snap_manifest(&st.snap, &o.rot, false, "link-failed");
			st.snap.active = false;
		}
	}
	return 0;
}

/* Every record the programs have written so far into the file, in completion
 * order across the per-CPU rings. Returns 0 or a negative error. */
static int consume(struct run *r)
{
	int err = ring_buffer__consume(r->rb);

	if (err >= 0 && r->cr.ncpu)
		err = cpurings_drain(&r->cr, on_event, NULL);
	return err;
}

/* Drain the ring into the file until a signal, the deadline or an error; progress
 * lines every status_ms. Returns the stop reason; *err is the last ring result. */
static const char *drain(struct run *r, int *err)
{
	uint64_t now = clock_ns(CLOCK_MONOTONIC), last_status = now, last_events = 0, deadline = 0;
	uint64_t next_status = now + o.status_ms * 1000000ull, next_flush = now + NSEC_PER_SEC;
	const char *reason = "signal", *step;

	if (o.duration_s > 0)
		deadline = st.mono_start + (uint64_t)(o.duration_s * NSEC_PER_SEC);
	while (!stop_signal) {
		/* The kernel side rarely wakes us (only when the ring is half
		 * full), so the timeout is the drain timer and consume does the work. */
		*err = ring_buffer__poll(r->rb, (int)o.timer_ms);
		/* A signal too: what is in the rings goes in before the rotation below
		 * closes a window whose records they may hold. */
		if (*err >= 0 || *err == -EINTR)
			*err = consume(r);
		if (*err < 0 && *err != -EINTR)
			return "error";	/* a failed write or rotation: no drain after it */
		now = clock_ns(CLOCK_MONOTONIC);
		if (now >= next_flush) {
			/* At most ~1 s of records at risk, one fdatasync per second. */
			if (tw_flush(&st.tw) || tw_sync(&st.tw))
				break;
			next_flush = now + NSEC_PER_SEC;
		}
		if (now >= next_status) {
			uint64_t events = st.prior_events + st.tw.events + st.tw.n;
			double dt = (now - last_status) / 1e9;
			char members[1024 + sizeof(st.path)];

			status_members(members, sizeof(members), r);
			emit("{\"type\":\"progress\",\"events_per_s\":%.1f,%s}\n",
			     (events - last_events) / dt, members);
			last_events = events;
			last_status = now;
			next_status = now + o.status_ms * 1000000ull;
		}
		if (deadline && now >= deadline) {
			reason = "duration";
			break;
		}
		if ((step = rotation_step(r, now))) {
			reason = step;
			break;
		}
		if (flight_step(r, now)) {
			reason = "error";
			break;
		}
	}
	return stop_signal == SIGUSR2 ? "command-exit" : reason;
}

/* The command or the clock has ended, but requests it submitted may still
 * be in flight (an exiting io_uring process leaves its queue to complete
 * after it): wait for them, bounded, so their completions are recorded. */
static void drain_in_flight(struct run *r)
{
	uint64_t t = clock_ns(CLOCK_MONOTONIC), until = t + o.drain_ms * 1000000ull;
	uint64_t quiet_since = t, seen = st.tw.events + st.tw.n;

	/* Quiet means nothing in flight and no completion for SETTLE_MS:
	 * an exiting process's io_uring worker may still submit queued
	 * requests a moment after the process itself is gone. */
	while (n_signals < 2 && (t = clock_ns(CLOCK_MONOTONIC)) < until) {
		uint64_t unseen, held = in_flight(r->skel, r->slots, r->n_slots, &unseen, false);

		/* What completed unseen will not complete again: do not wait for it. */
		if (held > unseen || st.tw.events + st.tw.n != seen)
			quiet_since = t;
		else if (t - quiet_since >= SETTLE_MS * 1000000ull)
			break;
		seen = st.tw.events + st.tw.n;
		if (ring_buffer__poll(r->rb, (int)o.timer_ms) < 0 && errno != EINTR)
			break;
		if (consume(r) < 0)
			break;
	}
}

/* Detach, drain what the programs left in the ring, write the footer. Returns the
 * exit status: 0 for the ordinary stops, 1 otherwise. */
static int finish(struct run *r, const char *reason, int err)
{
	char footer[4096], done[4096];
	uint64_t left, now, wall;
	int n;

	iotape_bpf__detach(r->skel);
	if (!st.tw.err) {
		consume(r);
		left = in_flight(r->skel, r->slots, r->n_slots, &st.unseen_at_stop, true);
		left -= st.unseen_at_stop;
		tw_flush(&st.tw);
	} else {
		left = in_flight(r->skel, r->slots, r->n_slots, NULL, false);
	}
	if (st.tw.err) {
		bool full = st.tw.err == ENOSPC || st.tw.err == EDQUOT;

		errorf("%s: %s; stopped the capture after %" PRIu64 " records",
		       st.path, strerror(st.tw.err), st.prior_events + st.tw.events);
		reason = full ? "disk-full" : "error";
		tw_truncate_to_good(&st.tw);
	} else if (st.rot_err) {
		errorf("%s: %s: %s; stopped the capture after %" PRIu64 " records",
		       st.rot_failed, st.rot_what, strerror(st.rot_err),
		       st.prior_events + st.tw.events + st.tw.n);
		reason = st.rot_err == ENOSPC || st.rot_err == EDQUOT ? "disk-full" : "error";
	} else if (err == -ECANCELED) {
		errorf("%s: the footer does not fit its buffer; stopped the capture", st.path);
		reason = "error";
	} else if (err < 0 && err != -EINTR) {
		errorf("reading the ring buffer: %s", strerror(-err));
		reason = "error";
	}
	now = clock_ns(CLOCK_MONOTONIC);
	wall = clock_ns(CLOCK_REALTIME);
	read_counters(r->skel, r->cnt);
	n = footer_json(done, sizeof(done), r->skel, r->cnt, now, wall, reason, left, true);
	if (n > 0 && (size_t)n < sizeof(done))
		n = footer_json(footer, sizeof(footer), r->skel, r->cnt, now, wall, reason, left,
				false);
	if (n < 0 || (size_t)n >= sizeof(footer)) {
		errorf("footer does not fit its buffer");
		return 1;
	}
	err = tw_finish(&st.tw, footer, n);
	if ((err == -ENOSPC || err == -EDQUOT) && reserve_free())
		err = tw_finish(&st.tw, footer, n);
	reserve_free();
	if (err) {
		errorf("%s: writing the footer: %s (the chunks written stay readable)",
		       st.path, strerror(-err));
		return 1;
	}
	r->created = false;	/* a complete trace, keep it */
	if (st.snap.active)
		snap_manifest(&st.snap, &o.rot, false, reason);
	emit("{\"type\":\"done\",%s\n", done + 1);
	if (st.short_records)
		errorf("%" PRIu64 " ring buffer records were shorter than a trace record",
		       st.short_records);
	return strcmp(reason, "signal") && strcmp(reason, "duration") &&
	       strcmp(reason, "command-exit") && strcmp(reason, "max-bytes");
}

static void run_free(struct run *r)
{
	ring_buffer__free(r->rb);
	cpurings_close(&r->cr);
	if (r->slots != MAP_FAILED)
		munmap((void *)r->slots, r->n_slots * sizeof(*r->slots));
	iotape_bpf__destroy(r->skel);
	if (r->stats_fd >= 0)
		close(r->stats_fd);
	/* Nothing half-written: a file that never got past its header goes. */
	if (r->created && st.tw.chunks == 0 && !st.tw.events)
		unlink(st.path);
	tw_close(&st.tw);
	ctl_close(st.ctl_fd, st.ctl_path);
	for (int i = 0; i < o.n_trig; i++)
		trig_free(&o.trig[i]);
	rot_free(&o.rot);
	labels_free(&st.labels);
	free(r->header);
	free(r->meta);
}

int main(int argc, char **argv)
{
	struct run r = { .slots = MAP_FAILED, .stats_fd = -1 };
	const char *reason;
	int err = 0, ret = 1;

	parse_args(argc, argv);
	st.tw.fd = -1;
	if (!setup(&r) && !start(&r)) {
		/* The records that come after the stop rotate as well: a file holds at
		 * most a chunk more than --rotate, whenever its records were read. */
		running = &r;
		reason = drain(&r, &err);
		/* A stop at --max-bytes or on an error does not wait for more records. */
		if (!st.tw.err && o.drain_ms && strcmp(reason, "max-bytes") && strcmp(reason, "error"))
			drain_in_flight(&r);
		ret = finish(&r, reason, err);
		running = NULL;
	}
	reserve_free();
	run_free(&r);
	return ret;
}
