/* analyzer_cm.c - the connection manager's part of the report: one connection per
 * rdma_cm id (address and route resolution, connect -> ESTABLISHED, the passive
 * side's CONNECT_REQUEST -> rdma_accept, time blocked in rdma_get_cm_event, ack
 * lag, disconnects), the CM findings (rejected connects, nobody listening, an
 * address on no RDMA device, timeouts, events never acked, QPs used after
 * DISCONNECTED), and the pairing of active and passive ids across traces.
 *
 * While the events are fed it only copies the CM records (a few per connection)
 * and the last post per QP, and streams the calls to the timeline; everything
 * else is computed at the end, on each trace's records in time order (several
 * threads' chunks interleave in a file in no time order, and event structs are
 * reused by librdmacm once acked).
 *
 * It must never trust a record: handles are identities only, strings are
 * bounded, counts are clamped. Memory: a few hundred bytes per CM record.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"
#include "util/rbt_json.h"

#define CM_ADDR 48
#define CM_NONE UINT64_MAX
/* A destroy that waited less than this for another thread's ack is the usual
 * race between a CM thread acking DISCONNECTED and the main thread destroying
 * the id (rping): not a finding */
#define CM_LATE_ACK_MIN_NS 10e6

/* enum rdma_cm_event_type (librdmacm ABI; the analyzer does not include it) */
enum {
	CM_EV_ADDR_RESOLVED = 0,
	CM_EV_ADDR_ERROR = 1,
	CM_EV_ROUTE_RESOLVED = 2,
	CM_EV_ROUTE_ERROR = 3,
	CM_EV_CONNECT_REQUEST = 4,
	CM_EV_CONNECT_RESPONSE = 5,
	CM_EV_CONNECT_ERROR = 6,
	CM_EV_UNREACHABLE = 7,
	CM_EV_REJECTED = 8,
	CM_EV_ESTABLISHED = 9,
	CM_EV_DISCONNECTED = 10,
};

struct cm_rec {
	uint64_t key; /* sort key: an event's return, a call's entry */
	uint64_t ts, ts_exit;
	uint32_t seq, tid;
	uint16_t type, what; /* RBT_EV_CM_*; fn or event type */
	uint16_t nested;
	int64_t ret, status;
	uint64_t err, id, listen_id, ev, qp, qp_num, conn_qp_num, pdlen, arg, why;
	char src[CM_ADDR], dst[CM_ADDR];
};

/* handle -> index, open addressing (key 0: empty). Lookups stay O(1) however
 * many ids, events or QPs a (hostile) trace holds. */
struct cm_map {
	uint64_t *k;
	uint32_t *v;
	uint32_t cap, n;
};

static uint32_t cm_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (uint32_t)k;
}

static bool cm_map_get(const struct cm_map *m, uint64_t k, uint32_t *v)
{
	if (!k || !m->cap)
		return false;
	for (uint32_t i = cm_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->k[i])
			return false;
		if (m->k[i] == k) {
			*v = m->v[i];
			return true;
		}
	}
}

static void cm_map_put(struct cm_map *m, uint64_t k, uint32_t v)
{
	if (!k)
		return;
	if ((m->n + 1) * 2 > m->cap) {
		uint32_t nc = m->cap ? m->cap * 2 : 64;
		uint64_t *nk = calloc(nc, sizeof(*nk));
		uint32_t *nv = calloc(nc, sizeof(*nv));
		if (!nk || !nv || nc < m->cap) {
			free(nk);
			free(nv);
			return;
		}
		for (uint32_t i = 0; i < m->cap; i++) {
			if (!m->k[i])
				continue;
			uint32_t j = cm_hash(m->k[i]) & (nc - 1);
			while (nk[j])
				j = (j + 1) & (nc - 1);
			nk[j] = m->k[i];
			nv[j] = m->v[i];
		}
		free(m->k);
		free(m->v);
		m->k = nk;
		m->v = nv;
		m->cap = nc;
	}
	uint32_t i = cm_hash(k) & (m->cap - 1);
	while (m->k[i] && m->k[i] != k)
		i = (i + 1) & (m->cap - 1);
	if (!m->k[i])
		m->n++;
	m->k[i] = k;
	m->v[i] = v;
}

static void cm_map_free(struct cm_map *m)
{
	free(m->k);
	free(m->v);
	memset(m, 0, sizeof(*m));
}

struct cm_qp_posts {
	uint64_t qp, last_post, posts;
};

enum cm_role { CM_ROLE_NONE, CM_ROLE_ACTIVE, CM_ROLE_PASSIVE, CM_ROLE_LISTEN };

struct cm_conn {
	int trace;
	uint64_t id, listen_id, qp, qp_num, peer_qpn, qp_type, ps;
	enum cm_role role;
	char src[CM_ADDR], dst[CM_ADDR];
	bool sync; /* its events were taken inside librdmacm (synchronous id) */
	/* ticks; CM_NONE: never */
	uint64_t t_create, t_raddr, t_raddr_done, t_rroute, t_rroute_done, t_connect,
		t_established, t_request, t_accept, t_disc_call, t_disc_ev,
		t_destroy_begin, t_destroyed;
	int err_event; /* -1: none */
	int64_t err_status;
	uint64_t err_pdlen, err_ts;
	uint64_t events, wait_ticks, acked, ack_lag_sum, ack_lag_max, unacked;
	uint64_t unacked_ts;
	int unacked_type;
	/* an ack that came only while rdma_destroy_id waited for it */
	uint64_t late_ack_ts, late_ack_ev_ts;
	int late_ack_type;
	uint64_t posts_after_disc, last_post;
	int peer_trace, peer; /* index in the peer trace's conns, -1: none */
	uint32_t pend_head;   /* 1 + its latest pending event, 0: none */
};

