/* analyzer_cm.c - the connection manager's part of the report: one connection per
 * rdma_cm id (address and route resolution, connect -> ESTABLISHED, the passive
 * side's CONNECT_REQUEST -> rdma_accept, time blocked in rdma_get_cm_event, ack
 * lag, disconnects), the CM findings (rejected connects, nobody listening, an
 * address on no RDMA device, timeouts, events never acked, QPs used after
 * DISCONNECTED), and the pairing of active and passive ids across traces.
 *
 * This file owns the feeding: while the events are fed it only copies the CM
 * records (a few per connection) and the last post per QP, and streams the calls
 * to the timeline; everything else is computed at the end (analyzer_cm_build.c,
 * analyzer_cm_diag.c), on each trace's records in time order (several threads'
 * chunks interleave in a file in no time order, and event structs are reused by
 * librdmacm once acked). The sections are written by analyzer_cm_out.c.
 *
 * It must never trust a record: handles are identities only, strings are
 * bounded, counts are clamped. Memory: a few hundred bytes per CM record.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_cm_int.h"

static const char *cm_fn_name(uint64_t f)
{
	const char *n = rbt_verbs_name(RBT_NAMES_CM_FN, f);
	return n ? n : "?";
}

static struct cm_trace *cm_trace_get(struct rbt_analyzer *an, int idx)
{
	if (!an->cm) {
		an->cm = calloc(1, sizeof(*an->cm));
		if (!an->cm)
			return NULL;
	}
	struct an_cm *cm = an->cm;
	if (idx >= cm->nt) {
		struct cm_trace *n = realloc(cm->t, (size_t)(idx + 1) * sizeof(*n));
		if (!n)
			return NULL;
		memset(n + cm->nt, 0, (size_t)(idx + 1 - cm->nt) * sizeof(*n));
		cm->t = n;
		cm->nt = idx + 1;
	}
	return &cm->t[idx];
}

/* Addresses come from the trace: kept printable (a damaged or hostile trace
 * must not put control characters in the report). */
void an_cm_copy(char *dst, const char *s)
{
	size_t n = s ? strnlen(s, CM_ADDR - 1) : 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		dst[i] = ch < 0x20 || ch >= 0x7f || ch == '<' || ch == '&' || ch == '"' ||
					 ch == '\\'
				 ? '?'
				 : (char)ch;
	}
	dst[n] = 0;
}

static void cm_posted(struct cm_trace *ct, uint64_t qp, uint64_t ts)
{
	uint32_t i;
	if (!qp)
		return;
	if (cm_map_get(&ct->qp_map, qp, &i)) {
		ct->qps[i].posts++;
		if (ts > ct->qps[i].last_post)
			ct->qps[i].last_post = ts;
		return;
	}
	if (rbt_grow(&ct->qps, &ct->capq, ct->nq + 1, sizeof(*ct->qps), 16, 0))
		return;
	cm_map_put(&ct->qp_map, qp, ct->nq);
	ct->qps[ct->nq++] = (struct cm_qp_posts){ qp, ts, 1 };
}

static void cm_stream(struct rbt_analyzer *an, struct an_trace *t,
		      const struct rbt_event *ev, const char *name, uint64_t exit,
		      const char *args)
{
	if (!an->n_stream)
		return;
	an_sinks_call(an, t, ev->stream, name, ev->ts, exit >= ev->ts ? exit : ev->ts,
		      args);
}

/* What every call, event and ack record has: when it returned, what it was (a
 * function or an event type, 0xffff past the list), nested in librdmacm, ret. */
static void cm_rec_ret(struct cm_rec *r, uint64_t ts_exit, uint64_t what, uint64_t nested,
		       int64_t ret)
{
	r->ts_exit = ts_exit;
	r->what = (uint16_t)(what < 0xffff ? what : 0xffff);
	r->nested = (uint16_t)(nested < 0xffff ? nested : 0xffff);
	r->ret = ret;
}

