/* Database and log storage: create a database to full size (with progress) or
 * reuse one, and map log generations to files or device slots.
 *
 * The first 4 KiB of a database region is a header. Creation writes it as
 * "creating" first and as "ready" only after every page is written and synced,
 * so a creation that was interrupted is found and redone, never trusted. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ese.h"

#define MAGIC "IOTAPE-ESE-DB"
enum { ST_CREATING = 1, ST_READY = 2 };

struct db_header {
	char magic[16];
	uint32_t version, state, page, db;
	uint64_t npages;
};

static int open_target(const struct target *t, int create)
{
	int fl = O_RDWR | O_DIRECT | (create && !t->is_dev ? O_CREAT : 0);
	int fd = open(t->path, fl, 0644);
	if (fd < 0)
		die("%s: cannot open: %s", t->path, strerror(errno));
	return fd;
}

static void write_header(struct db *d, const struct target *t, uint32_t state)
{
	char *buf = xalign(4096);
	struct db_header h = {.version = 1, .state = state, .page = (uint32_t)d->page, .db = (uint32_t)d->idx,
			      .npages = (uint64_t)d->npages};
	memcpy(h.magic, MAGIC, sizeof(MAGIC));
	memcpy(buf, &h, sizeof(h));
	if (pwrite(d->fd, buf, 4096, (off_t)t->off) != 4096 || fdatasync(d->fd))
		die("%s: cannot write the database header: %s", t->path, strerror(errno));
	free(buf);
}

/* What the region holds: no database of ours, one whose creation never finished,
 * a finished one of another shape, or this database, ready. */
enum { HDR_NONE, HDR_INCOMPLETE, HDR_OTHER, HDR_OK };
static const char *const hdr_names[] = {"new", "incomplete", "different", "ready"};

static int header_state(struct db *d, const struct target *t)
{
	char *buf = xalign(4096);
	struct db_header h;
	int ok = pread(d->fd, buf, 4096, (off_t)t->off) == 4096;
	memcpy(&h, buf, sizeof(h));
	free(buf);
	if (!ok || memcmp(h.magic, MAGIC, sizeof(MAGIC)) || h.version != 1)
		return HDR_NONE;
	if (h.state != ST_READY)
		return HDR_INCOMPLETE;
	if (h.page != (uint32_t)d->page || h.npages != (uint64_t)d->npages || h.db != (uint32_t)d->idx)
		return HDR_OTHER;
	return HDR_OK;
}

/* The null backend reads and writes nothing, so its database need not exist: the
 * file only gets its size (sparse), and the header stays "creating" so that a
 * real run never takes those unwritten pages for a database. That is what lets
 * the model run at a published deployment's full size on a small disk. */
static void create_db_null(struct db *d, const struct target *t)
{
	write_header(d, t, ST_CREATING);
	if (!t->is_dev && ftruncate(d->fd, (off_t)(d->data_off + (uint64_t)d->npages * (uint64_t)d->page)))
		die("%s: cannot size the database file: %s", t->path, strerror(errno));
}

