/* Options are data: one table gives each option's name, type, default, bounds and
 * help; parsing, validation and --help all come from it (as fio's options.c). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ese.h"

enum otype { O_INT, O_DBL, O_STR, O_TARGET };

struct option_def {
	const char *name;
	enum otype type;
	size_t off, len;
	const char *def;
	double min, max;
	const char *help;
};

#define I(n, f, d, lo, hi, h) {n, O_INT, offsetof(struct config, f), 0, d, lo, hi, h}
#define D(n, f, d, lo, hi, h) {n, O_DBL, offsetof(struct config, f), 0, d, lo, hi, h}
#define S(n, f, d, h) {n, O_STR, offsetof(struct config, f), sizeof(((struct config *)0)->f), d, 0, 0, h}

static const struct option_def defs[] = {
	S("mode", mode_name, "performance", "performance|stress|throughput|backup|soft-recovery"),
	I("databases", databases, "1", 1, MAX_DBS, "number of databases"),
	D("mailboxes", mailboxes, "100", 1, 1e7, "mailboxes in all, spread evenly over the databases"),
	D("iops-per-mailbox", iops_per_mailbox, "0.2", 0.0001, 100, "target transactional IOPS per mailbox"),
	D("mailbox-size-mb", mailbox_mb, "4", 0.01, 1e7, "size of one mailbox"),
	I("page-kb", page_kb, "32", 4, 64, "database page size (KiB)"),
	I("copies", copies, "1", 1, 16, "database copies in all; logs are read once per extra copy"),
	D("duration", duration, "10", 0, 1e7, "seconds of transactional load"),
	I("threads", threads, "2", 1, MAX_THREADS, "user sessions (threads) per database"),
	I("auto-threads", auto_threads, "0", 0, 1, "throughput: raise threads while db reads stay fast"),
	I("max-threads", max_threads, "16", 1, MAX_THREADS, "throughput auto: most threads per database"),
	D("auto-read-ms", auto_read_ms, "20", 0.01, 1000, "throughput auto: db read latency limit"),
	D("auto-step-s", auto_step_s, "1", 0.1, 60, "throughput auto: seconds per thread count"),
	D("lazy-flush-ms", lazy_flush_ms, "0", 0, 10000,
	  "a lazy commit is written within this (0: at once, as a durable one)"),
	D("emulate-db-read-ms", emu_db_read_ms, "0", 0, 10000,
	  "EMULATION: hold each db read's completion until it is this old"),
	D("emulate-db-write-ms", emu_db_write_ms, "0", 0, 10000,
	  "EMULATION: hold each db write's completion until it is this old"),
	D("emulate-log-write-ms", emu_log_write_ms, "0", 0, 10000,
	  "EMULATION: hold each log write's completion until it is this old"),
	D("cache-min-mb", cache_min_mb, "8", 0.1, 1e6, "database cache, lower bound (all databases)"),
	D("cache-max-mb", cache_max_mb, "64", 0.1, 1e6, "database cache, upper bound (all databases)"),
	D("insert", mix_insert, "40", 0, 100, "percent of operations that insert a message"),
	D("delete", mix_delete, "20", 0, 100, "percent that delete"),
	D("replace", mix_replace, "5", 0, 100, "percent that replace"),
	D("read", mix_read, "35", 0, 100, "percent that read"),
	D("lazy-commit", lazy_pct, "70", 0, 100, "percent of commits that do not wait for the log"),
	D("preread-cont", preread_cont, "0.14", 0, 0.95, "chance a touched run goes on to the next page"),
	I("preread-max", preread_max, "16", 1, 64, "most pages one coalesced preread covers"),
	D("insert-index-runs", insert_index_runs, "1", 0, 8, "random index runs an insert updates"),
	D("msg-pages", pages_per_msg_insert, "0", 0, 8, "extra new pages an insert appends"),
	I("log-rec-min", log_rec_min, "256", 64, 65536, "smallest log record (bytes)"),
	I("log-insert-max", log_insert_max, "5664", 64, 262144, "largest insert log record"),
	I("log-delete", log_delete, "256", 64, 65536, "delete log record"),
	I("log-replace-max", log_replace_max, "2048", 64, 262144, "largest replace log record"),
	S("log-partial", log_partial_name, "pad",
	  "pad|rewrite|shadow: a log write's partial last 4 KiB segment is padded and skipped (ESE 14), "
	  "written and rewritten when it fills (ESE 15), or that plus a shadow copy (today's ESE)"),
	I("log-file-kb", log_file_kb, "1024", 64, 65536, "log file size"),
	I("logfmt-kb", logfmt_kb, "256", 4, 65536, "pre-format write size"),
	D("checkpoint-depth-mb", ckpt_depth_mb, "20", 0.1, 1e5, "log behind which dirty pages are written"),
	D("flush-start-pct", flush_start_pct, "1", 0.01, 50, "scavenge when clean LRU pages fall under"),
	D("flush-stop-pct", flush_stop_pct, "2", 0.01, 50, "scavenge until clean LRU pages reach"),
	I("write-coalesce-kb", write_coalesce_kb, "512", 4, 4096, "largest coalesced page write"),
	I("bdm", bdm, "1", 0, 1, "background database maintenance on (1) or off (0)"),
	I("bdm-read-kb", bdm_read_kb, "256", 4, 4096, "maintenance read size"),
	D("bdm-rate", bdm_rate, "23.62", 0, 100000, "maintenance reads per second per database"),
	I("repl-read-kb", repl_read_kb, "256", 4, 4096, "log replication read size"),
	I("seed", seed, "1", 0, 2147483647, "seed of every random choice"),
	S("ioengine", ioengine, "io_uring", "io_uring|psync|null"),
	S("result", result, "", "write the result JSON here"),
	I("quiet", quiet, "0", 0, 1, "no progress lines on stdout"),
	S("create", create, "reuse", "reuse|recreate: an existing complete database"),
	S("end", end_name, "clean",
	  "clean|crash: at the end write the cache back (a clean shutdown) or drop its dirty pages, as an "
	  "instance that stops without one, leaving them to soft recovery"),
	{"db", O_TARGET, offsetof(struct config, db), 0, NULL, 0, 0, "PATH[,OFFSET,SIZE] of one database"},
	{"log", O_TARGET, offsetof(struct config, log), 0, NULL, 0, 0, "DIR or DEV,OFFSET,SIZE of one log"},
};
#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static const char *const modes[] = {"performance", "stress", "throughput", "backup", "soft-recovery"};
static const char *const partials[] = {"pad", "rewrite", "shadow"}; /* enum log_partial */
static const char *const creates[] = {"reuse", "recreate"};

