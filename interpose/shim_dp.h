/* shim_dp.h - what the data-path files of librbtrace.so share: the table of
 * patched contexts with the provider's original ops, the per-object table of
 * ibv_cq_ex/ibv_qp_ex state, and the wrappers that shim_patch.c installs.
 *
 * The lookups here run on every post and poll: lock-free, allocation-free.
 */
#ifndef RBT_SHIM_DP_H
#define RBT_SHIM_DP_H

#include <pthread.h>

#include "interpose/shim.h"

/* Declarations here are of hidden definitions: reached directly, never through
 * the GOT (the same code as when they were one file's statics). */
#pragma GCC visibility push(hidden)

/* Distance of a verbs_context member from the struct's end (the layout checks are
 * in shim_patch.c); an op exists when the provider's struct reaches back that far. */
#define RBT_VEND(f)    (sizeof(struct verbs_context) - offsetof(struct verbs_context, f))
#define RBT_VHAS(v, f) ((v)->sz >= RBT_VEND(f))

/* ---- contexts (shim_patch.c) ---------------------------------------------------- */
struct rbt_ctx_ent {
	struct ibv_context *ctx;
	struct verbs_context *vctx; /* NULL: not extended, or layout refused */
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *,
			     struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	int (*req_notify_cq)(struct ibv_cq *, int);
	struct ibv_mw *(*alloc_mw)(struct ibv_pd *, enum ibv_mw_type);
	int (*dealloc_mw)(struct ibv_mw *);
	int (*bind_mw)(struct ibv_qp *, struct ibv_mw *, struct ibv_mw_bind *);
	int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *, size_t);
	struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *,
					  struct ibv_cq_init_attr_ex *);
	struct ibv_qp *(*create_qp_ex)(struct ibv_context *,
				       struct ibv_qp_init_attr_ex *);
	struct ibv_srq *(*create_srq_ex)(struct ibv_context *,
					 struct ibv_srq_init_attr_ex *);
	struct ibv_xrcd *(*open_xrcd)(struct ibv_context *, struct ibv_xrcd_init_attr *);
	int (*close_xrcd)(struct ibv_xrcd *);
	int (*query_device_ex)(struct ibv_context *,
			       const struct ibv_query_device_ex_input *,
			       struct ibv_device_attr_ex *, size_t);
	int (*query_rt_values)(struct ibv_context *, struct ibv_values_ex *);
	uint64_t ts_mask; /* completion_timestamp_mask of the device */
	uint64_t nic_hz;  /* hca_core_clock (kHz) * 1000, 0 = unknown */
	/* NIC clock sampling, under rbt_sample_lock: the writer thread reads the
	 * clock of a context only while sampling == RBT_SAMPLING_ON, and
	 * ibv_close_device turns it off before the provider frees the context. */
	int sampling;
	uint64_t sample_since, sample_last; /* ticks */
};

enum { RBT_SAMPLING_OFF, RBT_SAMPLING_ON, RBT_SAMPLING_CLOSING };

#define RBT_MAX_CTX 64
extern struct rbt_ctx_ent rbt_ctxs[RBT_MAX_CTX];
extern _Atomic int rbt_nctx;
extern pthread_mutex_t rbt_ctx_lock;
/* Held around every NIC clock read of the sampler and around turning sampling off
 * at close, so no read can overlap ibv_close_device. Taken after rbt_ctx_lock and
 * after the core's writer lock; nothing is emitted while it is held (emitting can
 * wait for the writer thread). */
extern pthread_mutex_t rbt_sample_lock;

static inline struct rbt_ctx_ent *rbt_ctx_find(struct ibv_context *ctx)
{
	int n = atomic_load_explicit(&rbt_nctx, memory_order_acquire);

	for (int i = 0; i < n; i++)
		if (rbt_ctxs[i].ctx == ctx)
			return &rbt_ctxs[i];
	return NULL;
}

/* ---- per-object table (ibv_cq_ex, ibv_qp_ex) ---------------------------------------
 * Open addressing, lock-free lookups; inserts and removals take a lock and happen
 * only in create/destroy. */
#define RBT_OBJ_SLOTS 8192
#define RBT_OBJ_TOMB  ((const void *)1)
extern const void *_Atomic rbt_obj_key[RBT_OBJ_SLOTS];
extern void *_Atomic rbt_obj_val[RBT_OBJ_SLOTS];

static inline unsigned rbt_obj_hash(const void *p)
{
	return (unsigned)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 51) &
	       (RBT_OBJ_SLOTS - 1);
}