static void create_db(struct db *d, const struct target *t)
{
	if (!strcmp(E.cfg.ioengine, "null")) {
		create_db_null(d, t);
		return;
	}
	const uint64_t chunk = 1 << 20;
	uint64_t total = (uint64_t)d->npages * (uint64_t)d->page;
	char *buf = xalign(chunk);
	write_header(d, t, ST_CREATING);
	uint64_t last = 0;
	for (uint64_t done = 0; done < total && !atomic_load(&E.stop);) {
		uint64_t n = total - done < chunk ? total - done : chunk;
		/* Each page carries its number, so a page read back is recognisable. */
		for (uint64_t p = 0; p < n; p += (uint64_t)d->page)
			*(uint64_t *)(buf + p) = (done + p) / (uint64_t)d->page;
		ssize_t r = pwrite(d->fd, buf, n, (off_t)(d->data_off + done));
		if (r != (ssize_t)n)
			die("%s: writing the database failed at %llu: %s", t->path, (unsigned long long)done,
			    r < 0 ? strerror(errno) : "short write (device full?)");
		done += n;
		uint64_t t_now = now_ns();
		if (t_now - last > 250000000ull || done == total) {
			fprintf(E.progress, "{\"type\":\"create\",\"db\":%d,\"done\":%llu,\"total\":%llu}\n", d->idx,
				(unsigned long long)done, (unsigned long long)total);
			fflush(E.progress);
			last = t_now;
		}
	}
	free(buf);
	if (atomic_load(&E.stop))
		return; /* header still says "creating": the next run recreates it */
	if (fdatasync(d->fd))
		die("%s: fdatasync: %s", t->path, strerror(errno));
	write_header(d, t, ST_READY);
}

void db_open_all(void)
{
	struct config *cfg = &E.cfg;
	double mb_per_db = cfg->mailboxes / cfg->databases;
	for (int i = 0; i < cfg->databases && !atomic_load(&E.stop); i++) {
		struct db *d = &E.dbs[i];
		const struct target *t = &cfg->db[i];
		d->idx = i;
		d->page = cfg->page_kb * 1024;
		d->mailboxes = (int64_t)(mb_per_db + 0.5);
		if (d->mailboxes < 1)
			d->mailboxes = 1;
		d->pages_per_mb = (int64_t)(cfg->mailbox_mb * 1048576.0 / d->page);
		if (d->pages_per_mb < 4)
			die("--mailbox-size-mb %g: a mailbox needs at least 4 pages", cfg->mailbox_mb);
		d->npages = d->mailboxes * d->pages_per_mb;
		d->data_off = t->off + (uint64_t)d->page;
		uint64_t need = (uint64_t)(d->npages + 1) * (uint64_t)d->page;
		if (t->is_dev && t->size < need)
			die("%s: database %d needs %llu bytes, the region has %llu", t->path, i,
			    (unsigned long long)need, (unsigned long long)t->size);
		d->fd = open_target(t, 1);
		int found = header_state(d, t);
		int reuse = !strcmp(cfg->create, "reuse") && found == HDR_OK;
		fprintf(E.progress, "{\"type\":\"db\",\"db\":%d,\"action\":\"%s\",\"bytes\":%llu,\"found\":\"%s\"}\n",
			i, reuse ? "reuse" : "create", (unsigned long long)need, hdr_names[found]);
		fflush(E.progress);
		if (!reuse)
			create_db(d, t);
		pthread_mutex_init(&d->mu, NULL);
		pthread_cond_init(&d->cv, NULL);
		pthread_cond_init(&d->ckpt_cv, NULL);
	}
}

/* Where log generation `gen` lives: its own file in a directory, or slot
 * (gen - 1) mod slots of a device region. Files are named by the group (its
 * number, that of its first database). */
int log_file_open(struct loggroup *g, uint64_t gen, int create, uint64_t *base)
{
	if (!g->log_is_dir) {
		uint64_t slots = g->logt.size / g->log_file_size;
		*base = g->logt.off + ((gen - 1) % slots) * g->log_file_size;
		return g->log_dev_fd;
	}
	char path[600];
	snprintf(path, sizeof(path), "%s/E%02d%08llX.log", g->logt.path, g->idx, (unsigned long long)gen);
	*base = 0;
	int fd = open(path, O_RDWR | O_DIRECT | (create ? O_CREAT | O_TRUNC : 0), 0644);
	if (fd < 0)
		die("%s: cannot open: %s", path, strerror(errno));
	return fd;
}

/* The databases of a group as "0,2,4". */
static void group_dbs(const struct loggroup *g, char *out, size_t len)
{
	size_t n = 0;
	out[0] = 0;
	for (int k = 0; k < g->ndbs && n < len; k++)
		n += (size_t)snprintf(out + n, len - n, "%s%d", k ? "," : "", g->dbs[k]);
}

