/*
 * softnic keys: translating (key, address, length) of a process into memory
 * we can touch, through an MR or a memory window, and binding and
 * invalidating windows (BIND_MW, LOCAL_INV, SEND_WITH_INV). Reads the shared
 * MR tables only; a window is changed under its seqlock and nothing else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "softnic_data.h"

/* ---------------- moving data ---------------- */

static inline struct sn_mrt_ent *sn_key_ent(struct sn_mrt_shm *t, uint32_t key)
{
	uint32_t idx = (key >> 8) - 1;

	if (SN_UNLIKELY(idx >= SN_MAX_MR))
		return NULL;
	if (SN_UNLIKELY(atomic_load_explicit(&t->ent[idx].key, memory_order_acquire) !=
				key ||
			!key))
		return NULL;
	return &t->ent[idx];
}

static inline bool sn_in_range(const struct sn_mrt_ent *e, uint64_t addr, uint64_t len)
{
	return addr >= e->addr && len <= e->len && addr - e->addr <= e->len - len;
}

static int sn_xlate_mw(struct sn_rproc *p, uint32_t key, uint64_t addr, uint64_t len,
		       uint32_t need, uint32_t pd_id, uint32_t qpn, struct sn_seg *segs,
		       int *nseg);

/* Translate (key, addr, len) of process p into segments we can touch.
 * qpn is the responder QP of a remote access (its key may name a memory
 * window), 0 for an lkey (never a window). */
int sn_xlate(struct sn_rproc *p, uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
	     uint32_t pd_id, uint32_t qpn, struct sn_seg *segs, int *nseg)
{
	struct sn_mrt_ent *e = sn_key_ent(sn_rproc_mrt(p), key);
	uint64_t va;

	if (SN_UNLIKELY(!e) && qpn && (key >> 8) > SN_MAX_MR)
		return sn_xlate_mw(p, key, addr, len, need, pd_id, qpn, segs, nseg);
	if (!e || e->pd_id != pd_id || (e->access & need) != need ||
	    !sn_in_range(e, addr, len))
		return -1;
	va = addr + (uint64_t)e->delta;
	while (len) {
		size_t contig;
		char *ptr = sn_remote_ptr(p, e, va, &contig);

		if (!ptr || *nseg >= SN_MAX_SEGS)
			return -1;
		if (contig > len)
			contig = len;
		segs[*nseg].p = ptr;
		segs[*nseg].len = contig;
		(*nseg)++;
		va += contig;
		len -= contig;
	}
	return 0;
}

/* ---------------- memory windows ---------------- */

static inline struct sn_mw_ent *sn_mw_of_key(struct sn_mrt_shm *t, uint32_t key)
{
	uint32_t idx = (key >> 8) - 1 - SN_MAX_MR;

	return (key >> 8) > SN_MAX_MR && idx < SN_MAX_MW ? &t->mw[idx] : NULL;
}

/* A remote access through a window: a consistent snapshot of its binding
 * (a rebind or invalidation may be running in another process), the checks
 * a responder makes (key, PD, type 2's QP, rights, bounds), then the MR
 * under it. */
static int sn_xlate_mw(struct sn_rproc *p, uint32_t key, uint64_t addr, uint64_t len,
		       uint32_t need, uint32_t pd_id, uint32_t qpn, struct sn_seg *segs,
		       int *nseg)
{
	struct sn_mrt_shm *t = sn_rproc_mrt(p);
	struct sn_mw_ent *m = sn_mw_of_key(t, key);
	uint32_t type, wkey, bound, wpd, wqpn, acc, mrkey, tries = 0;
	uint64_t waddr, wlen;

	if (!m)
		return -1;
	for (;;) {
		uint32_t s0 = atomic_load_explicit(&m->seq, memory_order_acquire);

		if (SN_LIKELY(!(s0 & 1))) {
			type = atomic_load_explicit(&m->type, memory_order_relaxed);
			wkey = m->key;
			bound = m->bound;
			wpd = m->pd_id;
			wqpn = m->qpn;
			acc = m->access;
			mrkey = m->mr_key;
			waddr = m->addr;
			wlen = m->len;
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&m->seq, memory_order_relaxed) == s0)
				break;
		}
		/* a writer holds it for a few stores; one that died there
		 * leaves the window unusable, as a dead NIC would */
		if (++tries > (1u << 16))
			return -1;
		if (!(tries & 63))
			sched_yield();
	}
	if (!type || !bound || wkey != key || wpd != pd_id ||
	    (type == IBV_MW_TYPE_2 && wqpn != qpn) || (acc & need) != need ||
	    addr < waddr || len > wlen || addr - waddr > wlen - len)
		return -1;
	/* the MR cannot be deregistered while bound (EBUSY): re-checking its
	 * key costs one load and guards against a dead owner's reused slot */
	return sn_xlate(p, mrkey, addr, len, 0, pd_id, 0, segs, nseg);
}