static inline void *rbt_obj_find(const void *key)
{
	unsigned h = rbt_obj_hash(key);

	for (unsigned i = 0; i < RBT_OBJ_SLOTS; i++, h = (h + 1) & (RBT_OBJ_SLOTS - 1)) {
		const void *k =
			atomic_load_explicit(&rbt_obj_key[h], memory_order_acquire);
		if (k == key)
			return atomic_load_explicit(&rbt_obj_val[h],
						    memory_order_relaxed);
		if (!k)
			return NULL;
	}
	return NULL;
}

int rbt_obj_insert(const void *key, void *val);

/* Send opcodes whose WR carries data from the local buffers (RBTRACE_PAYLOAD). */
static inline int rbt_wr_has_payload(enum ibv_wr_opcode op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
	       op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM ||
	       op == IBV_WR_SEND_WITH_INV;
}

/* ---- ring records of the data path ------------------------------------------------ */
/* Room for a record of at least min bytes where the ring's head stands, its length
 * not known yet: *room is how far it may grow (to the ring's end, or to the
 * writer's tail as last seen). NULL: take rbt_ring_reserve with the exact length
 * (it pads at the ring's end, refreshes the tail, waits, writes a pending LOSS or
 * flushes folded polls first). Finish with rbt_ring_commit_len. */
static inline void *rbt_ring_open(struct rbt_ring *r, uint32_t min, uint32_t *room)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t pos = head & r->mask;
	uint64_t free = r->size - (head - r->cached_tail);
	uint64_t n = free < r->size - pos ? free : r->size - pos;

	if (RBT_UNLIKELY(r->nfold || r->lost_events || n < min))
		return NULL;
	*room = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
	return r->buf + pos;
}

/* Publishes the len bytes at the head (after rbt_ring_open or rbt_ring_reserve). */
static inline void rbt_ring_commit_len(struct rbt_ring *r, uint32_t len)
{
	r->reserved = atomic_load_explicit(&r->head, memory_order_relaxed) + len;
	rbt_ring_commit(r);
}

/* A POLL record: the head as given (but its length and kind) and nwc elements of
 * esize bytes (ibv_wc or rbt_raw_wcx) copied from wc as they are. */
static inline void rbt_poll_put(struct rbt_ring *r, const struct rbt_raw_poll *head,
				const void *wc, size_t esize)
{
	uint32_t len = (uint32_t)(sizeof(*head) + head->nwc * esize);
	struct rbt_raw_poll *p = rbt_ring_reserve(r, len);

	if (!p)
		return;
	*p = *head;
	p->h.len = len;
	p->h.kind = RBT_RAW_POLL;
	if (head->nwc)
		memcpy(p + 1, wc, head->nwc * esize);
	rbt_ring_commit(r);
}

/* The shape of a data-path wrapper, after it found the provider's op: untraced
 * (not recording, nested, sealed) the call goes straight through; traced it is
 * timed (t0 at entry, t1 = EXIT after it: rbt_now_exit() for posts and polls,
 * none in light mode), REC records it from t0, t1 and ret outside any lock, and
 * the wrapper returns exactly what the provider returned. */
#define RBT_DP_CALL(CALL, EXIT, REC)         \
	do {                                 \
		if (!rbt_dp_recording())     \
			return CALL;         \
		uint64_t t0 = rbt_now();     \
		__typeof__(CALL) ret = CALL; \
		uint64_t t1 = EXIT;          \
		REC;                         \
		rbt_dp_done();               \
		return ret;                  \
	} while (0)

/* ---- the wrappers shim_patch.c installs ------------------------------------------ */
/* shim_post.c */
int rbt_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b);
int rbt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int rbt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int rbt_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr);
/* shim_poll.c */
int rbt_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int rbt_req_notify_cq(struct ibv_cq *cq, int solicited_only);
struct rbt_cqx_ent;
struct rbt_cqx_ent *rbt_wrap_cqx(struct ibv_cq_ex *cq, uint64_t wc_flags, int emulated);
/* shim_ext.c */
struct ibv_cq_ex *rbt_create_cq_ex(struct ibv_context *ctx,
				   struct ibv_cq_init_attr_ex *a);
struct ibv_qp *rbt_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a);
struct ibv_srq *rbt_create_srq_ex(struct ibv_context *ctx,
				  struct ibv_srq_init_attr_ex *a);
struct ibv_xrcd *rbt_open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *a);
int rbt_close_xrcd(struct ibv_xrcd *x);
int rbt_query_device_ex(struct ibv_context *ctx,
			const struct ibv_query_device_ex_input *in,
			struct ibv_device_attr_ex *attr, size_t size);
int rbt_query_rt_values(struct ibv_context *ctx, struct ibv_values_ex *v);
int rbt_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a,
		      size_t size);
struct ibv_mw *rbt_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int rbt_dealloc_mw(struct ibv_mw *mw);

#pragma GCC visibility pop

#endif