struct cm_trace {
	struct cm_rec *recs;
	uint32_t n, cap;
	struct cm_qp_posts *qps;
	uint32_t nq, capq;
	struct cm_map qp_map, conn_map; /* QP handle -> qps[], id -> latest conns[] */
	struct cm_conn *conns;
	uint32_t nc, capc;
};

struct an_cm {
	struct cm_trace *t;
	int nt;
	bool done;
};

static const char *cm_ev_name(uint64_t e)
{
	const char *n = rbt_verbs_name(RBT_NAMES_CM_EVENT, e);
	return n ? n : "?";
}

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
static void cm_copy(char *dst, const char *s)
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
	if (ct->nq == ct->capq) {
		uint32_t nc = ct->capq ? ct->capq * 2 : 16;
		struct cm_qp_posts *n = realloc(ct->qps, nc * sizeof(*n));
		if (!n)
			return;
		ct->qps = n;
		ct->capq = nc;
	}
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
	if (ct->n == ct->cap) {
		uint32_t nc = ct->cap ? ct->cap * 2 : 64;
		struct cm_rec *n = realloc(ct->recs, nc * sizeof(*n));
		if (!n)
			return;
		ct->recs = n;
		ct->cap = nc;
	}
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
		r->ts_exit = c->ts_exit;
		r->what = (uint16_t)(c->fn < 0xffff ? c->fn : 0);
		r->nested = (uint16_t)(c->nested < 0xffff ? c->nested : 0xffff);
		r->ret = c->ret;
		r->err = c->err;
		r->id = c->id;
		r->listen_id = c->listen_id;
		r->qp = c->qp;
		r->qp_num = c->qp_num;
		r->pdlen = c->private_data_len;
		r->arg = c->arg;
		r->why = c->arg2;
		cm_copy(r->src, c->src);
		cm_copy(r->dst, c->dst);
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
		r->ts_exit = e->ts_exit;
		r->key = e->ts_exit >= ev->ts ? e->ts_exit : ev->ts;
		r->what = (uint16_t)(e->event < 0xffff ? e->event : 0xffff);
		r->nested = (uint16_t)(e->nested < 0xffff ? e->nested : 0xffff);
		r->ret = e->ret;
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
		r->ts_exit = a->ts_exit;
		r->what = (uint16_t)(a->event < 0xffff ? a->event : 0xffff);
		r->nested = (uint16_t)(a->nested < 0xffff ? a->nested : 0xffff);
		r->ret = a->ret;
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
		cm_copy(r->src, d->src);
		cm_copy(r->dst, d->dst);
		break;
	}
	}
}

static int cm_rec_cmp(const void *a, const void *b)
{
	const struct cm_rec *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static struct cm_conn *cm_conn_new(struct cm_trace *ct, int trace, uint64_t id)
{
	if (ct->nc == ct->capc) {
		uint32_t nc = ct->capc ? ct->capc * 2 : 16;
		struct cm_conn *n = realloc(ct->conns, nc * sizeof(*n));
		if (!n)
			return NULL;
		ct->conns = n;
		ct->capc = nc;
	}
	struct cm_conn *c = &ct->conns[ct->nc++];
	memset(c, 0, sizeof(*c));
	c->trace = trace;
	c->id = id;
	c->err_event = -1;
	c->unacked_type = -1;
	c->peer = -1;
	c->peer_trace = -1;
	uint64_t *ts[] = { &c->t_create,      &c->t_raddr,	 &c->t_raddr_done,
			   &c->t_rroute,      &c->t_rroute_done, &c->t_connect,
			   &c->t_established, &c->t_request,	 &c->t_accept,
			   &c->t_disc_call,   &c->t_disc_ev,	 &c->t_destroy_begin,
			   &c->t_destroyed };
	for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++)
		*ts[i] = CM_NONE;
	return c;
}

/* The live connection of id (the latest one; a destroyed id's handle may be
 * reused), made when create is set. */
static struct cm_conn *cm_conn_of(struct cm_trace *ct, int trace, uint64_t id,
				  bool create)
{
	uint32_t i;
	if (!id)
		return NULL;
	if (cm_map_get(&ct->conn_map, id, &i) &&
	    (ct->conns[i].t_destroyed == CM_NONE || !create))
		return &ct->conns[i];
	if (!create)
		return NULL;
	struct cm_conn *c = cm_conn_new(ct, trace, id);
	if (c)
		cm_map_put(&ct->conn_map, id, ct->nc - 1);
	return c;
}

/* An event returned and not yet acked. prev_ev: 1 + the one before it with the
 * same handle (a hostile or lossy trace may reuse one unacked); prev_conn:
 * 1 + the one before it of the same connection. */
struct cm_pending {
	uint64_t ev, ts;
	uint32_t conn, prev_ev, prev_conn;
	int type;
	bool done;
};

static void cm_set(uint64_t *slot, uint64_t v)
{
	if (*slot == CM_NONE)
		*slot = v;
}

