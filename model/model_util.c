/* model_util.c - the model's containers (the FIFO rings of outstanding WRs; the
 * map behind every table is util/rbt_map) and the deep copy of an event.
 *
 * On the per-event path: no allocation except when a container grows. The copy is
 * generated from the field lists of rbt_format.h, so a field added there is copied
 * without a change here.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"

/* ---- rings ---- */

void *rbt_model_ring_grow(struct rbt_model_ring *r)
{
	uint32_t ncap = r->cap ? r->cap * 2 : 16;
	char *nv = malloc((size_t)ncap * r->elem);
	if (!nv)
		return NULL;
	for (uint32_t i = 0; i < r->n; i++)
		memcpy(nv + (size_t)i * r->elem, rbt_model_ring_at(r, i), r->elem);
	free(r->v);
	r->v = nv;
	r->cap = ncap;
	r->head = 0;
	return rbt_model_ring_at(r, r->n++);
}

void rbt_model_ring_drop(struct rbt_model_ring *r, uint32_t n)
{
	if (n > r->n)
		n = r->n;
	r->head = (r->head + n) & (r->cap ? r->cap - 1 : 0);
	r->n -= n;
}

void rbt_model_ring_remove(struct rbt_model_ring *r, uint32_t i)
{
	if (i == 0) {
		rbt_model_ring_drop(r, 1);
		return;
	}
	for (uint32_t k = i; k + 1 < r->n; k++)
		memcpy(rbt_model_ring_at(r, k), rbt_model_ring_at(r, k + 1), r->elem);
	r->n--;
}

void rbt_model_ring_free(struct rbt_model_ring *r)
{
	free(r->v);
	r->v = NULL;
	r->cap = r->head = r->n = 0;
}

/* ---- deep copy of an event ----
 * Two passes over the source: the first (base NULL) sizes the copy, the second
 * fills it; the fix-up functions are generated from the field lists. */

struct mt_arena {
	char *base;
	size_t off;
};

static void *mt_take(struct mt_arena *a, const void *src, size_t n)
{
	size_t o = (a->off + 7) & ~(size_t)7;
	a->off = o + n;
	if (!a->base)
		return NULL;
	memcpy(a->base + o, src, n);
	return a->base + o;
}

#define MT_CP_U(name)
#define MT_CP_I(name)
#define MT_CP_T(name)
#define MT_CP_H(name)
#define MT_CP_D(name)
#define MT_CP_S(name)                                                   \
	if (src->name) {                                                \
		void *p = mt_take(a, src->name, strlen(src->name) + 1); \
		if (dst)                                                \
			dst->name = p;                                  \
	}
#define MT_CP_B(name)                                                \
	if (src->name.data && src->name.len) {                       \
		void *p = mt_take(a, src->name.data, src->name.len); \
		if (dst)                                             \
			dst->name.data = p;                          \
	} else if (dst) {                                            \
		dst->name.data = NULL;                               \
		dst->name.len = 0;                                   \
	}
#define MT_CP_F(kind, name) MT_CP_##kind(name)
#define MT_CP_A(rec, name)                                                         \
	if (src->name && src->n_##name) {                                          \
		struct rbt_##rec *v =                                              \
			mt_take(a, src->name, src->n_##name * sizeof(*src->name)); \
		if (dst)                                                           \
			dst->name = v;                                             \
		for (uint32_t i = 0; i < src->n_##name; i++)                       \
			mt_fix_##rec(a, v ? &v[i] : NULL, &src->name[i]);          \
	} else if (dst) {                                                          \
		dst->name = NULL;                                                  \
		dst->n_##name = 0;                                                 \
	}

#define MT_FIX_FN(rec, LIST)                                                \
	static void mt_fix_##rec(struct mt_arena *a, struct rbt_##rec *dst, \
				 const struct rbt_##rec *src)               \
	{                                                                   \
		(void)a;                                                    \
		(void)dst;                                                  \
		(void)src;                                                  \
		LIST(MT_CP_F, MT_CP_A)                                      \
	}
MT_FIX_FN(sge, RBT_REC_sge)
MT_FIX_FN(frame, RBT_REC_frame)
MT_FIX_FN(send_wr, RBT_REC_send_wr)
MT_FIX_FN(recv_wr, RBT_REC_recv_wr)
MT_FIX_FN(wc, RBT_REC_wc)
#define MT_FIX_EV(NAME, id, lname) MT_FIX_FN(ev_##lname, RBT_EV_##lname)
RBT_EVENT_LIST(MT_FIX_EV)
#undef MT_FIX_EV

static void mt_fix_event(struct mt_arena *a, struct rbt_event *dst,
			 const struct rbt_event *src)
{
	switch (src->type) {
#define MT_FIX_CASE(NAME, id, lname)                                             \
	case RBT_EV_##NAME:                                                      \
		mt_fix_ev_##lname(a, dst ? &dst->u.lname : NULL, &src->u.lname); \
		break;
		RBT_EVENT_LIST(MT_FIX_CASE)
#undef MT_FIX_CASE
	default:
		break;
	}
}

size_t rbt_model_event_head_size(const struct rbt_event *ev)
{
	switch (ev->type) {
#define MT_HEAD_CASE(NAME, id, lname) \
	case RBT_EV_##NAME:           \
		return offsetof(struct rbt_event, u) + sizeof(ev->u.lname);
		RBT_EVENT_LIST(MT_HEAD_CASE)
#undef MT_HEAD_CASE
	default:
		return sizeof(*ev);
	}
}

size_t rbt_model_event_size(const struct rbt_event *ev)
{
	struct mt_arena a = { .base = NULL, .off = rbt_model_event_head_size(ev) };
	mt_fix_event(&a, NULL, ev);
	return a.off;
}

struct rbt_event *rbt_model_event_copy_to(void *buf, const struct rbt_event *ev)
{
	size_t head = rbt_model_event_head_size(ev);
	struct mt_arena a = { .base = buf, .off = head };
	memcpy(buf, ev, head);
	mt_fix_event(&a, buf, ev);
	return buf;
}

struct rbt_event *rbt_model_event_copy(const struct rbt_event *ev)
{
	char *buf = malloc(rbt_model_event_size(ev));
	return buf ? rbt_model_event_copy_to(buf, ev) : NULL;
}
