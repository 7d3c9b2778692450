/*
 * softnic memory registration: an MR's pages are backed by files of the
 * fabric (copy, then mmap MAP_SHARED|MAP_FIXED over the same addresses, with
 * other threads' stores held off meanwhile: softnic_move.c) so
 * that a peer can map the same pages and move data with plain loads and
 * stores; runs of pages shared by several MRs are counted; the MR table and
 * its memory-window slots; the child's private copies after fork().
 * Control path only: never called from post or poll.
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

struct sn_run {
	uint64_t va, len;
	uint32_t file_id;
	int refs;
	struct sn_mem_src src;
};

static struct sn_run **sn_runs;
static int sn_nruns, sn_runs_cap;

/* Runs in the child of fork() (from the atfork handler, with the
 * global lock held across the fork). */
void sn_fabric_atfork_child(void)
{
	int i;

	/* The child must not share registered pages with its parent (fork
	 * semantics are copy-on-write): give it private copies. */
	for (i = 0; i < sn_nruns; i++) {
		struct sn_run *r = sn_runs[i];

		if (r->src.kind != SN_MEM_FABRIC) {
			sn_mem_release(&r->src); /* shared pages stay shared */
			continue;
		}
		/* one thread: nobody else stores meanwhile */
		sn_pages_move(r->va, r->len, -1, true);
	}
	sn_nruns = 0;
	if (sn_g.alive_fd > 0)
		close(sn_g.alive_fd); /* the lock says the parent lives, not us */
	sn_g.alive_fd = -1;
	sn_g.inited = false;
	sn_g.cqs = NULL;
	sn_g.qps = NULL;
	sn_g.srqs = NULL;
}

/* ---------------- local memory registration ---------------- */

static struct sn_run *sn_run_find(uint64_t va)
{
	int i;

	for (i = 0; i < sn_nruns; i++)
		if (va >= sn_runs[i]->va && va < sn_runs[i]->va + sn_runs[i]->len)
			return sn_runs[i];
	return NULL;
}

static uint64_t sn_run_next_start(uint64_t va)
{
	uint64_t best = UINT64_MAX;
	int i;

	for (i = 0; i < sn_nruns; i++)
		if (sn_runs[i]->va > va && sn_runs[i]->va < best)
			best = sn_runs[i]->va;
	return best;
}

static struct sn_run *sn_run_new(uint64_t va, uint64_t len)
{
	char name[96], p[512];
	struct sn_run *r;
	int fd, err;

