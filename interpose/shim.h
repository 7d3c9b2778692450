/* shim.h - what the parts of librbtrace.so share: configuration, the per-thread
 * record rings, the raw (pre-encoding) record layouts, and the event emitters.
 *
 * Everything here is hidden (-fvisibility=hidden); only the verbs wrappers are
 * exported. The inline helpers below run on the application's post/poll path:
 * they must never lock, allocate, or make a system call.
 */
#ifndef RBT_SHIM_H
#define RBT_SHIM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <x86intrin.h>

#include <infiniband/verbs.h>

#include "interpose/rbt_verbs.h"
#include "trace_format/rbt_format.h"

#define RBT_EXPORT	__attribute__((visibility("default")))
#define RBT_LIKELY(x)	__builtin_expect(!!(x), 1)
#define RBT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RBT_TLS		__thread __attribute__((tls_model("initial-exec")))
#define RBT_ALIGN8(x)	(((x) + 7u) & ~(size_t)7u)

struct rbt_config {
	size_t ring_bytes;    /* per thread, power of two */
	unsigned flush_ms;    /* max delay from record to file */
	unsigned block_ms;    /* max wait for ring space before dropping */
	int stacks;	      /* unw_backtrace at resource creation */
	int nic_ts;	      /* completion timestamps on every CQ */
	unsigned payload;     /* bytes of payload captured per send WR */
	int debug;	      /* RBTRACE_DEBUG */
	char output[4096];    /* RBTRACE_OUTPUT, "" = current directory */
	char manifest[4096];  /* RBTRACE_MANIFEST, "" = none */
	uint64_t flush_ticks; /* flush_ms in TSC ticks */
	int writer_cpu;	      /* RBTRACE_WRITER_CPU, -1 = not pinned */
	int light;	      /* RBTRACE_LIGHT: one timestamp per post and poll */
};
extern struct rbt_config rbt_cfg;

/* The flight recorder and rotation (shim_flight.c; settings read by shim_env.c,
 * docs/recording.md). */
struct rbt_flight_cfg {
	uint64_t flight_bytes; /* RBTRACE_FLIGHT, 0 = off */
	unsigned before_ms;    /* window before a trigger, 0 = the whole ring */
	unsigned after_ms;     /* window after it */
	unsigned gap_ms;       /* least time between two snapshots */
	unsigned max_snaps;    /* snapshots per process at most */
	unsigned stall_ms;     /* WRs outstanding, no completion: 0 = off */
	unsigned slow_post_us; /* 0 = off */
	unsigned slow_poll_us; /* 0 = off */
	uint64_t rotate_bytes; /* RBTRACE_ROTATE=SIZE */
	uint64_t rotate_ms;    /* RBTRACE_ROTATE=DURATION */
};
extern struct rbt_flight_cfg rbt_fcfg;

/* 0 not started, 1 recording, 2 off (disabled, failed, or finished and released:
 * exec failed), 3 sealed: the final flush began (exit, a signal, exec), and a
 * thread that enters a verb now parks until the process ends (rbt_park). */
#define RBT_STATE_SEALED 3
extern _Atomic int rbt_state;
int rbt_start_slow(void);
/* Parks the calling thread while the state is sealed (returns at once in the
 * thread that finishes the trace, and when exec failed). */
void rbt_park(void);

/* Nonzero while this thread runs tracer code: verbs called from inside the tracer
 * (or from a provider inside a wrapped verb) are forwarded untraced. */
extern RBT_TLS int rbt_tls_inside;

static inline uint64_t rbt_now(void)
{
	return __rdtsc();
}

/* A slow-path wrapper's real call (the statement after depth): t0 and t1 read
 * around it with depth raised (rbt_tls_inside, or the CM wrappers' nesting
 * depth), the errno it left in rerrno. */
#define RBT_TIMED(depth, ...)    \
	uint64_t t0 = rbt_now(); \
	(depth)++;               \
	__VA_ARGS__;             \
	(depth)--;               \
	int rerrno = errno;      \
	uint64_t t1 = rbt_now();

/* The head of a call's record: exit time, what the call returned, its errno (0
 * when it succeeded). */
#define RBT_EV_HEAD(e, exit, r, error) \
	((e)->ts_exit = (exit), (e)->ret = (r), (e)->err = (error))

/* e->f = a->f: given a list macro LIST(X) of fields, LIST(RBT_COPY_FIELD) copies
 * them from the attributes a into the record e (the names are the same). */
#define RBT_COPY_FIELD(f) e->f = a->f;

/* A post's or poll's exit time: none in light mode (the trace's ts_exit is then
 * absent, and readers take the entry time for it). */
static inline uint64_t rbt_now_exit(void)
{
	return RBT_UNLIKELY(rbt_cfg.light) ? 0 : __rdtsc();
}

