/* shim_datapath.c - the verbs that are not exported: the data path through
 * ctx->ops (post_send, post_recv, post_srq_recv, poll_cq, req_notify_cq, MW ops),
 * the extended verbs through struct verbs_context, and the per-object function
 * pointers of ibv_cq_ex and ibv_qp_ex.
 *
 * The post/poll wrappers here are the hot path: they take two TSC readings and
 * copy a fixed-layout record into the thread's ring - never a lock, an
 * allocation or a system call. Each wrapper returns exactly what the provider
 * returned and does not touch errno. Objects always stay the provider's own; only
 * function pointers are swapped, and only in layouts checked below.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "interpose/shim.h"

/* ---- layout checks -------------------------------------------------------------
 * The shim writes into struct ibv_context's ops and into struct verbs_context,
 * which sits in front of it and grows towards lower addresses. The distances
 * below are those of rdma-core's ABI (checked against the installed headers at
 * build time); a header that moved them would make the shim patch the wrong
 * pointers, so the build stops instead. */
#define RBT_VEND(f) (sizeof(struct verbs_context) - offsetof(struct verbs_context, f))
_Static_assert(offsetof(struct verbs_context, context) + sizeof(struct ibv_context) ==
		       sizeof(struct verbs_context),
	       "verbs_context: context is no longer last");
_Static_assert(offsetof(struct verbs_context, sz) + sizeof(size_t) ==
		       offsetof(struct verbs_context, context),
	       "verbs_context: sz no longer right before context");
_Static_assert(RBT_VEND(context) == 328 && RBT_VEND(sz) == 336,
	       "verbs_context tail moved");
_Static_assert(RBT_VEND(close_xrcd) == 352 && RBT_VEND(open_xrcd) == 360 &&
		       RBT_VEND(create_srq_ex) == 368 && RBT_VEND(create_qp_ex) == 384 &&
		       RBT_VEND(query_device_ex) == 432 &&
		       RBT_VEND(create_cq_ex) == 448 &&
		       RBT_VEND(query_rt_values) == 456 && RBT_VEND(query_port) == 648,
	       "verbs_context: extended op offsets differ from the ABI the shim knows");
_Static_assert(offsetof(struct ibv_context, ops.post_send) == 208 &&
		       offsetof(struct ibv_context, ops.post_recv) == 216 &&
		       offsetof(struct ibv_context, ops.poll_cq) == 96 &&
		       offsetof(struct ibv_context, ops.req_notify_cq) == 104 &&
		       offsetof(struct ibv_context, ops.post_srq_recv) == 168 &&
		       offsetof(struct ibv_context, ops.alloc_mw) == 64 &&
		       offsetof(struct ibv_context, abi_compat) == 320,
	       "ibv_context_ops: offsets differ from the ABI the shim knows");
_Static_assert(offsetof(struct ibv_qp_ex, wr_id) == 168 &&
		       offsetof(struct ibv_qp_ex, wr_start) == 320 &&
		       offsetof(struct ibv_qp_ex, wr_complete) == 328,
	       "ibv_qp_ex layout differs from the ABI the shim knows");
_Static_assert(offsetof(struct ibv_cq_ex, start_poll) == 144 &&
		       offsetof(struct ibv_cq_ex, read_completion_ts) == 248,
	       "ibv_cq_ex layout differs from the ABI the shim knows");
_Static_assert(sizeof(struct ibv_wc) % 8 == 0, "ibv_wc records must stay 8-aligned");

/* A verbs_context op exists when the provider's struct reaches back that far. */
#define RBT_VHAS(v, f) ((v)->sz >= RBT_VEND(f))

/* ---- contexts -------------------------------------------------------------------- */
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
static struct rbt_ctx_ent rbt_ctxs[RBT_MAX_CTX];
static _Atomic int rbt_nctx;
static pthread_mutex_t rbt_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held around every NIC clock read of the sampler and around turning sampling off
 * at close, so no read can overlap ibv_close_device. Taken after rbt_ctx_lock and
 * after the core's writer lock; nothing is emitted while it is held (emitting can
 * wait for the writer thread). */
static pthread_mutex_t rbt_sample_lock = PTHREAD_MUTEX_INITIALIZER;

static inline struct rbt_ctx_ent *rbt_ctx_find(struct ibv_context *ctx)
{
	int n = atomic_load_explicit(&rbt_nctx, memory_order_acquire);

	for (int i = 0; i < n; i++)
		if (rbt_ctxs[i].ctx == ctx)
			return &rbt_ctxs[i];
	return NULL;
}

/* ---- NIC clock samples ------------------------------------------------------------
 * A context whose CQs carry completion timestamps (asked by the program or added by
 * RBTRACE_NIC_TS) gets (host ticks, NIC clock) samples: one when each such CQ is
 * created, then from the writer thread every RBT_NIC_DENSE_MS for its first
 * RBT_NIC_DENSE_FOR_MS (short programs still get several points for the fit),
 * every RBT_NIC_EVERY_MS after, and a last one at ibv_close_device or exit. */
#define RBT_NIC_DENSE_MS     10
#define RBT_NIC_DENSE_FOR_MS 100
#define RBT_NIC_EVERY_MS     100

static uint64_t rbt_clock_ns_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads the NIC clock through the provider's own op (not our wrapper, which would
 * record it again), between two TSC reads; 0, or -1 when the read failed or the
 * device does not give its raw clock. Leaves errno alone. */
static int rbt_nic_read(struct rbt_ctx_ent *c, struct rbt_nic_sample *s)
{
	uint64_t best = UINT64_MAX;
	int saved = errno;

	/* Three reads, keeping the one with the narrowest TSC window: a read the
	 * scheduler interrupted would put the midpoint microseconds off. */
	for (int i = 0; i < 3; i++) {
		struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
		uint64_t t0 = rbt_now();
		int ret = c->query_rt_values(c->ctx, &v);
		uint64_t t1 = rbt_now();
		if (ret || !(v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK))
			break;
		if (t1 - t0 < best) {
			best = t1 - t0;
			s->ts = t0 + (t1 - t0) / 2;
			s->nic_ts = (uint64_t)v.raw_clock.tv_sec * 1000000000ull +
				    (uint64_t)v.raw_clock.tv_nsec;
		}
	}
	errno = saved;
	if (best == UINT64_MAX)
		return -1;
	s->ctx = c->ctx;
	s->mono_ns = rbt_clock_ns_of(CLOCK_MONOTONIC);
	s->real_ns = rbt_clock_ns_of(CLOCK_REALTIME);
	errno = saved;
	s->nic_hz = c->nic_hz;
	return 0;
}

void rbt_dp_nic_event(const struct rbt_nic_sample *s, struct rbt_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = RBT_EV_CLOCK_SAMPLE;
	ev->ts = s->ts;
	ev->u.clock_sample.ctx = (uintptr_t)s->ctx;
	ev->u.clock_sample.mono_ns = s->mono_ns;
	ev->u.clock_sample.real_ns = s->real_ns;
	ev->u.clock_sample.nic_ts = s->nic_ts;
	ev->u.clock_sample.nic_hz = s->nic_hz;
}

/* A CQ with completion timestamps now exists on ctx: a sample right away, and the
 * writer samples the context from now on. Emitted into the calling thread's ring
 * after the lock is dropped. */
void rbt_dp_nic_cq_created(struct ibv_context *ctx)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);
	struct rbt_nic_sample s;
	int tried = 0, got = 0, started = 0;

	if (!c)
		return;
	pthread_mutex_lock(&rbt_sample_lock);
	if (c->ctx == ctx && c->query_rt_values && c->sampling != RBT_SAMPLING_CLOSING) {
		tried = 1;
		got = rbt_nic_read(c, &s) == 0;
		/* A device without a readable clock is not sampled again. */
		if (got && c->sampling == RBT_SAMPLING_OFF) {
			c->sampling = RBT_SAMPLING_ON;
			c->sample_since = c->sample_last = s.ts;
			started = 1;
		}
	}
	pthread_mutex_unlock(&rbt_sample_lock);
	if (got) {
		struct rbt_event ev;
		rbt_dp_nic_event(&s, &ev);
		rbt_emit(&ev);
	} else if (tried || !c->query_rt_values) {
		rbt_note(0, "completion timestamps without a readable NIC clock "
			    "(query_rt_values): no NIC clock samples");
	}
	if (started)
		rbt_wake_writer(); /* its dense first samples are due soon */
}

