/*
 * softnic peers: how one process reaches another's objects, through caches
 * of mapped files: a peer's MR table and memory files, its QPs (and XRC
 * views through a TGT QP onto an SRQ), liveness, and event FIFOs.
 * sn_remote_ptr and sn_rqp_get run on the data path: lock-free once a file
 * is mapped; everything that maps or opens runs once per object.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netpacket/packet.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "softnic_int.h"

/* ---------------- peers ---------------- */

struct sn_maptab {
	uint32_t n;
	_Atomic(void *) slot[];
};

struct sn_rproc {
	char procid[32];
	bool self;
	struct sn_mrt_shm *mrt;
	/* mappings of its memory files, indexed by file_id; read without the
	 * lock, so the table and its size are published together */
	_Atomic(struct sn_maptab *) maps;
	struct sn_rproc *next;
};

/* map the fabric file of the name made from fmt; NULL if it cannot be */
static void *sn_shm_mapf(size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void *sn_shm_mapf(size_t *len, const char *fmt, ...)
{
	char name[128];
	va_list ap;
	void *m;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	return sn_shm_map(name, &m, len) ? NULL : m;
}

static struct sn_rproc *sn_procs;

struct sn_rproc *sn_rproc_get(const char *procid)
{
	struct sn_rproc *p;
	void *m;
	size_t len;

	pthread_mutex_lock(&sn_g.lock);
	for (p = sn_procs; p; p = p->next)
		if (!strcmp(p->procid, procid))
			goto out;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto out;
	snprintf(p->procid, sizeof(p->procid), "%s", procid);
	p->self = !strcmp(procid, sn_g.procid);
	if (p->self) {
		p->mrt = sn_g.mrt;
	} else {
		m = sn_shm_mapf(&len, "mrt-%s", procid);
		if (!m || len < sizeof(struct sn_mrt_shm)) {
			free(p);
			p = NULL;
			goto out;
		}
		p->mrt = m;
	}
	p->next = sn_procs;
	sn_procs = p;
out:
	pthread_mutex_unlock(&sn_g.lock);
	return p;
}

struct sn_mrt_shm *sn_rproc_mrt(struct sn_rproc *p)
{
	return p->mrt;
}

static void *sn_rproc_map(struct sn_rproc *p, const struct sn_mr_run *r)
{
	uint32_t file_id = r->file_id;
	struct sn_maptab *t = atomic_load_explicit(&p->maps, memory_order_acquire);
	void *m = NULL;
	size_t len;

	if (t && file_id < t->n) {
		m = atomic_load_explicit(&t->slot[file_id], memory_order_acquire);
		if (m)
			return m;
	}
	pthread_mutex_lock(&sn_g.lock);
	t = atomic_load_explicit(&p->maps, memory_order_relaxed);
	if (!t || file_id >= t->n) {
		uint32_t n = t ? t->n : 64;
		struct sn_maptab *nt;

		while (n <= file_id)
			n *= 2;
		/* Another thread (the helper, or a post on another QP) may be
		 * reading the old table right now: it is leaked, never freed,
		 * and the new one is published whole, its size with it. */
		nt = calloc(1, sizeof(*nt) + n * sizeof(nt->slot[0]));
		if (!nt)
			goto out;
		nt->n = n;
		for (uint32_t i = 0; t && i < t->n; i++)
			atomic_store_explicit(
				&nt->slot[i],
				atomic_load_explicit(&t->slot[i], memory_order_relaxed),
				memory_order_relaxed);
		atomic_store_explicit(&p->maps, nt, memory_order_release);
		t = nt;
	}
	m = atomic_load_explicit(&t->slot[file_id], memory_order_relaxed);
	if (!m) {
		if (r->src.kind != SN_MEM_FABRIC) /* shared: softnic_mem.c */
			m = sn_mem_peer_map(&r->src, r->len);
		else
			m = sn_shm_mapf(&len, "m-%s-%u", p->procid, file_id);
		if (m)
			atomic_store_explicit(&t->slot[file_id], m, memory_order_release);
	}
out:
	pthread_mutex_unlock(&sn_g.lock);
	return m;
}

void *sn_remote_ptr(struct sn_rproc *p, const struct sn_mrt_ent *e, uint64_t va,
		    size_t *contig)
{
	uint32_t i, n = e->nruns < SN_MAX_RUNS ? e->nruns : SN_MAX_RUNS;

	for (i = 0; i < n; i++) {
		const struct sn_mr_run *r = &e->runs[i];

		if (va >= r->va && va < r->va + r->len) {
			char *base;

			*contig = (size_t)(r->va + r->len - va);
			if (p->self)
				return (void *)va;
			base = sn_rproc_map(p, r);
			return base ? base + (va - r->va) : NULL;
		}
	}
	return NULL;
}

#define SN_RQP_HASH 256
static struct sn_rqp *sn_rqps[SN_RQP_HASH];

/* a remote receive queue's CQ (a ring that may grow) */
static int sn_rqp_cq(struct sn_rqp *r, const char *cq_name)
{
	void *m;
	size_t len;

	if (sn_shm_map_reserve(cq_name, SN_CQ_RESERVE, &m, &len))
		return -1;
	r->rcq = m;
	return 0;
}

/* the process that owns a remote receive queue (its MRs) */
static int sn_rqp_owner(struct sn_rqp *r, const char *procid)
{
	r->proc = sn_rproc_get(procid);
	return r->proc ? 0 : -1;
}

static struct sn_rqp *sn_rqp_open(uint32_t qpn)
{
	struct sn_rqp *r = calloc(1, sizeof(*r));
	void *m;
	size_t len;

	if (!r)
		return NULL;
	r->chan_fd = r->async_fd = -1;
	r->qpn = qpn;
	r->shm = sn_shm_mapf(&r->shm_len, "qp-%u", qpn);
	if (!r->shm)
		goto fail;
	if (atomic_load(&r->shm->destroyed))
		goto fail;
	r->rq = &r->shm->rq;
	if (r->shm->has_srq) {
		if (sn_shm_map(r->shm->srq_name, &m, &len))
			goto fail;
		r->srq = m;
		r->rq = &r->srq->rq;
	}
	if (r->shm->rcq_name[0] && sn_rqp_cq(r, r->shm->rcq_name))
		goto fail;
	if (sn_rqp_owner(r, r->shm->procid))
		goto fail;
	r->pd_id = r->srq ? r->srq->pd_id : r->shm->pd_id;
	return r;
fail:
	free(r); /* mappings are leaked on purpose: cheap and rare */
	return NULL;
}

struct sn_rqp *sn_rqp_get(uint32_t qpn)
{
	struct sn_rqp *r, **pp;

	pthread_mutex_lock(&sn_g.lock);
	for (pp = &sn_rqps[qpn % SN_RQP_HASH]; (r = *pp); pp = &r->hnext) {
		if (r->qpn != qpn)
			continue;
		if (!atomic_load(&r->shm->destroyed) && !r->dead)
			goto out;
		*pp = r->hnext; /* stale: forget it, look again */
		break;
	}
	pthread_mutex_unlock(&sn_g.lock);
	r = sn_rqp_open(qpn);
	pthread_mutex_lock(&sn_g.lock);
	if (r) {
		r->hnext = sn_rqps[qpn % SN_RQP_HASH];
		sn_rqps[qpn % SN_RQP_HASH] = r;
	}
out:
	pthread_mutex_unlock(&sn_g.lock);
	return r;
}

uint64_t sn_coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Cheap enough for every post: a shared flag, and a look at the peer's
 * liveness lock at most every few milliseconds. */
/* XRC: a view of TGT QP tgt that delivers into XRC SRQ srqn (same domain
 * only): the SRQ's ring, CQ, PD and owner process. Cached forever. */
struct sn_rqp *sn_rqp_xrc(struct sn_rqp *tgt, uint32_t srqn)
{
	static struct sn_rqp *views;
	struct sn_rqp *v;
	size_t len;

	pthread_mutex_lock(&sn_g.lock);
	for (v = views; v; v = v->hnext)
		if (v->qpn == tgt->qpn && v->xsrqn == srqn && v->shm == tgt->shm)
			break;
	pthread_mutex_unlock(&sn_g.lock);
	if (v)
		return v;
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	*v = *tgt;
	v->chan_fd = v->async_fd = -1;
	v->xsrqn = srqn;
	v->srq = sn_shm_mapf(&len, "xsrq-%u", srqn);
	if (!v->srq)
		goto fail;
	if (!v->srq->xrcd_id || v->srq->xrcd_id != tgt->shm->xrcd_id)
		goto fail; /* not an XRC SRQ of the TGT's domain */
	v->rq = &v->srq->rq;
	if (sn_rqp_cq(v, v->srq->cq_name) || sn_rqp_owner(v, v->srq->procid))
		goto fail;
	v->pd_id = v->srq->pd_id;
	pthread_mutex_lock(&sn_g.lock);
	v->hnext = views;
	views = v;
	pthread_mutex_unlock(&sn_g.lock);
	return v;
fail:
	free(v);
	return NULL;
}

bool sn_rqp_alive(struct sn_rqp *r)
{
	uint64_t now;

	if (r->dead || atomic_load_explicit(&r->shm->destroyed, memory_order_relaxed)) {
		r->dead = true;
		return false;
	}
	now = sn_coarse_ns();
	if (now >= r->next_alive_ns) {
		r->next_alive_ns = now + 2000000;
		if (!sn_proc_alive(r->shm->procid)) {
			r->dead = true;
			return false;
		}
	}
	return true;
}

static void sn_fifo_write(int *fdp, const char *path, const void *rec, size_t n)
{
	if (!path[0])
		return;
	if (*fdp < 0) {
		char p[512];

		sn_path(p, sizeof(p), path);
		*fdp = open(p, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		if (*fdp < 0)
			return;
	}
	if (write(*fdp, rec, n) < 0 && errno != EAGAIN) {
		close(*fdp);
		*fdp = -1;
	}
}

void sn_notify_fd(int *fdp, const char *path, uint64_t cookie)
{
	sn_fifo_write(fdp, path, &cookie, sizeof(cookie));
}

/* The record is the kernel's (struct ib_uverbs_async_event_desc): the
 * object's address (a port's number for port events), then the type, so
 * that rdma-core's own ibv_get_async_event reads it in provider mode. */
void sn_async_event(const char *path, int *fdp, uint32_t type, uint64_t cookie)
{
	struct sn_async_rec rec = { .element = cookie, .type = type };
	int tmp = -1;

	sn_fifo_write(fdp ? fdp : &tmp, path, &rec, sizeof(rec));
	if (!fdp && tmp >= 0)
		close(tmp);
}