static void cm_build(struct cm_trace *ct, int trace)
{
	qsort(ct->recs, ct->n, sizeof(*ct->recs), cm_rec_cmp);
	struct cm_pending *pend = NULL;
	uint32_t np = 0, capp = 0, k;
	struct cm_map ev_map = { 0 }; /* event handle -> 1 + its latest pending */

	for (uint32_t i = 0; i < ct->n; i++) {
		const struct cm_rec *r = &ct->recs[i];
		struct cm_conn *c;
		switch (r->type) {
		case RBT_EV_CM_CALL:
			if (r->what == RBT_CM_CREATE_ID || r->what == RBT_CM_CREATE_EP) {
				if (r->ret || !r->id)
					break;
				c = cm_conn_of(ct, trace, r->id, true);
				if (!c)
					break;
				cm_set(&c->t_create, r->ts);
				/* rdma_create_ep resolves the address and route itself */
				if (r->what == RBT_CM_CREATE_EP && r->dst[0])
					cm_set(&c->t_raddr, r->ts);
				if (r->what == RBT_CM_CREATE_ID)
					c->ps = r->arg, c->qp_type = r->why;
				if (r->dst[0]) {
					cm_copy(c->dst, r->dst);
					c->role = CM_ROLE_ACTIVE;
				}
				break;
			}
			c = cm_conn_of(ct, trace, r->id, r->what != RBT_CM_DESTROY_ID);
			if (!c)
				break;
			if (r->qp_num && (r->what == RBT_CM_CREATE_QP ||
					  r->what == RBT_CM_CREATE_QP_EX ||
					  r->what == RBT_CM_CREATE_EP || r->qp)) {
				c->qp = r->qp;
				c->qp_num = r->qp_num;
			}
			switch (r->what) {
			case RBT_CM_RESOLVE_ADDR:
				c->role = CM_ROLE_ACTIVE;
				cm_set(&c->t_raddr, r->ts);
				if (r->dst[0])
					cm_copy(c->dst, r->dst);
				break;
			case RBT_CM_RESOLVE_ROUTE:
				cm_set(&c->t_rroute, r->ts);
				break;
			case RBT_CM_CONNECT:
				c->role = CM_ROLE_ACTIVE;
				cm_set(&c->t_connect, r->ts);
				if (r->ret && c->err_event < 0) {
					c->err_event = 1000; /* the call itself failed */
					c->err_status = -(int64_t)r->err;
					c->err_ts = r->ts_exit;
				}
				break;
			case RBT_CM_LISTEN:
				c->role = CM_ROLE_LISTEN;
				if (r->src[0])
					cm_copy(c->src, r->src);
				break;
			case RBT_CM_GET_REQUEST:
				c->role = CM_ROLE_PASSIVE;
				c->listen_id = r->listen_id;
				break;
			case RBT_CM_ACCEPT:
				c->role = CM_ROLE_PASSIVE;
				cm_set(&c->t_accept, r->ts);
				break;
			case RBT_CM_ESTABLISH:
				/* an id without the CM's QP (rping -q): CONNECT_RESPONSE,
				 * then the program's rdma_establish makes the connection */
				if (!r->ret)
					cm_set(&c->t_established, r->ts_exit);
				break;
			case RBT_CM_DISCONNECT:
				if (!r->nested)
					cm_set(&c->t_disc_call, r->ts);
				break;
			case RBT_CM_DESTROY_ID_BEGIN:
				cm_set(&c->t_destroy_begin, r->ts);
				break;
			case RBT_CM_DESTROY_EP:
			case RBT_CM_DESTROY_ID:
				cm_set(&c->t_destroyed, r->ts_exit);
				/* librdmacm acks a synchronous id's last event itself
				 * (in its destroy; softnic's without a call) */
				for (k = c->pend_head; c->sync && !r->ret && k;
				     k = pend[k - 1].prev_conn)
					if (!pend[k - 1].done) {
						pend[k - 1].done = true;
						c->acked++;
					}
				break;
			default:
				break;
			}
			break;
		case RBT_EV_CM_EVENT: {
			if (r->ret || !r->id)
				break;
			c = cm_conn_of(ct, trace, r->id, true);
			if (!c)
				break;
			uint64_t at = r->ts_exit >= r->ts ? r->ts_exit : r->ts;
			c->events++;
			c->wait_ticks += at - r->ts;
			if (r->nested)
				c->sync = true;
			switch (r->what) {
			case CM_EV_ADDR_RESOLVED:
				cm_set(&c->t_raddr_done, at);
				break;
			case CM_EV_ROUTE_RESOLVED:
				/* no rdma_resolve_route seen (rdma_create_ep): from the
				 * address's resolution */
				if (c->t_rroute == CM_NONE && c->t_raddr_done != CM_NONE)
					c->t_rroute = c->t_raddr_done;
				cm_set(&c->t_rroute_done, at);
				break;
			case CM_EV_CONNECT_REQUEST:
				c->role = CM_ROLE_PASSIVE;
				c->listen_id = r->listen_id;
				c->peer_qpn = r->conn_qp_num;
				cm_set(&c->t_request, at);
				break;
			case CM_EV_CONNECT_RESPONSE:
			case CM_EV_ESTABLISHED:
				if (r->conn_qp_num && !c->peer_qpn)
					c->peer_qpn = r->conn_qp_num;
				if (r->what == CM_EV_ESTABLISHED)
					cm_set(&c->t_established, at);
				break;
			case CM_EV_DISCONNECTED:
				cm_set(&c->t_disc_ev, at);
				break;
			case CM_EV_ADDR_ERROR:
			case CM_EV_ROUTE_ERROR:
			case CM_EV_CONNECT_ERROR:
			case CM_EV_UNREACHABLE:
			case CM_EV_REJECTED:
				if (c->err_event < 0) {
					c->err_event = r->what;
					c->err_status = r->status;
					c->err_pdlen = r->pdlen;
					c->err_ts = at;
				}
				break;
			default:
				break;
			}
			if (np == capp) {
				uint32_t nc = capp ? capp * 2 : 32;
				struct cm_pending *n = realloc(pend, nc * sizeof(*n));
				if (!n)
					break;
				pend = n;
				capp = nc;
			}
			uint32_t pk = 0;
			cm_map_get(&ev_map, r->ev, &pk);
			pend[np] = (struct cm_pending){
				r->ev, at,	     (uint32_t)(c - ct->conns),
				pk,    c->pend_head, r->what,
				false
			};
			np++;
			c->pend_head = np;
			cm_map_put(&ev_map, r->ev, np);
			break;
		}
		case RBT_EV_CM_ACK:
			k = 0;
			cm_map_get(&ev_map, r->ev, &k);
			while (k && pend[k - 1].done)
				k = pend[k - 1].prev_ev;
			if (k) {
				struct cm_pending *pp = &pend[k - 1];
				struct cm_conn *pc = &ct->conns[pp->conn];
				uint64_t lag = r->ts > pp->ts ? r->ts - pp->ts : 0;
				if (pc->t_destroy_begin != CM_NONE && !r->nested &&
				    r->ts >= pc->t_destroy_begin &&
				    (pc->t_destroyed == CM_NONE ||
				     r->ts <= pc->t_destroyed) &&
				    !pc->late_ack_ts) {
					pc->late_ack_ts = r->ts;
					pc->late_ack_ev_ts = pp->ts;
					pc->late_ack_type = pp->type;
				}
				pc->acked++;
				pc->ack_lag_sum += lag;
				if (lag > pc->ack_lag_max)
					pc->ack_lag_max = lag;
				pp->done = true;
				cm_map_put(&ev_map, r->ev, pp->prev_ev);
			}
			break;
		case RBT_EV_CM_ID:
			c = cm_conn_of(ct, trace, r->id, false);
			if (!c)
				break;
			if (r->src[0])
				cm_copy(c->src, r->src);
			if (r->dst[0])
				cm_copy(c->dst, r->dst);
			if (r->qp_num) {
				c->qp = r->qp;
				c->qp_num = r->qp_num;
			}
			c->qp_type = r->arg;
			c->ps = (uint64_t)r->status;
			break;
		}
	}
	/* left unacked: a finding only when the id's destroy began after the event
	 * was delivered and never returned (it waits for the ack); an event
	 * delivered to an id still alive when the process ended hung nothing */
	for (k = 0; k < np; k++) {
		struct cm_conn *pc = &ct->conns[pend[k].conn];
		if (pend[k].done || pc->t_destroy_begin == CM_NONE ||
		    pend[k].ts > pc->t_destroy_begin)
			continue;
		/* a destroy that returned had its acks (librdmacm waits for
		 * them): the ack's record was lost at the process's end */
		if (pc->t_destroyed != CM_NONE)
			continue;
		pc->unacked++;
		if (pc->unacked_type < 0 || pend[k].ts < pc->unacked_ts) {
			pc->unacked_type = pend[k].type;
			pc->unacked_ts = pend[k].ts;
		}
	}
	free(pend);
	cm_map_free(&ev_map);
	/* posts on a connection's QP after its DISCONNECTED event */
	for (uint32_t i = 0; i < ct->nc; i++) {
		struct cm_conn *c = &ct->conns[i];
		if (!c->qp || c->t_disc_ev == CM_NONE)
			continue;
		uint32_t q;
		if (cm_map_get(&ct->qp_map, c->qp, &q) &&
		    ct->qps[q].last_post > c->t_disc_ev)
			c->last_post = ct->qps[q].last_post, c->posts_after_disc = 1;
	}
}