int rbt_dp_nic_samples(struct rbt_nic_sample *out, int max, uint64_t ms_ticks, int all,
		       uint64_t *next_due)
{
	int k = 0;

	*next_due = UINT64_MAX;
	pthread_mutex_lock(&rbt_sample_lock);
	int n = atomic_load(&rbt_nctx);
	for (int i = 0; i < n; i++) {
		struct rbt_ctx_ent *c = &rbt_ctxs[i];
		if (c->sampling != RBT_SAMPLING_ON)
			continue;
		uint64_t now = rbt_now();
		uint64_t dense = c->sample_since + RBT_NIC_DENSE_FOR_MS * ms_ticks;
		uint64_t ival =
			(now < dense ? RBT_NIC_DENSE_MS : RBT_NIC_EVERY_MS) * ms_ticks;
		/* Beyond max per pass the rest stay due and go in the next pass. */
		if ((all || now >= c->sample_last + ival) && k < max) {
			if (rbt_nic_read(c, &out[k]) == 0)
				k++;
			c->sample_last = now;
		}
		uint64_t due = c->sample_last + ival;
		if (due < *next_due)
			*next_due = due;
	}
	pthread_mutex_unlock(&rbt_sample_lock);
	return k;
}

int rbt_dp_close_begin(struct ibv_context *ctx, struct rbt_nic_sample *last)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);
	int got = 0;

	if (!c)
		return 0;
	pthread_mutex_lock(&rbt_sample_lock);
	if (c->ctx == ctx && c->sampling == RBT_SAMPLING_ON) {
		got = rbt_nic_read(c, last) == 0;
		c->sampling = RBT_SAMPLING_CLOSING;
	}
	pthread_mutex_unlock(&rbt_sample_lock);
	return got;
}

void rbt_dp_fork_child(void)
{
	/* Another thread of the parent may have held it at fork. */
	pthread_mutex_init(&rbt_sample_lock, NULL);
}

void rbt_dp_close_end(struct ibv_context *ctx, int ret)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c)
		return;
	pthread_mutex_lock(&rbt_sample_lock);
	if (c->ctx == ctx && c->sampling == RBT_SAMPLING_CLOSING)
		c->sampling = ret ? RBT_SAMPLING_ON : RBT_SAMPLING_OFF;
	pthread_mutex_unlock(&rbt_sample_lock);
}

/* ---- per-object table (ibv_cq_ex, ibv_qp_ex) ---------------------------------------
 * Open addressing, lock-free lookups; inserts and removals take a lock and happen
 * only in create/destroy. */
#define RBT_OBJ_SLOTS 8192
#define RBT_OBJ_TOMB  ((const void *)1)
static const void *_Atomic rbt_obj_key[RBT_OBJ_SLOTS];
static void *_Atomic rbt_obj_val[RBT_OBJ_SLOTS];
static pthread_mutex_t rbt_obj_lock = PTHREAD_MUTEX_INITIALIZER;

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

static int rbt_obj_insert(const void *key, void *val)
{
	unsigned h = rbt_obj_hash(key);
	int ret = -1;

	pthread_mutex_lock(&rbt_obj_lock);
	for (unsigned i = 0; i < RBT_OBJ_SLOTS; i++, h = (h + 1) & (RBT_OBJ_SLOTS - 1)) {
		const void *k = atomic_load(&rbt_obj_key[h]);
		if (k == key || !k || k == RBT_OBJ_TOMB) {
			atomic_store(&rbt_obj_val[h], val);
			atomic_store_explicit(&rbt_obj_key[h], key, memory_order_release);
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&rbt_obj_lock);
	return ret;
}

void rbt_dp_forget_obj(const void *key)
{
	unsigned h = rbt_obj_hash(key);

	pthread_mutex_lock(&rbt_obj_lock);
	for (unsigned i = 0; i < RBT_OBJ_SLOTS; i++, h = (h + 1) & (RBT_OBJ_SLOTS - 1)) {
		const void *k = atomic_load(&rbt_obj_key[h]);
		if (!k)
			break;
		if (k == key) {
			/* The entry itself is leaked on purpose: a thread may still be
			 * inside one of its wrappers. A tombstone keeps probing intact. */
			atomic_store(&rbt_obj_key[h], RBT_OBJ_TOMB);
			break;
		}
	}
	pthread_mutex_unlock(&rbt_obj_lock);
}

/* ---- post_send ---------------------------------------------------------------------- */
#define RBT_MAX_SGE 64	/* sges recorded per WR (more: the first 64) */
#define RBT_SEG_WRS 256 /* WRs per record; longer chains take several */

static inline int rbt_wr_has_payload(enum ibv_wr_opcode op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
	       op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM ||
	       op == IBV_WR_SEND_WITH_INV;
}

static uint32_t rbt_payload_len(const struct ibv_send_wr *w, uint32_t nsge)
{
	uint64_t n = 0;

	if (!rbt_cfg.payload || !rbt_wr_has_payload(w->opcode))
		return 0;
	for (uint32_t i = 0; i < nsge; i++)
		n += w->sg_list[i].length;
	return n > rbt_cfg.payload ? rbt_cfg.payload : (uint32_t)n;
}

static void rbt_copy_payload(uint8_t *dst, const struct ibv_send_wr *w, uint32_t nsge,
			     uint32_t len)
{
	for (uint32_t i = 0; i < nsge && len; i++) {
		uint32_t l = w->sg_list[i].length < len ? w->sg_list[i].length : len;
		memcpy(dst, (const void *)(uintptr_t)w->sg_list[i].addr, l);
		dst += l;
		len -= l;
	}
}

static inline uint32_t rbt_nsge(int n)
{
	return n <= 0 ? 0 : n > RBT_MAX_SGE ? RBT_MAX_SGE : (uint32_t)n;
}

/* Whether a send WR on a QP of this type needs rbt_raw_swr_ext. */
static inline int rbt_swr_ext(enum ibv_qp_type t, enum ibv_wr_opcode op)
{
	return t == IBV_QPT_UD || t == IBV_QPT_XRC_SEND ||
	       op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
	       op == IBV_WR_BIND_MW || op == IBV_WR_TSO;
}

/* The imm_data field of the trace (see RBT_REC_send_wr). */
static inline uint32_t rbt_swr_imm(const struct ibv_send_wr *w)
{
	switch (w->opcode) {
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return be32toh(w->imm_data);
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		return w->invalidate_rkey;
	default:
		return 0;
	}
}

/* WRs after *bad_wr were never posted and may be half-built: they are not read. */
static void rbt_rec_send(struct ibv_qp *qp, struct ibv_send_wr *wr, int ret,
			 struct ibv_send_wr *bad, uint64_t t0, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	enum ibv_qp_type qpt = qp->qp_type;
	uint32_t bad_idx = 0;
	struct ibv_send_wr *stop = NULL;

	if (ret && bad) {
		for (struct ibv_send_wr *w = wr; w && w != bad; w = w->next)
			bad_idx++;
		stop = bad->next;
	}
	while (wr && wr != stop) {
		size_t len = sizeof(struct rbt_raw_post);
		uint32_t n = 0;
		struct ibv_send_wr *w;

		for (w = wr; w && w != stop && n < RBT_SEG_WRS; w = w->next, n++) {
			uint32_t ns = rbt_nsge(w->num_sge);
			len += sizeof(struct rbt_raw_swr) +
			       ns * sizeof(struct rbt_raw_sge);
			if (RBT_UNLIKELY(rbt_swr_ext(qpt, w->opcode)))
				len += sizeof(struct rbt_raw_swr_ext);
			if (RBT_UNLIKELY(rbt_cfg.payload))
				len += RBT_ALIGN8(rbt_payload_len(w, ns));
		}
		struct rbt_raw_post *p = rbt_ring_reserve(r, (uint32_t)len);
		if (p) {
			p->h.len = (uint32_t)len;
			p->h.kind = RBT_RAW_POST_SEND;
			p->h.flags = 0;
			p->ts = t0;
			p->ts_exit = t1;
			p->obj = (uintptr_t)qp;
			p->ret = ret;
			p->qp_num = qp->qp_num;
			p->bad_wr = ret ? bad_idx : 0;
			p->api = 0;
			p->nwr = (uint16_t)n;
			uint8_t *o = (uint8_t *)(p + 1);
			uint32_t k = n;
			for (w = wr; k--; w = w->next) {
				struct rbt_raw_swr *h = (void *)o;
				uint32_t ns = rbt_nsge(w->num_sge);
				h->wr_id = w->wr_id;
				h->remote_addr = w->wr.rdma.remote_addr;
				h->rkey = w->wr.rdma.rkey;
				h->imm = rbt_swr_imm(w);
				h->send_flags = w->send_flags;
				h->payload_len = 0;
				h->opcode = (uint8_t)w->opcode;
				h->ext = 0;
				h->nsge = (uint16_t)ns;
				h->pad = 0;
				o += sizeof(*h);
				if (RBT_UNLIKELY(rbt_swr_ext(qpt, w->opcode))) {
					struct rbt_raw_swr_ext *x = (void *)o;
					memset(x, 0, sizeof(*x));
					h->ext = 1;
					if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
					    w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
						h->remote_addr = w->wr.atomic.remote_addr;
						h->rkey = w->wr.atomic.rkey;
						x->compare_add = w->wr.atomic.compare_add;
						x->swap = w->wr.atomic.swap;
					} else if (w->opcode == IBV_WR_BIND_MW) {
						const struct ibv_mw_bind_info *bi =
							&w->bind_mw.bind_info;
						h->remote_addr = bi->addr;
						h->rkey = w->bind_mw.rkey;
						x->compare_add = bi->length;
						x->swap = bi->mw_access_flags;
						x->ah = (uintptr_t)w->bind_mw.mw;
					} else if (w->opcode == IBV_WR_TSO) {
						x->compare_add = w->tso.hdr_sz;
						x->swap = w->tso.mss;
					}
					if (qpt == IBV_QPT_UD) {
						x->ah = (uintptr_t)w->wr.ud.ah;
						x->remote_qpn = w->wr.ud.remote_qpn;
						x->remote_qkey = w->wr.ud.remote_qkey;
						h->remote_addr = 0;
						h->rkey = 0;
					} else if (qpt == IBV_QPT_XRC_SEND) {
						x->remote_qpn =
							w->qp_type.xrc.remote_srqn;
					}
					o += sizeof(*x);
				}
				struct rbt_raw_sge *sg = (void *)o;
				for (uint32_t i = 0; i < ns; i++) {
					sg[i].addr = w->sg_list[i].addr;
					sg[i].length = w->sg_list[i].length;
					sg[i].lkey = w->sg_list[i].lkey;
				}
				o += ns * sizeof(*sg);
				if (RBT_UNLIKELY(rbt_cfg.payload)) {
					uint32_t pl = rbt_payload_len(w, ns);
					h->payload_len = pl;
					if (pl)
						rbt_copy_payload(o, w, ns, pl);
					o += RBT_ALIGN8(pl);
				}
			}
			rbt_ring_commit(r);
		}
		for (uint32_t k = 0; k < n; k++)
			wr = wr->next;
	}
}

