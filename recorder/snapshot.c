#include "snapshot.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void snap_init(struct snapshot *s, const struct rotation *r, uint64_t before_ns,
	       uint64_t after_ns)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->root, sizeof(s->root), "%s.snapshots", r->stem);
	s->before_ns = before_ns;
	s->after_ns = after_ns;
}

static const char *base(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

static int link_file(const struct snapshot *s, const struct rotation *r, uint32_t index)
{
	char src[sizeof(r->stem) + 16], dst[sizeof(s->dir) + sizeof(src)];

	rot_name(r, index, src, sizeof(src));
	snprintf(dst, sizeof(dst), "%s/%s", s->dir, base(src));
	if (link(src, dst) && errno != EEXIST)
		return -errno;
	return 0;
}

int snap_link(struct snapshot *s, const struct rotation *r)
{
	int err;

	for (; s->next <= r->index; s->next++)
		if ((err = link_file(s, r, s->next)))
			return err;
	return 0;
}

int snap_begin(struct snapshot *s, const struct rotation *r, uint64_t now, uint64_t wall,
	       uint64_t since, const char *reason, const char *detail)
{
	time_t secs = (time_t)(wall / 1000000000u);
	char stamp[32];
	struct tm tm;
	size_t len;
	int err;

	gmtime_r(&secs, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
	if (mkdir(s->root, 0755) && errno != EEXIST)
		return -errno;
	len = (size_t)snprintf(s->dir, sizeof(s->dir), "%s/%s.%03uZ-%s", s->root, stamp,
			       (unsigned)(wall / 1000000u % 1000), reason);
	/* Two in one millisecond: the second one numbered. */
	for (int i = 2; mkdir(s->dir, 0755); i++) {
		if (errno != EEXIST || i > 99)
			return -errno;
		snprintf(s->dir + len, sizeof(s->dir) - len, "-%d", i);
		s->dir[sizeof(s->dir) - 1] = 0;
	}
	s->req_mono = now;
	s->req_wall = wall;
	s->until_mono = now + s->after_ns;
	snprintf(s->reason, sizeof(s->reason), "%s", reason);
	snprintf(s->detail, sizeof(s->detail), "%s", detail ? detail : "");
	/* The oldest file still on disk whose last record is within the window. */
	s->first = r->oldest;
	while (s->first < r->index && rot_end(r, s->first) + s->before_ns < now)
		s->first++;
	s->next = s->first;
	s->active = true;
	s->taken++;
	err = snap_link(s, r);
	if (!err) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		s->saved_mono = (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
		s->latency_ns = s->saved_mono - since;
		err = snap_manifest(s, r, false, NULL);
	}
	return err;
}

/* DETAIL may hold quotes or backslashes (a trigger's text): escaped for JSON. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s >= 0x20)
			fputc(*s, f);
	}
	fputc('"', f);
}

int snap_manifest(const struct snapshot *s, const struct rotation *r, bool complete,
		  const char *stopped)
{
	char path[sizeof(s->dir) + 32], tmp[sizeof(path) + 8];
	FILE *f;
	int err = 0;

	snprintf(path, sizeof(path), "%s/snapshot.json", s->dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "{\"reason\":\"%s\",\"detail\":", s->reason);
	json_str(f, s->detail);
	fprintf(f, ",\"requested_wall_ns\":%" PRIu64 ",\"requested_mono_ns\":%" PRIu64
		",\"saved_mono_ns\":%" PRIu64 ",\"before_ns\":%" PRIu64 ",\"after_ns\":%" PRIu64
		",\"latency_ns\":%" PRIu64
		",\"first_index\":%u,\"last_index\":%u,\"complete\":%s",
		s->req_wall, s->req_mono, s->saved_mono, s->before_ns, s->after_ns, s->latency_ns, s->first,
		s->next ? s->next - 1 : 0, complete ? "true" : "false");
	if (stopped)
		fprintf(f, ",\"stopped\":\"%s\"", stopped);
	fputs(",\"files\":[", f);
	for (uint32_t i = s->first; i < s->next; i++) {
		char name[sizeof(r->stem) + 16];

		rot_name(r, i, name, sizeof(name));
		fprintf(f, "%s\"%s\"", i == s->first ? "" : ",", base(name));
	}
	fputs("]}\n", f);
	if (fflush(f) || fsync(fileno(f)))
		err = -errno;
	if (fclose(f) && !err)
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}
