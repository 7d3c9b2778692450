/* replay_side.c - one side's tables (the recorded resources of one trace and
 * what they became): the arena that owns every copied array, growable lists,
 * lookups by handle and by recorded QP number, the recorded clock in
 * CLOCK_MONOTONIC nanoseconds, and freeing it all.
 *
 * Plain data, shared by every phase. Must never issue a verb or print.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

/* Room for n more blocks: rp_arena_keep cannot fail for them; -ENOMEM. */
int rp_arena_room(struct rp_arena *a, size_t n)
{
	size_t cap = a->capallocs ? a->capallocs : 256;

	while (cap < a->nallocs + n)
		cap *= 2;
	if (cap != a->capallocs) {
		void **v = realloc(a->allocs, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		a->allocs = v;
		a->capallocs = cap;
	}
	return 0;
}

/* The arena owns p from now on; -ENOMEM. */
int rp_arena_keep(struct rp_arena *a, void *p)
{
	if (rp_arena_room(a, 1) < 0)
		return -ENOMEM;
	a->allocs[a->nallocs++] = p;
	return 0;
}

/* Small pieces come from chunks of this size: a window's steps take several
 * each, and one malloc and free apiece cost more than the window's reading. */
#define RP_CHUNK (64 * 1024)

/* n bytes of a block of their own (zero: zeroed by writing them - calloc
 * could hand out untouched zero pages, and what the run writes, e.g. a
 * poll's completions, would fault on the hot path), kept by the arena. */
static void *rp_arena_block(struct rp_arena *a, size_t n, int zero)
{
	void *p = malloc(n);

	if (p && rp_arena_keep(a, p) < 0) {
		free(p);
		return NULL;
	}
	return p && zero ? memset(p, 0, n) : p;
}

void *rp_arena_get(struct rp_arena *a, size_t n, int zero)
{
	void *p;

	n = (n + 15) & ~(size_t)15;
	if (!n)
		n = 16;
	if (n > RP_CHUNK / 8)
		return rp_arena_block(a, n, zero);
	if (n > a->bump_left) {
		if (!(a->bump = rp_arena_block(a, RP_CHUNK, zero)))
			return NULL;
		a->bump_left = RP_CHUNK;
	}
	p = a->bump;
	a->bump += n;
	a->bump_left -= n;
	return p;
}

void rp_arena_free(struct rp_arena *a)
{
	for (size_t i = 0; i < a->nallocs; i++)
		free(a->allocs[i]);
	free(a->allocs);
	*a = (struct rp_arena){ 0 };
}

/* The side's arena owns p from now on (freed with the side); -ENOMEM. */
int rp_keep(struct rp_side *s, void *p)
{
	return rp_arena_keep(&s->ar, p);
}

/* Zeroed memory owned by the side's arena, aligned for any type, its pages
 * touched. */
void *rp_alloc(struct rp_side *s, size_t n)
{
	return rp_arena_get(&s->ar, n, 1);
}

size_t rp_arena_mark(struct rp_side *s)
{
	s->ar.bump_left = 0; /* what comes next is in chunks of its own */
	return s->ar.nallocs;
}

void rp_arena_release(struct rp_side *s, size_t mark, size_t end)
{
	struct rp_arena *a = &s->ar;
	size_t n = a->nallocs;

	if (end > n)
		end = n;
	for (size_t k = mark; k < end; k++)
		free(a->allocs[k]);
	/* what was kept after end (the next window's, read while this one
	 * ran) moves down, the chunk being handed out among it */
	memmove(a->allocs + mark, a->allocs + end, (n - end) * sizeof(*a->allocs));
	a->nallocs = n - (end - mark);
	if (end == n) /* the chunk being handed out was given back */
		a->bump_left = 0;
}

void rp_sort_nearly(void *base, size_t n, size_t size,
		    int (*cmp)(const void *, const void *))
{
	char *b = base, *tmp = NULL;
	size_t moved = 0, budget = 8 * n + 64;

	for (size_t i = 1; i < n; i++) {
		size_t j = i - 1;

		if (cmp(b + j * size, b + i * size) <= 0)
			continue;
		while (j > 0 && cmp(b + (j - 1) * size, b + i * size) > 0)
			j--;
		moved += i - j;
		if (moved > budget || (!tmp && !(tmp = malloc(size)))) {
			qsort(base, n, size, cmp); /* what is done is in order */
			break;
		}
		memcpy(tmp, b + i * size, size);
		memmove(b + (j + 1) * size, b + j * size, (i - j) * size);
		memcpy(b + j * size, tmp, size);
	}
	free(tmp);
}

/* Merges the sorted runs [a, m) and [m, e) of elements of size bytes into out,
 * the left one first between equals. */
static void rp_merge(const char *a, const char *m, const char *e, char *out, size_t size,
		     int (*cmp)(const void *, const void *))
{
	const char *l = a, *r = m;

	while (l < m && r < e) {
		const char **t = cmp(l, r) <= 0 ? &l : &r;

		memcpy(out, *t, size);
		out += size;
		*t += size;
	}
	memcpy(out, l, (size_t)(m - l));
	memcpy(out + (m - l), r, (size_t)(e - r));
}

void rp_sort_runs(void *base, size_t n, size_t size,
		  int (*cmp)(const void *, const void *))
{
	char *b = base, *tmp, *src, *dst;
	size_t *run, nrun = 0;

	if (n < 2)
		return;
	run = malloc((n + 1) * sizeof(*run));
	tmp = malloc(n * size);
	if (!run || !tmp) {
		free(run);
		free(tmp);
		qsort(base, n, size, cmp);
		return;
	}
	/* where each ascending run starts, and the end */
	run[nrun++] = 0;
	for (size_t i = 1; i < n; i++)
		if (cmp(b + (i - 1) * size, b + i * size) > 0)
			run[nrun++] = i;
	run[nrun] = n;
	/* pairs of neighbouring runs merged, between the array and tmp, until
	 * one is left */
	src = b;
	dst = tmp;
	while (nrun > 1) {
		size_t k = 0, w = 0;

		for (; k + 1 < nrun; k += 2, w++) {
			rp_merge(src + run[k] * size, src + run[k + 1] * size,
				 src + run[k + 2] * size, dst + run[k] * size, size, cmp);
			run[w] = run[k];
		}
		if (k < nrun) { /* an odd one out: copied as it is */
			memcpy(dst + run[k] * size, src + run[k] * size,
			       (run[k + 1] - run[k]) * size);
			run[w++] = run[k];
		}
		run[w] = n;
		nrun = w;
		char *t = src;

		src = dst;
		dst = t;
	}
	if (src != b)
		memcpy(b, src, n * size);
	free(run);
	free(tmp);
}

void rp_wclist_push(struct rp_wclist *l, const struct rp_wcrec *w)
{
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? 2 * l->cap : 64;
		struct rp_wcrec *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *w;
}

/* The recorded CLOCK_MONOTONIC at ticks: the model's one conversion. */
uint64_t rp_abs_ns(const struct rp_side *s, uint64_t ticks)
{
	return rbt_model_mono_ns(s->mtrace, ticks);
}

uint64_t rp_host_clock(const struct rp_side *s, uint64_t ticks)
{
	return s->hdr.clock_source == RBT_CLOCK_TSC ? ticks : rp_abs_ns(s, ticks);
}

/* The model's objects carry 1 + the index of their replay entry in user (0:
 * none, e.g. an object first seen in use, which the replayer cannot rebuild). */
void *rp_res_user(int idx)
{
	return (void *)(uintptr_t)idx;
}

int rp_res_idx(const struct rbt_model_res *r)
{
	return r ? (int)(uintptr_t)r->user : 0;
}

/* 1 + the index of the latest object created with handle h, or 0: the model
 * tells a handle reused after a destroy from the object it named before. */
static int rp_index(const struct rp_side *s, enum rbt_model_kind k, uint64_t h)
{
	return h && s->model ? rp_res_idx(rbt_model_by_handle(s->model, 0, k, h)) : 0;
}

int rp_qp_index(const struct rp_side *s, uint64_t h)
{
	return rp_index(s, RBT_MODEL_QP, h);
}

int rp_cq_index(const struct rp_side *s, uint64_t h)
{
	return rp_index(s, RBT_MODEL_CQ, h);
}

int rp_srq_index(const struct rp_side *s, uint64_t h)
{
	return rp_index(s, RBT_MODEL_SRQ, h);
}

int rp_xrcd_index(const struct rp_side *s, uint64_t h)
{
	return rp_index(s, RBT_MODEL_XRCD, h);
}

struct rp_qp *rp_qp_by_rec_qpn(struct rp_side *s, uint32_t qpn)
{
	struct rbt_model_qp *mq = s->model ? rbt_model_qp_by_num(s->model, 0, qpn) : NULL;
	int i = mq ? rp_res_idx(&mq->res) : 0;

	return i ? &s->qp[i - 1] : NULL;
}

int rp_mr_index(const struct rp_side *s, uint64_t h)
{
	return rp_index(s, RBT_MODEL_MR, h);
}

int rp_mw_index(const struct rp_side *s, uint64_t h)
{
	return rp_index(s, RBT_MODEL_MW, h);
}

/* Type 2: the consumer owns the key's low byte, the device its upper 24 bits.
 * Type 1: each bind moves the low byte by one (ibv_inc_rkey), on the recorded
 * device as on the replayed one, so the k-th bind's key is k past the alloc's. */
uint32_t rp_mw_key(const struct rp_mw *w, uint32_t rec_key)
{
	uint32_t rep = w->rkey0;

	if (w->type == IBV_MW_TYPE_2)
		return (rep & ~0xffu) | (rec_key & 0xffu);
	return (rep & ~0xffu) | ((rep + (rec_key - w->rec_rkey)) & 0xffu);
}

struct rp_ah *rp_ah_by_h(struct rp_side *s, uint64_t h)
{
	int i = rp_index(s, RBT_MODEL_AH, h);

	return i ? &s->ah[i - 1] : NULL;
}

struct ibv_pd *rp_pd_by_h(struct rp_side *s, uint64_t h)
{
	int i = rp_index(s, RBT_MODEL_PD, h);

	return i && s->pd ? s->pd[i - 1] : NULL;
}

int rp_is_xrc(uint64_t qp_type)
{
	return qp_type == IBV_QPT_XRC_SEND || qp_type == IBV_QPT_XRC_RECV;
}

/* Whether receive completions of QP q can arrive on CQ cq (1 + index): its own
 * receive CQ, or - for an XRC_RECV QP, which has none - the CQ of any XRC SRQ of
 * its domain, since the sender picks the SRQ (and so the CQ) in each send. */
int rp_qp_recv_on_cq(const struct rp_side *s, const struct rp_qp *q, int cq)
{
	if (q->rcq == cq)
		return 1;
	if (q->rec.qp_type != IBV_QPT_XRC_RECV || !q->xrcdi)
		return 0;
	for (int i = 0; i < s->nsrq; i++)
		if (s->srq[i].xrcdi == q->xrcdi && s->srq[i].cqi == cq)
			return 1;
	return 0;
}

int rp_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

const char *rp_qpt_name(uint64_t t)
{
	const char *n = rbt_verbs_name(RBT_NAMES_QP_TYPE, t);

	return n ? n : "unknown";
}

/* What replayed memory holds before the run: recognisable, not zeros. */
void rp_pattern(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((i * 131 + seed * 7 + 17) >> 1);
}

void rp_side_free(struct rp_side *s)
{
	rp_stream_free(s);
	rbt_model_destroy(s->model);
	rp_arena_free(&s->ar);
	for (int i = 0; i < s->nqp; i++) {
		for (int k = 0; k < 2; k++) {
			free(s->qp[i].rec_wc[k].v);
			free(s->qp[i].rep_wc[k].v);
			free(s->qp[i].rec_next[k].v);
		}
		free(s->qp[i].send_ids.v);
		free(s->qp[i].recv_ids.v);
		free(s->qp[i].wpost);
	}
	free(s->pd_h);
	free(s->pd);
	free(s->mr);
	free(s->ch_h);
	free(s->ch);
	for (int i = 0; i < s->ncq; i++)
		free(s->cq[i].stash);
	free(s->cq);
	for (int i = 0; i < s->nxqp; i++)
		for (int k = 0; k < 2; k++) {
			free(s->xqp[i].rec_wc[k].v);
			free(s->xqp[i].rep_wc[k].v);
		}
	free(s->xqp);
	free(s->srq);
	free(s->xrcd);
	free(s->qp);
	free(s->ah);
	free(s->mw);
	free(s->step);
	rp_cm_free(s);
	memset(s, 0, sizeof(*s));
}