static void rbt_rec_recv(uint16_t kind, void *obj, uint32_t qpn, struct ibv_recv_wr *wr,
			 int ret, struct ibv_recv_wr *bad, uint64_t t0, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	uint32_t bad_idx = 0;
	struct ibv_recv_wr *stop = NULL;

	if (ret && bad) {
		for (struct ibv_recv_wr *w = wr; w && w != bad; w = w->next)
			bad_idx++;
		stop = bad->next;
	}
	while (wr && wr != stop) {
		size_t len = sizeof(struct rbt_raw_post);
		uint32_t n = 0;
		struct ibv_recv_wr *w;

		for (w = wr; w && w != stop && n < RBT_SEG_WRS; w = w->next, n++)
			len += sizeof(struct rbt_raw_rwr) +
			       rbt_nsge(w->num_sge) * sizeof(struct rbt_raw_sge);
		struct rbt_raw_post *p = rbt_ring_reserve(r, (uint32_t)len);
		if (p) {
			p->h.len = (uint32_t)len;
			p->h.kind = kind;
			p->h.flags = 0;
			p->ts = t0;
			p->ts_exit = t1;
			p->obj = (uintptr_t)obj;
			p->ret = ret;
			p->qp_num = qpn;
			p->bad_wr = ret ? bad_idx : 0;
			p->api = 0;
			p->nwr = (uint16_t)n;
			struct rbt_raw_rwr *o = (void *)(p + 1);
			uint32_t k = n;
			for (w = wr; k--; w = w->next) {
				uint32_t ns = rbt_nsge(w->num_sge);
				o->wr_id = w->wr_id;
				o->nsge = ns;
				o->pad = 0;
				struct rbt_raw_sge *s = (void *)(o + 1);
				for (uint32_t i = 0; i < ns; i++) {
					s[i].addr = w->sg_list[i].addr;
					s[i].length = w->sg_list[i].length;
					s[i].lkey = w->sg_list[i].lkey;
				}
				o = (void *)(s + ns);
			}
			rbt_ring_commit(r);
		}
		/* advance past this segment */
		for (uint32_t k = 0; k < n; k++)
			wr = wr->next;
	}
}

static int rbt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			 struct ibv_send_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	if (!rbt_recording())
		return c->post_send(qp, wr, bad_wr);
	uint64_t t0 = rbt_now();
	int ret = c->post_send(qp, wr, bad_wr);
	uint64_t t1 = rbt_now();
	rbt_rec_send(qp, wr, ret, ret && bad_wr ? *bad_wr : NULL, t0, t1);
	return ret;
}

static int rbt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			 struct ibv_recv_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	if (!rbt_recording())
		return c->post_recv(qp, wr, bad_wr);
	uint64_t t0 = rbt_now();
	int ret = c->post_recv(qp, wr, bad_wr);
	uint64_t t1 = rbt_now();
	rbt_rec_recv(RBT_RAW_POST_RECV, qp, qp->qp_num, wr, ret,
		     ret && bad_wr ? *bad_wr : NULL, t0, t1);
	return ret;
}

static int rbt_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			     struct ibv_recv_wr **bad_wr)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(srq->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	if (!rbt_recording())
		return c->post_srq_recv(srq, wr, bad_wr);
	uint64_t t0 = rbt_now();
	int ret = c->post_srq_recv(srq, wr, bad_wr);
	uint64_t t1 = rbt_now();
	rbt_rec_recv(RBT_RAW_POST_SRQ, srq, 0, wr, ret, ret && bad_wr ? *bad_wr : NULL,
		     t0, t1);
	return ret;
}

/* ---- polling ------------------------------------------------------------------------- */
/* Runs of empty polls on one CQ become one record (count = N, ts = first entry,
 * ts_exit = last exit), kept in the ring struct until something else is
 * recorded, the run is a flush interval old, or the thread ends. Up to
 * RBT_FOLDS CQs polled in turn (send CQ, receive CQ, ...) fold at once. */
static inline void rbt_rec_empty_poll(struct rbt_ring *r, void *cq, uint32_t asked,
				      uint32_t api, uint64_t t0, uint64_t t1)
{
	struct rbt_fold *f = r->folds;

	for (uint32_t i = 0; i < r->nfold; i++, f++) {
		if (f->cq == cq && f->asked == asked && f->api == api) {
			if (t1 - f->ts < rbt_cfg.flush_ticks) {
				f->n++;
				f->exit = t1;
				return;
			}
			break; /* a flush interval old: write it and start again */
		}
	}
	if (f != r->folds + r->nfold || r->nfold == RBT_FOLDS)
		rbt_fold_flush(r);
	f = &r->folds[r->nfold++];
	f->cq = cq;
	f->ts = t0;
	f->exit = t1;
	f->n = 1;
	f->asked = asked;
	f->api = api;
}

static void rbt_rec_poll(struct ibv_cq *cq, int asked, int ret, const struct ibv_wc *wc,
			 uint64_t t0, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	uint32_t n = ret > 0 ? (uint32_t)ret : 0;
	uint32_t len = sizeof(struct rbt_raw_poll) + n * sizeof(struct ibv_wc);
	struct rbt_raw_poll *p;

	if (ret == 0) {
		rbt_rec_empty_poll(r, cq, asked, 0, t0, t1);
		return;
	}
	p = rbt_ring_reserve(r, len);
	if (!p)
		return;
	p->h.len = len;
	p->h.kind = RBT_RAW_POLL;
	p->h.flags = 0;
	p->ts = t0;
	p->ts_exit = t1;
	p->cq = (uintptr_t)cq;
	p->ret = ret;
	p->asked = asked;
	p->api = 0;
	p->count = 1;
	p->nwc = n;
	p->pad = 0;
	memcpy(p + 1, wc, n * sizeof(struct ibv_wc));
	rbt_ring_commit(r);
}

struct rbt_cqx_ent;
static int rbt_poll_emulated(struct rbt_cqx_ent *e, struct ibv_cq *cq, int n,
			     struct ibv_wc *wc);
static int rbt_emulating; /* some CQ stands in for a plain one (RBTRACE_NIC_TS) */

static int rbt_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(cq->context);

	if (RBT_UNLIKELY(!c))
		return -1;
	if (RBT_UNLIKELY(rbt_emulating)) {
		struct rbt_cqx_ent *e = rbt_obj_find(cq);
		if (e)
			return rbt_poll_emulated(e, cq, n, wc);
	}
	if (!rbt_recording())
		return c->poll_cq(cq, n, wc);
	uint64_t t0 = rbt_now();
	int ret = c->poll_cq(cq, n, wc);
	uint64_t t1 = rbt_now();
	rbt_rec_poll(cq, n, ret, wc, t0, t1);
	return ret;
}