static uint64_t cm_addr_key(const char *a, const char *b)
{
	uint64_t h = 1469598103934665603ull;
	for (; *a; a++)
		h = (h ^ (unsigned char)*a) * 1099511628211ull;
	h = (h ^ '|') * 1099511628211ull;
	for (; *b; b++)
		h = (h ^ (unsigned char)*b) * 1099511628211ull;
	return h ? h : 1;
}

static bool cm_pairable(const struct cm_conn *x, const struct cm_conn *y, bool by_qpn)
{
	if (y->role != CM_ROLE_PASSIVE || y->peer >= 0)
		return false;
	if (by_qpn)
		return x->qp_num && y->qp_num && x->peer_qpn == y->qp_num &&
		       y->peer_qpn == x->qp_num;
	return !strcmp(x->src, y->dst) && !strcmp(x->dst, y->src);
}

/* Active <-> passive across traces: each names the other's QP number (the REQ and
 * REP carry them), else the addresses mirror each other. Passive ids are looked
 * up by QP number and by address pair (maps per trace). */
static void cm_pair(struct an_cm *cm)
{
	struct cm_map *byq = calloc((size_t)cm->nt, sizeof(*byq));
	struct cm_map *bya = calloc((size_t)cm->nt, sizeof(*bya));

	if (!byq || !bya)
		goto out;
	for (int b = 0; b < cm->nt; b++)
		for (uint32_t j = 0; j < cm->t[b].nc; j++) {
			const struct cm_conn *y = &cm->t[b].conns[j];
			if (y->role != CM_ROLE_PASSIVE)
				continue;
			cm_map_put(&byq[b], y->qp_num, j);
			if (y->src[0] && y->dst[0])
				cm_map_put(&bya[b], cm_addr_key(y->src, y->dst), j);
		}
	for (int a = 0; a < cm->nt; a++)
		for (uint32_t i = 0; i < cm->t[a].nc; i++) {
			struct cm_conn *x = &cm->t[a].conns[i];
			if (x->role != CM_ROLE_ACTIVE || x->peer >= 0)
				continue;
			for (int pass = 0; pass < 2 && x->peer < 0; pass++)
				for (int b = 0; b < cm->nt && x->peer < 0; b++) {
					uint32_t j;
					bool hit =
						b != a &&
						(pass ? x->src[0] && x->dst[0] &&
								 cm_map_get(
									 &bya[b],
									 cm_addr_key(
										 x->dst,
										 x->src),
									 &j)
						      : cm_map_get(&byq[b], x->peer_qpn,
								   &j));
					if (!hit ||
					    !cm_pairable(x, &cm->t[b].conns[j], !pass))
						continue;
					x->peer_trace = b, x->peer = (int)j;
					cm->t[b].conns[j].peer_trace = a;
					cm->t[b].conns[j].peer = (int)i;
				}
		}
out:
	for (int b = 0; byq && bya && b < cm->nt; b++) {
		cm_map_free(&byq[b]);
		cm_map_free(&bya[b]);
	}
	free(byq);
	free(bya);
}

