/* replay_cm.c - what the replay says about connections a trace made through
 * librdmacm: the replay never runs the CM; it rebuilds the QPs and replays the
 * QP transitions the CM issued (recorded as ibv_modify_qp) and pairs the ends by
 * their QP numbers as for any other trace. Here only the counting of the CM
 * calls at load and the line of the fidelity report that says so.
 *
 * Must never change what is replayed: the CM events are facts for the report.
 */
#include "replay/replay_int.h"
#include "util/rbt_json.h"

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
		if (c->qp_num)
			m->qps++;
		break;
	default:
		break;
	}
	return 0;
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
	}
}

void rp_cm_json(const struct rp_side *s, struct rbt_json *w)
{
	rbt_json_kbool(w, "connected_by_cm", s->cm.calls > 0);
	rbt_json_ku64(w, "cm_connects", s->cm.connects);
	rbt_json_ku64(w, "cm_accepts", s->cm.accepts);
}
