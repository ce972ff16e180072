/* The ESE-like engine's shared types: configuration, databases, workers, stats. */
#ifndef ESE_H
#define ESE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "contract.h"
#include "ioengine.h"

#define MAX_DBS ESE_MAX_DATABASES
#define MAX_THREADS ESE_MAX_THREADS
#define HIST_BUCKETS 48 /* log2 buckets of latency in ns */

/* Why the log writer wrote: a durable commit waited, lazy commits reached their
 * deadline, the buffer was half full, or a clean stop. */
enum log_flush { LF_DURABLE, LF_LAZY, LF_CAPACITY, LF_STOP, LF_N };
/* enum stream (the streams the engine accounts by), enum mode and enum log_partial
 * (what a log write does with a partly filled last 4 KiB segment, log.c) are in
 * contract.h, generated from schemas/. */
extern const char *const stream_names[S_N];

/* Where a database or its logs live: a file or directory (off = size = 0 for a
 * directory of log files) or a slice of a block device. */
struct target {
	char path[512];
	uint64_t off, size;
	int is_dev;
};

struct config {
	char mode_name[32];
	enum mode mode;
	int quiet, databases, threads, auto_threads, max_threads, copies, bdm, seed, page_kb;
	int transactions; /* per session thread; 0: run for --duration */
	double mailboxes, iops_per_mailbox, mailbox_mb, duration;
	double cache_min_mb, cache_max_mb;
	double mix_insert, mix_delete, mix_replace, mix_read, lazy_pct;
	double preread_cont, insert_index_runs, pages_per_msg_insert;
	int preread_max, log_rec_min, log_insert_max, log_delete, log_replace_max;
	int log_file_kb, write_coalesce_kb, bdm_read_kb, repl_read_kb, logfmt_kb;
	int log_partial; /* enum log_partial, from log_partial_name */
	double ckpt_depth_mb, flush_start_pct, flush_stop_pct, bdm_rate;
	double auto_read_ms, auto_step_s;
	double lazy_flush_ms;                                 /* lazy commits reach disk within this */
	double emu_db_read_ms, emu_db_write_ms, emu_log_write_ms; /* emulated device latency floors */
	char tier_fast[512], tier_log[512], tier_policy[8];
	double tier_capacity_mb, tier_stats_s, tier_migrate_s, tier_half_life_s, tier_budget_mb;
	int tier_unit_kb, tier_verify;
	char ioengine[16], result[512], create[16], log_partial_name[16], end_name[16];
	int crash_end; /* end=crash: stop without writing the cache back */
	double recovery_behind_pct; /* end=crash: the last part of the log left unwritten */
	int storage_groups; /* 0 on the command line: one per database (options.c resolves it) */
	struct target db[MAX_DBS], log[MAX_DBS]; /* --log: one per storage group */
	int ndb_targets, nlog_targets;
};

struct iostat {
	uint64_t count, bytes, lat_sum_ns, lat_max_ns;
	uint64_t hist[HIST_BUCKETS];
};

/* A thread: its name (what the recorder labels by), its own ring and stats. */
struct worker {
	pthread_t tid;
	char name[16];
	struct db *db; /* a group's log threads: the group's first database, which reports its log I/O */
	struct loggroup *g;
	int index, active;
	struct ioengine *io;
	const struct ioengine_ops *ops;
	struct iostat st[S_N];
	uint64_t rng[2];
	uint64_t ops_done, commits, durable_commits;
	/* A session's operations by kind (session.c enum op) and a digest of its
	 * sequence (each one's kind, mailbox, run length and first page): the same
	 * for the same --seed whatever the device, which the report shows. */
	uint64_t op_kinds[4], op_digest;
	void *(*fn)(void *);
	/* emulate.c: a latency floor for this worker's requests, and the
	 * completions it is holding back until they are due */
	uint64_t emu_ns;
	uint64_t emu_sub[IOE_MAX_DEPTH];
	struct {
		uint64_t tag, due, start;
		int64_t res;
	} emu_held[IOE_MAX_DEPTH];
	int emu_n;
};

struct slot {
	int64_t page;
	int32_t hnext, prev, next, dnext, dprev, cnext, cprev;
	uint8_t valid, dirty, reading, writing, redirty, in_clean;
	uint64_t lgpos;
	uint64_t stamp; /* when it was last put at the LRU head: its place in the LRU */
	char *buf;
};

