/* Generated from schemas/ (trace_record.toml, contracts.toml, workload_options.toml)
 * by `python -m schemas.gen_c --workload`. Do not edit: change the TOML, regenerate. */
#ifndef ESE_CONTRACT_H
#define ESE_CONTRACT_H

/* The streams the engine accounts by: the trace schema's, id - 1 (the recorder
 * derives the same from thread names). */
enum stream {
	S_DB_READ, /* 1: db-read */
	S_DB_WRITE, /* 2: db-write */
	S_LOG_WRITE, /* 3: log-write */
	S_LOG_PREFORMAT, /* 4: log-preformat */
	S_BDM_READ, /* 5: bdm-read */
	S_LOG_REPLICATION_READ, /* 6: log-replication-read */
	S_LOG_READ, /* 7: log-read */
	S_BACKUP_READ, /* 8: backup-read */
	S_MIGRATION, /* 9: migration */
	S_N
};
#define ESE_STREAM_NAMES "db-read", "db-write", "log-write", "log-preformat", "bdm-read", "log-replication-read", "log-read", "backup-read", "migration"

/* The result document (report.c). */
#define ESE_RESULT_FORMAT "iotape-ese-result"
#define ESE_RESULT_VERSION 1

#define ESE_MAX_DATABASES 64
#define ESE_MAX_THREADS 64

/* --mode */
enum mode { M_PERFORMANCE, M_STRESS, M_THROUGHPUT, M_BACKUP, M_SOFT_RECOVERY };
#define ESE_MODE_CHOICES "performance", "stress", "throughput", "backup", "soft-recovery"
/* --log-partial */
enum log_partial { LP_PAD, LP_REWRITE, LP_SHADOW };
#define ESE_LOG_PARTIAL_CHOICES "pad", "rewrite", "shadow"
/* --ioengine */
#define ESE_IOENGINE_CHOICES "io_uring", "psync", "null", "tiered"
/* --tier-policy */
#define ESE_TIER_POLICY_CHOICES "tier", "cache"
/* --create */
#define ESE_CREATE_CHOICES "reuse", "recreate"
/* --end */
#define ESE_END_CHOICES "clean", "crash"

/* The option table: I(name, field, default, min, max, help) for an int, D for a
 * double, S(name, field, default, help) for a string, T(name, field, help) for a
 * target. */