/* The index of v in names, or -1. */
static int name_index(const char *const *names, size_t n, const char *v)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v, names[i]))
			return (int)i;
	return -1;
}

static void usage(void)
{
	printf("usage: iotape-ese [--option=value]...\n");
	for (size_t i = 0; i < NDEFS; i++)
		printf("  --%-20s %s%s%s%s\n", defs[i].name, defs[i].help, defs[i].def ? " (default " : "",
		       defs[i].def ? defs[i].def : "", defs[i].def ? ")" : "");
	exit(0);
}

static void set(struct config *cfg, const struct option_def *d, const char *v)
{
	char *p = (char *)cfg + d->off, *end;
	if (d->type == O_STR) {
		if (strlen(v) >= d->len)
			die("--%s: value too long", d->name);
		strcpy(p, v);
		return;
	}
	if (d->type == O_TARGET) {
		int *n = d->off == offsetof(struct config, db) ? &cfg->ndb_targets : &cfg->nlog_targets;
		if (*n >= MAX_DBS)
			die("--%s: more than %d given", d->name, MAX_DBS);
		struct target *t = (struct target *)p + (*n)++;
		char buf[600];
		snprintf(buf, sizeof(buf), "%s", v);
		char *c1 = strchr(buf, ',');
		if (c1) {
			*c1 = 0;
			t->off = strtoull(c1 + 1, &end, 10);
			if (*end != ',')
				die("--%s %s: expected PATH,OFFSET,SIZE", d->name, v);
			t->size = strtoull(end + 1, &end, 10);
			t->is_dev = 1;
		}
		if (strlen(buf) >= sizeof(t->path))
			die("--%s: path too long", d->name);
		strcpy(t->path, buf);
		return;
	}
	double x = strtod(v, &end);
	if (*v == 0 || *end)
		die("--%s %s: not a number", d->name, v);
	if (x < d->min || x > d->max)
		die("--%s %s: out of range [%g, %g]", d->name, v, d->min, d->max);
	if (d->type == O_INT)
		*(int *)p = (int)x;
	else
		*(double *)p = x;
}

