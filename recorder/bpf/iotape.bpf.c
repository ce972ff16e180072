// SPDX-License-Identifier: GPL-2.0
/* iotape kernel side: one struct iotape_record per completed block request.
 *
 * block_io_start  (submitter's context) -> who submitted it, queue time
 * block_rq_issue                        -> issue (dispatch) time
 * block_rq_complete                     -> the record, into the ring buffer
 *
 * Settings are const volatile globals the loader fills before load, so the
 * verifier sees them as constants and prunes the filters that are off. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "iotape_record.h"
#include "iotape.h"

char LICENSE[] SEC("license") = "GPL";

/* IOTAPE_FLOOR (recorder/Makefile's FLOOR=N, never the default build): what the
 * hot path costs at the least, for issue #36's floor (docs/benchmarks.md,
 * Recorder, seventh pass). 1: every program returns at entry, so a request
 * pays only the tracepoints' dispatch; 2: as 1 plus one clock read each (the
 * traces these two write have no records); 3: two programs a request, no
 * block_io_start: block_rq_issue takes the submitter from the task it runs in
 * and the queue time from the kernel's rq->start_time_ns (exact only where the
 * submitter issues, unplugged; an fsync's record is lost: cost, not records);
 * 4: the programs loaded but none attached (the loader's own cost); 5: as 1
 * without block_io_start (two programs a request, as 3, returning at entry);
 * 6: two programs, no block_rq_issue: the issue time is the kernel's
 * rq->io_start_time_ns, read at completion (set only while the queue keeps
 * stats, as writeback throttling does; device flushes are not linked). */
#if IOTAPE_FLOOR == 1 || IOTAPE_FLOOR == 5
#define FLOOR_RETURN() return 0
#elif IOTAPE_FLOOR == 2
#define FLOOR_RETURN()			\
	do {				\
		bpf_ktime_get_ns();	\
		return 0;		\
	} while (0)
#else
#define FLOOR_RETURN() do {} while (0)
#endif

const volatile __u32 n_devs = 0;
const volatile __u32 devs[IOTAPE_MAX_DEVS] = {};	/* kernel dev_t: major << 20 | minor */
const volatile __u8 dev_is_part[IOTAPE_MAX_DEVS] = {};
const volatile bool any_part = false;
const volatile __u32 n_pids = 0;
const volatile __u32 pids[IOTAPE_MAX_PIDS] = {};
const volatile __u32 n_cgroups = 0;
const volatile __u64 cgroups[IOTAPE_MAX_CGROUPS] = {};
const volatile __u32 n_comms = 0;
const volatile __u64 comms[IOTAPE_MAX_COMMS][2] = {};	/* 16 NUL-padded bytes */
const volatile __u32 op_mask = 0xffffffff;		/* bit (1 << IOTAPE_OP_*) */
const volatile __u64 ring_half = 0;			/* wake user space past this */
const volatile bool wakes = false;			/* --wakes: wake records */
const volatile __u32 cpu_slots = 0;			/* per-CPU ring slots; 0: none (iotape.h) */
const volatile __u32 cpu_wake_at = 0;			/* wake the loader from this fill on */
const volatile __u32 cpu_wake_mask = 0;			/* ... and each time fill & mask is 0 */

/* Set by the loader after load and before attach: CLOCK_MONOTONIC at the start. */
__u64 mono_start = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 32 << 20);			/* resized by the loader (--ring-mb) */
} events SEC(".maps");

/* The completion records' per-CPU rings and their positions (iotape.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);				/* ncpu * cpu_slots, set by the loader */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct iotape_record);
} cpurecs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);				/* ncpu, set by the loader */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct iotape_cpupos);
} cpupos SEC(".maps");

/* Fast path: one slot per (device filter, hctx, tag); see iotape.h. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, IOTAPE_SLOTS_PER_DEV);	/* n_devs * IOTAPE_SLOTS_PER_DEV, set by the loader */
	__uint(map_flags, BPF_F_MMAPABLE);		/* the loader counts requests in flight at stop */
	__type(key, __u32);
	__type(value, struct iotape_inflight);
} slots SEC(".maps");

/* Slow path for requests without a slot. Preallocated (the default) so an
 * update never allocates in the I/O path. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);			/* resized by the loader (--inflight) */
	__type(key, __u64);				/* struct request * */
	__type(value, struct iotape_inflight);
} inflight SEC(".maps");