static double cm_span(const struct an_trace *t, uint64_t from, uint64_t to)
{
	if (from == CM_NONE || to == CM_NONE || to < from)
		return -1;
	return an_ticks_ns(t, to) - an_ticks_ns(t, from);
}

static const char *cm_addr(const char *s)
{
	return s && *s ? s : "?";
}

static void cm_findings(struct rbt_analyzer *an, struct an_trace *t, struct cm_conn *c)
{
	struct an_str title = { 0 }, ev = { 0 };
	double at = c->err_ts ? an_ticks_ns(t, c->err_ts) : 0;
	const char *dst = cm_addr(c->dst);

	if (c->err_event >= 0) {
		int code = -1;
		const char *advice = NULL;
		an_str_printf(&ev, "id 0x%" PRIx64 " %s -> %s: %s status %" PRId64, c->id,
			      cm_addr(c->src), dst,
			      c->err_event == 1000 ? "rdma_connect failed"
						   : cm_ev_name((uint64_t)c->err_event),
			      c->err_status);
		if (c->t_connect != CM_NONE && c->err_ts >= c->t_connect)
			an_str_printf(&ev, ", %.3f ms after rdma_connect",
				      cm_span(t, c->t_connect, c->err_ts) / 1e6);
		switch (c->err_event) {
		case CM_EV_REJECTED:
			if (c->err_status == 8) {
				code = RBT_FINDING_cm_no_listener;
				an_str_printf(
					&title,
					"connect to %s rejected: nobody listened there "
					"(REJECTED, reason 8: invalid service ID)",
					dst);
				advice = "start the server (rdma_listen) before the "
					 "client "
					 "connects, or retry the connect after REJECTED "
					 "(perftest and many programs do not retry)";
			} else {
				code = RBT_FINDING_cm_rejected;
				an_str_printf(&title,
					      "connect to %s rejected by the peer "
					      "(reason %" PRId64 "%s), %" PRIu64
					      " bytes of private data",
					      dst, c->err_status,
					      c->err_status == 28 ? ": consumer reject"
								  : "",
					      c->err_pdlen);
				an_str_printf(&ev, ", private data %" PRIu64 " bytes",
					      c->err_pdlen);
				advice = "the passive side called rdma_reject: its "
					 "private "
					 "data (record with RBTRACE_PAYLOAD to see the "
					 "bytes) "
					 "and its log say why; check that both ends "
					 "agree on "
					 "the connection parameters";
			}
			break;
		case CM_EV_ADDR_ERROR:
			code = RBT_FINDING_cm_addr_error;
			an_str_printf(
				&title,
				"address resolution of %s failed (ADDR_ERROR %" PRId64
				"%s)",
				dst, c->err_status,
				c->err_status == -19
					? ": the address is on no RDMA device"
					: "");
			advice = "use an address of an RDMA interface (IPoIB or RoCE "
				 "netdev "
				 "of the device; rdma link show, ibdev2netdev)";
			break;
		case CM_EV_ROUTE_ERROR:
			code = RBT_FINDING_cm_timeout;
			an_str_printf(
				&title,
				"route resolution to %s failed (ROUTE_ERROR %" PRId64
				"%s)",
				dst, c->err_status,
				c->err_status == -110 ? ": the path query timed out"
						      : "");
			advice =
				"check the subnet manager (IB) or the route and "
				"neighbour "
				"to the peer (RoCE), or give rdma_resolve_route a longer "
				"timeout";
			break;
		case CM_EV_UNREACHABLE:
			code = RBT_FINDING_cm_timeout;
			an_str_printf(&title,
				      "connect to %s timed out (UNREACHABLE %" PRId64
				      "): the peer never answered",
				      dst, c->err_status);
			advice =
				"the peer's CM did not reply: check that it is alive and "
				"its application takes its events (rdma_get_cm_event), "
				"and that nothing drops CM MADs between the ends";
			break;
		case CM_EV_CONNECT_ERROR:
		case 1000:
			code = RBT_FINDING_cm_connect_error;
			an_str_printf(
				&title, "connect to %s failed (%s %" PRId64 ")", dst,
				c->err_event == 1000 ? "rdma_connect" : "CONNECT_ERROR",
				c->err_status);
			advice = "the QP could not be moved to RTR/RTS with the peer's "
				 "parameters, or the call's arguments were refused: see "
				 "the qp_modify events around it";
			break;
		}
		if (code >= 0)
			an_add_finding(an, RBT_SEV_ERROR, code, t->idx,
				       (uint32_t)c->qp_num, at, title.s, ev.s, advice);
		an_str_free(&title);
		an_str_free(&ev);
	}
	if (c->unacked) {
		bool hang = c->t_destroy_begin != CM_NONE && c->t_destroyed == CM_NONE;
		an_str_printf(&title,
			      "%" PRIu64 " CM event%s on id 0x%" PRIx64 " never acked%s",
			      c->unacked, c->unacked == 1 ? "" : "s", c->id,
			      hang ? ": rdma_destroy_id waits for it forever" : "");
		an_str_printf(&ev, "%s delivered at %.3f ms, no rdma_ack_cm_event",
			      cm_ev_name((uint64_t)c->unacked_type),
			      an_ticks_ns(t, c->unacked_ts) / 1e6);
		if (hang)
			an_str_printf(&ev,
				      "; rdma_destroy_id entered at %.3f ms, never "
				      "returned",
				      an_ticks_ns(t, c->t_destroy_begin) / 1e6);
		an_add_finding(an, hang ? RBT_SEV_ERROR : RBT_SEV_WARNING,
			       RBT_FINDING_cm_event_not_acked, t->idx,
			       (uint32_t)c->qp_num, an_ticks_ns(t, c->unacked_ts),
			       title.s, ev.s,
			       "ack every event with rdma_ack_cm_event (after copying "
			       "what it carries) before rdma_destroy_id or "
			       "rdma_destroy_event_channel");
		an_str_free(&title);
		an_str_free(&ev);
	}
	double waited =
		c->late_ack_ts ? cm_span(t, c->t_destroy_begin, c->late_ack_ts) : -1;
	if (!c->unacked && c->late_ack_ts && waited >= CM_LATE_ACK_MIN_NS) {
		an_str_printf(&title,
			      "rdma_destroy_id of id 0x%" PRIx64
			      " waited %.3f ms for a CM event to be acked",
			      c->id, waited / 1e6);
		an_str_printf(
			&ev,
			"%s delivered at %.3f ms; rdma_destroy_id entered at %.3f ms; "
			"the ack at %.3f ms",
			cm_ev_name((uint64_t)c->late_ack_type),
			an_ticks_ns(t, c->late_ack_ev_ts) / 1e6,
			an_ticks_ns(t, c->t_destroy_begin) / 1e6,
			an_ticks_ns(t, c->late_ack_ts) / 1e6);
		an_add_finding(
			an, RBT_SEV_WARNING, RBT_FINDING_cm_event_not_acked, t->idx,
			(uint32_t)c->qp_num, an_ticks_ns(t, c->t_destroy_begin), title.s,
			ev.s,
			"ack every event with rdma_ack_cm_event before "
			"rdma_destroy_id: the destroy blocks until then (forever when "
			"the ack never comes)");
		an_str_free(&title);
		an_str_free(&ev);
	}
	if (c->posts_after_disc) {
		an_str_printf(&title,
			      "QP %" PRIu64 " posted to after its DISCONNECTED event",
			      c->qp_num);
		an_str_printf(&ev,
			      "id 0x%" PRIx64
			      ": DISCONNECTED at %.3f ms, a post at %.3f ms",
			      c->id, an_ticks_ns(t, c->t_disc_ev) / 1e6,
			      an_ticks_ns(t, c->last_post) / 1e6);
		an_add_finding(
			an, RBT_SEV_WARNING, RBT_FINDING_cm_qp_after_disconnect, t->idx,
			(uint32_t)c->qp_num, an_ticks_ns(t, c->last_post), title.s, ev.s,
			"after DISCONNECTED the QP is in the error state and its "
			"work completes in error: stop posting, drain the CQ, then "
			"rdma_destroy_qp");
		an_str_free(&title);
		an_str_free(&ev);
	}
}