struct cache {
	struct slot *slots;
	int32_t *hash;
	uint32_t hmask;
	int cap, used, ndirty, start_pages, stop_pages;
	int32_t lru_head, lru_tail, free_head, dirty_head, dirty_tail;
	/* The clean, idle pages of the LRU (not dirty, read or written), in LRU
	 * order: its tail is the page a miss evicts, found without walking past
	 * the dirty pages that fill most of the cold end under a write-heavy load. */
	int32_t clean_head, clean_tail;
	int nclean; /* pages on that list */
	/* Sessions waiting for clean pages (d->mu held): how many wait and the
	 * pages they need in all. While any wait, the scavenger writes from the
	 * cold end until that many are free, clean or being written, whatever its
	 * thresholds say; the waiters sleep on d->cv, which every completion that
	 * frees a page, and the stop, broadcast. */
	int starved, want;
	uint64_t clock;
	uint64_t hits, misses, clean_waits; /* clean_waits: times a session waited for clean pages */
};

struct closed_log {
	uint64_t gen, used;
};

/* A log file found on a log target: its generation and the stream (first
 * generation of the run) that wrote it. */
struct log_file {
	uint64_t gen, stream;
};

/* A storage group: the databases that share one log (database i is in group
 * i % --storage-groups; by default one group per database). Its log writer
 * (ese-log-G), pre-formatter (ese-logfmt-G) and replication reader (ese-repl-G)
 * are the group's: the records of all its databases interleave in one buffer,
 * one write commits whichever of them are waiting (group commit across the
 * databases), and its files live on one log target. Group G's threads and
 * files carry the number G, which is also its first database's (database G),
 * so with one group per database every name, file and figure is what it was
 * before groups. */
struct loggroup {
	int idx;
	int ndbs;
	int dbs[MAX_DBS]; /* the databases it holds, in order */
	pthread_mutex_t lmu;
	pthread_cond_t lcv, ldone_cv, lfmt_cv, lrepl_cv;
	_Atomic uint64_t lsn_now;
	int writer_done;
	char *wbuf;
	char *lbuf;
	uint64_t lbuf_size, lsn_end, lsn_flushed;
	/* --log-partial rewrite|shadow: the start of the segment the next write begins with (a
	 * partial one is written again when it fills); its bytes stay in lbuf. */
	uint64_t lsn_seg;
	int have_shadow; /* the segment after lsn_seg holds a shadow copy */
	uint64_t lsn_want;    /* flush at least this far now: durable commits, a full buffer */
	uint64_t lazy_due_ns; /* a lazy commit is waiting to be flushed by then (0: none) */
	uint64_t log_flushes[LF_N]; /* flushes that wrote, by what asked for them */
	int cap_pending;            /* lsn_want was set by a half-full buffer */
	/* Durable commits waiting for their LSN, each on a futex of its own, so a
	 * finished write wakes only the sessions it made durable (log.c). */
	struct log_waiter *waiters;
	int space_waiters;              /* appenders waiting for room in the buffer */
	_Atomic uint64_t lsn_durable;   /* lsn_flushed, readable without lmu */
	uint64_t log_gen, log_used, log_file_size;
	uint64_t fmt_ready_gen;
	uint64_t log_stream; /* this run's first generation: names its log stream */
	uint64_t logs_kept, logs_removed; /* earlier runs' log files left on the target, removed for room */
	int log_fd, log_is_dir, log_dev_fd;
	struct target logt;
	struct closed_log *closed;
	uint64_t nclosed, nclosed_cap, repl_done;
	uint64_t closed_logs;
	int stopping;
};

struct db {
	int idx;
	int fd;
	uint64_t data_off; /* byte offset of page 0 */
	int64_t npages;
	int page;
	int64_t mailboxes, pages_per_mb;
	int64_t *tail;          /* per mailbox: next page an insert appends to */
	uint32_t *tail_fill;    /* per mailbox: bytes used in the tail page */
	pthread_mutex_t mu;
	pthread_cond_t cv, ckpt_cv;
	struct cache c;
	struct loggroup *g; /* the storage group whose log this database writes */
	uint64_t dbtime;     /* (mu) the last page modification's number: pages and records carry it */
	/* soft recovery: how far the redo session has replayed the group's log,
	 * the checkpoint's log position for this database's pages then */
	_Atomic uint64_t redo_lsn;
	/* pacing: transactional I/O so far and ops so far, shared by sessions */
	_Atomic uint64_t tx_ios, tx_ops;
	uint64_t tx_ios_load; /* tx_ios when the load stopped: the measurement window's */
};

