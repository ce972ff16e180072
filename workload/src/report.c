/* The engine's result: one JSON document from its own completion times, per
 * database and stream, and per storage group its log's. The Python front end turns it into the Jetstress report.
 * The first key names the format and its version. */
#include <string.h>

#include "ese.h"
#include "tier.h"

static void put_stat(FILE *f, const struct iostat *s, double secs)
{
	fprintf(f, "{\"count\":%llu,\"bytes\":%llu,\"per_s\":%.4f,\"avg_bytes\":%.1f,"
		   "\"lat_avg_ms\":%.4f,\"lat_max_ms\":%.4f,\"hist_log2_ns\":[",
		(unsigned long long)s->count, (unsigned long long)s->bytes, secs > 0 ? s->count / secs : 0.0,
		s->count ? (double)s->bytes / s->count : 0.0, s->count ? s->lat_sum_ns / 1e6 / s->count : 0.0,
		s->lat_max_ns / 1e6);
	int last = HIST_BUCKETS - 1;
	while (last > 0 && !s->hist[last])
		last--;
	for (int i = 0; i <= last; i++)
		fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)s->hist[i]);
	fputs("]}", f);
}

/* A string as JSON (a path may hold quotes or backslashes). */
static void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void merge(struct iostat *a, const struct iostat *b)
{
	a->count += b->count;
	a->bytes += b->bytes;
	a->lat_sum_ns += b->lat_sum_ns;
	if (b->lat_max_ns > a->lat_max_ns)
		a->lat_max_ns = b->lat_max_ns;
	for (int i = 0; i < HIST_BUCKETS; i++)
		a->hist[i] += b->hist[i];
}

/* A stream -> figures object of the streams that have I/O. */
static void put_streams(FILE *f, const struct iostat *st, double secs)
{
	fputs("\"streams\":{", f);
	int first = 1;
	for (int s = 0; s < S_N; s++) {
		if (!st[s].count)
			continue;
		fprintf(f, "%s\"%s\":", first ? "" : ",", stream_names[s]);
		put_stat(f, &st[s], secs);
		first = 0;
	}
	fputs("}", f);
}

static void put_flushes(FILE *f, const struct loggroup *g)
{
	fprintf(f, "\"log_flushes\":{\"durable\":%llu,\"lazy\":%llu,\"capacity\":%llu,\"stop\":%llu},",
		(unsigned long long)g->log_flushes[LF_DURABLE], (unsigned long long)g->log_flushes[LF_LAZY],
		(unsigned long long)g->log_flushes[LF_CAPACITY], (unsigned long long)g->log_flushes[LF_STOP]);
}

/* One database. A storage group's log figures (closed logs, files kept, flushes,
 * the log threads' I/O) are its first database's, so the sums over databases
 * stay the whole run's; every database names the log stream it wrote into. With
 * one group per database nothing changes. */
static void put_db(FILE *f, int i, double secs)
{
	const struct config *c = &E.cfg;
	struct db *d = &E.dbs[i];
	static const struct loggroup none;
	const struct loggroup *g = d->g->idx == i ? d->g : &none;
	struct iostat st[S_N];
	uint64_t ops = 0, commits = 0, durable = 0, kinds[4] = {0}, digest = 0;
	memset(st, 0, sizeof(st));
	for (int k = 0; k < E.nworkers; k++) {
		struct worker *w = E.workers[k];
		if (w->db != d)
			continue;
		for (int s = 0; s < S_N; s++)
			merge(&st[s], &w->st[s]);
		if (!strncmp(w->name, "ese-user", 8)) {
			ops += w->ops_done;
			commits += w->commits;
			durable += w->durable_commits;
			for (int o = 0; o < 4; o++)
				kinds[o] += w->op_kinds[o];
			digest ^= w->op_digest; /* the sessions' digests, whatever order they ran in */
		}
	}
	tier_db_stats(i, &st[S_MIGRATION]);
	fprintf(f, "%s{\"db\":%d,\"mailboxes\":%lld,\"pages\":%lld,\"operations\":%llu,\"commits\":%llu,"
		   "\"durable_commits\":%llu,\"tx_ios_load\":%llu,\"closed_logs\":%llu,\"log_stream\":%llu,\"logs_kept\":%llu,\"logs_removed\":%llu,"
		   "\"cache\":{\"pages\":%d,\"hits\":%llu,\"misses\":%llu,\"clean_waits\":%llu,\"dirty_at_end\":%d},",
		i ? "," : "", i, (long long)d->mailboxes, (long long)d->npages, (unsigned long long)ops,
		(unsigned long long)commits, (unsigned long long)durable, (unsigned long long)d->tx_ios_load,
		(unsigned long long)g->closed_logs, (unsigned long long)d->g->log_stream, (unsigned long long)g->logs_kept,
		(unsigned long long)g->logs_removed, d->c.cap, (unsigned long long)d->c.hits,
		(unsigned long long)d->c.misses, (unsigned long long)d->c.clean_waits, d->c.ndirty);
	fprintf(f, "\"operations_by_kind\":{\"insert\":%llu,\"delete\":%llu,\"replace\":%llu,\"read\":%llu},"
		   "\"operations_digest\":\"%016llx\",",
		(unsigned long long)kinds[0], (unsigned long long)kinds[1], (unsigned long long)kinds[2],
		(unsigned long long)kinds[3], (unsigned long long)digest);
	if (c->mode == M_SOFT_RECOVERY)
		recovery_result(f, i);
	put_flushes(f, g);
	put_streams(f, st, secs);
	fputs("}", f);
}