static int rbt_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(cq->context);

	if (RBT_UNLIKELY(!c))
		return ENOSYS;
	if (!rbt_recording())
		return c->req_notify_cq(cq, solicited_only);
	uint64_t t0 = rbt_now();
	int ret = c->req_notify_cq(cq, solicited_only);
	uint64_t t1 = rbt_now();
	struct rbt_ring *r = rbt_ring_get();
	struct rbt_raw_notify *p = rbt_ring_reserve(r, sizeof(*p));
	if (p) {
		p->h.len = sizeof(*p);
		p->h.kind = RBT_RAW_NOTIFY;
		p->h.flags = 0;
		p->ts = t0;
		p->ts_exit = t1;
		p->cq = (uintptr_t)cq;
		p->ret = ret;
		p->solicited = solicited_only;
		rbt_ring_commit(r);
	}
	return ret;
}

/* ---- ibv_cq_ex ------------------------------------------------------------------------ */
#define RBT_CQX_WCS 64
struct rbt_cqx_ent {
	struct ibv_cq_ex *cqx;
	int (*start_poll)(struct ibv_cq_ex *, struct ibv_poll_cq_attr *);
	int (*next_poll)(struct ibv_cq_ex *);
	void (*end_poll)(struct ibv_cq_ex *);
	uint64_t wc_flags;
	int emulated;
	/* the poll session in progress (one consumer per CQ at a time) */
	uint64_t ts;
	uint32_t n;
	struct rbt_raw_wcx wcs[RBT_CQX_WCS];
};

static void rbt_cqx_capture(struct rbt_cqx_ent *e, struct ibv_cq_ex *cq,
			    struct rbt_raw_wcx *x)
{
	uint64_t f = e->wc_flags;

	memset(x, 0, sizeof(*x));
	x->wc.wr_id = cq->wr_id;
	x->wc.status = cq->status;
	if (cq->read_vendor_err)
		x->wc.vendor_err = cq->read_vendor_err(cq);
	if ((f & IBV_WC_EX_WITH_QP_NUM) && cq->read_qp_num)
		x->wc.qp_num = cq->read_qp_num(cq);
	/* For a failed completion only wr_id, status, vendor_err and qp_num mean
	 * anything, and some providers do not decode the rest. */
	if (cq->status != IBV_WC_SUCCESS)
		return;
	if (cq->read_opcode)
		x->wc.opcode = cq->read_opcode(cq);
	if (cq->read_wc_flags)
		x->wc.wc_flags = cq->read_wc_flags(cq);
	if ((f & IBV_WC_EX_WITH_BYTE_LEN) && cq->read_byte_len)
		x->wc.byte_len = cq->read_byte_len(cq);
	/* the immediate (network order) or the invalidated rkey (host order) */
	if ((f & IBV_WC_EX_WITH_IMM) && cq->read_imm_data &&
	    (x->wc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)))
		x->wc.imm_data = cq->read_imm_data(cq);
	if ((f & IBV_WC_EX_WITH_SRC_QP) && cq->read_src_qp)
		x->wc.src_qp = cq->read_src_qp(cq);
	if ((f & IBV_WC_EX_WITH_SLID) && cq->read_slid)
		x->wc.slid = cq->read_slid(cq);
	if ((f & IBV_WC_EX_WITH_SL) && cq->read_sl)
		x->wc.sl = cq->read_sl(cq);
	if ((f & IBV_WC_EX_WITH_DLID_PATH_BITS) && cq->read_dlid_path_bits)
		x->wc.dlid_path_bits = cq->read_dlid_path_bits(cq);
	if ((f & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) && cq->read_completion_ts)
		x->hw_ts = cq->read_completion_ts(cq);
}

static void rbt_cqx_emit(struct rbt_cqx_ent *e, int ret, uint64_t t0, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	uint32_t len = sizeof(struct rbt_raw_poll) + e->n * sizeof(struct rbt_raw_wcx);
	struct rbt_raw_poll *p = rbt_ring_reserve(r, len);

	if (p) {
		p->h.len = len;
		p->h.kind = RBT_RAW_POLL;
		p->h.flags = RBT_POLL_WCX;
		p->ts = t0;
		p->ts_exit = t1;
		p->cq = (uintptr_t)e->cqx;
		p->ret = ret;
		p->asked = 0;
		p->api = 1;
		p->count = 1;
		p->nwc = e->n;
		p->pad = 0;
		memcpy(p + 1, e->wcs, e->n * sizeof(struct rbt_raw_wcx));
		rbt_ring_commit(r);
	}
	e->n = 0;
}

static inline void rbt_cqx_take(struct rbt_cqx_ent *e, struct ibv_cq_ex *cq)
{
	if (e->n == RBT_CQX_WCS) {
		/* A long session is written in pieces (each a poll_cq event). */
		uint64_t t = rbt_now();
		rbt_cqx_emit(e, RBT_CQX_WCS, e->ts, t);
		e->ts = t;
	}
	rbt_cqx_capture(e, cq, &e->wcs[e->n++]);
}

static int rbt_cqx_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	struct rbt_cqx_ent *e = rbt_obj_find(cq);

	if (RBT_UNLIKELY(!e))
		return EINVAL;
	if (!rbt_recording())
		return e->start_poll(cq, attr);
	uint64_t t0 = rbt_now();
	int ret = e->start_poll(cq, attr);
	uint64_t t1 = rbt_now();
	if (ret == ENOENT) {
		rbt_rec_empty_poll(rbt_ring_get(), cq, 0, 1, t0, t1);
	} else if (ret) {
		e->n = 0;
		rbt_cqx_emit(e, -ret, t0, t1);
	} else {
		e->ts = t0;
		e->n = 0;
		rbt_cqx_take(e, cq);
	}
	return ret;
}

static int rbt_cqx_next_poll(struct ibv_cq_ex *cq)
{
	struct rbt_cqx_ent *e = rbt_obj_find(cq);

	if (RBT_UNLIKELY(!e))
		return EINVAL;
	int ret = e->next_poll(cq);
	if (ret == 0 && rbt_recording())
		rbt_cqx_take(e, cq);
	return ret;
}

static void rbt_cqx_end_poll(struct ibv_cq_ex *cq)
{
	struct rbt_cqx_ent *e = rbt_obj_find(cq);

	if (RBT_UNLIKELY(!e))
		return;
	e->end_poll(cq);
	if (rbt_recording() && e->n)
		rbt_cqx_emit(e, e->n, e->ts, rbt_now());
}

static struct rbt_cqx_ent *rbt_wrap_cqx(struct ibv_cq_ex *cq, uint64_t wc_flags,
					int emulated)
{
	struct rbt_cqx_ent *e;

	if (cq->start_poll == rbt_cqx_start_poll)
		return rbt_obj_find(cq);
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->cqx = cq;
	e->start_poll = cq->start_poll;
	e->next_poll = cq->next_poll;
	e->end_poll = cq->end_poll;
	e->wc_flags = wc_flags;
	e->emulated = emulated;
	if (!e->start_poll || !e->next_poll || !e->end_poll ||
	    rbt_obj_insert(cq, e) < 0) {
		free(e);
		rbt_note(1, "extended CQ not traced (no poll ops, or too many CQs)");
		return NULL;
	}
	cq->start_poll = rbt_cqx_start_poll;
	cq->next_poll = rbt_cqx_next_poll;
	cq->end_poll = rbt_cqx_end_poll;
	return e;
}

/* ibv_poll_cq on a CQ that the recorder made a timestamping cq_ex behind the
 * program's back: the same semantics as poll_cq, built on start/next/end_poll. */
static int rbt_poll_emulated(struct rbt_cqx_ent *e, struct ibv_cq *cq, int n,
			     struct ibv_wc *wc)
{
	struct ibv_cq_ex *cqx = e->cqx;
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	struct rbt_raw_wcx x;
	int rec = rbt_recording();
	int got = 0;
	uint64_t t0 = rbt_now();
	int ret;