/* --wakes: the threads that have submitted a traced request (tid -> 1). LRU, so
 * a capture with many short-lived threads forgets the oldest, never fails. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, IOTAPE_MAX_SUBMITTERS);
	__type(key, __u32);
	__type(value, __u8);
} submitters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOTAPE_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	/* Atomic although per-CPU: a completion in IRQ context can nest in a submission. */
	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline bool task_filter(void)
{
	return n_pids || n_cgroups || n_comms;
}

/* The whole disk's dev_t in the kernel's encoding (disk_devt()). */
static __always_inline __u32 disk_dev(struct request *rq)
{
	struct gendisk *disk = rq->q->disk;

	return ((__u32)disk->major << 20) | (__u32)disk->first_minor;
}

/* rq->part is assigned in blk_account_io_start, which on some kernels runs
 * after the block_io_start tracepoint; the bio's bdev is the same partition. */
static __always_inline __u32 part_dev(struct request *rq)
{
	struct block_device *part = rq->part;

	if (!part && rq->bio)
		part = rq->bio->bi_bdev;
	return part ? part->bd_dev : 0;
}

/* The index of the device filter RQ matches, or -1. */
static __always_inline int dev_match(struct request *rq, __u32 *dev)
{
	__u32 disk = disk_dev(rq), part = any_part ? part_dev(rq) : 0;

	*dev = disk;
	for (int i = 0; i < IOTAPE_MAX_DEVS; i++) {
		if (i >= n_devs)
			break;
		if (devs[i] == (dev_is_part[i] ? part : disk))
			return i;
	}
	return -1;
}

/* With an I/O scheduler the request owns its internal (scheduler) tag for
 * its whole life and gets a driver tag only at dispatch; without one,
 * internal_tag is BLK_MQ_NO_TAG and the driver tag is owned from allocation. */
static __always_inline struct iotape_inflight *slot_of(struct request *rq, int devslot)
{
	__u32 tag = rq->internal_tag, hctx = rq->mq_hctx->queue_num, idx;

	if (tag == (__u32)-1)
		tag = rq->tag;
	if (tag >= IOTAPE_SLOT_TAGS || hctx >= IOTAPE_SLOT_HCTX)
		return NULL;
	idx = ((__u32)devslot * IOTAPE_SLOT_HCTX + hctx) * IOTAPE_SLOT_TAGS + tag;
	return bpf_map_lookup_elem(&slots, &idx);
}

/* RQ's in-flight entry: its slot if it owns one, else the hash map's. */
static __always_inline struct iotape_inflight *find(struct request *rq, int devslot,
						    struct iotape_inflight **slot)
{
	__u64 key = (__u64)rq;

	*slot = slot_of(rq, devslot);
	if (*slot && (*slot)->rq == key)
		return *slot;
	return bpf_map_lookup_elem(&inflight, &key);
}

static __always_inline bool has_flag_preflush(__u32 opf)
{
	return opf & (1u << bpf_core_enum_value(enum req_flag_bits, __REQ_PREFLUSH));
}

/* An fsync reaches the block layer as an empty REQ_OP_WRITE with REQ_PREFLUSH
 * (REQ_OP_FLUSH is only the flush machinery's own flush_rq): call it a flush. */
static __always_inline __u8 map_op(__u32 opf, __u32 len)
{
	__u32 op = opf & 0xff;				/* REQ_OP_MASK */

	if (op == bpf_core_enum_value(enum req_op, REQ_OP_READ))
		return IOTAPE_OP_READ;
	if (op == bpf_core_enum_value(enum req_op, REQ_OP_WRITE))
		return !len && has_flag_preflush(opf) ? IOTAPE_OP_FLUSH : IOTAPE_OP_WRITE;
	if (op == bpf_core_enum_value(enum req_op, REQ_OP_FLUSH))
		return IOTAPE_OP_FLUSH;
	if (op == bpf_core_enum_value(enum req_op, REQ_OP_DISCARD))
		return IOTAPE_OP_DISCARD;
	if (op == bpf_core_enum_value(enum req_op, REQ_OP_WRITE_ZEROES))
		return IOTAPE_OP_WRITE_ZEROES;
	return IOTAPE_OP_OTHER;
}