void options_parse(struct config *cfg, int argc, char **argv)
{
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < NDEFS; i++)
		if (defs[i].def)
			set(cfg, &defs[i], defs[i].def);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			usage();
		if (strncmp(argv[i], "--", 2))
			die("%s: options start with --", argv[i]);
		char name[64];
		const char *val = strchr(argv[i], '=');
		size_t len = val ? (size_t)(val - argv[i] - 2) : strlen(argv[i] + 2);
		if (len >= sizeof(name))
			die("%s: unknown option", argv[i]);
		memcpy(name, argv[i] + 2, len);
		name[len] = 0;
		const struct option_def *d = NULL;
		for (size_t k = 0; k < NDEFS; k++)
			if (!strcmp(defs[k].name, name))
				d = &defs[k];
		if (!d)
			die("--%s: unknown option", name);
		if (!val) {
			if (i + 1 >= argc)
				die("--%s: needs a value", name);
			val = argv[++i];
		} else {
			val++;
		}
		set(cfg, d, val);
	}
	int mode = name_index(modes, sizeof(modes) / sizeof(modes[0]), cfg->mode_name);
	if (mode < 0)
		die("--mode %s: one of performance, stress, throughput, backup, soft-recovery", cfg->mode_name);
	cfg->mode = (enum mode)mode;
	double mix = cfg->mix_insert + cfg->mix_delete + cfg->mix_replace + cfg->mix_read;
	if (mix < 99.999 || mix > 100.001)
		die("--insert/--delete/--replace/--read add up to %g, not 100", mix);
	if (cfg->ndb_targets != cfg->databases || cfg->nlog_targets != cfg->databases)
		die("give one --db and one --log per database (%d databases, %d --db, %d --log)",
		    cfg->databases, cfg->ndb_targets, cfg->nlog_targets);
	if (cfg->cache_min_mb > cfg->cache_max_mb)
		die("--cache-min-mb %g is above --cache-max-mb %g", cfg->cache_min_mb, cfg->cache_max_mb);
	if (cfg->flush_start_pct > cfg->flush_stop_pct)
		die("--flush-start-pct is above --flush-stop-pct");
	cfg->log_partial = name_index(partials, sizeof(partials) / sizeof(partials[0]), cfg->log_partial_name);
	if (cfg->log_partial < 0)
		die("--log-partial %s: pad, rewrite or shadow", cfg->log_partial_name);
	if (name_index(creates, sizeof(creates) / sizeof(creates[0]), cfg->create) < 0)
		die("--create %s: reuse or recreate", cfg->create);
	static const char *const ends[] = {"clean", "crash"};
	cfg->crash_end = name_index(ends, 2, cfg->end_name);
	if (cfg->crash_end < 0)
		die("--end %s: clean or crash", cfg->end_name);
	if (cfg->max_threads < cfg->threads)
		cfg->max_threads = cfg->threads;
	if ((cfg->log_file_kb & 3) || (cfg->bdm_read_kb & 3) || (cfg->repl_read_kb & 3) || (cfg->logfmt_kb & 3))
		die("log file, preformat, maintenance and replication sizes are multiples of 4 KiB");
}
