/* Options are data: one table gives each option's name, type, default, bounds and
 * help; parsing, validation and --help all come from it (as fio's options.c). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ese.h"
#include "tier.h"

enum otype { O_INT, O_DBL, O_STR, O_TARGET };

struct option_def {
	const char *name;
	enum otype type;
	size_t off, len;
	const char *def;
	double min, max;
	const char *help;
};

#define I(n, f, d, lo, hi, h) {n, O_INT, offsetof(struct config, f), 0, d, lo, hi, h},
#define D(n, f, d, lo, hi, h) {n, O_DBL, offsetof(struct config, f), 0, d, lo, hi, h},
#define S(n, f, d, h) {n, O_STR, offsetof(struct config, f), sizeof(((struct config *)0)->f), d, 0, 0, h},
#define T(n, f, h) {n, O_TARGET, offsetof(struct config, f), 0, NULL, 0, 0, h},

/* The table itself is schemas/workload_options.toml, generated into contract.h. */
static const struct option_def defs[] = {ESE_OPTIONS(I, D, S, T)};
#define NDEFS (sizeof(defs) / sizeof(defs[0]))

static const char *const modes[] = {ESE_MODE_CHOICES};          /* enum mode */
static const char *const partials[] = {ESE_LOG_PARTIAL_CHOICES}; /* enum log_partial */
static const char *const creates[] = {ESE_CREATE_CHOICES};

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
	if (cfg->storage_groups > cfg->databases)
		die("--storage-groups %d: more than --databases %d (a storage group holds at least one database)",
		    cfg->storage_groups, cfg->databases);
	if (!cfg->storage_groups)
		cfg->storage_groups = cfg->databases; /* one log per database */
	if (cfg->storage_groups == cfg->databases &&
	    (cfg->ndb_targets != cfg->databases || cfg->nlog_targets != cfg->databases))
		die("give one --db and one --log per database (%d databases, %d --db, %d --log)",
		    cfg->databases, cfg->ndb_targets, cfg->nlog_targets);
	if (cfg->ndb_targets != cfg->databases || cfg->nlog_targets != cfg->storage_groups)
		die("give one --db per database and one --log per storage group (%d databases, %d storage groups, "
		    "%d --db, %d --log)",
		    cfg->databases, cfg->storage_groups, cfg->ndb_targets, cfg->nlog_targets);
	if (cfg->cache_min_mb > cfg->cache_max_mb)
		die("--cache-min-mb %g is above --cache-max-mb %g", cfg->cache_min_mb, cfg->cache_max_mb);
	if (cfg->flush_start_pct > cfg->flush_stop_pct)
		die("--flush-start-pct is above --flush-stop-pct");
	cfg->log_partial = name_index(partials, sizeof(partials) / sizeof(partials[0]), cfg->log_partial_name);
	if (cfg->log_partial < 0)
		die("--log-partial %s: pad, rewrite or shadow", cfg->log_partial_name);
	if (name_index(creates, sizeof(creates) / sizeof(creates[0]), cfg->create) < 0)
		die("--create %s: reuse or recreate", cfg->create);
	static const char *const ends[] = {ESE_END_CHOICES};
	cfg->crash_end = name_index(ends, sizeof(ends) / sizeof(ends[0]), cfg->end_name);
	if (cfg->crash_end < 0)
		die("--end %s: clean or crash", cfg->end_name);
	if (cfg->transactions && cfg->mode > M_THROUGHPUT)
		die("--transactions %d: only in performance, stress or throughput mode (a fixed number of "
		    "operations per session)",
		    cfg->transactions);
	if (cfg->transactions && cfg->auto_threads)
		die("--transactions %d: not with --auto-threads (its sessions come and go)", cfg->transactions);
	if (cfg->max_threads < cfg->threads)
		cfg->max_threads = cfg->threads;
	if ((cfg->log_file_kb & 3) || (cfg->bdm_read_kb & 3) || (cfg->repl_read_kb & 3) || (cfg->logfmt_kb & 3))
		die("log file, preformat, maintenance and replication sizes are multiples of 4 KiB");
	tier_check_options(cfg); /* before any file is created */
}