void an_cm_diagnose(struct rbt_analyzer *an)
{
	struct an_cm *cm = an->cm;
	if (!cm || cm->done)
		return;
	cm->done = true;
	for (int i = 0; i < cm->nt && i < an->n_traces; i++)
		cm_build(&cm->t[i], i);
	cm_pair(cm);
	for (int i = 0; i < cm->nt && i < an->n_traces; i++)
		for (uint32_t k = 0; k < cm->t[i].nc; k++)
			cm_findings(an, an->traces[i], &cm->t[i].conns[k]);
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
		cm_map_free(&cm->t[i].qp_map);
		cm_map_free(&cm->t[i].conn_map);
	}
	free(cm->t);
	free(cm);
	an->cm = NULL;
}

static const char *cm_role_name(enum cm_role r)
{
	static const char *const n[] = { "id", "active", "passive", "listener" };
	return n[r];
}

static uint32_t cm_count(const struct an_cm *cm)
{
	uint32_t n = 0;
	for (int i = 0; cm && i < cm->nt; i++)
		n += cm->t[i].nc;
	return n;
}

static void cm_text_span(FILE *f, const char *label, double ns, bool *first)
{
	if (ns < 0)
		return;
	if (ns < 1e6)
		fprintf(f, "%s%s %.1f us", *first ? "    " : ", ", label, ns / 1e3);
	else
		fprintf(f, "%s%s %.3f ms", *first ? "    " : ", ", label, ns / 1e6);
	*first = false;
}