	if (sn_nruns == sn_runs_cap) {
		int cap = sn_runs_cap ? sn_runs_cap * 2 : 64;
		struct sn_run **n = realloc(sn_runs, (size_t)cap * sizeof(*n));

		if (!n)
			return NULL;
		sn_runs = n;
		sn_runs_cap = cap;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	/* shared memory keeps its pages (softnic_mem.c) */
	int64_t n = sn_mem_probe(va, len, &r->src);

	if (n <= 0) {
		free(r);
		errno = EFAULT;
		return NULL;
	}
	len = (uint64_t)n;
	r->file_id = ++sn_g.next_file;
	if (r->src.kind != SN_MEM_FABRIC)
		goto done;
	snprintf(name, sizeof(name), "m-%s-%u", sn_g.procid, r->file_id);
	sn_path(p, sizeof(p), name);
	fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	if ((errno = posix_fallocate(fd, 0, (off_t)len)) != 0)
		goto fail_fd; /* ENOSPC on a full fabric: the registration fails */
	{
		unsigned char *vec = malloc(len / 4096 + 1);
		int bad;

		if (!vec)
			goto fail_fd;
		bad = mincore((void *)va, len, vec); /* ENOMEM: not all mapped */
		free(vec);
		if (bad) {
			errno = EFAULT;
			goto fail_fd;
		}
	}
	/* what the process has there now, and what other threads store there
	 * meanwhile, into the file (whole pages: more than the caller's buffer) */
	err = sn_pages_move(va, len, fd, false);
	if (err) {
		errno = -err;
		goto fail_fd;
	}
	close(fd);
done:
	r->va = va;
	r->len = len;
	sn_runs[sn_nruns++] = r;
	return r;
fail_fd:
	close(fd);
	unlink(p);
fail:
	free(r);
	return NULL;
}

static void sn_run_put(struct sn_run *r)
{
	char name[96];
	int i;

	if (--r->refs > 0)
		return;
	/* The pages go back to private memory with the process's data (peers
	 * that mapped the file keep a stale view only): left MAP_SHARED, a
	 * later fork() would share them - heap pages around a freed buffer -
	 * with the child, no longer a run for the atfork handler to copy
	 * (pyverbs' test_mr, then test_rdmacm's forked children: a corrupted
	 * heap in both). */
	snprintf(name, sizeof(name), "m-%s-%u", sn_g.procid, r->file_id);
	if (r->src.kind == SN_MEM_FABRIC) {
		sn_pages_move(r->va, r->len, -1, false);
		sn_unlink(name);
	}
	sn_mem_release(&r->src);
	for (i = 0; i < sn_nruns; i++)
		if (sn_runs[i] == r) {
			sn_runs[i] = sn_runs[--sn_nruns];
			break;
		}
	free(r);
}

int sn_mr_register(struct sn_mr *mr, void *addr, size_t len, uint64_t iova,
		   uint32_t access, uint32_t pd_id)
{
	uint64_t pg = 4096, a0 = (uint64_t)addr & ~(pg - 1);
	uint64_t a1 = ((uint64_t)addr + len + pg - 1) & ~(pg - 1);
	uint64_t cur = a0;
	struct sn_mrt_ent *e = NULL;
	uint32_t i;
	int ret = 0;

	pthread_mutex_lock(&sn_g.lock);
	for (i = 0; i < SN_MAX_MR; i++)
		if (!atomic_load(&sn_g.mrt->ent[i].key)) {
			e = &sn_g.mrt->ent[i];
			break;
		}
	if (!e) {
		ret = -ENOMEM;
		goto out;
	}
	mr->nruns = 0;
	while (cur < a1) {
		struct sn_run *r = sn_run_find(cur);

		if (mr->nruns == SN_MAX_RUNS) {
			ret = -ENOMEM;
			break;
		}
		if (!r) {
			uint64_t end = sn_run_next_start(cur);

			if (end > a1)
				end = a1;
			r = sn_run_new(cur, end - cur);
			if (!r) {
				ret = errno == EFAULT ? -EFAULT : -ENOMEM;
				break;
			}
		}
		r->refs++;
		mr->runs[mr->nruns++] = r;
		cur = r->va + r->len;
	}
	if (ret) {
		while (mr->nruns)
			sn_run_put(mr->runs[--mr->nruns]);
		goto out;
	}
	mr->idx = i;
	e->addr = iova;
	e->len = len;
	e->delta = (int64_t)((uint64_t)addr - iova);
	e->access = access;
	e->pd_id = pd_id;
	e->nruns = (uint32_t)mr->nruns;
	for (int k = 0; k < mr->nruns; k++) {
		e->runs[k].va = mr->runs[k]->va;
		e->runs[k].len = mr->runs[k]->len;
		e->runs[k].file_id = mr->runs[k]->file_id;
		e->runs[k].src = mr->runs[k]->src;
	}
	{
		static uint8_t gen;
		uint32_t key;

		gen = (uint8_t)(gen + 0x35);
		if (!gen)
			gen = 1;
		key = ((i + 1) << 8) | gen;
		mr->mr.lkey = mr->mr.rkey = key;
		atomic_store_explicit(&e->key, key, memory_order_release);
	}
out:
	pthread_mutex_unlock(&sn_g.lock);
	return ret;
}

/* EBUSY while a memory window is bound to the MR (ibv_dereg_mr(3)): the
 * window's accesses translate through the MR's entry. */
int sn_mr_unregister(struct sn_mr *mr)
{
	uint32_t key = mr->mr.lkey;

	pthread_mutex_lock(&sn_g.lock);
	for (uint32_t i = 0; i < SN_MAX_MW; i++) {
		struct sn_mw_ent *m = &sn_g.mrt->mw[i];

		if (!atomic_load(&m->type))
			continue;
		/* acquire: the latest binding (one racing with this dereg is
		 * the application's race, as on hardware) */
		(void)atomic_load(&m->seq);
		if (m->bound && m->mr_key == key) {
			pthread_mutex_unlock(&sn_g.lock);
			return -EBUSY;
		}
	}
	atomic_store(&sn_g.mrt->ent[mr->idx].key, 0);
	while (mr->nruns)
		sn_run_put(mr->runs[--mr->nruns]);
	pthread_mutex_unlock(&sn_g.lock);
	return 0;
}

/* ibv_rereg_mr: the MR keeps its slot and keys; its range, access and PD
 * become the new ones. The new range is registered into a spare slot first
 * (so a failure leaves the MR as it was), then moved into the MR's own slot
 * and the old runs let go. A requester racing with the change may see
 * either registration, as on hardware. EBUSY while a window is bound. */
int sn_mr_reregister(struct sn_mr *mr, void *addr, size_t len, uint64_t iova,
		     uint32_t access, uint32_t pd_id)
{
	struct sn_mrt_ent *e, *t;
	struct sn_mr tmp;
	int ret;

	pthread_mutex_lock(&sn_g.lock);
	for (uint32_t i = 0; i < SN_MAX_MW; i++) {
		struct sn_mw_ent *m = &sn_g.mrt->mw[i];

		if (atomic_load(&m->type) && (atomic_load(&m->seq), m->bound) &&
		    m->mr_key == mr->mr.lkey) {
			pthread_mutex_unlock(&sn_g.lock);
			return -EBUSY;
		}
	}
	pthread_mutex_unlock(&sn_g.lock);
	memset(&tmp, 0, sizeof(tmp));
	ret = sn_mr_register(&tmp, addr, len, iova, access, pd_id);
	if (ret)
		return ret;
	pthread_mutex_lock(&sn_g.lock);
	e = &sn_g.mrt->ent[mr->idx];
	t = &sn_g.mrt->ent[tmp.idx];
	e->addr = t->addr;
	e->len = t->len;
	e->delta = t->delta;
	e->access = t->access;
	e->pd_id = t->pd_id;
	memcpy(e->runs, t->runs, sizeof(e->runs));
	e->nruns = t->nruns;
	atomic_thread_fence(memory_order_release);
	atomic_store(&t->key, 0);
	while (mr->nruns)
		sn_run_put(mr->runs[--mr->nruns]);
	memcpy(mr->runs, tmp.runs, sizeof(mr->runs));
	mr->nruns = tmp.nruns;
	pthread_mutex_unlock(&sn_g.lock);
	return 0;
}

/* ---------------- memory windows ---------------- */

bool sn_mw_wlock(struct sn_mw_ent *m)
{
	/* writers hold it for a few stores; a holder that died mid-way
	 * (kill -9) must not hang us: give up after ~a second of trying */
	for (uint32_t spins = 0; spins < (1u << 20); spins++) {
		uint32_t s = atomic_load_explicit(&m->seq, memory_order_relaxed);

		if (!(s & 1) && atomic_compare_exchange_weak_explicit(
					&m->seq, &s, s + 1, memory_order_acquire,
					memory_order_relaxed))
			return true;
		if ((spins & 255) == 255)
			sched_yield();
	}
	return false;
}

void sn_mw_wunlock(struct sn_mw_ent *m)
{
	atomic_fetch_add_explicit(&m->seq, 1, memory_order_release);
}

int sn_mw_alloc(struct sn_mw *mw, uint32_t type, uint32_t pd_id)
{
	static uint8_t gen;
	int ret = -ENOMEM;

	pthread_mutex_lock(&sn_g.lock);
	for (uint32_t i = 0; i < SN_MAX_MW; i++) {
		struct sn_mw_ent *m = &sn_g.mrt->mw[i];

		if (atomic_load(&m->type))
			continue;
		gen = (uint8_t)(gen + 0x4b);
		m->key = ((SN_MAX_MR + i + 1) << 8) | gen;
		m->bound = 0;
		m->pd_id = pd_id;
		m->qpn = 0;
		m->access = 0;
		m->mr_key = 0;
		m->addr = m->len = 0;
		atomic_store_explicit(&m->type, type, memory_order_release);
		mw->slot = i;
		mw->mw.rkey = m->key;
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&sn_g.lock);
	return ret;
}

void sn_mw_free(struct sn_mw *mw)
{
	struct sn_mw_ent *m = &sn_g.mrt->mw[mw->slot];
	bool locked = sn_mw_wlock(m);

	m->bound = 0; /* deallocation unbinds (ibv_alloc_mw(3)) */
	if (locked)
		sn_mw_wunlock(m);
	atomic_store(&m->type, 0);
}
