/* replay_cm.c - what the replay says about connections a trace made through
 * librdmacm: the replay never runs the CM; it rebuilds the QPs and replays the
 * QP transitions the CM issued (recorded as ibv_modify_qp) and pairs the ends by
 * their QP numbers as for any other trace. Here the counting of the CM calls at
 * load, the line of the fidelity report that says so, and the one thing of the
 * CM's that verbs do not show: a multicast group joined through
 * rdma_join_multicast (librdmacm attaches the QP itself, inside its event), which
 * the replayed QP is attached to at build, before anything runs.
 *
 * Must never change what is replayed otherwise: the other CM events are facts
 * for the report. Counts and sizes from the trace are bounded.
 */
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"
#include "util/rbt_json.h"

#define RP_CM_MAX 65536 /* ids with a QP, groups joined: per trace */

/* enum rdma_cm_event_type's MULTICAST_JOIN (the replay does not include
 * librdmacm's headers) */
#define RP_CM_EV_MULTICAST_JOIN 12

static void *rp_cm_grow(void *v, uint32_t n, uint32_t *cap, size_t sz)
{
	uint32_t nc;
	void *nv;

	if (n < *cap)
		return v;
	if (n >= RP_CM_MAX)
		return NULL;
	nc = *cap ? *cap * 2 : 8;
	nv = realloc(v, nc * sz);
	if (nv)
		*cap = nc;
	return nv;
}

static void rp_cm_note_qp(struct rp_cm_info *m, uint64_t id, uint32_t qpn)
{
	struct rp_cm_qp *v = rp_cm_grow(m->idqp, m->nidqp, &m->capidqp, sizeof(*v));

	if (!v)
		return;
	m->idqp = v;
	v[m->nidqp++] = (struct rp_cm_qp){ id, qpn };
}

int rp_load_cm(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_cm_call *c = &ev->u.cm_call;
	struct rp_cm_info *m = &ld->s->cm;

	if (c->nested)
		return 0;
	m->calls++;
	if (c->ret)
		return 0;
	switch (c->fn) {
	case RBT_CM_CONNECT:
		m->connects++;
		break;
	case RBT_CM_ACCEPT:
		m->accepts++;
		break;
	case RBT_CM_CREATE_QP:
	case RBT_CM_CREATE_QP_EX:
	case RBT_CM_CREATE_EP:
		if (c->qp_num) {
			m->qps++;
			rp_cm_note_qp(m, c->id, (uint32_t)c->qp_num);
		}
		break;
	default:
		break;
	}
	return 0;
}

/* MULTICAST_JOIN with the group's address: the id's QP joins it */
int rp_load_cm_event(struct rp_loading *ld, const struct rbt_event *ev)
{
	const struct rbt_ev_cm_event *e = &ev->u.cm_event;
	struct rp_cm_info *m = &ld->s->cm;
	struct rp_cm_join *v;

	if (e->ret || e->event != RP_CM_EV_MULTICAST_JOIN || !e->ud ||
	    e->ud_dgid.len != 16 || e->ud_dgid.data[0] != 0xff)
		return 0;
	v = rp_cm_grow(m->join, m->njoin, &m->capjoin, sizeof(*v));
	if (!v)
		return 0;
	m->join = v;
	v = &m->join[m->njoin++];
	v->id = e->id;
	memcpy(v->mgid, e->ud_dgid.data, 16);
	v->mlid = (uint16_t)e->ud_dlid;
	return 0;
}

int rp_cm_build_mcast(struct rp_job *j, struct rp_side *s)
{
	struct rp_cm_info *m = &s->cm;

	(void)j;
	for (uint32_t g = 0; g < m->njoin; g++) {
		struct rp_qp *q = NULL;
		union ibv_gid gid;

		/* the id's last QP (an id has one at a time) */
		for (uint32_t k = m->nidqp; k-- > 0 && !q;)
			if (m->idqp[k].id == m->join[g].id)
				q = rp_qp_by_rec_qpn(s, m->idqp[k].qpn);
		if (!q || !q->qp) {
			m->attach_failed++;
			continue;
		}
		memcpy(gid.raw, m->join[g].mgid, 16);
		if (ibv_attach_mcast(q->qp, &gid, m->join[g].mlid))
			m->attach_failed++;
		else
			m->attached++;
	}
	return 0;
}

void rp_cm_free(struct rp_side *s)
{
	free(s->cm.idqp);
	free(s->cm.join);
	s->cm.idqp = NULL;
	s->cm.join = NULL;
}

void rp_cm_text(struct rp_job *j, FILE *f)
{
	for (int si = 0; si < j->nside; si++) {
		const struct rp_cm_info *m = &j->side[si].cm;

		if (!m->calls)
			continue;
		fprintf(f,
			"  %s: connected by rdma_cm (%u rdma_connect, %u rdma_accept, %u "
			"QPs made by rdma_create_qp/ep): replayed without the CM, over "
			"the QP transitions it issued\n",
			j->side[si].path, m->connects, m->accepts, m->qps);
		if (m->njoin)
			fprintf(f,
				"  %s: %u multicast group joins (rdma_join_multicast): "
				"%u attached to the replayed QPs, %u not (no QP of "
				"the id, or the device refused)\n",
				j->side[si].path, m->njoin, m->attached,
				m->attach_failed);
	}
}

void rp_cm_json(const struct rp_side *s, struct rbt_json *w)
{
	rbt_json_kbool(w, "connected_by_cm", s->cm.calls > 0);
	rbt_json_ku64(w, "cm_connects", s->cm.connects);
	rbt_json_ku64(w, "cm_accepts", s->cm.accepts);
	rbt_json_ku64(w, "cm_multicast_joins", s->cm.njoin);
	rbt_json_ku64(w, "cm_multicast_attached", s->cm.attached);
}