void an_cm_write_text(struct rbt_analyzer *an, FILE *f)
{
	struct an_cm *cm = an->cm;
	uint32_t n = cm_count(cm);
	if (!n)
		return;
	fprintf(f, "== connections (rdma_cm): %u id%s\n", n, n == 1 ? "" : "s");
	for (int i = 0; i < cm->nt && i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		for (uint32_t k = 0; k < cm->t[i].nc; k++) {
			const struct cm_conn *c = &cm->t[i].conns[k];
			const char *qt = rbt_verbs_name(RBT_NAMES_QP_TYPE, c->qp_type);
			fprintf(f, "  trace %d id 0x%" PRIx64 " %s%s %s -> %s", i, c->id,
				cm_role_name(c->role), c->sync ? " (synchronous)" : "",
				cm_addr(c->src), cm_addr(c->dst));
			if (c->qp_num)
				fprintf(f, ", QP %" PRIu64 " (%s)", c->qp_num,
					qt ? qt : "?");
			if (c->peer_qpn)
				fprintf(f, " <-> peer QP %" PRIu64, c->peer_qpn);
			fputc('\n', f);
			bool first = true;
			cm_text_span(f, "address resolution",
				     cm_span(t, c->t_raddr, c->t_raddr_done), &first);
			cm_text_span(f, "route resolution",
				     cm_span(t, c->t_rroute, c->t_rroute_done), &first);
			cm_text_span(f, "connect -> ESTABLISHED",
				     cm_span(t, c->t_connect, c->t_established), &first);
			cm_text_span(f, "CONNECT_REQUEST -> accept",
				     cm_span(t, c->t_request, c->t_accept), &first);
			cm_text_span(f, "accept -> ESTABLISHED",
				     cm_span(t, c->t_accept, c->t_established), &first);
			if (!first)
				fputc('\n', f);
			fprintf(f,
				"    %" PRIu64
				" event%s, blocked in rdma_get_cm_event %.3f ms, "
				"%" PRIu64 " acked",
				c->events, c->events == 1 ? "" : "s",
				(double)c->wait_ticks * t->mt->ns_per_tick / 1e6,
				c->acked);
			if (c->acked)
				fprintf(f, " (ack lag mean %.1f us, max %.1f us)",
					(double)c->ack_lag_sum * t->mt->ns_per_tick /
						(double)c->acked / 1e3,
					(double)c->ack_lag_max * t->mt->ns_per_tick /
						1e3);
			if (c->unacked)
				fprintf(f, ", %" PRIu64 " never acked", c->unacked);
			fputc('\n', f);
			if (c->err_event >= 0)
				fprintf(f,
					"    failed: %s status %" PRId64 " at %.3f ms\n",
					c->err_event == 1000
						? "rdma_connect"
						: cm_ev_name((uint64_t)c->err_event),
					c->err_status, an_ticks_ns(t, c->err_ts) / 1e6);
			if (c->t_disc_call != CM_NONE || c->t_disc_ev != CM_NONE) {
				fprintf(f, "    disconnect:");
				if (c->t_disc_call != CM_NONE)
					fprintf(f, " rdma_disconnect at %.3f ms",
						an_ticks_ns(t, c->t_disc_call) / 1e6);
				if (c->t_disc_ev != CM_NONE)
					fprintf(f, "%s DISCONNECTED at %.3f ms",
						c->t_disc_call != CM_NONE ? "," : "",
						an_ticks_ns(t, c->t_disc_ev) / 1e6);
				double up =
					cm_span(t, c->t_established,
						c->t_disc_call != CM_NONE ? c->t_disc_call
									  : c->t_disc_ev);
				if (up >= 0)
					fprintf(f, " (connected %.3f ms)", up / 1e6);
				fputc('\n', f);
			}
			if (c->peer >= 0)
				fprintf(f, "    peer: trace %d id 0x%" PRIx64 "\n",
					c->peer_trace,
					cm->t[c->peer_trace].conns[c->peer].id);
		}
	}
	fputc('\n', f);
}

static void cm_json_ns(struct rbt_json *j, const char *key, double ns)
{
	rbt_json_key(j, key);
	if (ns < 0)
		rbt_json_null(j);
	else
		rbt_json_dbl(j, "%.0f", ns);
}

static void cm_json_at(struct rbt_json *j, const char *key, const struct an_trace *t,
		       uint64_t ts)
{
	cm_json_ns(j, key, ts == CM_NONE ? -1 : an_ticks_ns(t, ts));
}

static void cm_json_hex(struct rbt_json *j, const char *key, uint64_t v)
{
	char b[24];
	snprintf(b, sizeof(b), "0x%" PRIx64, v);
	rbt_json_kstr(j, key, b);
}