#define ESE_OPTIONS(I, D, S, T) \
	S("mode", mode_name, "performance", "performance|stress|throughput|backup|soft-recovery") \
	I("databases", databases, "1", 1, 64, "number of databases") \
	I("storage-groups", storage_groups, "0", 0, 64, "storage groups the databases share (database i in group i % G): one log writer, log target and log stream per group; 0: one per database") \
	D("mailboxes", mailboxes, "100", 1, 10000000.0, "mailboxes in all, spread evenly over the databases") \
	D("iops-per-mailbox", iops_per_mailbox, "0.2", 0.0001, 100, "target transactional IOPS per mailbox") \
	D("mailbox-size-mb", mailbox_mb, "4", 0.01, 10000000.0, "size of one mailbox") \
	I("page-kb", page_kb, "32", 4, 64, "database page size (KiB)") \
	I("copies", copies, "2", 1, 16, "database copies in all; logs are read once per extra copy") \
	D("duration", duration, "30", 0, 10000000.0, "seconds of transactional load") \
	I("transactions", transactions, "0", 0, 1000000000, "a fixed amount of work instead of --duration: each session thread does this many operations (the same ones for the same --seed on any device), then stops; the run ends when all have (0: run --duration)") \
	I("threads", threads, "3", 1, 64, "user sessions (threads) per database") \
	I("auto-threads", auto_threads, "0", 0, 1, "throughput: raise threads while db reads stay fast") \
	I("max-threads", max_threads, "16", 1, 64, "throughput auto: most threads per database") \
	D("auto-read-ms", auto_read_ms, "20", 0.01, 1000, "throughput auto: db read latency limit") \
	D("auto-step-s", auto_step_s, "1", 0.1, 60, "throughput auto: seconds per thread count") \
	D("lazy-flush-ms", lazy_flush_ms, "0", 0, 10000, "a lazy commit is written within this (0: at once, as a durable one)") \
	D("emulate-db-read-ms", emu_db_read_ms, "0", 0, 10000, "EMULATION: hold each db read's completion until it is this old") \
	D("emulate-db-write-ms", emu_db_write_ms, "0", 0, 10000, "EMULATION: hold each db write's completion until it is this old") \
	D("emulate-log-write-ms", emu_log_write_ms, "0", 0, 10000, "EMULATION: hold each log write's completion until it is this old") \
	D("cache-min-mb", cache_min_mb, "8", 0.1, 1000000.0, "database cache, lower bound (all databases)") \
	D("cache-max-mb", cache_max_mb, "64", 0.1, 1000000.0, "database cache, upper bound (all databases)") \
	D("insert", mix_insert, "40", 0, 100, "percent of operations that insert a message") \
	D("delete", mix_delete, "20", 0, 100, "percent that delete") \
	D("replace", mix_replace, "5", 0, 100, "percent that replace") \
	D("read", mix_read, "35", 0, 100, "percent that read") \
	D("lazy-commit", lazy_pct, "70", 0, 100, "percent of commits that do not wait for the log") \
	D("preread-cont", preread_cont, "0.14", 0, 0.95, "chance a touched run goes on to the next page") \
	I("preread-max", preread_max, "16", 1, 64, "most pages one coalesced preread covers") \
	D("insert-index-runs", insert_index_runs, "1", 0, 8, "random index runs an insert updates") \
	D("msg-pages", pages_per_msg_insert, "0", 0, 8, "extra new pages an insert appends") \
	I("log-rec-min", log_rec_min, "256", 64, 65536, "smallest log record (bytes)") \
	I("log-insert-max", log_insert_max, "5664", 64, 262144, "largest insert log record") \
	I("log-delete", log_delete, "256", 64, 65536, "delete log record") \
	I("log-replace-max", log_replace_max, "2048", 64, 262144, "largest replace log record") \
	S("log-partial", log_partial_name, "pad", "pad|rewrite|shadow: a log write's partial last 4 KiB segment is padded and skipped (ESE 14), written and rewritten when it fills (ESE 15), or that plus a shadow copy (today's ESE)") \
	I("log-file-kb", log_file_kb, "1024", 64, 65536, "log file size") \
	I("logfmt-kb", logfmt_kb, "256", 4, 65536, "pre-format write size") \
	D("checkpoint-depth-mb", ckpt_depth_mb, "20", 0.1, 100000.0, "log behind which dirty pages are written") \
	D("flush-start-pct", flush_start_pct, "1", 0.01, 50, "scavenge when clean LRU pages fall under") \
	D("flush-stop-pct", flush_stop_pct, "2", 0.01, 50, "scavenge until clean LRU pages reach") \
	I("write-coalesce-kb", write_coalesce_kb, "512", 4, 4096, "largest coalesced page write") \
	I("bdm", bdm, "1", 0, 1, "background database maintenance on (1) or off (0)") \
	I("bdm-read-kb", bdm_read_kb, "256", 4, 4096, "maintenance read size") \
	D("bdm-rate", bdm_rate, "23.62", 0, 100000, "maintenance reads per second per database") \
	I("repl-read-kb", repl_read_kb, "256", 4, 4096, "log replication read size") \
	I("seed", seed, "1", 0, 2147483647, "seed of every random choice") \
	S("ioengine", ioengine, "io_uring", "io_uring|psync|null|tiered (tiered: psync through an emulated hybrid device, the --tier-* options)") \
	S("tier-fast", tier_fast, "", "tiered: the fast device or file (must exist; holds the promoted units' copies)") \
	S("tier-policy", tier_policy, "tier", "tiered: tier (array-style tiering, the --tier-*-s intervals and the budget) or cache (an LRU read cache: misses copied in by the migration thread, writes through to both copies)") \
	D("tier-capacity-mb", tier_capacity_mb, "0", 0, 1000000000.0, "tiered: fast-tier capacity (MiB), whole units") \
	I("tier-unit-kb", tier_unit_kb, "4096", 4, 1048576, "tiered: the unit placed and moved (KiB, a power of two, at least a page)") \
	D("tier-stats-s", tier_stats_s, "5", 0.001, 1000000.0, "tiered: heat is counted per interval of this") \
	D("tier-migrate-s", tier_migrate_s, "5", 0.001, 1000000.0, "tiered: placement changes every this (a multiple of --tier-stats-s)") \
	D("tier-half-life-s", tier_half_life_s, "60", 0, 1000000000.0, "tiered: heat halves over this (0: no decay)") \
	D("tier-budget-mb", tier_budget_mb, "0", 0, 1000000000.0, "tiered: most data one migration moves, promotions and demotions together (MiB; 0: no limit)") \
	I("tier-verify", tier_verify, "0", 0, 1, "tiered, for tests: keep a checksum of every 4 KiB written and, at the end, read each back through the placement and after the write-back") \
	S("tier-log", tier_log, "", "tiered: write each migration and the end placement here (JSON lines)") \
	S("result", result, "", "write the result JSON here") \
	I("quiet", quiet, "0", 0, 1, "no progress lines on stdout") \
	S("create", create, "reuse", "reuse|recreate: an existing complete database") \
	S("end", end_name, "clean", "clean|crash: at the end write the cache back (a clean shutdown) or drop its dirty pages, as an instance that stops without one, leaving them to soft recovery") \
	D("recovery-behind-pct", recovery_behind_pct, "4", 0, 100, "end=crash: how far the database is behind its log when the instance stops, in percent of the log this run wrote (at most the checkpoint depth): the dirty pages first dirtied before that are written as the stop begins, the rest are left to soft recovery. 4: ESE's 20 MB checkpoint depth (Exchange 2010) in the about 500 logs of 1 MB a published soft-recovery test replays; 100: every dirty page is left") \
	T("db", db, "PATH[,OFFSET,SIZE] of one database") \
	T("log", log, "DIR or DEV,OFFSET,SIZE of one storage group's log (one per database without storage groups)")

#endif /* ESE_CONTRACT_H */
