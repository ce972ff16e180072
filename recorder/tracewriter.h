/* Writer for the iotape trace file (docs/trace-format.md): header, CRC'd
 * chunks of records, footer and trailer. Chunks are the crash-safety unit:
 * the file is valid up to the last complete chunk at every moment. */
#ifndef TRACEWRITER_H
#define TRACEWRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "iotape_record.h"

struct tracewriter {
	int fd;
	uint32_t cap;			/* records per chunk */
	uint32_t n;			/* records buffered in the open chunk */
	unsigned char *buf;		/* chunk header + cap records */
	uint64_t chunks;		/* complete chunks in the file (next seq) */
	uint64_t events;		/* records in complete chunks */
	off_t good_end;			/* file size up to the last complete chunk */
	int err;			/* errno of the first failed write, or 0 */
	/* Compression (docs/trace-format.md, version 2): 0 writes plain chunks. */
	int codec;			/* IOTAPE_CODEC_*, TW_CODEC_AUTO or 0 */
	unsigned char *tbuf;		/* the open chunk's records, transformed */
	unsigned char *zbuf;		/* compressed chunk header + stored bytes */
	size_t zcap;			/* room for stored bytes in zbuf */
	void *zctx;			/* the zstd context, reused */
	uint64_t raw_bytes;		/* records' bytes in complete chunks */
	uint64_t stored_bytes;		/* bytes written for them, chunk headers included */
	uint64_t compress_ns;		/* this thread's CPU in transform and compression */
	/* The transform runs block by block as records are committed, while a block
	 * is still in cache: planes at a stride of cap until the chunk is written. */
	uint32_t split_n;		/* the open chunk's records already in tbuf */
	uint64_t split_done, split_end;	/* the last of them: completion, end offset */
	/* The CPU has AVX-512 (BW) for the transform, unless $IOTAPE_SPLIT_SSE2 is
	 * set (tests compare the two paths' files byte for byte). */
	bool avx512;
	bool wakes;			/* may hold wake and sched records: format version 4 */
};

/* Creates or truncates PATH. Returns 0 or -errno. */
int tw_open(struct tracewriter *tw, const char *path, uint32_t chunk_records);
/* Not a codec id in the file: zstd for a chunk written before it is full (a low
 * rate: its CPU is negligible), lz4 for a full one (a high rate, where the loader's
 * CPU competes with the I/O it records). */
#define TW_CODEC_AUTO 255

/* Compresses every later chunk with CODEC (IOTAPE_CODEC_*, TW_CODEC_AUTO, or 0 for
 * plain chunks); before tw_write_header(). Returns 0 or -errno. */
int tw_set_codec(struct tracewriter *tw, int codec);
/* The format version the header will carry: plain chunks are version 1, wake
 * records (tw->wakes, set before the header) version 4. */
int tw_version(const struct tracewriter *tw);
int tw_write_header(struct tracewriter *tw, const char *json, size_t len);

/* The next free record slot of the open chunk; write it, then tw_commit(). */
static inline struct iotape_record *tw_slot(struct tracewriter *tw)
{
	return (struct iotape_record *)(tw->buf + IOTAPE_CHUNK_HEADER_SIZE) + tw->n;
}

/* Writes the chunk when it is full. Returns 0 or -errno. */
int tw_commit(struct tracewriter *tw);
/* Writes the open chunk if it holds any record. Returns 0 or -errno. */
int tw_flush(struct tracewriter *tw);
int tw_sync(struct tracewriter *tw);
/* After a failed write: cut the file back to its last complete chunk. */
void tw_truncate_to_good(struct tracewriter *tw);
/* Footer JSON, trailer, fsync. On failure the file is cut back to its last chunk. */
int tw_finish(struct tracewriter *tw, const char *footer_json, size_t len);
void tw_close(struct tracewriter *tw);

#endif /* TRACEWRITER_H */