void an_cm_write_json(struct rbt_analyzer *an, struct rbt_json *j)
{
	struct an_cm *cm = an->cm;
	if (!cm_count(cm))
		return; /* no rdma_cm in the traces: no key (older reports' shape) */
	rbt_json_key(j, "connections");
	rbt_json_arr(j);
	for (int i = 0; i < cm->nt && i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		double nst = t->mt->ns_per_tick;
		for (uint32_t k = 0; k < cm->t[i].nc; k++) {
			const struct cm_conn *c = &cm->t[i].conns[k];
			const char *qt = rbt_verbs_name(RBT_NAMES_QP_TYPE, c->qp_type);
			rbt_json_obj(j);
			rbt_json_ki64(j, "trace", i);
			cm_json_hex(j, "id", c->id);
			rbt_json_kstr(j, "role", cm_role_name(c->role));
			rbt_json_kstr(j, "src", c->src);
			rbt_json_kstr(j, "dst", c->dst);
			rbt_json_kbool(j, "synchronous", c->sync);
			rbt_json_ku64(j, "qp_num", c->qp_num);
			rbt_json_kstr(j, "qp_type", qt ? qt : "");
			rbt_json_ku64(j, "peer_qp_num", c->peer_qpn);
			cm_json_ns(j, "addr_resolve_ns",
				   cm_span(t, c->t_raddr, c->t_raddr_done));
			cm_json_ns(j, "route_resolve_ns",
				   cm_span(t, c->t_rroute, c->t_rroute_done));
			cm_json_ns(j, "connect_ns",
				   cm_span(t, c->t_connect, c->t_established));
			cm_json_ns(j, "accept_delay_ns",
				   cm_span(t, c->t_request, c->t_accept));
			cm_json_ns(j, "accept_to_established_ns",
				   cm_span(t, c->t_accept, c->t_established));
			cm_json_at(j, "established_at_ns", t, c->t_established);
			rbt_json_ku64(j, "events", c->events);
			rbt_json_kdbl(j, "get_event_wait_ns", "%.0f",
				      (double)c->wait_ticks * nst);
			rbt_json_ku64(j, "acked", c->acked);
			rbt_json_ku64(j, "unacked", c->unacked);
			cm_json_ns(j, "ack_lag_mean_ns",
				   c->acked ? (double)c->ack_lag_sum * nst /
						      (double)c->acked
					    : -1);
			cm_json_ns(j, "ack_lag_max_ns",
				   c->acked ? (double)c->ack_lag_max * nst : -1);
			rbt_json_key(j, "error");
			if (c->err_event >= 0) {
				rbt_json_obj(j);
				rbt_json_kstr(
					j, "event",
					c->err_event == 1000
						? "rdma_connect"
						: cm_ev_name((uint64_t)c->err_event));
				rbt_json_ki64(j, "status", c->err_status);
				rbt_json_ku64(j, "private_data_len", c->err_pdlen);
				rbt_json_kdbl(j, "at_ns", "%.0f",
					      an_ticks_ns(t, c->err_ts));
				rbt_json_obj_end(j);
			} else {
				rbt_json_null(j);
			}
			cm_json_at(j, "disconnect_call_ns", t, c->t_disc_call);
			cm_json_at(j, "disconnected_event_ns", t, c->t_disc_ev);
			rbt_json_key(j, "peer");
			if (c->peer >= 0) {
				rbt_json_obj(j);
				rbt_json_ki64(j, "trace", c->peer_trace);
				cm_json_hex(j, "id",
					    cm->t[c->peer_trace].conns[c->peer].id);
				rbt_json_obj_end(j);
			} else {
				rbt_json_null(j);
			}
			rbt_json_obj_end(j);
		}
	}
	rbt_json_arr_end(j);
}

void an_cm_write_html(struct rbt_analyzer *an, FILE *f)
{
	uint32_t n = cm_count(an->cm);
	if (!n)
		return;
	fprintf(f,
		"<h2>Connections (rdma_cm): %u</h2>\n<table border=\"1\" "
		"cellspacing=\"0\" cellpadding=\"3\">\n<tr><th>trace</th><th>id</th>"
		"<th>role</th><th>src &rarr; dst</th><th>QP</th><th>addr</th>"
		"<th>route</th><th>connect &rarr; ESTABLISHED</th>"
		"<th>request &rarr; accept</th><th>events</th><th>result</th></tr>\n",
		n);
	struct an_cm *cm = an->cm;
	for (int i = 0; i < cm->nt && i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		for (uint32_t k = 0; k < cm->t[i].nc; k++) {
			const struct cm_conn *c = &cm->t[i].conns[k];
			double sp[4] = { cm_span(t, c->t_raddr, c->t_raddr_done),
					 cm_span(t, c->t_rroute, c->t_rroute_done),
					 cm_span(t, c->t_connect, c->t_established),
					 cm_span(t, c->t_request, c->t_accept) };
			/* addresses are kept printable without <, & or " (cm_copy) */
			fprintf(f,
				"<tr><td>%d</td><td>0x%" PRIx64 "</td><td>%s</td><td>%s "
				"&rarr; %s",
				i, c->id, cm_role_name(c->role), c->src, c->dst);
			fprintf(f, "</td><td>%" PRIu64 "</td>", c->qp_num);
			for (int s = 0; s < 4; s++) {
				if (sp[s] < 0)
					fputs("<td></td>", f);
				else
					fprintf(f, "<td>%.3f ms</td>", sp[s] / 1e6);
			}
			fprintf(f, "<td>%" PRIu64 "</td><td>%s", c->events,
				c->err_event >= 0
					? (c->err_event == 1000
						   ? "rdma_connect failed"
						   : cm_ev_name((uint64_t)c->err_event))
				: c->t_established != CM_NONE ? "ESTABLISHED"
							      : "");
			if (c->err_event >= 0)
				fprintf(f, " %" PRId64, c->err_status);
			fputs("</td></tr>\n", f);
		}
	}
	fputs("</table>\n", f);
}
