/* shim_patch.c - what lets the data path be traced at all: the layout checks of
 * the rdma-core ABI the recorder writes into, the table of opened contexts and
 * their original ops, the table of per-object state (ibv_cq_ex, ibv_qp_ex), and
 * the patching of a new context's ops and verbs_context ops.
 *
 * Only function pointers are swapped, only in layouts checked here, and never
 * while another thread could be calling through them for the first time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "interpose/shim.h"
#include "interpose/shim_dp.h"

/* ---- layout checks -------------------------------------------------------------
 * The shim writes into struct ibv_context's ops and into struct verbs_context,
 * which sits in front of it and grows towards lower addresses. The distances
 * below are those of rdma-core's ABI (checked against the installed headers at
 * build time); a header that moved them would make the shim patch the wrong
 * pointers, so the build stops instead. */
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

struct rbt_ctx_ent rbt_ctxs[RBT_MAX_CTX];
_Atomic int rbt_nctx;
pthread_mutex_t rbt_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held around every NIC clock read of the sampler and around turning sampling off
 * at close, so no read can overlap ibv_close_device. Taken after rbt_ctx_lock and
 * after the core's writer lock; nothing is emitted while it is held (emitting can
 * wait for the writer thread). */
pthread_mutex_t rbt_sample_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- per-object table (ibv_cq_ex, ibv_qp_ex) ---------------------------------------
 * Open addressing, lock-free lookups; inserts and removals take a lock and happen
 * only in create/destroy. */
const void *_Atomic rbt_obj_key[RBT_OBJ_SLOTS];
void *_Atomic rbt_obj_val[RBT_OBJ_SLOTS];
static pthread_mutex_t rbt_obj_lock = PTHREAD_MUTEX_INITIALIZER;

int rbt_obj_insert(const void *key, void *val)
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

/* The ops a context's wrappers take the place of: (op, wrapper), in ctx->ops and
 * in the verbs_context (there only where the provider's struct reaches the op). */
#define RBT_PATCHED_OPS(X)                  \
	X(post_send, rbt_post_send)         \
	X(post_recv, rbt_post_recv)         \
	X(post_srq_recv, rbt_post_srq_recv) \
	X(poll_cq, rbt_poll_cq)             \
	X(req_notify_cq, rbt_req_notify_cq) \
	X(alloc_mw, rbt_alloc_mw)           \
	X(dealloc_mw, rbt_dealloc_mw)       \
	X(bind_mw, rbt_bind_mw)
#define RBT_PATCHED_VOPS(X)                     \
	X(query_port, rbt_query_port_ex)        \
	X(create_cq_ex, rbt_create_cq_ex)       \
	X(create_qp_ex, rbt_create_qp_ex)       \
	X(create_srq_ex, rbt_create_srq_ex)     \
	X(open_xrcd, rbt_open_xrcd)             \
	X(close_xrcd, rbt_close_xrcd)           \
	X(query_device_ex, rbt_query_device_ex) \
	X(query_rt_values, rbt_query_rt_values)

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
	/* the originals */
#define RBT_TAKE_OP(f, w) fresh.f = ctx->ops.f;
#define RBT_TAKE_V(f, w)  fresh.f = RBT_VHAS(v, f) ? v->f : NULL;
	RBT_PATCHED_OPS(RBT_TAKE_OP)
	if (v) {
		RBT_PATCHED_VOPS(RBT_TAKE_V)
	}
	pthread_mutex_lock(&rbt_sample_lock); /* the writer may be sampling others */
	*c = fresh;
	pthread_mutex_unlock(&rbt_sample_lock);
	if (c == &rbt_ctxs[n])
		atomic_store_explicit(&rbt_nctx, n + 1, memory_order_release);
	/* Publish the originals before any wrapper can run. */
	atomic_thread_fence(memory_order_seq_cst);
	/* the wrappers in their place (where the provider has the op) */
#define RBT_PATCH_OP(f, w) \
	if (fresh.f)       \
		ctx->ops.f = w;
#define RBT_PATCH_V(f, w) \
	if (fresh.f)      \
		v->f = w;
	RBT_PATCHED_OPS(RBT_PATCH_OP)
	if (v) {
		RBT_PATCHED_VOPS(RBT_PATCH_V)
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
