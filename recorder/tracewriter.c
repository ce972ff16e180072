#include "tracewriter.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}

static uint32_t crc(const void *p, size_t len)
{
	uLong c = crc32(0L, Z_NULL, 0);

	/* zlib's length is a uInt; chunks and JSON stay far below 4 GiB. */
	return crc32(c, p, (uInt)len);
}

/* Writes all of BUF at the current end. A short write leaves a torn tail
 * that tw_truncate_to_good() removes. */
static int write_all(struct tracewriter *tw, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len) {
		ssize_t w = write(tw->fd, p, len);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			tw->err = errno;
			return -errno;
		}
		if (w == 0) {
			tw->err = EIO;
			return -EIO;
		}
		p += w;
		len -= w;
	}
	return 0;
}

int tw_open(struct tracewriter *tw, const char *path, uint32_t chunk_records)
{
	memset(tw, 0, sizeof(*tw));
	tw->fd = -1;
	tw->cap = chunk_records;
	tw->buf = malloc(IOTAPE_CHUNK_HEADER_SIZE + (size_t)chunk_records * IOTAPE_RECORD_SIZE);
	if (!tw->buf)
		return -ENOMEM;
	tw->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (tw->fd < 0)
		return -errno;
	/* Held until close: repair refuses a file that a live capture still
	 * writes, and two captures never truncate each other's file. */
	if (flock(tw->fd, LOCK_EX | LOCK_NB))
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	if (ftruncate(tw->fd, 0))
		return -errno;
	return 0;
}

/* JSON blocks are padded to 8 so that chunks start 8-aligned. */
static int write_padded(struct tracewriter *tw, const char *json, size_t len)
{
	static const unsigned char zero[8];
	int err = write_all(tw, json, len);

	if (!err && len % 8)
		err = write_all(tw, zero, 8 - len % 8);
	return err;
}

int tw_write_header(struct tracewriter *tw, const char *json, size_t len)
{
	unsigned char h[24];
	int err;

	if (len > IOTAPE_MAX_JSON_BYTES)
		return -EMSGSIZE;
	memcpy(h, IOTAPE_HEADER_MAGIC, 8);
	put32(h + 8, IOTAPE_FILE_VERSION);
	put32(h + 12, IOTAPE_RECORD_SIZE);
	put32(h + 16, len);
	put32(h + 20, crc(json, len));
	err = write_all(tw, h, sizeof(h));
	if (!err)
		err = write_padded(tw, json, len);
	if (!err)
		tw->good_end = sizeof(h) + (len + 7) / 8 * 8;
	return err;
}

int tw_flush(struct tracewriter *tw)
{
	unsigned char *h = tw->buf;
	size_t payload = (size_t)tw->n * IOTAPE_RECORD_SIZE;
	int err;

	if (!tw->n)
		return 0;
	if (tw->err)
		return -tw->err;
	put32(h, IOTAPE_CHUNK_MAGIC);
	put32(h + 4, tw->n);
	put64(h + 8, tw->chunks);
	put32(h + 16, crc(h + IOTAPE_CHUNK_HEADER_SIZE, payload));
	put32(h + 20, crc(h, 20));
	err = write_all(tw, h, IOTAPE_CHUNK_HEADER_SIZE + payload);
	if (err)
		return err;
	tw->good_end += IOTAPE_CHUNK_HEADER_SIZE + payload;
	tw->events += tw->n;
	tw->chunks++;
	tw->n = 0;
	return 0;
}

int tw_commit(struct tracewriter *tw)
{
	if (++tw->n < tw->cap)
		return 0;
	return tw_flush(tw);
}

int tw_sync(struct tracewriter *tw)
{
	if (fdatasync(tw->fd) < 0) {
		tw->err = errno;
		return -errno;
	}
	return 0;
}

void tw_truncate_to_good(struct tracewriter *tw)
{
	/* Best effort: if even this fails, readers stop at the first bad chunk. */
	if (ftruncate(tw->fd, tw->good_end) == 0)
		lseek(tw->fd, tw->good_end, SEEK_SET);
}

int tw_finish(struct tracewriter *tw, const char *json, size_t len)
{
	unsigned char h[IOTAPE_FOOTER_HEADER_SIZE], t[16];
	uint64_t footer_off = tw->good_end;
	int err;

	if (len > IOTAPE_MAX_JSON_BYTES)
		return -EMSGSIZE;
	/* A failed chunk write (full disk) left err set; a footer may still fit. */
	tw->err = 0;
	put32(h, IOTAPE_FOOTER_MAGIC);
	put32(h + 4, len);
	put32(h + 8, crc(json, len));
	put32(h + 12, 0);
	put64(t, footer_off);
	memcpy(t + 8, IOTAPE_TRAILER_MAGIC, 8);
	err = write_all(tw, h, sizeof(h));
	if (!err)
		err = write_padded(tw, json, len);
	if (!err)
		err = write_all(tw, t, sizeof(t));
	if (!err && fsync(tw->fd) < 0)
		err = -errno;
	if (err) {
		tw_truncate_to_good(tw);
		fsync(tw->fd);
	}
	return err;
}

void tw_close(struct tracewriter *tw)
{
	if (tw->fd >= 0)
		close(tw->fd);
	free(tw->buf);
	tw->fd = -1;
	tw->buf = NULL;
}
