/* iotape-tracewriter-check OUT.iot CHUNK_RECORDS CODEC: writes the records on stdin
 * (raw struct iotape_record, 80 bytes each) through recorder/tracewriter.c with
 * CODEC (0 plain, 1 zstd, 2 lz4, 255 auto), a header and a footer of the format's
 * own fields, for tests/recorder/test_tracewriter.py to read back with the project's readers.
 * Each FLUSH_AT (argv[4..], ascending) writes the open chunk after that many
 * records (a partial chunk, as the loader's timer writes). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "tracewriter.h"

int main(int argc, char **argv)
{
	struct tracewriter tw;
	struct iotape_record r;
	unsigned long long at = 0;
	int err, next = 4;

	if (argc < 4) {
		fprintf(stderr, "usage: iotape-tracewriter-check OUT.iot CHUNK_RECORDS CODEC [FLUSH_AT...]\n");
		return 2;
	}
	err = tw_open(&tw, argv[1], (uint32_t)strtoul(argv[2], NULL, 10));
	if (!err)
		err = tw_set_codec(&tw, atoi(argv[3]));
	if (!err) {
		char h[256];
		int len = snprintf(h, sizeof(h),
				   "{\"format\":\"" IOTAPE_FILE_FORMAT "\",\"version\":%d,"
				   "\"record\":{\"size\":%d,\"layout_version\":%d},"
				   "\"mono_start_ns\":0,\"wall_start_ns\":0}",
				   tw_version(&tw), IOTAPE_RECORD_SIZE, IOTAPE_LAYOUT_VERSION);

		err = tw_write_header(&tw, h, (size_t)len);
	}
	while (!err && fread(&r, sizeof(r), 1, stdin) == 1) {
		*tw_slot(&tw) = r;
		err = tw_commit(&tw);
		at++;
		if (!err && next < argc && strtoull(argv[next], NULL, 10) == at) {
			err = tw_flush(&tw);
			next++;
		}
	}
	if (!err)
		err = tw_flush(&tw);
	if (!err) {
		char f[128];
		int len = snprintf(f, sizeof(f), "{\"events\":%" PRIu64 ",\"chunks\":%" PRIu64 "}",
				   tw.events, tw.chunks);

		err = tw_finish(&tw, f, (size_t)len);
	}
	tw_close(&tw);
	if (err) {
		fprintf(stderr, "iotape-tracewriter-check: error %d\n", err);
		return 1;
	}
	return 0;
}