void an_cm_feed(struct rbt_analyzer *an, struct an_trace *t, const struct rbt_event *ev)
{
	if (ev->type == RBT_EV_POST_SEND) {
		if (an->cm && t->idx < an->cm->nt && an->cm->t[t->idx].n)
			cm_posted(&an->cm->t[t->idx], ev->u.post_send.qp, ev->ts);
		return;
	}
	if (ev->type != RBT_EV_CM_CALL && ev->type != RBT_EV_CM_EVENT &&
	    ev->type != RBT_EV_CM_ACK && ev->type != RBT_EV_CM_ID)
		return;
	struct cm_trace *ct = cm_trace_get(an, t->idx);
	if (!ct || ct->n >= (1u << 26))
		return;
	if (rbt_grow(&ct->recs, &ct->cap, ct->n + 1, sizeof(*ct->recs), 64, 0))
		return;
	struct cm_rec *r = &ct->recs[ct->n];
	memset(r, 0, sizeof(*r));
	r->seq = ct->n++;
	r->type = (uint16_t)ev->type;
	r->ts = ev->ts;
	r->key = ev->ts;
	r->tid = ev->stream;
	char name[48], args[160];
	switch (ev->type) {
	case RBT_EV_CM_CALL: {
		const struct rbt_ev_cm_call *c = &ev->u.cm_call;
		cm_rec_ret(r, c->ts_exit, c->fn < 0xffff ? c->fn : 0, c->nested, c->ret);
		r->err = c->err;
		r->id = c->id;
		r->listen_id = c->listen_id;
		r->qp = c->qp;
		r->qp_num = c->qp_num;
		r->pdlen = c->private_data_len;
		r->arg = c->arg;
		r->why = c->arg2;
		an_cm_copy(r->src, c->src);
		an_cm_copy(r->dst, c->dst);
		if (!c->nested && c->fn != RBT_CM_DESTROY_ID_BEGIN) {
			snprintf(name, sizeof(name), "rdma_%s", cm_fn_name(c->fn));
			snprintf(args, sizeof(args),
				 "{\"id\":\"0x%" PRIx64 "\",\"ret\":%" PRId64 "}", c->id,
				 c->ret);
			cm_stream(an, t, ev, name, c->ts_exit, args);
		}
		break;
	}
	case RBT_EV_CM_EVENT: {
		const struct rbt_ev_cm_event *e = &ev->u.cm_event;
		cm_rec_ret(r, e->ts_exit, e->event, e->nested, e->ret);
		r->key = e->ts_exit >= ev->ts ? e->ts_exit : ev->ts;
		r->err = e->err;
		r->status = e->status;
		r->id = e->id;
		r->listen_id = e->listen_id;
		r->ev = e->ev;
		r->conn_qp_num = e->ud ? e->ud_qp_num : e->conn_qp_num;
		r->pdlen = e->private_data_len;
		if (!e->nested) {
			snprintf(args, sizeof(args),
				 "{\"event\":\"%s\",\"status\":%" PRId64
				 ",\"id\":\"0x%" PRIx64 "\"}",
				 e->ret ? "none" : cm_ev_name(e->event), e->status,
				 e->id);
			cm_stream(an, t, ev, "rdma_get_cm_event", e->ts_exit, args);
		}
		break;
	}
	case RBT_EV_CM_ACK: {
		const struct rbt_ev_cm_ack *a = &ev->u.cm_ack;
		cm_rec_ret(r, a->ts_exit, a->event, a->nested, a->ret);
		r->ev = a->ev;
		r->id = a->id;
		break;
	}
	case RBT_EV_CM_ID: {
		const struct rbt_ev_cm_id *d = &ev->u.cm_id;
		r->why = d->why;
		r->id = d->id;
		r->qp = d->qp;
		r->qp_num = d->qp_num;
		r->arg = d->qp_type;
		r->status = (int64_t)d->ps;
		an_cm_copy(r->src, d->src);
		an_cm_copy(r->dst, d->dst);
		break;
	}
	}
}

void an_cm_diagnose(struct rbt_analyzer *an)
{
	struct an_cm *cm = an->cm;
	if (!cm || cm->done)
		return;
	cm->done = true;
	for (int i = 0; i < cm->nt && i < an->n_traces; i++)
		an_cm_build(&cm->t[i], i);
	an_cm_pair(cm);
	for (int i = 0; i < cm->nt && i < an->n_traces; i++)
		for (uint32_t k = 0; k < cm->t[i].nc; k++)
			an_cm_findings(an, an->traces[i], &cm->t[i].conns[k]);
}

void an_cm_free(struct rbt_analyzer *an)
{
	struct an_cm *cm = an->cm;
	if (!cm)
		return;
	for (int i = 0; i < cm->nt; i++) {
		free(cm->t[i].recs);
		free(cm->t[i].qps);
		free(cm->t[i].conns);
		rbt_map_free(&cm->t[i].qp_map);
		rbt_map_free(&cm->t[i].conn_map);
	}
	free(cm->t);
	free(cm);
	an->cm = NULL;
}