/* The header a log file starts with (log.c's pre-formatter writes it); the
 * stream is the first generation of the run that wrote the file. A group of one
 * database writes version 2, the log of that database as before storage groups;
 * a group of several, version 3, which names the group and its databases (a
 * replay then takes records only for exactly those). */
int log_header_format(char *buf, size_t len, const struct loggroup *g, uint64_t gen)
{
	if (g->ndbs == 1)
		return snprintf(buf, len, "IOTAPE-ESE-LOG 2 db=%d gen=%llu stream=%llu\n", g->dbs[0],
				(unsigned long long)gen, (unsigned long long)g->log_stream);
	char dbs[400];
	group_dbs(g, dbs, sizeof(dbs));
	return snprintf(buf, len, "IOTAPE-ESE-LOG 3 group=%d gen=%llu stream=%llu dbs=%s\n", g->idx,
			(unsigned long long)gen, (unsigned long long)g->log_stream, dbs);
}

int log_header_parse(const char *buf, const struct loggroup *g, uint64_t *gen, uint64_t *stream)
{
	int v, who, used = 0;
	unsigned long long gn, st;
	if (g->ndbs == 1) {
		if (sscanf(buf, "IOTAPE-ESE-LOG %d db=%d gen=%llu stream=%llu", &v, &who, &gn, &st) != 4 || v != 2 ||
		    who != g->dbs[0])
			return 0;
	} else {
		char dbs[400], want[400];
		if (sscanf(buf, "IOTAPE-ESE-LOG %d group=%d gen=%llu stream=%llu dbs=%n", &v, &who, &gn, &st, &used) != 4 ||
		    v != 3 || who != g->idx || !used)
			return 0;
		size_t k = strcspn(buf + used, "\n");
		if (k >= sizeof(dbs))
			return 0;
		memcpy(dbs, buf + used, k);
		dbs[k] = 0;
		group_dbs(g, want, sizeof(want));
		if (strcmp(dbs, want))
			return 0; /* another layout's group: its records name other databases */
	}
	*gen = gn, *stream = st;
	return 1;
}

static int cmp_gen(const void *a, const void *b)
{
	uint64_t x = ((const struct log_file *)a)->gen, y = ((const struct log_file *)b)->gen;
	return x < y ? -1 : x > y;
}

static int is_log_name(const struct loggroup *g, const char *name)
{
	char prefix[8];
	snprintf(prefix, sizeof(prefix), "E%02d", g->idx);
	return !strncmp(name, prefix, 3) && strlen(name) == 15 && !strcmp(name + 11, ".log");
}

/* Every log file of group g on its target, oldest generation first, with the
 * stream it belongs to (0: a file whose header is not ours, or not yet written). */
size_t log_scan(struct loggroup *g, struct log_file *out, size_t max)
{
	size_t n = 0;
	char *buf = xalign(4096);
	if (g->log_is_dir) {
		DIR *dir = opendir(g->logt.path);
		if (!dir)
			die("%s: cannot read the log directory: %s", g->logt.path, strerror(errno));
		struct dirent *e;
		while ((e = readdir(dir)) && n < max) {
			if (!is_log_name(g, e->d_name))
				continue;
			struct log_file *f = &out[n++];
			f->gen = strtoull(e->d_name + 3, NULL, 16);
			f->stream = 0;
			int fd = openat(dirfd(dir), e->d_name, O_RDONLY | O_DIRECT);
			uint64_t gn, st;
			if (fd >= 0 && pread(fd, buf, 4096, 0) == 4096 && log_header_parse(buf, g, &gn, &st) && gn == f->gen)
				f->stream = st;
			if (fd >= 0)
				close(fd);
		}
		closedir(dir);
	} else {
		uint64_t slots = g->logt.size / g->log_file_size;
		for (uint64_t s = 0; s < slots && n < max; s++) {
			uint64_t gn, st;
			if (pread(g->log_dev_fd, buf, 4096, (off_t)(g->logt.off + s * g->log_file_size)) == 4096 &&
			    log_header_parse(buf, g, &gn, &st) && (gn - 1) % slots == s)
				out[n++] = (struct log_file){gn, st};
		}
	}
	free(buf);
	qsort(out, n, sizeof(*out), cmp_gen);
	return n;
}

