#include "tracewriter.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SPLIT_AVX512 1
#endif

/* The open chunk's planes lie this much further apart than cap records while it
 * fills: 8192 records apart, the 16 planes a transpose writes map to one L1 cache
 * set (12 ways) and evict each other between its four 16-record passes. Packed to
 * n apart when the chunk is written. */
#define PLANE_PAD 64

/* zstd's fastest level: the records are transformed first, so more effort buys
 * little (docs/trace-format.md has the measurements). */
#define ZSTD_LEVEL 1

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
	put32(h + 8, tw_version(tw));
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

int tw_set_codec(struct tracewriter *tw, int codec)
{
	size_t raw = (size_t)tw->cap * IOTAPE_RECORD_SIZE;

	if (codec && codec != IOTAPE_CODEC_ZSTD && codec != IOTAPE_CODEC_LZ4 &&
	    codec != TW_CODEC_AUTO)
		return -EINVAL;
	if (codec == IOTAPE_CODEC_ZSTD || codec == TW_CODEC_AUTO) {
		tw->zcap = ZSTD_compressBound(raw);
		tw->zctx = ZSTD_createCCtx();
		if (!tw->zctx)
			return -ENOMEM;
	}
	if ((codec == IOTAPE_CODEC_LZ4 || codec == TW_CODEC_AUTO) &&
	    (size_t)LZ4_compressBound(raw) > tw->zcap)
		tw->zcap = LZ4_compressBound(raw);
	tw->codec = codec;
	if (!codec)
		return 0;
#ifdef HAVE_SPLIT_AVX512
	tw->avx512 = __builtin_cpu_supports("avx512bw") && !getenv("IOTAPE_SPLIT_SSE2");
#endif
	tw->tbuf = malloc(raw + (size_t)IOTAPE_RECORD_SIZE * PLANE_PAD);
	tw->zbuf = malloc(IOTAPE_ZCHUNK_HEADER_SIZE + tw->zcap + 8);
	return tw->tbuf && tw->zbuf ? 0 : -ENOMEM;
}

int tw_version(const struct tracewriter *tw)
{
	if (tw->wakes)	/* the recorder writes sched records with its wake records */
		return IOTAPE_FILE_VERSION_SCHED;
	return tw->codec ? IOTAPE_FILE_VERSION : IOTAPE_FILE_VERSION_PLAIN;
}

static uint64_t zigzag(uint64_t v)
{
	return (v << 1) ^ (0 - (v >> 63));
}

/* Records transformed in blocks of this many, then written plane by plane: each
 * plane's share of a block is one cache line. Byte by byte across the planes, the
 * stores (8 KiB apart) fought over a few cache sets and cost 240 ns per record;
 * blocked, 45 ns; blocked with SSE2 16x16 transposes, 21 ns (the whole transform,
 * in cache; in the loader, where a chunk is cold by the time it is full, transform
 * and codec together take 57-73 ns a record). */
#define SPLIT_BLOCK 64


#ifdef __SSE2__
/* SPLIT_BLOCK records B into the planes at DST (plane j at DST + j * N), 16 records
 * by 16 bytes at a time: four rounds of interleaving rows r and r + 8 transpose a
 * 16x16 block (each round rotates the bits of (row, column) by one). */
static void split_block(const unsigned char *b, unsigned char *dst, size_t n)
{
	for (size_t j = 0; j < IOTAPE_RECORD_SIZE; j += 16) {
		for (size_t k = 0; k < SPLIT_BLOCK; k += 16) {
			__m128i a[16], t[16];

			for (int r = 0; r < 16; r++)
				a[r] = _mm_loadu_si128((const __m128i *)(b + (k + r) *
									 IOTAPE_RECORD_SIZE + j));
			for (int round = 0; round < 4; round++) {
				for (int i = 0; i < 8; i++) {
					t[2 * i] = _mm_unpacklo_epi8(a[i], a[i + 8]);
					t[2 * i + 1] = _mm_unpackhi_epi8(a[i], a[i + 8]);
				}
				memcpy(a, t, sizeof(a));
			}
			for (int r = 0; r < 16; r++)
				_mm_storeu_si128((__m128i *)(dst + (j + r) * n + k), a[r]);
		}
	}
}

#ifdef HAVE_SPLIT_AVX512
/* The same with AVX-512 where the CPU has it (checked at run time): a 512-bit
 * unpack is four 128-bit ones side by side, so one pass transposes bytes 0-63
 * of 16 records as four 16x16 blocks at once, and its 32 registers hold the
 * whole block (SSE2's 16 spill it to the stack between rounds): delta_split,
 * 30 % of the loader's samples under perf, 16 -> 7 ns a record
 * (docs/benchmarks.md, Recorder, fourth pass). Bytes 64-79 go as in SSE2. */
