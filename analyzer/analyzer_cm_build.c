/* analyzer_cm_build.c - the connections of the connection manager's report,
 * built once after the last event from each trace's CM records (analyzer_cm.c):
 * records in time order, one connection per id lifetime (a destroyed id's handle
 * reused is a new connection), the events still pending an ack, then the pairing
 * of active and passive ids across traces.
 *
 * It must never trust a record: an event acked twice, an ack of an event never
 * seen, a handle reused unacked are all possible in a damaged or hostile trace.
 * It prints nothing and raises no finding (analyzer_cm_diag.c does).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_cm_int.h"

static int cm_rec_cmp(const void *a, const void *b)
{
	const struct cm_rec *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static struct cm_conn *cm_conn_new(struct cm_trace *ct, int trace, uint64_t id)
{
	if (rbt_grow(&ct->conns, &ct->capc, ct->nc + 1, sizeof(*ct->conns), 16, 0))
		return NULL;
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

/* The state of one trace's build: the events returned and not yet acked. */
struct cm_builder {
	struct cm_pending *pend;
	uint32_t np, capp;
	struct rbt_map ev_map; /* event handle -> 1 + its latest pending */
};

static void cm_build_create(struct cm_trace *ct, int trace, const struct cm_rec *r)
{
	if (r->ret || !r->id)
		return;
	struct cm_conn *c = cm_conn_of(ct, trace, r->id, true);
	if (!c)
		return;
	cm_set(&c->t_create, r->ts);
	/* rdma_create_ep resolves the address and route itself */
	if (r->what == RBT_CM_CREATE_EP && r->dst[0])
		cm_set(&c->t_raddr, r->ts);
	if (r->what == RBT_CM_CREATE_ID)
		c->ps = r->arg, c->qp_type = r->why;
	if (r->dst[0]) {
		an_cm_copy(c->dst, r->dst);
		c->role = CM_ROLE_ACTIVE;
	}
}

static void cm_build_call(struct cm_trace *ct, int trace, const struct cm_rec *r,
			  struct cm_builder *b)
{
	if (r->what == RBT_CM_CREATE_ID || r->what == RBT_CM_CREATE_EP) {
		cm_build_create(ct, trace, r);
		return;
	}
	struct cm_conn *c = cm_conn_of(ct, trace, r->id, r->what != RBT_CM_DESTROY_ID);
	if (!c)
		return;
	if (r->qp_num && (r->what == RBT_CM_CREATE_QP || r->what == RBT_CM_CREATE_QP_EX ||
			  r->what == RBT_CM_CREATE_EP || r->qp)) {
		c->qp = r->qp;
		c->qp_num = r->qp_num;
	}
	switch (r->what) {
	case RBT_CM_RESOLVE_ADDR:
		c->role = CM_ROLE_ACTIVE;
		cm_set(&c->t_raddr, r->ts);
		if (r->dst[0])
			an_cm_copy(c->dst, r->dst);
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
			an_cm_copy(c->src, r->src);
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
		/* an id without the CM's QP (rping -q): CONNECT_RESPONSE, then the
		 * program's rdma_establish makes the connection */
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
		/* librdmacm acks a synchronous id's last event itself (in its
		 * destroy; softnic's without a call) */
		for (uint32_t k = c->pend_head; c->sync && !r->ret && k;
		     k = b->pend[k - 1].prev_conn)
			if (!b->pend[k - 1].done) {
				b->pend[k - 1].done = true;
				c->acked++;
			}
		break;
	default:
		break;
	}
}