	if (n <= 0)
		return 0;
	ret = e->start_poll(cqx, &attr);
	if (ret == ENOENT) {
		if (rec)
			rbt_rec_empty_poll(rbt_ring_get(), cq, n, 0, t0, rbt_now());
		return 0;
	}
	if (ret)
		return -1;
	if (rec) {
		e->ts = t0;
		e->n = 0;
	}
	for (;;) {
		rbt_cqx_capture(e, cqx, &x);
		wc[got] = x.wc;
		got++;
		if (rec) {
			if (e->n == RBT_CQX_WCS) {
				uint64_t t = rbt_now();
				rbt_cqx_emit(e, RBT_CQX_WCS, e->ts, t);
				e->ts = t;
			}
			e->wcs[e->n++] = x;
		}
		if (got == n || e->next_poll(cqx))
			break;
	}
	e->end_poll(cqx);
	if (rec) {
		/* api 0: to the program this was an ordinary ibv_poll_cq. */
		struct rbt_ring *r = rbt_ring_get();
		uint32_t len =
			sizeof(struct rbt_raw_poll) + e->n * sizeof(struct rbt_raw_wcx);
		struct rbt_raw_poll *p = rbt_ring_reserve(r, len);
		if (p) {
			p->h.len = len;
			p->h.kind = RBT_RAW_POLL;
			p->h.flags = RBT_POLL_WCX;
			p->ts = e->ts;
			p->ts_exit = rbt_now();
			p->cq = (uintptr_t)cq;
			p->ret = got;
			p->asked = n;
			p->api = 0;
			p->count = 1;
			p->nwc = e->n;
			p->pad = 0;
			memcpy(p + 1, e->wcs, e->n * sizeof(struct rbt_raw_wcx));
			rbt_ring_commit(r);
		}
		e->n = 0;
	}
	return got;
}

struct ibv_cq *rbt_dp_create_ts_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				   struct ibv_comp_channel *channel, int comp_vector)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);
	struct ibv_cq_init_attr_ex a = { 0 };
	struct ibv_cq_ex *cqx;

	if (!c || !c->create_cq_ex || !c->ts_mask)
		return NULL;
	a.cqe = cqe;
	a.cq_context = cq_context;
	a.channel = channel;
	a.comp_vector = comp_vector;
	a.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	cqx = c->create_cq_ex(ctx, &a);
	if (!cqx)
		return NULL;
	if (!rbt_wrap_cqx(cqx, a.wc_flags, 1)) {
		/* Cannot poll it for the program: give it back, fall back. */
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
		return NULL;
	}
	rbt_emulating = 1;
	return ibv_cq_ex_to_cq(cqx);
}

/* ---- ibv_qp_ex: ibv_wr_* ------------------------------------------------------------ */
/* clang-format off */
#define RBT_QPX_OPS(X)             \
	X(wr_atomic_cmp_swp)       \
	X(wr_atomic_fetch_add)     \
	X(wr_bind_mw)              \
	X(wr_local_inv)            \
	X(wr_rdma_read)            \
	X(wr_rdma_write)           \
	X(wr_rdma_write_imm)       \
	X(wr_send)                 \
	X(wr_send_imm)             \
	X(wr_send_inv)             \
	X(wr_send_tso)             \
	X(wr_set_ud_addr)          \
	X(wr_set_xrc_srqn)         \
	X(wr_set_inline_data)      \
	X(wr_set_inline_data_list) \
	X(wr_set_sge)              \
	X(wr_set_sge_list)         \
	X(wr_start)                \
	X(wr_complete)             \
	X(wr_abort)                \
	X(wr_atomic_write)
/* clang-format on */

#define RBT_QPX_WRS  32
#define RBT_QPX_SGES 8
/* A WR of an open session, built call by call: every field a WR can have. */
struct rbt_qpx_swr {
	uint64_t wr_id, remote_addr, compare_add, swap, ah;
	uint32_t opcode, send_flags, imm, rkey, remote_qpn, remote_qkey;
	uint32_t nsge, payload_len;
	uint32_t inl; /* its data came through wr_set_inline_data*: kept in e->inl */
};

struct rbt_qpx_wr {
	struct rbt_qpx_swr w;
	struct rbt_raw_sge sge[RBT_QPX_SGES];
};

/* Inline data is copied by the provider when it is set, and the application may
 * reuse its buffer at once: with payload capture on, it is kept here (up to this
 * much per WR; more inline data than this is unusual on any device). */
#define RBT_QPX_INLINE_MAX 1024

struct rbt_qpx_ent {
	struct ibv_qp_ex *qpx;
#define RBT_QPX_FIELD(f) __typeof__(((struct ibv_qp_ex *)0)->f) f;
	RBT_QPX_OPS(RBT_QPX_FIELD)
	uint64_t ts;
	uint32_t n;
	uint32_t inl_cap; /* bytes of inl per WR; 0 = payload capture off */
	uint8_t *inl;	  /* RBT_QPX_WRS * inl_cap: inline payloads of the session */
	struct rbt_qpx_wr wrs[RBT_QPX_WRS];
};

/* Payload bytes WR i of the session carries in the record: the inline data kept
 * when it was set, or (capture on, sge-based) the start of its buffers. */
static uint32_t rbt_qpx_payload_len(const struct rbt_qpx_ent *e, uint32_t i)
{
	const struct rbt_qpx_wr *c = &e->wrs[i];
	uint64_t n = 0;

	if (!e->inl_cap || !rbt_wr_has_payload(c->w.opcode))
		return 0;
	if (c->w.inl)
		return c->w.payload_len;
	for (uint32_t k = 0; k < c->w.nsge; k++)
		n += c->sge[k].length;
	return n > rbt_cfg.payload ? rbt_cfg.payload : (uint32_t)n;
}

static void rbt_qpx_copy_payload(const struct rbt_qpx_ent *e, uint32_t i, uint8_t *dst,
				 uint32_t len)
{
	const struct rbt_qpx_wr *c = &e->wrs[i];

	if (c->w.inl) {
		memcpy(dst, e->inl + (size_t)i * e->inl_cap, len);
		return;
	}
	for (uint32_t k = 0; k < c->w.nsge && len; k++) {
		uint32_t l = c->sge[k].length < len ? c->sge[k].length : len;
		memcpy(dst, (const void *)(uintptr_t)c->sge[k].addr, l);
		dst += l;
		len -= l;
	}
}

/* Whether WR c needs the ring record's rbt_raw_swr_ext. */
static inline int rbt_qpx_ext(const struct rbt_qpx_swr *w)
{
	return (w->compare_add | w->swap | w->ah | w->remote_qpn | w->remote_qkey) != 0;
}

static void rbt_qpx_emit(struct rbt_qpx_ent *e, int ret, uint64_t t1)
{
	struct rbt_ring *r = rbt_ring_get();
	size_t len = sizeof(struct rbt_raw_post);
	struct rbt_raw_post *p;

	for (uint32_t i = 0; i < e->n; i++) {
		struct rbt_qpx_swr *w = &e->wrs[i].w;
		w->payload_len = rbt_qpx_payload_len(e, i);
		len += sizeof(struct rbt_raw_swr) + w->nsge * sizeof(struct rbt_raw_sge) +
		       RBT_ALIGN8(w->payload_len);
		if (rbt_qpx_ext(w))
			len += sizeof(struct rbt_raw_swr_ext);
	}
	p = rbt_ring_reserve(r, (uint32_t)len);
	if (p) {
		p->h.len = (uint32_t)len;
		p->h.kind = RBT_RAW_POST_SEND;
		p->h.flags = 0;
		p->ts = e->ts;
		p->ts_exit = t1;
		p->obj = (uintptr_t)&e->qpx->qp_base;
		p->ret = ret;
		p->qp_num = e->qpx->qp_base.qp_num;
		p->bad_wr = 0;
		p->api = 1;
		p->nwr = (uint16_t)e->n;
		uint8_t *o = (uint8_t *)(p + 1);
		for (uint32_t i = 0; i < e->n; i++) {
			const struct rbt_qpx_swr *w = &e->wrs[i].w;
			struct rbt_raw_swr *h = (void *)o;
			h->wr_id = w->wr_id;
			h->remote_addr = w->remote_addr;
			h->rkey = w->rkey;
			h->imm = w->imm;
			h->send_flags = w->send_flags;
			h->payload_len = w->payload_len;
			h->opcode = (uint8_t)w->opcode;
			h->ext = (uint8_t)rbt_qpx_ext(w);
			h->nsge = (uint16_t)w->nsge;
			h->pad = 0;
			o += sizeof(*h);
			if (h->ext) {
				struct rbt_raw_swr_ext *x = (void *)o;
				x->compare_add = w->compare_add;
				x->swap = w->swap;
				x->ah = w->ah;
				x->remote_qpn = w->remote_qpn;
				x->remote_qkey = w->remote_qkey;
				o += sizeof(*x);
			}
			memcpy(o, e->wrs[i].sge, w->nsge * sizeof(struct rbt_raw_sge));
			o += w->nsge * sizeof(struct rbt_raw_sge);
			if (w->payload_len) {
				rbt_qpx_copy_payload(e, i, o, w->payload_len);
				o += RBT_ALIGN8(w->payload_len);
			}
		}
		rbt_ring_commit(r);
	}
	e->n = 0;
}