__attribute__((target("avx512f,avx512bw")))
static void split_block_avx512(const unsigned char *b, unsigned char *dst, size_t n)
{
	_Static_assert(IOTAPE_RECORD_SIZE == 80, "64 bytes by AVX-512, 16 by SSE2");
	for (size_t k = 0; k < SPLIT_BLOCK; k += 16) {
		__m512i a[16], t[16];
		__m128i c[16], u[16];

#pragma GCC unroll 16
		for (int r = 0; r < 16; r++) {
			a[r] = _mm512_loadu_si512((const void *)(b + (k + r) * IOTAPE_RECORD_SIZE));
			c[r] = _mm_loadu_si128((const __m128i *)(b + (k + r) * IOTAPE_RECORD_SIZE + 64));
		}
#pragma GCC unroll 4
		for (int round = 0; round < 4; round++) {
#pragma GCC unroll 8
			for (int i = 0; i < 8; i++) {
				t[2 * i] = _mm512_unpacklo_epi8(a[i], a[i + 8]);
				t[2 * i + 1] = _mm512_unpackhi_epi8(a[i], a[i + 8]);
				u[2 * i] = _mm_unpacklo_epi8(c[i], c[i + 8]);
				u[2 * i + 1] = _mm_unpackhi_epi8(c[i], c[i + 8]);
			}
#pragma GCC unroll 16
			for (int r = 0; r < 16; r++) {
				a[r] = t[r];
				c[r] = u[r];
			}
		}
#pragma GCC unroll 16
		for (int r = 0; r < 16; r++) {
			/* Lane l of row r is plane 16 l + r. */
			_mm_storeu_si128((__m128i *)(dst + (size_t)r * n + k), _mm512_castsi512_si128(a[r]));
			_mm_storeu_si128((__m128i *)(dst + (size_t)(16 + r) * n + k),
					 _mm512_extracti32x4_epi32(a[r], 1));
			_mm_storeu_si128((__m128i *)(dst + (size_t)(32 + r) * n + k),
					 _mm512_extracti32x4_epi32(a[r], 2));
			_mm_storeu_si128((__m128i *)(dst + (size_t)(48 + r) * n + k),
					 _mm512_extracti32x4_epi32(a[r], 3));
			_mm_storeu_si128((__m128i *)(dst + (size_t)(64 + r) * n + k), c[r]);
		}
	}
}
#endif
#else
/* The same, byte by byte, where SSE2 is missing. */
static void split_block(const unsigned char *b, unsigned char *dst, size_t n)
{
	for (size_t j = 0; j < IOTAPE_RECORD_SIZE; j++)
		for (size_t k = 0; k < SPLIT_BLOCK; k++)
			dst[j * n + k] = b[k * IOTAPE_RECORD_SIZE + j];
}
#endif

/* The delta-split transform (docs/trace-format.md): times and offsets as zigzagged
 * deltas, then byte j of record i at tbuf[j * (cap + PLANE_PAD) + i] until the chunk is written
 * (split_planes). Records [split_n, upto) are transformed; upto is split_n plus a
 * whole block except at the chunk's end. */
static void delta_split(struct tracewriter *tw, uint32_t upto)
{
	const unsigned char *src = tw->buf + IOTAPE_CHUNK_HEADER_SIZE;
	size_t stride = (size_t)tw->cap + PLANE_PAD;
	struct iotape_record blk[SPLIT_BLOCK];
	uint64_t prev_done = tw->split_done, prev_end = tw->split_end;

	for (uint32_t i = tw->split_n; i < upto; i += SPLIT_BLOCK) {
		uint32_t m = upto - i < SPLIT_BLOCK ? upto - i : SPLIT_BLOCK;
		const unsigned char *b = (const unsigned char *)blk;

		memcpy(blk, src + (size_t)i * IOTAPE_RECORD_SIZE, (size_t)m * IOTAPE_RECORD_SIZE);
		for (uint32_t k = 0; k < m; k++) {
			struct iotape_record *t = &blk[k];
			uint64_t done = t->ts_complete_ns, issue = t->ts_issue_ns, off = t->offset;

			t->ts_complete_ns = zigzag(done - prev_done);
			t->ts_issue_ns = zigzag(done - issue);
			t->ts_queue_ns = zigzag(issue - t->ts_queue_ns);
			t->offset = zigzag(off - prev_end);
			prev_done = done;
			prev_end = off + t->bytes;
		}
		if (m == SPLIT_BLOCK) {
#ifdef HAVE_SPLIT_AVX512
			if (tw->avx512) {
				split_block_avx512(b, tw->tbuf + i, stride);
				continue;
			}
#endif
			split_block(b, tw->tbuf + i, stride);
			continue;
		}
		for (size_t j = 0; j < IOTAPE_RECORD_SIZE; j++) {
			unsigned char *d = tw->tbuf + j * stride + i;

			for (uint32_t k = 0; k < m; k++)
				d[k] = b[(size_t)k * IOTAPE_RECORD_SIZE + j];
		}
	}
	tw->split_n = upto;
	tw->split_done = prev_done;
	tw->split_end = prev_end;
}