/* A run that writes a log starts a new stream after the generations already on
 * the target and keeps the earlier runs' files (soft recovery replays them). In a
 * directory, earlier streams' files are removed oldest first only while the file
 * system has less than LOG_ROOM_FILES log files of room; a device region is a ring
 * whose oldest slots the new stream overwrites as it goes. */
#define LOG_ROOM_FILES 64
static void start_stream(struct loggroup *g)
{
	static struct log_file files[1 << 16];
	size_t n = log_scan(g, files, sizeof(files) / sizeof(files[0])), removed = 0;
	uint64_t first = n ? files[n - 1].gen + 1 : 1;
	if (g->log_is_dir) {
		for (size_t i = 0; i < n; i++) {
			struct statvfs sv;
			if (statvfs(g->logt.path, &sv) ||
			    (uint64_t)sv.f_bavail * sv.f_frsize >= LOG_ROOM_FILES * g->log_file_size)
				break;
			char path[600];
			snprintf(path, sizeof(path), "%s/E%02d%08llX.log", g->logt.path, g->idx,
				 (unsigned long long)files[i].gen);
			if (!unlink(path))
				removed++;
		}
	}
	g->log_stream = g->log_gen = first;
	/* Modification numbers grow across runs as the generations do. */
	for (int k = 0; k < g->ndbs; k++)
		E.dbs[g->dbs[k]].dbtime = first << 40;
	g->fmt_ready_gen = first - 1;
	g->logs_kept = n - removed;
	g->logs_removed = removed;
	fprintf(E.progress, "{\"type\":\"logs\",\"db\":%d,\"stream\":%llu,\"kept\":%zu,\"removed\":%zu,\"ring\":%d",
		g->idx, (unsigned long long)first, n - removed, removed, !g->log_is_dir);
	if (g->ndbs > 1) {
		char dbs[400];
		group_dbs(g, dbs, sizeof(dbs));
		fprintf(E.progress, ",\"group\":%d,\"databases\":[%s]", g->idx, dbs);
	}
	fputs("}\n", E.progress);
	fflush(E.progress);
}

void log_target_open(struct loggroup *g)
{
	g->logt = E.cfg.log[g->idx];
	struct stat st;
	g->log_is_dir = !g->logt.is_dev;
	if (g->log_is_dir) {
		if (stat(g->logt.path, &st) || !S_ISDIR(st.st_mode))
			die("%s: log path is not a directory", g->logt.path);
	} else {
		if (g->logt.size / g->log_file_size < 8)
			die("%s: a log region holds at least 8 log files", g->logt.path);
		g->log_dev_fd = open_target(&g->logt, 0);
	}
	if (E.cfg.mode <= M_THROUGHPUT)
		start_stream(g);
}

/* Circular logging: a log file goes once replication has read it and it is
 * older than the checkpoint could need. */
void log_file_retire(struct loggroup *g, uint64_t gen)
{
	uint64_t keep = (uint64_t)(E.cfg.ckpt_depth_mb * 1048576.0) / g->log_file_size + 4;
	if (!g->log_is_dir || gen < g->log_stream + keep || E.cfg.mode == M_SOFT_RECOVERY)
		return;
	char path[600];
	snprintf(path, sizeof(path), "%s/E%02d%08llX.log", g->logt.path, g->idx, (unsigned long long)(gen - keep));
	unlink(path);
}