/* Starts a new WR in the session from the qp_ex's wr_id/wr_flags. */
static inline struct rbt_qpx_swr *rbt_qpx_new(struct rbt_qpx_ent *e, struct ibv_qp_ex *q,
					      uint32_t opcode)
{
	if (!rbt_recording())
		return NULL;
	if (e->n == RBT_QPX_WRS) {
		uint64_t t = rbt_now();
		rbt_qpx_emit(e, 0, t);
		e->ts = t;
	}
	struct rbt_qpx_swr *w = &e->wrs[e->n++].w;
	memset(w, 0, sizeof(*w));
	w->wr_id = q->wr_id;
	w->send_flags = q->wr_flags;
	w->opcode = opcode;
	return w;
}

static inline struct rbt_qpx_wr *rbt_qpx_cur(struct rbt_qpx_ent *e)
{
	return e->n && rbt_recording() ? &e->wrs[e->n - 1] : NULL;
}

static inline void rbt_qpx_add_sge(struct rbt_qpx_wr *c, uint64_t addr, uint32_t len,
				   uint32_t lkey)
{
	if (c->w.nsge < RBT_QPX_SGES) {
		c->sge[c->w.nsge].addr = addr;
		c->sge[c->w.nsge].length = len;
		c->sge[c->w.nsge].lkey = lkey;
		c->w.nsge++;
	}
}

#define RBT_QPX_ENT(q)                           \
	struct rbt_qpx_ent *e = rbt_obj_find(q); \
	if (RBT_UNLIKELY(!e))                    \
		return;

static void rbt_wr_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra,
				  uint64_t cmp, uint64_t swap)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_ATOMIC_CMP_AND_SWP);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = ra;
		w->compare_add = cmp;
		w->swap = swap;
	}
	e->wr_atomic_cmp_swp(q, rkey, ra, cmp, swap);
}

static void rbt_wr_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra,
				    uint64_t add)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = ra;
		w->compare_add = add;
	}
	e->wr_atomic_fetch_add(q, rkey, ra, add);
}

static void rbt_wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
			   const struct ibv_mw_bind_info *bi)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_BIND_MW);
	if (w) {
		w->rkey = rkey;
		w->ah = (uintptr_t)mw;
		if (bi) {
			w->remote_addr = bi->addr;
			w->compare_add = bi->length;
			w->swap = bi->mw_access_flags;
		}
	}
	e->wr_bind_mw(q, mw, rkey, bi);
}

static void rbt_wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_LOCAL_INV);
	if (w)
		w->imm = rkey;
	e->wr_local_inv(q, rkey);
}

static void rbt_wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_RDMA_READ);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = ra;
	}
	e->wr_rdma_read(q, rkey, ra);
}

static void rbt_wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_RDMA_WRITE);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = ra;
	}
	e->wr_rdma_write(q, rkey, ra);
}

static void rbt_wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra,
				  __be32 imm)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_RDMA_WRITE_WITH_IMM);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = ra;
		w->imm = be32toh(imm);
	}
	e->wr_rdma_write_imm(q, rkey, ra, imm);
}

static void rbt_wr_send(struct ibv_qp_ex *q)
{
	RBT_QPX_ENT(q);
	rbt_qpx_new(e, q, IBV_WR_SEND);
	e->wr_send(q);
}

static void rbt_wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->imm = be32toh(imm);
	e->wr_send_imm(q, imm);
}

static void rbt_wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_SEND_WITH_INV);
	if (w)
		w->imm = rkey;
	e->wr_send_inv(q, rkey);
}

static void rbt_wr_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_TSO);
	if (w) {
		w->remote_addr = (uintptr_t)hdr;
		w->compare_add = hdr_sz;
		w->swap = mss;
	}
	e->wr_send_tso(q, hdr, hdr_sz, mss);
}

static void rbt_wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t qpn,
			       uint32_t qkey)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c) {
		c->w.ah = (uintptr_t)ah;
		c->w.remote_qpn = qpn;
		c->w.remote_qkey = qkey;
	}
	e->wr_set_ud_addr(q, ah, qpn, qkey);
}

static void rbt_wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c)
		c->w.remote_qpn = srqn;
	e->wr_set_xrc_srqn(q, srqn);
}

/* Appends inline data of the current WR to its kept payload (capture on). */
static void rbt_qpx_keep_inline(struct rbt_qpx_ent *e, struct rbt_qpx_wr *c,
				const void *addr, size_t len)
{
	uint32_t cap = e->inl_cap < rbt_cfg.payload ? e->inl_cap : rbt_cfg.payload;
	uint32_t have = c->w.payload_len;

	c->w.inl = 1;
	if (!e->inl || have >= cap)
		return;
	size_t n = len < cap - have ? len : cap - have;
	memcpy(e->inl + (size_t)(c - e->wrs) * e->inl_cap + have, addr, n);
	c->w.payload_len = (uint32_t)(have + n);
}

static void rbt_wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t len)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c) {
		c->w.send_flags |= IBV_SEND_INLINE;
		rbt_qpx_add_sge(c, (uintptr_t)addr, (uint32_t)len, 0);
		rbt_qpx_keep_inline(e, c, addr, len);
	}
	e->wr_set_inline_data(q, addr, len);
}

static void rbt_wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n,
					const struct ibv_data_buf *bufs)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c) {
		c->w.send_flags |= IBV_SEND_INLINE;
		for (size_t i = 0; i < n; i++) {
			rbt_qpx_add_sge(c, (uintptr_t)bufs[i].addr,
					(uint32_t)bufs[i].length, 0);
			rbt_qpx_keep_inline(e, c, bufs[i].addr, bufs[i].length);
		}
	}
	e->wr_set_inline_data_list(q, n, bufs);
}

static void rbt_wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr,
			   uint32_t len)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c)
		rbt_qpx_add_sge(c, addr, len, lkey);
	e->wr_set_sge(q, lkey, addr, len);
}

static void rbt_wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_wr *c = rbt_qpx_cur(e);
	if (c)
		for (size_t i = 0; i < n; i++)
			rbt_qpx_add_sge(c, sg[i].addr, sg[i].length, sg[i].lkey);
	e->wr_set_sge_list(q, n, sg);
}

static void rbt_wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t ra,
				const void *data)
{
	RBT_QPX_ENT(q);
	struct rbt_qpx_swr *w = rbt_qpx_new(e, q, IBV_WR_ATOMIC_WRITE);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = ra;
		if (data)
			memcpy(&w->compare_add, data, 8);
	}
	e->wr_atomic_write(q, rkey, ra, data);
}

static void rbt_qpx_recheck(struct rbt_qpx_ent *e);

static void rbt_wr_start(struct ibv_qp_ex *q)
{
	RBT_QPX_ENT(q);
	/* Providers rewrite the wr_* pointers (mlx5 on every move to RTS/RESET): make
	 * sure the session's ops are still ours before it starts. */
	rbt_qpx_recheck(e);
	e->n = 0;
	e->ts = rbt_now();
	e->wr_start(q);
}

static int rbt_wr_complete(struct ibv_qp_ex *q)
{
	struct rbt_qpx_ent *e = rbt_obj_find(q);

	if (RBT_UNLIKELY(!e))
		return EINVAL;
	int ret = e->wr_complete(q);
	uint64_t t1 = rbt_now();
	if (rbt_recording() && e->n)
		rbt_qpx_emit(e, ret, t1);
	e->n = 0;
	return ret;
}

static void rbt_wr_abort(struct ibv_qp_ex *q)
{
	RBT_QPX_ENT(q);
	e->n = 0; /* nothing was posted */
	e->wr_abort(q);
}

static void rbt_qpx_recheck(struct rbt_qpx_ent *e)
{
	struct ibv_qp_ex *q = e->qpx;

#define RBT_QPX_REWRAP(f)              \
	if (q->f && q->f != rbt_##f) { \
		e->f = q->f;           \
		q->f = rbt_##f;        \
	}
	RBT_QPX_OPS(RBT_QPX_REWRAP)
}