/* The open chunk's planes, the last ones transformed, packed to a stride of n. */
static void split_planes(struct tracewriter *tw)
{
	delta_split(tw, tw->n);
	for (size_t j = 1; j < IOTAPE_RECORD_SIZE; j++)
		memmove(tw->tbuf + j * tw->n, tw->tbuf + j * ((size_t)tw->cap + PLANE_PAD), tw->n);
}

static uint64_t thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

/* The open chunk compressed into zbuf; its length, or 0 when it does not pay. */
static size_t compress_chunk(struct tracewriter *tw, size_t payload)
{
	unsigned char *h = tw->zbuf, *out = h + IOTAPE_ZCHUNK_HEADER_SIZE;
	uint64_t t0 = thread_ns();
	int codec = tw->codec;
	size_t z;

	if (codec == TW_CODEC_AUTO)
		codec = tw->n < tw->cap ? IOTAPE_CODEC_ZSTD : IOTAPE_CODEC_LZ4;
	split_planes(tw);
	if (codec == IOTAPE_CODEC_ZSTD) {
		z = ZSTD_compressCCtx(tw->zctx, out, tw->zcap, tw->tbuf, payload, ZSTD_LEVEL);
		if (ZSTD_isError(z))
			z = 0;
	} else {
		int r = LZ4_compress_default((const char *)tw->tbuf, (char *)out, (int)payload,
					     (int)tw->zcap);
		z = r > 0 ? (size_t)r : 0;
	}
	tw->compress_ns += thread_ns() - t0;
	if (!z || z >= payload)
		return 0;
	memset(out + z, 0, (8 - z % 8) % 8);
	put32(h, IOTAPE_ZCHUNK_MAGIC);
	put32(h + 4, tw->n);
	put64(h + 8, tw->chunks);
	put32(h + 16, z);
	h[20] = codec;
	h[21] = IOTAPE_TRANSFORM_DELTA_SPLIT;
	h[22] = h[23] = 0;
	put32(h + 24, crc(out, z));
	put32(h + 28, crc(h, 28));
	return IOTAPE_ZCHUNK_HEADER_SIZE + z + (8 - z % 8) % 8;
}

int tw_flush(struct tracewriter *tw)
{
	unsigned char *h = tw->buf;
	size_t payload = (size_t)tw->n * IOTAPE_RECORD_SIZE, len = 0;
	int err;

	if (!tw->n)
		return 0;
	if (tw->err)
		return -tw->err;
	if (tw->codec)
		len = compress_chunk(tw, payload);
	if (len) {
		h = tw->zbuf;
	} else {
		/* Plain where compression does not pay; a version 2 reader takes both. */
		put32(h, IOTAPE_CHUNK_MAGIC);
		put32(h + 4, tw->n);
		put64(h + 8, tw->chunks);
		put32(h + 16, crc(h + IOTAPE_CHUNK_HEADER_SIZE, payload));
		put32(h + 20, crc(h, 20));
		len = IOTAPE_CHUNK_HEADER_SIZE + payload;
	}
	err = write_all(tw, h, len);
	if (err)
		return err;
	tw->good_end += len;
	tw->raw_bytes += payload;
	tw->stored_bytes += len;
	tw->events += tw->n;
	tw->chunks++;
	tw->n = tw->split_n = 0;
	tw->split_done = tw->split_end = 0;
	return 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

int tw_commit(struct tracewriter *tw)
{
	if (++tw->n % SPLIT_BLOCK == 0 && tw->codec) {
		/* Transformed now, in cache: at the chunk's end, 8192 records later,
		 * the block has left the cache (docs/benchmarks.md, Recorder: the
		 * loader's transform and codec per request). Timed on the vDSO's clock:
		 * the thread's CPU clock is a system call, dearer than a block's transform. */
		uint64_t t0 = mono_ns();

		delta_split(tw, tw->n);
		tw->compress_ns += mono_ns() - t0;
	}
	if (tw->n < tw->cap)
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
	free(tw->tbuf);
	free(tw->zbuf);
	ZSTD_freeCCtx(tw->zctx);
	tw->fd = -1;
	tw->buf = tw->tbuf = tw->zbuf = NULL;
	tw->zctx = NULL;
}