/* 1 when the calling (slow-path) wrapper should record. Starts the recorder on
 * first use so that a program which never calls a verb gets no thread and no
 * file. */
static inline int rbt_recording(void)
{
	int s = atomic_load_explicit(&rbt_state, memory_order_relaxed);

	if (RBT_LIKELY(s == 1))
		return !rbt_tls_inside;
	if (s == 0)
		return rbt_start_slow() && !rbt_tls_inside;
	if (s == RBT_STATE_SEALED && !rbt_tls_inside)
		rbt_park();
	return 0;
}

/* ---- raw records: what the hot path copies into the ring ------------------- */
enum rbt_raw_kind {
	RBT_RAW_PAD = 1,   /* filler up to the ring's end */
	RBT_RAW_EVENT,	   /* a struct rbt_event + its strings/blobs/arrays */
	RBT_RAW_POST_SEND, /* rbt_raw_post + rbt_raw_swr[], or dense WRs */
	RBT_RAW_POST_RECV, /* rbt_raw_post + rbt_raw_rwr[] */
	RBT_RAW_POST_SRQ,  /* rbt_raw_post + rbt_raw_rwr[] */
	RBT_RAW_POLL,	   /* rbt_raw_poll + ibv_wc[], rbt_raw_wcx[] or dense */
	RBT_RAW_NOTIFY,	   /* rbt_raw_notify */
};

struct rbt_raw_hdr {
	uint32_t len; /* whole record, multiple of 8 */
	uint16_t kind;
	uint16_t flags;
};

struct rbt_raw_post {
	struct rbt_raw_hdr h;
	uint64_t ts, ts_exit, obj;
	int32_t ret;
	uint32_t qp_num;
	uint32_t bad_wr;
	uint16_t api;
	uint16_t nwr; /* at most RBT_SEG_WRS: longer chains take several records */
};

struct rbt_raw_sge {
	uint64_t addr;
	uint32_t length, lkey;
};

/* A send WR in 40 bytes: what an RC/UC send, write or read needs. Atomics,
 * BIND_MW, TSO, and every WR of a UD or XRC QP add the 32 bytes of
 * rbt_raw_swr_ext (ext = 1). Every byte here is written by the application's
 * thread on its post path: keep it small. */
struct rbt_raw_swr {
	uint64_t wr_id, remote_addr;
	uint32_t rkey, imm, send_flags;
	uint32_t payload_len; /* bytes after the sges, padded to 8 */
	uint8_t opcode;
	uint8_t ext;
	uint16_t nsge;
	uint32_t pad;
	/* [struct rbt_raw_swr_ext]; struct rbt_raw_sge sge[nsge];
	 * uint8_t payload[payload_len] */
};

struct rbt_raw_swr_ext {
	uint64_t compare_add, swap, ah;
	uint32_t remote_qpn, remote_qkey;
};

struct rbt_raw_rwr {
	uint64_t wr_id;
	uint32_t nsge, pad;
	/* struct rbt_raw_sge sge[nsge]; */
};

#define RBT_POLL_WCX 1 /* h.flags: elements are rbt_raw_wcx */
/* h.flags of a POST_SEND or POLL record: its WRs or completions are in the dense
 * layouts of trace_format (rbt_flat_dswr, rbt_flat_dwc, rbt_format.h), which the
 * post and poll wrappers write: fewer bytes for the application's thread to
 * store and hand to the writer's core. */
#define RBT_RAW_DENSE 2
struct rbt_raw_poll {
	struct rbt_raw_hdr h;
	uint64_t ts, ts_exit, cq;
	int32_t ret;
	uint32_t asked;
	uint32_t api;
	uint32_t count; /* folded empty polls */
	uint32_t nwc, pad;
};

struct rbt_raw_wcx {
	struct ibv_wc wc;
	uint64_t hw_ts;
};

struct rbt_raw_notify {
	struct rbt_raw_hdr h;
	uint64_t ts, ts_exit, cq;
	int32_t ret;
	uint32_t solicited;
};

/* ---- per-thread ring ------------------------------------------------------- */
/* A run of empty polls of one CQ: ts of the first entry, exit of the last. */
struct rbt_fold {
	void *cq;
	uint64_t ts, exit, n;
	uint64_t last_ts, prev_exit; /* the last poll's entry, the one before's exit */
	uint32_t asked, api;
};
#define RBT_FOLDS 4 /* CQs one thread can poll in turn and still get folding */