void rbt_dp_wrap_qpx(struct ibv_qp *qp)
{
	struct ibv_qp_ex *q;
	struct rbt_qpx_ent *e;

	if (!qp || !rbt_ctx_find(qp->context))
		return;
	e = rbt_obj_find(qp);
	if (e) {
		rbt_qpx_recheck(e);
		return;
	}
	/* rdma-core marks QPs created through create_qp_ex with the ibv_wr_* API
	 * (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS); ibv_qp_to_qp_ex is the only sanctioned
	 * way to get at the qp_ex. */
	struct ibv_qp_ex *(*to_qpx)(struct ibv_qp *) = rbt_next_ibv_qp_to_qp_ex();
	if (!to_qpx)
		return;
	rbt_tls_inside++;
	q = to_qpx(qp);
	rbt_tls_inside--;
	if (!q || !q->wr_start || !q->wr_complete)
		return;
	e = calloc(1, sizeof(*e));
	if (!e)
		return;
	if (rbt_cfg.payload) {
		e->inl_cap = rbt_cfg.payload < RBT_QPX_INLINE_MAX ? rbt_cfg.payload
								  : RBT_QPX_INLINE_MAX;
		e->inl = malloc((size_t)RBT_QPX_WRS * e->inl_cap);
		if (!e->inl)
			e->inl_cap = 0;
	}
	e->qpx = q;
	if (rbt_obj_insert(qp, e) < 0) {
		free(e->inl);
		free(e);
		rbt_note(1, "ibv_wr_* API of a QP not traced (too many QPs)");
		return;
	}
	rbt_qpx_recheck(e);
}

void rbt_dp_recheck_qpx(struct ibv_qp *qp)
{
	struct rbt_qpx_ent *e = qp ? rbt_obj_find(qp) : NULL;

	if (e)
		rbt_qpx_recheck(e);
}

/* ---- extended verbs through verbs_context ---------------------------------------- */
static struct ibv_cq_ex *rbt_create_cq_ex(struct ibv_context *ctx,
					  struct ibv_cq_init_attr_ex *a)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c || !c->create_cq_ex) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!rbt_recording())
		return c->create_cq_ex(ctx, a);
	uint32_t cqe = a->cqe;
	uint64_t t0 = rbt_now();
	rbt_tls_inside++;
	struct ibv_cq_ex *cq = c->create_cq_ex(ctx, a);
	rbt_tls_inside--;
	int err = cq ? 0 : errno;
	uint64_t t1 = rbt_now();
	int ts_src = (a->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ? 1 : 0;
	rbt_rec_cq_create(t0, t1, err, ctx, cq ? ibv_cq_ex_to_cq(cq) : NULL, cqe,
			  a->channel, a->comp_vector, 1, a->wc_flags,
			  (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? a->flags : 0,
			  ts_src);
	if (cq)
		rbt_wrap_cqx(cq, a->wc_flags, 0);
	if (cq && ts_src)
		rbt_dp_nic_cq_created(ctx);
	errno = err ? err : errno;
	return cq;
}

static struct ibv_qp *rbt_create_qp_ex(struct ibv_context *ctx,
				       struct ibv_qp_init_attr_ex *a)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c || !c->create_qp_ex) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!rbt_recording())
		return c->create_qp_ex(ctx, a);
	struct ibv_qp_init_attr_ex asked = *a;
	uint64_t t0 = rbt_now();
	rbt_tls_inside++;
	struct ibv_qp *qp = c->create_qp_ex(ctx, a);
	rbt_tls_inside--;
	int err = qp ? 0 : errno;
	uint64_t t1 = rbt_now();
	/* Caps as granted (written back into *a), the rest as asked. */
	asked.cap = a->cap;
	rbt_rec_qp_create(t0, t1, err, ctx, qp, &asked, 1);
	if (qp && (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		rbt_dp_wrap_qpx(qp);
	errno = err ? err : errno;
	return qp;
}

static struct ibv_srq *rbt_create_srq_ex(struct ibv_context *ctx,
					 struct ibv_srq_init_attr_ex *a)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c || !c->create_srq_ex) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!rbt_recording())
		return c->create_srq_ex(ctx, a);
	uint64_t t0 = rbt_now();
	rbt_tls_inside++;
	struct ibv_srq *srq = c->create_srq_ex(ctx, a);
	rbt_tls_inside--;
	int err = srq ? 0 : errno;
	uint64_t t1 = rbt_now();
	rbt_rec_srq_create(t0, t1, err,
			   (a->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? a->pd : NULL, srq, a);
	errno = err ? err : errno;
	return srq;
}

static struct ibv_xrcd *rbt_open_xrcd(struct ibv_context *ctx,
				      struct ibv_xrcd_init_attr *a)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c || !c->open_xrcd) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!rbt_recording())
		return c->open_xrcd(ctx, a);
	uint64_t t0 = rbt_now();
	rbt_tls_inside++;
	struct ibv_xrcd *x = c->open_xrcd(ctx, a);
	rbt_tls_inside--;
	int err = x ? 0 : errno;
	struct rbt_event ev = { .type = RBT_EV_XRCD_OPEN, .ts = t0 };
	ev.u.xrcd_open.ts_exit = rbt_now();
	ev.u.xrcd_open.ret = x ? 0 : -err;
	ev.u.xrcd_open.err = err;
	ev.u.xrcd_open.ctx = (uintptr_t)ctx;
	ev.u.xrcd_open.xrcd = (uintptr_t)x;
	ev.u.xrcd_open.fd =
		(a->comp_mask & IBV_XRCD_INIT_ATTR_FD) ? (uint64_t)a->fd : ~0ull;
	ev.u.xrcd_open.oflags =
		(a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ? a->oflags : 0;
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_XRCD_OPEN);
	errno = err ? err : errno;
	return x;
}

/* A context op that releases an object: the same record as the exported
 * release verbs (entry and exit time, return code, errno, the handle). */
#define RBT_CTX_RELEASE(fn, obj_t, op, EV, lname, field)          \
	static int fn(obj_t *o)                                   \
	{                                                         \
		struct rbt_ctx_ent *c = rbt_ctx_find(o->context); \
		if (!c || !c->op)                                 \
			return EOPNOTSUPP;                        \
		if (!rbt_recording())                             \
			return c->op(o);                          \
		uint64_t t0 = rbt_now();                          \
		int ret = c->op(o);                               \
		int err = ret ? errno : 0;                        \
		struct rbt_event ev = { .type = EV, .ts = t0 };   \
		ev.u.lname.ts_exit = rbt_now();                   \
		ev.u.lname.ret = ret;                             \
		ev.u.lname.err = err;                             \
		ev.u.lname.field = (uintptr_t)o;                  \
		rbt_emit(&ev);                                    \
		errno = err ? err : errno;                        \
		return ret;                                       \
	}
RBT_CTX_RELEASE(rbt_close_xrcd, struct ibv_xrcd, close_xrcd, RBT_EV_XRCD_CLOSE,
		xrcd_close, xrcd)

static int rbt_query_device_ex(struct ibv_context *ctx,
			       const struct ibv_query_device_ex_input *in,
			       struct ibv_device_attr_ex *attr, size_t sz)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c || !c->query_device_ex)
		return EOPNOTSUPP;
	if (!rbt_recording())
		return c->query_device_ex(ctx, in, attr, sz);
	rbt_tls_inside++;
	int ret = c->query_device_ex(ctx, in, attr, sz);
	rbt_tls_inside--;
	int saved = errno;
	if (!ret)
		rbt_rec_device_attr(
			ctx, &attr->orig_attr,
			sz >= offsetof(struct ibv_device_attr_ex, hca_core_clock) + 8
				? attr->completion_timestamp_mask
				: 0,
			sz >= offsetof(struct ibv_device_attr_ex, hca_core_clock) + 8
				? attr->hca_core_clock
				: 0);
	errno = saved;
	return ret;
}

static int rbt_query_rt_values(struct ibv_context *ctx, struct ibv_values_ex *v)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c || !c->query_rt_values)
		return EOPNOTSUPP;
	if (!rbt_recording())
		return c->query_rt_values(ctx, v);
	uint64_t t0 = rbt_now();
	int ret = c->query_rt_values(ctx, v);
	uint64_t t1 = rbt_now();
	int saved = errno;
	if (!ret && (v->comp_mask & IBV_VALUES_MASK_RAW_CLOCK)) {
		/* The program's own clock readings are samples for the model too. */
		struct rbt_event ev = { .type = RBT_EV_CLOCK_SAMPLE,
					.ts = t0 + (t1 - t0) / 2 };
		ev.u.clock_sample.ctx = (uintptr_t)ctx;
		ev.u.clock_sample.nic_hz = c->nic_hz;
		ev.u.clock_sample.nic_ts = (uint64_t)v->raw_clock.tv_sec * 1000000000ull +
					   v->raw_clock.tv_nsec;
		rbt_emit(&ev);
	}
	errno = saved;
	return ret;
}

static int rbt_query_port_ex(struct ibv_context *ctx, uint8_t port,
			     struct ibv_port_attr *a, size_t len)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c || !c->query_port)
		return EOPNOTSUPP;
	if (!rbt_recording())
		return c->query_port(ctx, port, a, len);
	rbt_tls_inside++;
	int ret = c->query_port(ctx, port, a, len);
	rbt_tls_inside--;
	int saved = errno;
	if (!ret && len >= sizeof(struct ibv_port_attr))
		rbt_rec_port_attr(ctx, port, a);
	errno = saved;
	return ret;
}