static __always_inline bool op_match(struct request *rq)
{
	return op_mask & (1u << map_op(rq->cmd_flags, rq->__data_len));
}

/* The REQ_* bit positions move between kernel versions; CO-RE reads them
 * from the running kernel's BTF, and the exists-guard drops absent bits. */
#define FLAG(bit, out)							\
	do {								\
		if (bpf_core_enum_value_exists(enum req_flag_bits, bit) && \
		    (opf & (1u << bpf_core_enum_value(enum req_flag_bits, bit)))) \
			f |= (out);					\
	} while (0)

static __always_inline __u16 map_flags(__u32 opf)
{
	__u16 f = 0;

	FLAG(__REQ_SYNC, IOTAPE_FLAG_SYNC);
	FLAG(__REQ_FUA, IOTAPE_FLAG_FUA);
	FLAG(__REQ_PREFLUSH, IOTAPE_FLAG_PREFLUSH);
	FLAG(__REQ_META, IOTAPE_FLAG_META);
	FLAG(__REQ_RAHEAD, IOTAPE_FLAG_READAHEAD);
	FLAG(__REQ_PRIO, IOTAPE_FLAG_PRIO);
	FLAG(__REQ_BACKGROUND, IOTAPE_FLAG_BACKGROUND);
	FLAG(__REQ_NOWAIT, IOTAPE_FLAG_NOWAIT);
	FLAG(__REQ_IDLE, IOTAPE_FLAG_IDLE);
	FLAG(__REQ_POLLED, IOTAPE_FLAG_POLLED);
	FLAG(__REQ_NOMERGE, IOTAPE_FLAG_NOMERGE);
	return f;
}

static __always_inline bool comm_match(const char *comm)
{
	const __u64 *w = (const __u64 *)comm;

	for (int i = 0; i < IOTAPE_MAX_COMMS; i++) {
		if (i >= n_comms)
			break;
		if (comms[i][0] == w[0] && comms[i][1] == w[1])
			return true;
	}
	return false;
}

static __always_inline bool pid_match(__u32 tgid)
{
	for (int i = 0; i < IOTAPE_MAX_PIDS; i++) {
		if (i >= n_pids)
			break;
		if (pids[i] == tgid)
			return true;
	}
	return false;
}

static __always_inline bool cgroup_match(__u64 id)
{
	for (int i = 0; i < IOTAPE_MAX_CGROUPS; i++) {
		if (i >= n_cgroups)
			break;
		if (cgroups[i] == id)
			return true;
	}
	return false;
}

/* One record's contents, gathered before the ring buffer is touched. */
struct emit_args {
	__u64 q, iss, now, offset;
	__u32 dev, bytes, opf;
	__u16 extra_flags;
	__s16 error;
};

/* The next record of this CPU's ring, or NULL when the loader has not taken the
 * ring's oldest yet (full). *pos and *head for cpu_commit(). */
static __always_inline struct iotape_record *cpu_reserve(struct iotape_cpupos **pos, __u64 *head,
							 __u64 *tail)
{
	__u32 cpu = bpf_get_smp_processor_id(), idx;
	struct iotape_cpupos *p = bpf_map_lookup_elem(&cpupos, &cpu);

	if (!p)
		return NULL;
	*pos = p;
	*head = p->head;
	*tail = p->tail;
	if (*head - *tail >= cpu_slots)
		return NULL;
	idx = cpu * cpu_slots + (__u32)(*head & (cpu_slots - 1));
	return bpf_map_lookup_elem(&cpurecs, &idx);
}

/* Publishes the record: head moves past it only after its fields are written.
 * The compiler barrier keeps the stores in that order in the program; the x86
 * JIT emits them in order, and x86 makes stores visible in program order (TSO),
 * so the loader, reading head with acquire, sees the whole record. */
static __always_inline void cpu_commit(struct iotape_cpupos *pos, __u64 head)
{
	asm volatile("" ::: "memory");
	pos->head = head + 1;
}

/* The loader drains on a 10 ms timer, and a CPU that takes many completions
 * (on a single-queue device, all of them) can fill its ring sooner: at half
 * full, wake it, and again every eighth of the ring while it stays behind
 * (cpu_wake_at, cpu_wake_mask), so a ring fills only when the loader cannot
 * keep up, never because it slept. The wake-up is a record of 8 bytes in the
 * shared ring buffer, which the loader's poll returns on and its reader skips
 * (not a struct iotape_record); FILL counts the record just committed. */