struct rbt_ring {
	_Atomic uint64_t head; /* producer: bytes published */
	char pad0[56];
	_Atomic uint64_t tail; /* consumer: bytes consumed */
	char pad1[56];
	/* producer-private (busy: read by the writer thread when sealing) */
	_Atomic int busy;     /* inside a data-path call, from its state check to done */
	_Atomic int deferred; /* a terminating signal that came while busy */
	uint64_t cached_tail;
	uint64_t reserved; /* head after the record being written */
	int dropping;	   /* waited in vain: drop until half empty */
	uint64_t lost_events, lost_bytes, lost_first, lost_last;
	/* folded runs of empty polls not yet written, one per CQ polled in turn */
	struct rbt_fold folds[RBT_FOLDS];
	uint32_t nfold;
	/* shared */
	uint64_t size, mask;
	uint32_t tid;
	_Atomic int dead;    /* the thread exited: drain then free */
	uint64_t lost_calls; /* writer thread: calls whose record was never committed */
	struct rbt_ring *next;
	uint8_t *buf;
};

extern RBT_TLS struct rbt_ring *rbt_tls_ring;
struct rbt_ring *rbt_ring_create(void);

void *rbt_ring_reserve_slow(struct rbt_ring *r, uint32_t len);
void rbt_fold_flush(struct rbt_ring *r);

static inline struct rbt_ring *rbt_ring_get(void)
{
	struct rbt_ring *r = rbt_tls_ring;

	if (RBT_UNLIKELY(!r))
		r = rbt_ring_create();
	return r;
}

/* ---- data-path entry and exit ------------------------------------------------
 * A post or poll wrapper brackets its call: rbt_dp_recording() marks the thread
 * busy, then reads the state; rbt_dp_done() clears busy after the record is
 * committed. The writer thread seals (state 3), forces a barrier on every thread
 * (membarrier), and waits for each busy flag to clear before its final drain: a
 * call either saw the seal and parks before calling the provider, or is waited
 * for. Two plain stores per call; no fence on this side. */
int rbt_dp_recording_slow(void);

static inline int rbt_dp_recording(void)
{
	struct rbt_ring *r = rbt_tls_ring;

	if (RBT_LIKELY(r != NULL && !rbt_tls_inside)) {
		atomic_store_explicit(&r->busy, 1, memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst);
		if (RBT_LIKELY(atomic_load_explicit(&rbt_state, memory_order_relaxed) ==
			       1))
			return 1;
	}
	return rbt_dp_recording_slow();
}

/* A terminating signal held back until this thread's call was recorded. */
void rbt_dp_deferred(struct rbt_ring *r);