/* ---- memory windows (inline verbs through ctx->ops) ------------------------------ */
static struct ibv_mw *rbt_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(pd->context);

	if (!c || !c->alloc_mw) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!rbt_recording())
		return c->alloc_mw(pd, type);
	uint64_t t0 = rbt_now();
	struct ibv_mw *mw = c->alloc_mw(pd, type);
	int err = mw ? 0 : errno;
	struct rbt_event ev = { .type = RBT_EV_MW_ALLOC, .ts = t0 };
	ev.u.mw_alloc.ts_exit = rbt_now();
	ev.u.mw_alloc.ret = mw ? 0 : -err;
	ev.u.mw_alloc.err = err;
	ev.u.mw_alloc.pd = (uintptr_t)pd;
	ev.u.mw_alloc.mw = (uintptr_t)mw;
	ev.u.mw_alloc.mw_type = type;
	ev.u.mw_alloc.rkey = mw ? mw->rkey : 0;
	rbt_emit(&ev);
	rbt_emit_stack(RBT_EV_MW_ALLOC);
	errno = err ? err : errno;
	return mw;
}

RBT_CTX_RELEASE(rbt_dealloc_mw, struct ibv_mw, dealloc_mw, RBT_EV_MW_DEALLOC, mw_dealloc,
		mw)

/* ibv_bind_mw posts a BIND_MW WR: recorded as a one-WR post_send. */
static int rbt_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(qp->context);

	if (!c || !c->bind_mw)
		return EOPNOTSUPP;
	if (!rbt_recording())
		return c->bind_mw(qp, mw, b);
	uint64_t t0 = rbt_now();
	int ret = c->bind_mw(qp, mw, b);
	uint64_t t1 = rbt_now();
	struct ibv_send_wr wr = { .wr_id = b->wr_id,
				  .opcode = IBV_WR_BIND_MW,
				  .send_flags = b->send_flags };
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = mw->rkey; /* the new key: the provider updated it */
	wr.bind_mw.bind_info = b->bind_info;
	rbt_rec_send(qp, &wr, ret, ret ? &wr : NULL, t0, t1);
	return ret;
}

/* ---- context patching --------------------------------------------------------------- */
static void rbt_probe_device(struct rbt_ctx_ent *c)
{
	struct ibv_device_attr_ex ax;
	struct ibv_context *ctx = c->ctx;

	memset(&ax, 0, sizeof(ax));
	rbt_tls_inside++;
	if (c->query_device_ex && !c->query_device_ex(ctx, NULL, &ax, sizeof(ax))) {
		c->ts_mask = ax.completion_timestamp_mask;
		c->nic_hz = ax.hca_core_clock * 1000;
		rbt_rec_device_attr(ctx, &ax.orig_attr, ax.completion_timestamp_mask,
				    ax.hca_core_clock);
	} else {
		__typeof__(&ibv_query_device) qd = rbt_next_ibv_query_device();
		if (qd && !qd(ctx, &ax.orig_attr))
			rbt_rec_device_attr(ctx, &ax.orig_attr, 0, 0);
	}
	for (unsigned p = 1; p <= ax.orig_attr.phys_port_cnt && p < 8; p++) {
		struct ibv_port_attr pa;
		memset(&pa, 0, sizeof(pa));
		int r = -1;
		if (c->query_port) {
			r = c->query_port(ctx, p, &pa, sizeof(pa));
		} else {
			/* The compat struct is struct ibv_port_attr's head. */
			__typeof__(&ibv_query_port) qp = rbt_next_ibv_query_port();
			if (qp)
				r = qp(ctx, p, (struct _compat_ibv_port_attr *)&pa);
		}
		if (!r)
			rbt_rec_port_attr(ctx, p, &pa);
	}
	rbt_tls_inside--;
}

void rbt_dp_patch_context(struct ibv_context *ctx)
{
	struct rbt_ctx_ent *c = NULL;
	struct verbs_context *v = NULL;
	char note[200];

	if (ctx->ops.post_send == rbt_post_send)
		return; /* already ours */
	pthread_mutex_lock(&rbt_ctx_lock);
	int n = atomic_load(&rbt_nctx);
	for (int i = 0; i < n; i++)
		if (rbt_ctxs[i].ctx == ctx || !rbt_ctxs[i].ctx)
			c = &rbt_ctxs[i];
	if (!c && n < RBT_MAX_CTX)
		c = &rbt_ctxs[n];
	if (!c) {
		pthread_mutex_unlock(&rbt_ctx_lock);
		rbt_note(
			1,
			"more than 64 device contexts: data path of the rest not traced");
		return;
	}
	struct rbt_ctx_ent fresh = { .ctx = ctx };
	if (ctx->abi_compat == __VERBS_ABI_IS_EXTENDED) {
		v = verbs_get_ctx(ctx);
		/* A provider built against a different rdma-core has a different sz;
		 * anything outside what the shim knows how to read is refused. */
		if (v->sz < RBT_VEND(sz) || v->sz > 65536) {
			snprintf(note, sizeof(note),
				 "device context layout not recognised (verbs_context "
				 "sz=%zu): "
				 "extended verbs not traced",
				 v->sz);
			v = NULL;
		}
	} else {
		snprintf(
			note, sizeof(note),
			"device context is not an extended verbs_context: extended verbs "
			"not traced");
	}
	fresh.vctx = v;
	fresh.post_send = ctx->ops.post_send;
	fresh.post_recv = ctx->ops.post_recv;
	fresh.post_srq_recv = ctx->ops.post_srq_recv;
	fresh.poll_cq = ctx->ops.poll_cq;
	fresh.req_notify_cq = ctx->ops.req_notify_cq;
	fresh.alloc_mw = ctx->ops.alloc_mw;
	fresh.dealloc_mw = ctx->ops.dealloc_mw;
	fresh.bind_mw = ctx->ops.bind_mw;
	if (v) {
#define RBT_TAKE(f) fresh.f = RBT_VHAS(v, f) ? v->f : NULL;
		RBT_TAKE(query_port)
		RBT_TAKE(create_cq_ex)
		RBT_TAKE(create_qp_ex)
		RBT_TAKE(create_srq_ex)
		RBT_TAKE(open_xrcd)
		RBT_TAKE(close_xrcd)
		RBT_TAKE(query_device_ex)
		RBT_TAKE(query_rt_values)
	}
	pthread_mutex_lock(&rbt_sample_lock); /* the writer may be sampling others */
	*c = fresh;
	pthread_mutex_unlock(&rbt_sample_lock);
	if (c == &rbt_ctxs[n])
		atomic_store_explicit(&rbt_nctx, n + 1, memory_order_release);
	/* Publish the originals before any wrapper can run. */
	atomic_thread_fence(memory_order_seq_cst);
	if (fresh.post_send)
		ctx->ops.post_send = rbt_post_send;
	if (fresh.post_recv)
		ctx->ops.post_recv = rbt_post_recv;
	if (fresh.post_srq_recv)
		ctx->ops.post_srq_recv = rbt_post_srq_recv;
	if (fresh.poll_cq)
		ctx->ops.poll_cq = rbt_poll_cq;
	if (fresh.req_notify_cq)
		ctx->ops.req_notify_cq = rbt_req_notify_cq;
	if (fresh.alloc_mw)
		ctx->ops.alloc_mw = rbt_alloc_mw;
	if (fresh.dealloc_mw)
		ctx->ops.dealloc_mw = rbt_dealloc_mw;
	if (fresh.bind_mw)
		ctx->ops.bind_mw = rbt_bind_mw;
	if (v) {
#define RBT_PATCH(f, w) \
	if (fresh.f)    \
		v->f = w;
		RBT_PATCH(query_port, rbt_query_port_ex)
		RBT_PATCH(create_cq_ex, rbt_create_cq_ex)
		RBT_PATCH(create_qp_ex, rbt_create_qp_ex)
		RBT_PATCH(create_srq_ex, rbt_create_srq_ex)
		RBT_PATCH(open_xrcd, rbt_open_xrcd)
		RBT_PATCH(close_xrcd, rbt_close_xrcd)
		RBT_PATCH(query_device_ex, rbt_query_device_ex)
		RBT_PATCH(query_rt_values, rbt_query_rt_values)
	}
	pthread_mutex_unlock(&rbt_ctx_lock);
	if (!v) {
		static int warned;
		rbt_note(warned++ ? 0 : 1, note);
	}
	rbt_probe_device(c);
}

void rbt_dp_forget_context(struct ibv_context *ctx)
{
	/* The entry stays: a context at the same address later is re-patched and
	 * overwrites it, and nothing can call through a closed context (sampling was
	 * turned off by rbt_dp_close_begin/end). */
	(void)ctx;
}