static __always_inline void cpu_wake(__u64 fill)
{
	__u64 word = 0;

	if (fill < cpu_wake_at || (fill & cpu_wake_mask))
		return;
	bpf_ringbuf_output(&events, &word, sizeof(word), BPF_RB_FORCE_WAKEUP);
}

/* One record. Completions go to this CPU's ring when the loader made them
 * (cpu_slots, no --wakes): no lock and no atomic, against the shared ring
 * buffer's spinlock and its reserve and submit (docs/benchmarks.md, Recorder);
 * every other record, and all of them with --wakes (whose wake and sched records
 * the file keeps in time order among the requests), to the shared ring buffer. */
static __always_inline void emit(const struct emit_args *a, const struct iotape_inflight *e,
				 bool completion)
{
	struct iotape_cpupos *pos = NULL;
	struct iotape_record *r;
	__u64 flags, head = 0, tail = 0;
	bool cpu = completion && cpu_slots;

	r = cpu ? cpu_reserve(&pos, &head, &tail) : bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count(IOTAPE_CNT_RINGBUF_FULL);
		return;
	}
	r->ts_queue_ns = a->q;
	r->ts_issue_ns = a->iss;
	r->ts_complete_ns = a->now;
	r->offset = a->offset;
	r->dev = a->dev;
	r->bytes = a->bytes;
	/* An entry's flags are map_flags(its opf), and a->opf is the entry's. */
	r->flags = (e ? e->flags : map_flags(a->opf)) | a->extra_flags;
	r->error = a->error;		/* raw blk_status_t; user space maps it to -errno */
	r->op = map_op(a->opf, a->bytes);
	r->stream = 0;
	r->_pad0[0] = 0;
	r->_pad0[1] = 0;
	if (e) {
		r->cgroup_id = e->cgroup_id;
		r->pid = e->pid;
		r->tid = e->tid;
		__builtin_memcpy(r->comm, e->comm, sizeof(r->comm));
	} else {
		r->cgroup_id = 0;
		r->pid = 0;
		r->tid = 0;
		__builtin_memset(r->comm, 0, sizeof(r->comm));
	}
	if (cpu) {
		if (pos) {
			cpu_commit(pos, head);
			cpu_wake(head + 1 - tail);
		}
		return;
	}
	/* User space drains on a 10 ms timer; a wake-up per event would cost
	 * more than the rest of this program. Wake it only if the ring fills. */
	flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > ring_half ?
		BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(r, flags);
}

/* OLD still owns the in-flight entry a new request is about to take: the
 * kernel freed OLD's tag without block_rq_complete reaching this program (seen
 * on 6.18 a few times per million requests, also by an independent consumer of
 * the tracepoint and of block_io_done, with no recursion miss). It did complete,
 * or its tag could not be reused: keep its record, flagged, with now as the
 * latest its completion can have been. */
static __always_inline void recover(const struct iotape_inflight *old, __u32 dev)
{
	struct emit_args a = {
		.q = old->ts_queue,
		.iss = old->ts_issue,
		.now = bpf_ktime_get_ns(),
		.offset = old->sector * 512,
		.dev = dev,
		.bytes = old->bytes,
		.opf = old->opf,
		.extra_flags = IOTAPE_FLAG_COMPLETE_UNSEEN,
		.error = 0,
	};

	count(IOTAPE_CNT_COMPLETION_UNSEEN);
	emit(&a, old, false);
}

/* Who submitted the request, read from the task itself: the same values as
 * bpf_get_current_pid_tgid(), bpf_get_current_cgroup_id() (the default
 * hierarchy's cgroup) and bpf_get_current_comm() (the kernel keeps comm
 * NUL-padded: __set_task_comm uses strscpy_pad), without the three helper
 * calls: ~24 of this program's ~124 ns (docs/benchmarks.md, Recorder). */
static __always_inline void submitter(struct iotape_inflight *e)
{
	struct task_struct *t = bpf_get_current_task_btf();
	const __u64 *comm = (const __u64 *)t->comm;
	__u64 *out = (__u64 *)e->comm;

	e->pid = t->tgid;
	e->tid = t->pid;
	e->cgroup_id = t->cgroups->dfl_cgrp->kn->id;
	out[0] = comm[0];
	out[1] = comm[1];
}

