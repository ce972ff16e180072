/* Generated from schemas/trace_record.toml by `python -m schemas.gen_c`.
 * Do not edit: change the TOML and regenerate. */
#ifndef IOTAPE_RECORD_H
#define IOTAPE_RECORD_H

/* Fixed-width kernel types, so the BPF side (vmlinux.h) and user space
 * (linux/types.h) share this header unchanged. */
#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define IOTAPE_LAYOUT_VERSION 1
#define IOTAPE_RECORD_SIZE 80

struct iotape_record {
	__u64 ts_queue_ns;         /* bio/request entered the block layer, ns since trace start (0 if unknown) */
	__u64 ts_issue_ns;         /* dispatched to the driver (blktrace D), ns since trace start (0 if unknown) */
	__u64 ts_complete_ns;      /* completed (blktrace C), ns since trace start */
	__u64 offset;              /* byte offset on dev (512-byte sector x 512) */
	__u64 cgroup_id;           /* submitting task's cgroup v2 id (0 if unknown) */
	__u32 dev;                 /* device of the request: major << 20 | minor (the whole disk) */
	__u32 bytes;               /* request size in bytes */
	__u32 pid;                 /* submitting process (tgid); 0 if unknown */
	__u32 tid;                 /* submitting thread; 0 if unknown */
	__u16 flags;               /* request flags, bit set */
	__s16 error;               /* 0 or -errno */
	__u8 op;                   /* operation */
	__u8 stream;               /* stream label */
	__u8 _pad0[2];
	char comm[16];             /* submitting thread's name, NUL-padded */
};

#define IOTAPE_OP_READ 0
#define IOTAPE_OP_WRITE 1
#define IOTAPE_OP_FLUSH 2
#define IOTAPE_OP_DISCARD 3
#define IOTAPE_OP_WRITE_ZEROES 4
#define IOTAPE_OP_OTHER 5

#define IOTAPE_STREAM_OTHER 0
#define IOTAPE_STREAM_DB_READ 1
#define IOTAPE_STREAM_DB_WRITE 2
#define IOTAPE_STREAM_LOG_WRITE 3
#define IOTAPE_STREAM_LOG_PREFORMAT 4
#define IOTAPE_STREAM_BDM_READ 5
#define IOTAPE_STREAM_LOG_REPLICATION_READ 6
#define IOTAPE_STREAM_LOG_READ 7
#define IOTAPE_STREAM_BACKUP_READ 8
#define IOTAPE_STREAM_MIGRATION 9

#define IOTAPE_FLAG_SYNC (1u << 0)
#define IOTAPE_FLAG_FUA (1u << 1)
#define IOTAPE_FLAG_PREFLUSH (1u << 2)
#define IOTAPE_FLAG_META (1u << 3)
#define IOTAPE_FLAG_READAHEAD (1u << 4)
#define IOTAPE_FLAG_PRIO (1u << 5)
#define IOTAPE_FLAG_BACKGROUND (1u << 6)
#define IOTAPE_FLAG_NOWAIT (1u << 7)
#define IOTAPE_FLAG_IDLE (1u << 8)
#define IOTAPE_FLAG_POLLED (1u << 9)
#define IOTAPE_FLAG_NOMERGE (1u << 10)
#define IOTAPE_FLAG_DEVICE_FLUSH (1u << 14)
#define IOTAPE_FLAG_COMPLETE_UNSEEN (1u << 15)

/* The trace file; see docs/trace-format.md. */
#define IOTAPE_FILE_FORMAT "iotape-trace"
#define IOTAPE_FILE_VERSION 2
#define IOTAPE_FILE_VERSION_PLAIN 1
#define IOTAPE_FILE_VERSION_WAKES 3
#define IOTAPE_WAKE_OP 255
#define IOTAPE_FILE_VERSION_SCHED 4
#define IOTAPE_SCHED_OP 254
#define IOTAPE_SCHED_RUN_DELAY_NS offset
#define IOTAPE_SCHED_ON_CPU_NS cgroup_id
#define IOTAPE_SCHED_RUNS bytes
#define IOTAPE_HEADER_MAGIC "IOTAPE\r\n"
#define IOTAPE_TRAILER_MAGIC "IOTEND\r\n"
#define IOTAPE_CHUNK_MAGIC 0x4B4E4843u
#define IOTAPE_ZCHUNK_MAGIC 0x5A4B4843u
#define IOTAPE_FOOTER_MAGIC 0x544F4F46u
#define IOTAPE_CHUNK_HEADER_SIZE 24
#define IOTAPE_ZCHUNK_HEADER_SIZE 32
#define IOTAPE_FOOTER_HEADER_SIZE 16
#define IOTAPE_MAX_CHUNK_RECORDS 65536
#define IOTAPE_MAX_JSON_BYTES 16777216
#define IOTAPE_CODEC_ZSTD 1
#define IOTAPE_CODEC_LZ4 2
#define IOTAPE_TRANSFORM_NONE 0
#define IOTAPE_TRANSFORM_DELTA_SPLIT 1

#endif /* IOTAPE_RECORD_H */