/* What an event returned tells of its connection. */
static void cm_event_apply(struct cm_conn *c, const struct cm_rec *r, uint64_t at)
{
	switch (r->what) {
	case CM_EV_ADDR_RESOLVED:
		cm_set(&c->t_raddr_done, at);
		break;
	case CM_EV_ROUTE_RESOLVED:
		/* no rdma_resolve_route seen (rdma_create_ep): from the address's
		 * resolution */
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
}

static void cm_build_event(struct cm_trace *ct, int trace, const struct cm_rec *r,
			   struct cm_builder *b)
{
	if (r->ret || !r->id)
		return;
	struct cm_conn *c = cm_conn_of(ct, trace, r->id, true);
	if (!c)
		return;
	uint64_t at = r->ts_exit >= r->ts ? r->ts_exit : r->ts;
	c->events++;
	c->wait_ticks += at - r->ts;
	if (r->nested)
		c->sync = true;
	cm_event_apply(c, r, at);
	if (rbt_grow(&b->pend, &b->capp, b->np + 1, sizeof(*b->pend), 32, 0))
		return;
	uint32_t pk = 0;
	cm_map_get(&b->ev_map, r->ev, &pk);
	b->pend[b->np] = (struct cm_pending){
		r->ev, at, (uint32_t)(c - ct->conns), pk, c->pend_head, r->what, false
	};
	b->np++;
	c->pend_head = b->np;
	cm_map_put(&b->ev_map, r->ev, b->np);
}

static void cm_build_ack(struct cm_trace *ct, const struct cm_rec *r,
			 struct cm_builder *b)
{
	uint32_t k = 0;
	cm_map_get(&b->ev_map, r->ev, &k);
	while (k && b->pend[k - 1].done)
		k = b->pend[k - 1].prev_ev;
	if (!k)
		return;
	struct cm_pending *pp = &b->pend[k - 1];
	struct cm_conn *pc = &ct->conns[pp->conn];
	uint64_t lag = r->ts > pp->ts ? r->ts - pp->ts : 0;
	if (pc->t_destroy_begin != CM_NONE && !r->nested &&
	    r->ts >= pc->t_destroy_begin &&
	    (pc->t_destroyed == CM_NONE || r->ts <= pc->t_destroyed) &&
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
	cm_map_put(&b->ev_map, r->ev, pp->prev_ev);
}

static void cm_build_id(struct cm_trace *ct, int trace, const struct cm_rec *r)
{
	struct cm_conn *c = cm_conn_of(ct, trace, r->id, false);
	if (!c)
		return;
	if (r->src[0])
		an_cm_copy(c->src, r->src);
	if (r->dst[0])
		an_cm_copy(c->dst, r->dst);
	if (r->qp_num) {
		c->qp = r->qp;
		c->qp_num = r->qp_num;
	}
	c->qp_type = r->arg;
	c->ps = (uint64_t)r->status;
}

/* Left unacked: a finding only when the id's destroy began after the event was
 * delivered and never returned (it waits for the ack); an event delivered to an
 * id still alive when the process ended hung nothing. */
static void cm_build_unacked(struct cm_trace *ct, const struct cm_builder *b)
{
	for (uint32_t k = 0; k < b->np; k++) {
		const struct cm_pending *p = &b->pend[k];
		struct cm_conn *pc = &ct->conns[p->conn];
		if (p->done || pc->t_destroy_begin == CM_NONE ||
		    p->ts > pc->t_destroy_begin)
			continue;
		/* a destroy that returned had its acks (librdmacm waits for them):
		 * the ack's record was lost at the process's end */
		if (pc->t_destroyed != CM_NONE)
			continue;
		pc->unacked++;
		if (pc->unacked_type < 0 || p->ts < pc->unacked_ts) {
			pc->unacked_type = p->type;
			pc->unacked_ts = p->ts;
		}
	}
}

void an_cm_build(struct cm_trace *ct, int trace)
{
	struct cm_builder b = { 0 };

	qsort(ct->recs, ct->n, sizeof(*ct->recs), cm_rec_cmp);
	for (uint32_t i = 0; i < ct->n; i++) {
		const struct cm_rec *r = &ct->recs[i];
		switch (r->type) {
		case RBT_EV_CM_CALL:
			cm_build_call(ct, trace, r, &b);
			break;
		case RBT_EV_CM_EVENT:
			cm_build_event(ct, trace, r, &b);
			break;
		case RBT_EV_CM_ACK:
			cm_build_ack(ct, r, &b);
			break;
		case RBT_EV_CM_ID:
			cm_build_id(ct, trace, r);
			break;
		}
	}
	cm_build_unacked(ct, &b);
	free(b.pend);
	rbt_map_free(&b.ev_map);
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
void an_cm_pair(struct an_cm *cm)
{
	struct rbt_map *byq = calloc((size_t)cm->nt, sizeof(*byq));
	struct rbt_map *bya = calloc((size_t)cm->nt, sizeof(*bya));

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
		rbt_map_free(&byq[b]);
		rbt_map_free(&bya[b]);
	}
	free(byq);
	free(bya);
}