/* --wakes: the submitter's scheduler accounting as it submits (docs/trace-format.md,
 * "Sched records"): how long it has waited runnable on a run queue, been on a CPU,
 * and been put on one, each over its life. Paired with its request by tid and
 * ts_queue_ns; a think time's share of run-queue wait is the difference between
 * two of the thread's records. */
static __always_inline void sched_record(const struct iotape_inflight *e)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct iotape_record *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);

	if (!r) {
		count(IOTAPE_CNT_SCHED_LOST);
		return;
	}
	__builtin_memset(r, 0, sizeof(*r));
	r->ts_queue_ns = r->ts_issue_ns = r->ts_complete_ns = e->ts_queue;
	r->pid = e->pid;
	r->tid = e->tid;
	r->IOTAPE_SCHED_RUN_DELAY_NS = BPF_CORE_READ(t, sched_info.run_delay);
	r->IOTAPE_SCHED_ON_CPU_NS = BPF_CORE_READ(t, se.sum_exec_runtime);
	r->IOTAPE_SCHED_RUNS = (__u32)BPF_CORE_READ(t, sched_info.pcount);
	r->op = IOTAPE_SCHED_OP;
	bpf_ringbuf_submit(r, bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > ring_half ?
			   BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline int track_start(struct request *rq, bool at_issue)
{
	struct iotape_inflight *s, e;
	__u64 key = (__u64)rq;
	int devslot;
	__u32 dev;

	devslot = dev_match(rq, &dev);
	if (devslot < 0)
		return 0;
	s = slot_of(rq, devslot);
	if (s) {
		if (s->rq && !s->state)
			recover(s, dev);
	} else {
		struct iotape_inflight *old = bpf_map_lookup_elem(&inflight, &key);

		if (old)
			recover(old, dev);
	}
	submitter(&e);
	if (!op_match(rq) || (n_pids && !pid_match(e.pid)) ||
	    (n_cgroups && !cgroup_match(e.cgroup_id)) || (n_comms && !comm_match(e.comm))) {
		/* A request merged away is freed without completing and leaves
		 * its entry; the next owner of the tag must not inherit it. */
		if (s)
			s->rq = 0;
		else if (task_filter())
			bpf_map_delete_elem(&inflight, &key);
		return 0;
	}
	e.rq = key;
	e.ts_queue = at_issue ? rq->start_time_ns : bpf_ktime_get_ns();
	e.ts_issue = at_issue ? bpf_ktime_get_ns() : 0;
	e.opf = rq->cmd_flags;
	e.bytes = rq->__data_len;
	e.sector = rq->__sector;
	e.dev = dev;
	e.flags = map_flags(e.opf);
	e.op = map_op(e.opf, e.bytes);
	e.state = 0;
	if (s)
		*s = e;
	else if (bpf_map_update_elem(&inflight, &key, &e, BPF_ANY))
		count(IOTAPE_CNT_INFLIGHT_FULL);
	if (wakes && !bpf_map_lookup_elem(&submitters, &e.tid)) {
		__u8 one = 1;

		bpf_map_update_elem(&submitters, &e.tid, &one, BPF_ANY);
	}
	if (wakes)
		sched_record(&e);
	return 0;
}

/* Since 6.5 (blk_account_io_start): once per new request, in the context of
 * the task that submitted the bio, also when a loop or dm worker completes it. */
SEC("tp_btf/block_io_start")
int BPF_PROG(on_io_start, struct request *rq)
{
	FLOOR_RETURN();
	return track_start(rq, false);
}

/* Fallback before 6.5: block_rq_insert also runs in the submitter's context
 * but misses requests issued directly (no scheduler); those are recorded
 * with an unknown task. The loader enables it only when block_io_start is absent. */
SEC("tp_btf/block_rq_insert")
int BPF_PROG(on_rq_insert, struct request *rq)
{
	FLOOR_RETURN();
	return track_start(rq, false);
}

static __always_inline bool is_device_flush(__u32 opf)
{
	return (opf & 0xff) == bpf_core_enum_value(enum req_op, REQ_OP_FLUSH);
}

/* The flush machinery's flush_rq is the device's flush, issued for the
 * requests with REQ_PREFLUSH (or, on a disk without FUA, REQ_FUA: a post-flush)
 * pending on the queue; blk_kick_flush lends it the hctx and tag (internal tag
 * with a scheduler) of the first of them, so its slot is that request's. One
 * application flush is one record: an empty PREFLUSH write (an fsync) gets the
 * device flush's dispatch as its issue time, a data write with PREFLUSH or FUA
 * already says it had one (its flags). Returns true when linked: the device
 * flush then gets no record of its own. */
static __always_inline bool link_device_flush(struct request *rq, int devslot)
{
	struct iotape_inflight *s = slot_of(rq, devslot);

	count(IOTAPE_CNT_DEVICE_FLUSH);
	if (!s || !s->rq || s->rq == (__u64)rq ||
	    !(s->flags & (IOTAPE_FLAG_PREFLUSH | IOTAPE_FLAG_FUA)))
		return false;
	if (s->op == IOTAPE_OP_FLUSH && !s->ts_issue)
		s->ts_issue = bpf_ktime_get_ns();
	count(IOTAPE_CNT_FLUSH_LINKED);
	return true;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_issue, struct request *rq)
{
	struct iotape_inflight *e, *s, n = {};
	__u64 key = (__u64)rq;
	int devslot;
	__u32 dev;

	FLOOR_RETURN();
	if (IOTAPE_FLOOR == 3 && !is_device_flush(rq->cmd_flags))
		return track_start(rq, true);
	devslot = dev_match(rq, &dev);
	if (devslot < 0)
		return 0;
	if (is_device_flush(rq->cmd_flags) && link_device_flush(rq, devslot))
		return 0;
	e = find(rq, devslot, &s);
	if (e && e->state) {
		/* The tag's last owner's flush sequence ended unseen (FUA on a disk
		 * with FUA needs none): this request never passed block_io_start. */
		e->rq = 0;
		e = NULL;
	}
	if (e) {
		e->ts_issue = bpf_ktime_get_ns();
		/* Bios merged since the start have grown the request. */
		e->bytes = rq->__data_len;
		e->sector = rq->__sector;
		e->op = map_op(e->opf, e->bytes);
		return 0;
	}
	/* No block_io_start: the flush state machine's flush_rq, passthrough,
	 * or a request queued before the attach. With a task filter it was
	 * filtered out (or cannot be attributed), so leave it. */
	if (task_filter() || !op_match(rq))
		return 0;
	n.ts_queue = rq->start_time_ns;
	if (n.ts_queue && n.ts_queue < mono_start)
		return 0;			/* completion counts it as pre_start */
	n.rq = key;
	n.ts_issue = bpf_ktime_get_ns();
	n.opf = rq->cmd_flags;
	n.bytes = rq->__data_len;
	n.sector = rq->__sector;
	n.dev = dev;
	n.flags = map_flags(n.opf);
	n.op = map_op(n.opf, n.bytes);
	if (bpf_map_update_elem(&inflight, &key, &n, BPF_ANY))
		count(IOTAPE_CNT_INFLIGHT_FULL);
	return 0;
}

/* A request merged into another is freed without completing; forget it, so
 * the slot is free and the loader does not wait for it at stop. Rare: only
 * request-to-request merges in a scheduler. */
SEC("tp_btf/block_rq_merge")
int BPF_PROG(on_rq_merge, struct request *rq)
{
	struct iotape_inflight *e, *s;
	__u64 key = (__u64)rq;
	int devslot;
	__u32 dev;

	FLOOR_RETURN();
	devslot = dev_match(rq, &dev);
	if (devslot < 0)
		return 0;
	e = find(rq, devslot, &s);
	if (e == s && s)
		s->rq = 0;
	else if (e)
		bpf_map_delete_elem(&inflight, &key);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	struct iotape_inflight *e, *s;
	struct emit_args a = {};
	__u64 key = (__u64)rq;
	int devslot;

	FLOOR_RETURN();
	devslot = dev_match(rq, &a.dev);
	if (devslot < 0)
		return 0;
	e = find(rq, devslot, &s);
	if (e && e->state) {
		/* The end of a flush sequence whose record was written at its data's
		 * completion (IOTAPE_STATE_FLUSH_SEQ): the slot is free now. */
		if (!nr_bytes)
			e->rq = 0;
		return 0;
	}
	if (e) {
		a.q = e->ts_queue;
		a.iss = e->ts_issue;
		a.opf = e->opf;
		if (IOTAPE_FLOOR == 6 && !a.iss)
			a.iss = rq->io_start_time_ns;
	} else {
		/* A device flush linked at issue (or issued before the attach), or
		 * the zero-byte end of a flush sequence whose entry was in the hash
		 * map (freed at its data's completion): no request of its own. */
		if (task_filter() || !op_match(rq) || is_device_flush(rq->cmd_flags) ||
		    (!nr_bytes && (rq->cmd_flags & 0xff) == bpf_core_enum_value(enum req_op, REQ_OP_WRITE)))
			return 0;
		a.q = rq->start_time_ns;
		a.iss = rq->io_start_time_ns;
		a.opf = rq->cmd_flags;
		if ((a.q && a.q < mono_start) || (a.iss && a.iss < mono_start)) {
			count(IOTAPE_CNT_PRE_START);
			return 0;
		}
		count(IOTAPE_CNT_NO_START);
	}
	if (is_device_flush(a.opf))
		a.extra_flags = IOTAPE_FLAG_DEVICE_FLUSH;	/* not linked: see on_issue */
	a.now = bpf_ktime_get_ns();
	a.offset = rq->__sector * 512;
	a.bytes = nr_bytes;
	a.error = error;
	emit(&a, e, true);
	/* A partial completion (nr_bytes < what is left) keeps the entry; so does
	 * a data write through the flush machinery, for the rest of its sequence. */
	if (e && nr_bytes >= rq->__data_len) {
		if (e == s && nr_bytes && e->op == IOTAPE_OP_WRITE &&
		    (e->flags & (IOTAPE_FLAG_PREFLUSH | IOTAPE_FLAG_FUA)))
			s->state = IOTAPE_STATE_FLUSH_SEQ;
		else if (e == s)
			s->rq = 0;
		else
			bpf_map_delete_elem(&inflight, &key);
	}
	return 0;
}

/* A word of scratch per CPU: a stack address stored here reads back as a number. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} scratch SEC(".maps");

/* Whether this program runs on the current task's own kernel stack: in task
 * context. A hard or soft interrupt runs on the CPU's interrupt stack (x86-64
 * runs softirqs there too), with `current` whoever it interrupted, not the waker.
 * The kernel's preempt count would say so, but it is a per-CPU variable, and a
 * kernel without KALLSYMS_ALL (this one) cannot resolve it for BPF. */
static __always_inline bool in_task(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	__u32 zero = 0;
	__u64 *w = bpf_map_lookup_elem(&scratch, &zero), base;

	if (!w)
		return false;
	*w = (__u64)&zero;
	base = (__u64)BPF_CORE_READ(t, stack);
	return *w - base < IOTAPE_TASK_STACK_MAX;
}

/* --wakes: a thread that submits traced I/O is woken by another such thread, in
 * task context (a futex or condition-variable wake: a database session woken by
 * its log writer's commit). One wake record (docs/trace-format.md); wakes from
 * interrupts (an I/O completion, a timer) and from threads that never submitted
 * are none. sched_waking runs in the waker's context (sched_wakeup may run on
 * the wakee's CPU). */
SEC("tp_btf/sched_waking")
int BPF_PROG(on_waking, struct task_struct *p)
{
	struct iotape_record *r;
	__u32 wakee, waker;
	__u64 id;

	if (!wakes)
		return 0;
	wakee = BPF_CORE_READ(p, pid);
	if (!bpf_map_lookup_elem(&submitters, &wakee))
		return 0;
	id = bpf_get_current_pid_tgid();
	waker = (__u32)id;
	if (waker == wakee || !bpf_map_lookup_elem(&submitters, &waker))
		return 0;
	if (!in_task())
		return 0;
	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count(IOTAPE_CNT_WAKE_LOST);
		return 0;
	}
	__builtin_memset(r, 0, sizeof(*r));
	r->ts_queue_ns = r->ts_issue_ns = r->ts_complete_ns = bpf_ktime_get_ns();
	r->pid = BPF_CORE_READ(p, tgid);
	r->tid = wakee;
	r->offset = waker;
	r->bytes = id >> 32;
	r->op = IOTAPE_WAKE_OP;
	count(IOTAPE_CNT_WAKES);
	bpf_ringbuf_submit(r, bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > ring_half ?
			   BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	return 0;
}