/* Only after rbt_dp_recording() returned 1. */
static inline void rbt_dp_done(void)
{
	struct rbt_ring *r = rbt_tls_ring;

	atomic_store_explicit(&r->busy, 0, memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
	if (RBT_UNLIKELY(atomic_load_explicit(&r->deferred, memory_order_relaxed)))
		rbt_dp_deferred(r);
}

/* Room for a record of len bytes (multiple of 8), or NULL when it has to be
 * dropped (then it is counted and a LOSS event says so). */
static inline void *rbt_ring_reserve(struct rbt_ring *r, uint32_t len)
{
	uint64_t head, pos;

	if (RBT_UNLIKELY(r->nfold))
		rbt_fold_flush(r);
	head = atomic_load_explicit(&r->head, memory_order_relaxed);
	pos = head & r->mask;
	if (RBT_LIKELY(pos + len <= r->size && head + len - r->cached_tail <= r->size &&
		       !r->lost_events)) {
		r->reserved = head + len;
		return r->buf + pos;
	}
	return rbt_ring_reserve_slow(r, len);
}

static inline void rbt_ring_commit(struct rbt_ring *r)
{
	atomic_store_explicit(&r->head, r->reserved, memory_order_release);
}

/* ---- events from the slow path -------------------------------------------- */
/* Copies ev (and its strings, blobs and arrays) into this thread's ring. */
void rbt_emit(const struct rbt_event *ev);
/* A STACK event for the event just emitted (when stacks are on). */
void rbt_emit_stack(uint32_t ref_type);
/* A NOTE event; also one line on stderr when level > 0 (once per text). */
void rbt_note(int level, const char *text);
/* write(2)-based logging; debug lines only with RBTRACE_DEBUG=1. */
void rbt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void rbt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Resolves the next definition of a libibverbs symbol (version first). */
void *rbt_real(const char *name, const char *version);

/* rbt_next_<name>(): the next definition of a function listed in rbt_verbs.h,
 * under the version listed there (glibc's by name), resolved once per file.
 * Threads may make their first call at once: the slot is read and written
 * atomically (relaxed: every thread stores the same address). */
#define RBT_NEXT_DEF(name, ver, ret, params, lookup_ver)                        \
	static inline __typeof__(&name) rbt_next_##name(void)                   \
	{                                                                       \
		static __typeof__(&name) slot;                                  \
		__typeof__(&name) p = __atomic_load_n(&slot, __ATOMIC_RELAXED); \
		if (RBT_UNLIKELY(!p)) {                                         \
			p = (__typeof__(&name))rbt_real(#name, lookup_ver);     \
			__atomic_store_n(&slot, p, __ATOMIC_RELAXED);           \
		}                                                               \
		return p;                                                       \
	}
#define RBT_NEXT_VER(name, ver, ret, params)  RBT_NEXT_DEF(name, ver, ret, params, ver)
#define RBT_NEXT_NAME(name, ver, ret, params) RBT_NEXT_DEF(name, ver, ret, params, NULL)
RBT_VERBS_IBV(RBT_NEXT_VER)
RBT_VERBS_MLX5(RBT_NEXT_VER)
RBT_VERBS_CALLED(RBT_NEXT_VER)
RBT_VERBS_LIBC(RBT_NEXT_NAME)

/* ---- data path (shim_patch.c, shim_nicclock.c, shim_poll.c, shim_qpx.c) --------- */
/* Patches ctx->ops and the verbs_context ops of a newly opened context. */
void rbt_dp_patch_context(struct ibv_context *ctx);
void rbt_dp_forget_context(struct ibv_context *ctx);
/* After a create_qp(_ex)/qp_to_qp_ex/modify_qp: (re)wrap the ibv_wr_* pointers. */
void rbt_dp_wrap_qpx(struct ibv_qp *qp);
void rbt_dp_recheck_qpx(struct ibv_qp *qp);
void rbt_dp_forget_obj(const void *obj);
/* NIC clock samples (host ticks at the midpoint of the read, NIC raw clock) of
 * contexts whose CQs carry completion timestamps. */
struct rbt_nic_sample {
	struct ibv_context *ctx;
	uint64_t ts, mono_ns, real_ns, nic_ts, nic_hz;
};
void rbt_dp_nic_event(const struct rbt_nic_sample *s, struct rbt_event *ev);
/* A CQ with completion timestamps was made on ctx: emits a sample and starts
 * periodic sampling of ctx by the writer thread. */
void rbt_dp_nic_cq_created(struct ibv_context *ctx);
/* Writer thread: the samples due (all: of every sampled context), at most max;
 * *next_due = ticks when the next one is due (UINT64_MAX: none sampled). */
int rbt_dp_nic_samples(struct rbt_nic_sample *out, int max, uint64_t ms_ticks, int all,
		       uint64_t *next_due);
/* ibv_close_device: begin stops sampling ctx (after it returns no read of ctx is
 * running or will start) and takes the last sample (1 when *last was filled); end
 * says whether the close failed (sampling resumes) or not. */
int rbt_dp_close_begin(struct ibv_context *ctx, struct rbt_nic_sample *last);
void rbt_dp_close_end(struct ibv_context *ctx, int ret);
void rbt_dp_fork_child(void);
/* Wakes the writer thread (a system call: never from the post/poll path). */
void rbt_wake_writer(void);
/* With RBTRACE_NIC_TS: a CQ made through create_cq_ex with completion
 * timestamps, standing in for a plain ibv_create_cq (NULL when not possible). */
struct ibv_cq *rbt_dp_create_ts_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				   struct ibv_comp_channel *channel, int comp_vector);

/* ---- resource records shared by both wrapper files (shim_verbs_rec.c) --------- */
void rbt_rec_cq_create(uint64_t t0, uint64_t t1, int err, struct ibv_context *ctx,
		       struct ibv_cq *cq, uint32_t cqe_asked, struct ibv_comp_channel *ch,
		       uint32_t vec, int ex, uint64_t wc_flags, uint32_t flags,
		       int ts_source);
void rbt_rec_qp_create(uint64_t t0, uint64_t t1, int err, struct ibv_context *ctx,
		       struct ibv_qp *qp, const struct ibv_qp_init_attr_ex *a, int ex);
/* QPs alive (shim_verbs_rec.c): each one's final state at exit(); forgotten in a
 * forked child. */
void rbt_final_states_at_exit(void);
void rbt_live_qps_forget(void);
void rbt_live_add(struct ibv_qp *qp);
/* Takes qp out of the table (1 if it was there), first recording its final
 * state when final_state is set; the QPs of a closed ctx all go. */
int rbt_live_take(struct ibv_qp *qp, int final_state);
void rbt_live_del_ctx(struct ibv_context *ctx);
void rbt_rec_srq_create(uint64_t t0, uint64_t t1, int err, struct ibv_pd *pd,
			struct ibv_srq *srq, const struct ibv_srq_init_attr_ex *a);
void rbt_rec_port_attr(struct ibv_context *ctx, uint8_t port,
		       const struct ibv_port_attr *a);
void rbt_rec_device_attr(struct ibv_context *ctx, const struct ibv_device_attr *a,
			 uint64_t ts_mask, uint64_t core_clock);

#endif