/* Invalidate a type 2 window: LOCAL_INV (qpn 0: any QP of the PD) or the
 * SEND_WITH_INV a responder QP received (the window must be bound to it).
 * 0 or -1 when the key names no such bound window. */
int sn_mw_invalidate(struct sn_mrt_shm *t, uint32_t key, uint32_t pd_id, uint32_t qpn)
{
	struct sn_mw_ent *m = sn_mw_of_key(t, key);
	int ret = -1;

	if (!m || atomic_load(&m->type) != IBV_MW_TYPE_2 || !sn_mw_wlock(m))
		return -1;
	if (m->bound && m->key == key && m->pd_id == pd_id && (!qpn || m->qpn == qpn)) {
		m->bound = 0;
		m->len = 0;
		ret = 0;
	}
	sn_mw_wunlock(m);
	return ret;
}

/* BIND_MW, executed in order on the send queue of the window's owner. The
 * checks are the IB spec's (C10-72..75, o10-36/37) as rdma-core's rxe makes
 * them; any failure is IBV_WC_MW_BIND_ERR (and the QP goes to ERR). */
uint32_t sn_mw_bind_exec(struct sn_qp *qp, struct sn_swr *w)
{
	const uint32_t remote = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_ATOMIC;
	uint32_t acc = w->mw_access, type;
	struct sn_mrt_ent *e;
	struct sn_mw_ent *m;

	if (!w->mw)
		return IBV_WC_MW_BIND_ERR;
	m = &sn_g.mrt->mw[w->mw->slot];
	type = atomic_load(&m->type);
	/* zero-based windows are not implemented */
	if (!type || (w->rkey >> 8) != (m->key >> 8) || (acc & IBV_ACCESS_ZERO_BASED))
		return IBV_WC_MW_BIND_ERR;
	if (type == IBV_MW_TYPE_2 && (m->pd_id != qp->pd_id || !w->mw_len))
		return IBV_WC_MW_BIND_ERR;
	if (w->mw_len) {
		e = sn_key_ent(sn_g.mrt, w->mr_key);
		if (!e || e->pd_id != m->pd_id || !(e->access & IBV_ACCESS_MW_BIND) ||
		    (e->access & IBV_ACCESS_ZERO_BASED) ||
		    ((acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
		     !(e->access & IBV_ACCESS_LOCAL_WRITE)) ||
		    !sn_in_range(e, w->raddr, w->mw_len))
			return IBV_WC_MW_BIND_ERR;
	}
	if (!sn_mw_wlock(m))
		return IBV_WC_MW_BIND_ERR;
	/* a bound type 2 window must be invalidated before it binds again */
	if (type == IBV_MW_TYPE_2 && m->bound) {
		sn_mw_wunlock(m);
		return IBV_WC_MW_BIND_ERR;
	}
	m->key = w->rkey;
	m->bound = w->mw_len != 0;
	m->access = acc & remote;
	m->mr_key = w->mw_len ? w->mr_key : 0;
	m->addr = w->mw_len ? w->raddr : 0;
	m->len = w->mw_len;
	m->qpn = type == IBV_MW_TYPE_2 ? qp->shm->qpn : 0;
	sn_mw_wunlock(m);
	return IBV_WC_SUCCESS;
}
