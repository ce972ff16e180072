/* Kernel <-> loader contract beyond the trace record (iotape_record.h):
 * filter limits, counter indexes and the in-flight entry. Fixed-width types only. */
#ifndef IOTAPE_H
#define IOTAPE_H

#define IOTAPE_MAX_DEVS 16
#define IOTAPE_MAX_PIDS 16
#define IOTAPE_MAX_CGROUPS 16
#define IOTAPE_MAX_COMMS 8
#define IOTAPE_COMM_LEN 16
#define IOTAPE_MAX_SUBMITTERS 16384	/* --wakes: threads remembered as submitters */
/* A task's kernel stack (x86-64's THREAD_SIZE: 16 KiB; 32 KiB with KASAN, where
 * a wake from the stack's upper half is then left out, never misattributed). */
#define IOTAPE_TASK_STACK_MAX (16 * 1024)

/* recorder/Makefile's FLOOR=N (bpf/iotape.bpf.c): 0, the recorder as it is. */
#ifndef IOTAPE_FLOOR
#define IOTAPE_FLOOR 0
#endif

/* The in-flight table is an array indexed by (device filter, hctx, tag): a
 * request owns its tag from start to completion, so no hashing or locking.
 * Requests outside these bounds, and the flush machinery's flush_rq (which
 * borrows another request's tag), use the hash map instead. */
#define IOTAPE_SLOT_HCTX 8
#define IOTAPE_SLOT_TAGS 1024
#define IOTAPE_SLOTS_PER_DEV (IOTAPE_SLOT_HCTX * IOTAPE_SLOT_TAGS)

/* Indexes into the per-CPU `counters` array; the loader sums them over CPUs. */
enum iotape_counter {
	IOTAPE_CNT_RINGBUF_FULL = 0,	/* record lost: ring buffer reserve failed */
	IOTAPE_CNT_INFLIGHT_FULL,	/* record lost: in-flight map update failed */
	IOTAPE_CNT_PRE_START,		/* request already in flight at attach, left out */
	IOTAPE_CNT_NO_START,		/* completion without block_io_start, recorded with pid 0 */
	IOTAPE_CNT_COMPLETION_UNSEEN,	/* the kernel reported no completion for a request; its
					 * record was kept, flagged, when its tag was reused */
	IOTAPE_CNT_DEVICE_FLUSH,	/* the device's flush requests (REQ_OP_FLUSH) issued */
	IOTAPE_CNT_FLUSH_LINKED,	/* of those, linked to the request that asked for them
					 * (no record of their own, see on_issue) */
	IOTAPE_CNT_WAKES,		/* --wakes: wake records written */
	IOTAPE_CNT_WAKE_LOST,		/* --wakes: wake records lost (ring buffer full) */
	IOTAPE_CNT_SCHED_LOST,		/* --wakes: sched records lost (ring buffer full) */
	IOTAPE_CNT_MAX,
};

/* The completion records' per-CPU rings (without --wakes): CPU c's records are
 * entries [c * cpu_slots, (c + 1) * cpu_slots) of the mmapable array `cpurecs`,
 * record i at i % cpu_slots; `cpupos` holds each CPU's positions. The completion
 * program is their only producer (the kernel never runs a program nested in
 * itself on one CPU: it skips and counts a recursion), the loader their only
 * consumer. Each position on a cache line of its own: head is written by its
 * CPU, tail by the loader. */
struct iotape_cpupos {
	__u64 head;			/* records written (the next one's number) */
	__u64 _pad0[7];
	__u64 tail;			/* records the loader has taken */
	__u64 _pad1[7];
};

/* What block_io_start learns in the submitter's context, kept until completion. */
struct iotape_inflight {
	__u64 rq;			/* owner (struct request *) of an array slot; 0 = free */
	__u64 ts_queue;			/* CLOCK_MONOTONIC ns; 0 if unknown */
	__u64 ts_issue;			/* CLOCK_MONOTONIC ns; 0 until issued */
	__u64 cgroup_id;
	__u32 pid;			/* tgid; 0 if unknown */
	__u32 tid;
	char comm[IOTAPE_COMM_LEN];
	__u32 opf;			/* cmd_flags as submitted (the flush machinery edits them) */
	/* Where and how much, as at issue: a request whose completion the kernel never
	 * reports is recorded from these when its tag is reused (the request by then
	 * describes its next owner). */
	__u32 bytes;
	__u64 sector;
	/* The whole disk (as the record's dev), and op and flags as the record has
	 * them: the loader writes the record of a request still held at stop on a
	 * disk where the kernel has nothing in flight, and cannot map opf itself. */
	__u32 dev;
	__u16 flags;
	__u8 op;
	__u8 state;			/* IOTAPE_STATE_* */
};

/* A slot's state past its record: a write that went through the flush machinery
 * (PREFLUSH or FUA) has its record written when its data completes, and keeps
 * its slot for the rest of its sequence: a post-flush the machinery may issue for
 * it (a disk without FUA) and the request's second, zero-byte completion. Neither
 * is a record; the next owner of the tag takes the slot over. */
#define IOTAPE_STATE_FLUSH_SEQ 1

#endif /* IOTAPE_H */