struct engine {
	struct config cfg;
	struct db dbs[MAX_DBS];
	struct loggroup groups[MAX_DBS];
	int ngroups;
	struct worker *workers[MAX_DBS * (MAX_THREADS + 6)];
	int nworkers;
	_Atomic int stop, interrupted, flush_all, ckpt_stop;
	_Atomic int flush_behind; /* end=crash: write what is older than --recovery-behind-pct */
	_Atomic int active_threads; /* user threads running per database (throughput auto) */
	uint64_t t0_ns, t_end_ns;
	/* --transactions: session threads still working; the last one to finish
	 * notes when (the end of the load) and wakes run() (done_mu, done_cv). */
	_Atomic int sessions_left;
	uint64_t work_end_ns;
	pthread_mutex_t done_mu;
	pthread_cond_t done_cv;
	double elapsed_s, load_s; /* all of it; the load alone (start to stop, no final flush) */
	FILE *progress;
	int auto_history_n;
	double auto_history[MAX_THREADS][3];
};

extern struct engine E;

/* util.c */
uint64_t now_ns(void);
uint64_t rng_next(uint64_t s[2]);
double rng_unit(uint64_t s[2]);
void rng_seed(uint64_t s[2], uint64_t a, uint64_t b);
void *xalign(size_t size);
/* What die() names as the program: each executable that links base.c defines it. */
extern const char *const program_name;
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void sleep_ns(uint64_t ns);
struct worker *worker_new(struct db *db, const char *name, int index, void *(*fn)(void *), unsigned depth);
void worker_start(struct worker *w);
int64_t io_sync(struct worker *w, int stream, int fd, const struct iovec *iov, int n, uint64_t off, int write);
void stat_add(struct iostat *s, uint64_t bytes, uint64_t lat_ns);

/* emulate.c */
int w_submit(struct worker *w, struct ioreq *rq, int n);
/* w_submit for a caller that waits at once: one system call where the backend can. */
int w_submit_wait(struct worker *w, struct ioreq *rq, int n);
int w_reap(struct worker *w, struct iocomp *out, int min, int max);
void emulate_setup(struct worker *w);

/* options.c */
void options_parse(struct config *cfg, int argc, char **argv);

/* dbfile.c */
void db_open_all(void);
void log_target_open(struct loggroup *g);
int log_file_open(struct loggroup *g, uint64_t gen, int create, uint64_t *base);
void log_file_retire(struct loggroup *g, uint64_t gen);
int log_header_format(char *buf, size_t len, const struct loggroup *g, uint64_t gen);
int log_header_parse(const char *buf, const struct loggroup *g, uint64_t *gen, uint64_t *stream);
size_t log_scan(struct loggroup *g, struct log_file *out, size_t max);

/* cache.c */
void cache_init(struct db *d, int cap);
#define CA_DIRTY 1
#define CA_NEW 2 /* a freshly allocated page: no read, its content is new */
#define CA_CUT UINT64_MAX /* cache_access: the run stopped before it got its pages */
uint64_t cache_access(struct worker *w, int64_t page, int n, int flags);
void cache_wake(struct db *d);
void cache_preread(struct worker *w, const int64_t *pages, int n);
int cache_redo(struct worker *w, int64_t page, int n, uint64_t t);
int32_t cache_lookup(struct cache *c, int64_t page);
void dirty_unlink(struct cache *c, int32_t s);
void dirty_append(struct cache *c, int32_t s);
void clean_add(struct cache *c, int32_t s);
void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);

/* log.c */
void log_init(struct loggroup *g);
uint64_t log_append(struct loggroup *g, const void *rec, uint32_t len);
void log_wait(struct loggroup *g, uint64_t lsn);
void log_commit(struct loggroup *g, uint64_t lsn, int durable);
void *log_writer_main(void *arg);
void *log_format_main(void *arg);
void log_shutdown(struct loggroup *g);
/* Where database d's log is now, as its pages' lgpos count: the group's log
 * end, or in soft recovery how far the redo has replayed it. */
uint64_t log_pos(struct db *d);

/* ckpt.c */
void *ckpt_main(void *arg);
int ckpt_has_work(struct db *d);
int ckpt_behind_left(struct db *d);

/* background.c */
void *bdm_main(void *arg);
void *repl_main(void *arg);

/* session.c */
void *session_main(void *arg);
void session_done(void);

/* modes.c */
void *backup_main(void *arg);
void recovery_start(void);
int recovery_done(void);
void recovery_result(FILE *f, int db);
/* session.c's log record: its op field holds the operation in the low byte and
 * the database in the next, so a group's replay knows whose pages it names. */
#define REC_OP_DB_SHIFT 8

/* report.c */
void result_write(const char *path);

#endif