/* One storage group: its databases, its log's figures and its log streams'
 * I/O (writes, pre-formatting, replication and recovery reads), with the
 * commits of its databases, which its log writes served. */
static void put_group(FILE *f, const struct loggroup *g, double secs)
{
	static const int log_streams[] = {S_LOG_WRITE, S_LOG_PREFORMAT, S_LOG_REPLICATION_READ, S_LOG_READ};
	struct iostat st[S_N];
	uint64_t commits = 0, durable = 0;
	memset(st, 0, sizeof(st));
	for (int k = 0; k < E.nworkers; k++) {
		struct worker *w = E.workers[k];
		if (w->g != g)
			continue;
		for (size_t s = 0; s < sizeof(log_streams) / sizeof(log_streams[0]); s++)
			merge(&st[log_streams[s]], &w->st[log_streams[s]]);
		if (!strncmp(w->name, "ese-user", 8)) {
			commits += w->commits;
			durable += w->durable_commits;
		}
	}
	fprintf(f, "%s{\"group\":%d,\"databases\":[", g->idx ? "," : "", g->idx);
	for (int k = 0; k < g->ndbs; k++)
		fprintf(f, "%s%d", k ? "," : "", g->dbs[k]);
	fputs("],\"log_path\":", f);
	put_str(f, g->logt.path);
	fprintf(f, ",\"commits\":%llu,\"durable_commits\":%llu,\"closed_logs\":%llu,"
		   "\"log_stream\":%llu,\"logs_kept\":%llu,\"logs_removed\":%llu,",
		(unsigned long long)commits, (unsigned long long)durable, (unsigned long long)g->closed_logs,
		(unsigned long long)g->log_stream, (unsigned long long)g->logs_kept,
		(unsigned long long)g->logs_removed);
	put_flushes(f, g);
	put_streams(f, st, secs);
	fputs("}", f);
}

void result_write(const char *path)
{
	FILE *f = *path ? fopen(path, "w") : stdout;
	if (!f)
		die("%s: cannot write the result", path);
	const struct config *c = &E.cfg;
	double secs = E.elapsed_s;
	fprintf(f, "{\"format\":\"" ESE_RESULT_FORMAT "\",\"version\":%d,\"mode\":\"%s\",\"interrupted\":%s,"
		   "\"elapsed_s\":%.4f,\"load_s\":%.4f,\"seed\":%d,\"ioengine\":\"%s\",\"page_bytes\":%d,\"log_file_bytes\":%d,"
		   "\"copies\":%d,\"threads_final\":%d,\"transactions\":%d,",
		ESE_RESULT_VERSION, c->mode_name, atomic_load(&E.interrupted) ? "true" : "false", secs, E.load_s, c->seed, c->ioengine,
		c->page_kb * 1024, c->log_file_kb * 1024, c->copies, atomic_load(&E.active_threads), c->transactions);
	/* Emulated latency is part of the result so no report passes it off as the device's. */
	fprintf(f, "\"lazy_flush_ms\":%g,\"emulated_latency_ms\":{\"db_read\":%g,\"db_write\":%g,\"log_write\":%g},",
		c->lazy_flush_ms, c->emu_db_read_ms, c->emu_db_write_ms, c->emu_log_write_ms);
	fputs("\"auto\":[", f);
	for (int i = 0; i < E.auto_history_n; i++)
		fprintf(f, "%s{\"threads\":%d,\"tx_iops\":%.2f,\"db_read_ms\":%.4f}", i ? "," : "",
			(int)E.auto_history[i][0], E.auto_history[i][1], E.auto_history[i][2]);
	fputs("],\"databases\":[", f);
	for (int i = 0; i < c->databases; i++)
		put_db(f, i, secs);
	fputs("],\"storage_groups\":[", f);
	for (int k = 0; k < E.ngroups; k++)
		put_group(f, &E.groups[k], secs);
	fputs("],\"tier\":", f);
	tier_report(f);
	fputs("}\n", f);
	if (f != stdout)
		fclose(f);
}
