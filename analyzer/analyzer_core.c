/* analyzer_core.c - the analyzer's event path: resources, the post/completion join
 * on (QP number, wr_id), the attribution of each WR's time and the statistics.
 *
 * Per-WR state lives only between a post and its completion; everything else is per
 * resource. Events of different threads arrive slightly out of order (chunks are per
 * thread), so the join tolerates a completion seen before its post (it is parked
 * until the post shows up) and bounds are only taken from polls earlier in time.
 * It must never trust a field of an event: every lookup can miss.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

#define AN_STATE_UNKNOWN 255
#define AN_PARK_MAX	 4096
#define AN_RT_MAX	 65536

const char *const an_size_class_name[AN_SIZE_CLASSES] = { "<=64B",   "<=512B", "<=4KiB",
							  "<=64KiB", "<=1MiB", ">1MiB" };

int an_size_class(uint64_t b)
{
	if (b <= 64)
		return 0;
	if (b <= 512)
		return 1;
	if (b <= 4096)
		return 2;
	if (b <= 65536)
		return 3;
	if (b <= 1048576)
		return 4;
	return 5;
}

/* 128 is the analyzer's own slot for receives (not an ibv_wr_opcode). */
const char *an_wr_opcode_name(int op)
{
	const char *n =
		op >= 0 ? rbt_verbs_name(RBT_NAMES_WR_OPCODE, (uint64_t)op) : NULL;

	return n ? n : op == 128 ? "RECV" : "OTHER";
}

const char *an_wc_status_name(uint64_t st)
{
	const char *n = rbt_verbs_name(RBT_NAMES_WC_STATUS, st);

	return n ? n : "UNKNOWN_STATUS";
}

const char *an_qp_state_name(uint64_t st)
{
	const char *n = st < 7 ? rbt_verbs_name(RBT_NAMES_QP_STATE, st) : NULL;

	return n ? n : "UNKNOWN";
}

static int an_opcode_slot(int op)
{
	if (op >= 0 && op < 12)
		return op;
	if (op == 128)
		return 12;
	return 13;
}

static int an_slot_opcode(int slot)
{
	return slot < 12 ? slot : slot == 12 ? 128 : 255;
}

double an_ticks_ns(const struct an_trace *t, uint64_t ticks)
{
	return ((double)ticks - (double)t->hdr.start.ticks) * t->ns_per_tick;
}

double an_aligned_ns(const struct an_trace *t, double ticks)
{
	return (ticks - (double)t->hdr.start.ticks) * t->ns_per_tick +
	       (double)t->align_ns;
}

uint64_t an_aligned_u64(const struct an_trace *t, double ticks)
{
	double v = an_aligned_ns(t, ticks);
	if (!(v > 0))
		return 0;
	if (v >= 9.2e18)
		return (uint64_t)9.2e18;
	return (uint64_t)v;
}

static uint64_t an_ns(const struct an_trace *t, double ticks)
{
	double v = ticks * t->ns_per_tick;
	if (!(v > 0))
		return 0;
	return v < 9.2e18 ? (uint64_t)(v + 0.5) : (uint64_t)9.2e18;
}

/* ---- create / destroy ---- */

int rbt_analyzer_create(const struct rbt_analyzer_opts *opts, struct rbt_analyzer **out)
{
	struct rbt_analyzer *an = calloc(1, sizeof(*an));
	if (!an)
		return -ENOMEM;
	if (opts)
		an->opts = *opts;
	an->perfetto_first = true;
	*out = an;
	return 0;
}

static void an_qp_free(struct an_qp *qp)
{
	free(qp->hist);
	free(qp->sq.v);
	free(qp->rq.v);
	free(qp->rt_wait.v);
	free(qp->rt_msgs);
	free(qp->parked);
	an_hist_free(&qp->rt_rtt);
	an_hist_free(&qp->rt_local_post);
	an_hist_free(&qp->rt_remote_app);
	an_hist_free(&qp->rt_nic_wire);
	an_hist_free(&qp->late_recv);
	free(qp);
}

static void an_trace_free(struct an_trace *t)
{
	struct an_qp *qp = t->qp_list;
	while (qp) {
		struct an_qp *n = qp->next;
		an_qp_free(qp);
		qp = n;
	}
	AN_MAP_FOREACH(&t->cqs, i) free(t->cqs.vals[i]);
	AN_MAP_FOREACH(&t->srqs, i)
	{
		struct an_srq *s = t->srqs.vals[i];
		free(s->rq.v);
		free(s);
	}
	AN_MAP_FOREACH(&t->mrs, i) free(t->mrs.vals[i]);
	AN_MAP_FOREACH(&t->clocks, i) free(t->clocks.vals[i]);
	AN_MAP_FOREACH(&t->threads, i)
	{
		struct an_thread *th = t->threads.vals[i];
		free(th->name);
		free(th->lane_end[0]);
		free(th->lane_end[1]);
		free(th);
	}
	an_map_free(&t->qps);
	an_map_free(&t->qpns);
	an_map_free(&t->cqs);
	an_map_free(&t->srqs);
	an_map_free(&t->mrs);
	an_map_free(&t->mr_lkeys);
	an_map_free(&t->mr_rkeys);
	an_map_free(&t->clocks);
	an_map_free(&t->threads);
	free(t->deferred.v);
	free(t->name);
	free(t->host);
	free(t->cmdline);
	free(t->tool);
	free(t);
}

void rbt_analyzer_destroy(struct rbt_analyzer *an)
{
	if (!an)
		return;
	for (uint32_t i = 0; i < an->n_groups; i++) {
		for (int p = 0; p < RBT_PHASE_COUNT; p++)
			an_hist_free(&an->groups[i]->h[p]);
		free(an->groups[i]);
	}
	free(an->groups);
	for (int i = 0; i < an->n_traces; i++)
		an_trace_free(an->traces[i]);
	free(an->traces);
	for (int i = 0; i < an->n_findings; i++) {
		free(an->findings[i].title);
		free(an->findings[i].evidence);
		free(an->findings[i].advice);
	}
	free(an->findings);
	free(an->pub_findings);
	free(an);
}

int rbt_analyzer_add_trace(struct rbt_analyzer *an, const struct rbt_header *hdr,
			   const char *name)
{
	if (an->origin_set)
		return -EBUSY; /* the timeline's origin is already fixed */
	struct an_trace *t = calloc(1, sizeof(*t));
	struct an_trace **nt = realloc(an->traces, sizeof(*nt) * (an->n_traces + 1));
	if (!t || !nt) {
		free(t);
		free(nt);
		return -ENOMEM;
	}
	an->traces = nt;
	t->idx = an->n_traces;
	t->hdr = *hdr;
	t->host = an_strdup(hdr->host);
	t->cmdline = an_strdup(hdr->cmdline);
	t->tool = an_strdup(hdr->tool);
	t->hdr.host = t->host;
	t->hdr.cmdline = t->cmdline;
	t->hdr.tool = t->tool;
	t->name = an_strdup(name);
	t->ns_per_tick = hdr->clock_hz ? 1e9 / (double)hdr->clock_hz : 1.0;
	an->traces[an->n_traces++] = t;
	return t->idx;
}

/* The timeline's origin: the earliest trace start in real time. */
static void an_set_origin(struct rbt_analyzer *an)
{
	if (an->origin_set)
		return;
	an->origin_set = true;
	uint64_t o = UINT64_MAX;
	for (int i = 0; i < an->n_traces; i++)
		if (an->traces[i]->hdr.start.real_ns < o)
			o = an->traces[i]->hdr.start.real_ns;
	an->origin_real_ns = o == UINT64_MAX ? 0 : o;
	for (int i = 0; i < an->n_traces; i++)
		an->traces[i]->align_ns =
			(int64_t)(an->traces[i]->hdr.start.real_ns - an->origin_real_ns);
	if (an->opts.perfetto) {
		an_pf_begin(an);
		for (int i = 0; i < an->n_traces; i++)
			an_pf_trace(an, an->traces[i]);
	}
}

/* ---- resources ---- */

struct an_thread *an_thread_get(struct rbt_analyzer *an, struct an_trace *t, uint32_t tid)
{
	struct an_thread *th = an_map_get(&t->threads, tid + 1ULL);
	if (th)
		return th;
	th = calloc(1, sizeof(*th));
	if (!th)
		return NULL;
	th->tid = tid;
	th->idx = t->n_threads++;
	if (an_map_put(&t->threads, tid + 1ULL, th)) {
		free(th);
		return NULL;
	}
	if (an->opts.perfetto)
		an_pf_thread(an, t, th);
	return th;
}

static struct an_cq *an_cq_get(struct an_trace *t, uint64_t handle)
{
	struct an_cq *cq = an_map_get(&t->cqs, handle);
	if (cq)
		return cq;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	cq->handle = handle;
	if (an_map_put(&t->cqs, handle, cq)) {
		free(cq);
		return NULL;
	}
	return cq;
}

static struct an_qp *an_qp_new(struct an_trace *t, uint64_t handle, uint32_t qpn)
{
	struct an_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->t = t;
	qp->handle = handle;
	qp->qpn = qpn;
	qp->state = AN_STATE_UNKNOWN;
	qp->sq.elem = sizeof(struct an_swr);
	qp->rq.elem = sizeof(struct an_rwr);
	qp->rt_wait.elem = sizeof(struct an_rt_wait);
	qp->next = t->qp_list;
	t->qp_list = qp;
	t->c_qp = t->c_qpn = NULL;
	if (handle)
		an_map_put(&t->qps, handle, qp);
	an_map_put(&t->qpns, qpn + 1ULL, qp);
	return qp;
}

/* A QP first seen in a post or completion (the trace began after its creation). */
static struct an_qp *an_qp_find(struct an_trace *t, uint64_t handle, uint32_t qpn,
				bool create)
{
	if (t->c_qp && handle && t->c_qp->handle == handle)
		return t->c_qp;
	struct an_qp *qp = handle ? an_map_get(&t->qps, handle) : NULL;
	if (!qp)
		qp = an_map_get(&t->qpns, qpn + 1ULL);
	if (!qp && create)
		qp = an_qp_new(t, handle, qpn);
	if (qp && handle && qp->handle == handle && !qp->destroyed)
		t->c_qp = qp;
	return qp;
}

static void an_qp_history(struct an_qp *qp, uint64_t ts, uint32_t to, uint64_t mask,
			  int64_t ret, bool implicit)
{
	if (qp->n_hist == qp->cap_hist) {
		uint32_t nc = qp->cap_hist ? qp->cap_hist * 2 : 8;
		if (nc > 4096)
			return; /* a QP modified forever: keep the first ones */
		struct an_state_change *nh = realloc(qp->hist, nc * sizeof(*nh));
		if (!nh)
			return;
		qp->hist = nh;
		qp->cap_hist = nc;
	}
	struct an_state_change *h = &qp->hist[qp->n_hist++];
	h->ts = ts;
	h->from = (uint8_t)qp->state;
	h->to = (uint8_t)to;
	h->mask = mask;
	h->ret = ret;
	h->implicit = implicit;
}

static void an_try_pair(struct rbt_analyzer *an, struct an_qp *qp)
{
	if (qp->peer || !qp->have_rtr)
		return;
	for (int i = 0; i < an->n_traces; i++) {
		struct an_qp *o = an_map_get(&an->traces[i]->qpns, qp->dest_qpn + 1ULL);
		if (!o || o == qp || o->peer || !o->have_rtr || o->dest_qpn != qp->qpn)
			continue;
		qp->peer = o;
		o->peer = qp;
		return;
	}
}

static void an_on_qp_create(struct rbt_analyzer *an, struct an_trace *t,
			    const struct rbt_event *ev)
{
	const struct rbt_ev_qp_create *p = &ev->u.qp_create;
	if (p->ret != 0 || !p->qp)
		return;
	struct an_qp *qp = an_qp_new(t, p->qp, (uint32_t)p->qp_num);
	if (!qp)
		return;
	qp->type = (uint32_t)p->qp_type;
	qp->state = IBV_QPS_RESET;
	qp->pd = p->pd;
	qp->max_send_wr = p->max_send_wr;
	qp->max_recv_wr = p->max_recv_wr;
	qp->max_inline = p->max_inline_data;
	qp->sq_sig_all = p->sq_sig_all;
	qp->create_ts = ev->ts;
	qp->scq = p->send_cq ? an_cq_get(t, p->send_cq) : NULL;
	qp->rcq = p->recv_cq ? an_cq_get(t, p->recv_cq) : NULL;
	qp->srq = p->srq ? an_map_get(&t->srqs, p->srq) : NULL;
	for (int k = 0; k < 2; k++) {
		struct an_cq *cq = k ? qp->rcq : qp->scq;
		if (cq && (k == 0 || cq != qp->scq) && cq->n_qps < 4)
			cq->qps[cq->n_qps++] = qp;
	}
	if (qp->scq)
		qp->scq->capacity += p->max_send_wr;
	if (qp->rcq && !qp->srq)
		qp->rcq->capacity += p->max_recv_wr;
	an_qp_history(qp, ev->ts, IBV_QPS_RESET, 0, 0, false);
	qp->hist[0].from = IBV_QPS_RESET;
}

static void an_on_qp_modify(struct rbt_analyzer *an, struct an_trace *t,
			    const struct rbt_event *ev)
{
	const struct rbt_ev_qp_modify *p = &ev->u.qp_modify;
	struct an_qp *qp = an_map_get(&t->qps, p->qp);
	if (!qp)
		return;
	uint64_t m = p->attr_mask;
	uint64_t when = p->ts_exit ? p->ts_exit : ev->ts;
	if (p->ret != 0) {
		an_qp_history(qp, when, qp->state, m, p->ret, false);
		return;
	}
	if (m & IBV_QP_STATE) {
		an_qp_history(qp, when, (uint32_t)p->qp_state, m, 0, false);
		qp->state = (uint32_t)p->qp_state;
	}
	if (m & IBV_QP_PATH_MTU)
		qp->path_mtu = p->path_mtu;
	if (m & IBV_QP_DEST_QPN)
		qp->dest_qpn = p->dest_qp_num;
	if (m & IBV_QP_RQ_PSN)
		qp->rq_psn = p->rq_psn;
	if (m & IBV_QP_SQ_PSN)
		qp->sq_psn = p->sq_psn;
	if (m & IBV_QP_MIN_RNR_TIMER)
		qp->min_rnr_timer = p->min_rnr_timer;
	if (m & IBV_QP_TIMEOUT)
		qp->timeout = p->timeout;
	if (m & IBV_QP_RETRY_CNT)
		qp->retry_cnt = p->retry_cnt;
	if (m & IBV_QP_RNR_RETRY)
		qp->rnr_retry = p->rnr_retry;
	if (m & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = p->max_rd_atomic;
	if (m & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->max_dest_rd_atomic = p->max_dest_rd_atomic;
	if (m & IBV_QP_AV)
		qp->ah_dlid = p->ah_dlid;
	if (m & IBV_QP_PORT)
		qp->port = p->port_num;
	if ((m & IBV_QP_STATE) && p->qp_state == IBV_QPS_RTR) {
		qp->have_rtr = true;
		qp->rtr_ts = when;
		an_try_pair(an, qp);
	}
	if ((m & IBV_QP_STATE) && p->qp_state == IBV_QPS_RTS) {
		qp->have_rts = true;
		qp->rts_ts = when;
	}
	if ((m & IBV_QP_STATE) && p->qp_state == IBV_QPS_ERR && !qp->modified_to_err) {
		qp->modified_to_err = true;
		qp->modify_to_err_ts = when;
	}
}

static void an_on_mr_reg(struct rbt_analyzer *an, struct an_trace *t,
			 const struct rbt_event *ev)
{
	const struct rbt_ev_mr_reg *p = &ev->u.mr_reg;
	if (p->ret != 0 || !p->mr)
		return;
	t->mr_regs++;
	if (t->any_post) {
		t->mr_reg_cand_total++;
		if (t->n_mr_reg_cand < 8)
			t->mr_reg_cand[t->n_mr_reg_cand++] = ev->ts;
		if (p->ts_exit > ev->ts)
			t->mr_traffic_ns += an_ns(t, (double)(p->ts_exit - ev->ts));
	}
	struct an_mr *mr = an_map_get(&t->mrs, p->mr);
	if (!mr) {
		mr = calloc(1, sizeof(*mr));
		if (!mr)
			return;
		if (an_map_put(&t->mrs, p->mr, mr)) {
			free(mr);
			return;
		}
	} else {
		/* the handle registered again without a dereg we saw: drop its old keys */
		if (an_map_get(&t->mr_lkeys, mr->lkey + 1ULL) == mr)
			an_map_del(&t->mr_lkeys, mr->lkey + 1ULL);
		if (an_map_get(&t->mr_rkeys, mr->rkey + 1ULL) == mr)
			an_map_del(&t->mr_rkeys, mr->rkey + 1ULL);
		memset(mr, 0, sizeof(*mr));
	}
	mr->handle = p->mr;
	mr->pd = p->pd;
	mr->addr = p->addr;
	mr->length = p->length;
	mr->access = p->access;
	mr->lkey = p->lkey;
	mr->rkey = p->rkey;
	mr->reg_ts = ev->ts;
	an_map_put(&t->mr_lkeys, p->lkey + 1ULL, mr);
	an_map_put(&t->mr_rkeys, p->rkey + 1ULL, mr);
}

static void an_on_mr_dereg(struct rbt_analyzer *an, struct an_trace *t,
			   const struct rbt_event *ev)
{
	const struct rbt_ev_mr_dereg *p = &ev->u.mr_dereg;
	if (p->ret != 0)
		return;
	struct an_mr *mr = an_map_del(&t->mrs, p->mr);
	if (!mr)
		return;
	if (t->any_post) {
		t->mr_dereg_cand_total++; /* confirmed by a later post */
		if (p->ts_exit > ev->ts)
			t->mr_traffic_ns += an_ns(t, (double)(p->ts_exit - ev->ts));
	}
	for (uint32_t i = 0; i < mr->n_users; i++) {
		struct an_qp *qp = mr->users[i];
		if (qp->destroyed)
			continue;
		if (!t->early_dereg++) {
			t->early_dereg_ts = ev->ts;
			t->early_dereg_addr = mr->addr;
			t->early_dereg_len = mr->length;
			t->early_dereg_lkey = mr->lkey;
			t->early_dereg_qpn = qp->qpn;
			t->early_dereg_outstanding = qp->sq.n || qp->rq.n;
		}
		break;
	}
	if (an_map_get(&t->mr_lkeys, mr->lkey + 1ULL) == mr)
		an_map_del(&t->mr_lkeys, mr->lkey + 1ULL);
	if (an_map_get(&t->mr_rkeys, mr->rkey + 1ULL) == mr)
		an_map_del(&t->mr_rkeys, mr->rkey + 1ULL);
	struct an_qp *q;
	for (q = t->qp_list; q; q = q->next)
		if (q->last_mr == mr) {
			q->last_mr = NULL;
			q->last_lkey = 0;
		}
	free(mr);
}

static void an_mr_use(struct an_trace *t, struct an_qp *qp, uint64_t lkey)
{
	struct an_mr *mr;
	if (qp->last_mr && qp->last_lkey == lkey)
		return; /* common case: the same buffer again */
	mr = an_map_get(&t->mr_lkeys, lkey + 1ULL);
	if (!mr)
		return;
	qp->last_mr = mr;
	qp->last_lkey = lkey;
	for (uint32_t i = 0; i < mr->n_users; i++)
		if (mr->users[i] == qp)
			return;
	if (mr->n_users < 4)
		mr->users[mr->n_users++] = qp;
}

static void an_drain_deferred(struct rbt_analyzer *an, struct an_trace *t, bool final);

static void an_on_clock(struct rbt_analyzer *an, struct an_trace *t,
			const struct rbt_event *ev)
{
	const struct rbt_ev_clock_sample *p = &ev->u.clock_sample;
	if (!p->ctx || !p->nic_ts)
		return;
	struct an_clock *c = an_map_get(&t->clocks, p->ctx);
	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c || an_map_put(&t->clocks, p->ctx, c)) {
			free(c);
			return;
		}
		c->ctx = p->ctx;
		c->x0 = p->nic_ts;
		c->y0 = ev->ts;
		c->nic_hz = (double)p->nic_hz;
		c->b = c->nic_hz > 0 ? (double)t->hdr.clock_hz / c->nic_hz : 0;
		if (!t->first_clock)
			t->first_clock = c;
	}
	double x = (double)(int64_t)(p->nic_ts - c->x0);
	double y = (double)(int64_t)(ev->ts - c->y0);
	if (c->n >= 1 && c->b > 0) {
		/* how wrong the model as used so far was: the honest residual */
		double pred = c->my + c->b * (x - c->mx);
		double r = fabs(y - pred);
		if (r > c->max_resid_ticks)
			c->max_resid_ticks = r;
	}
	/* Welford-style running fit, stable with large tick counts */
	c->n++;
	double dx = x - c->mx;
	double dy = y - c->my;
	c->mx += dx / (double)c->n;
	c->my += dy / (double)c->n;
	c->cxy += dx * (y - c->my);
	c->m2x += dx * (x - c->mx);
	c->m2y += dy * (y - c->my);
	if (c->n >= 2 && c->m2x > 0)
		c->b = c->cxy / c->m2x;
	if (t->deferred.n)
		an_drain_deferred(an, t, false);
}

/* Host ticks of a NIC timestamp, or false when the clock of that device is unknown. */
static bool an_nic_to_host(const struct an_clock *c, uint64_t nic, double *host)
{
	if (!c || !c->n || c->b <= 0)
		return false;
	double x = (double)(int64_t)(nic - c->x0);
	*host = (double)c->y0 + c->my + c->b * (x - c->mx);
	return true;
}

/* ---- statistics ---- */

static struct an_group *an_group_get(struct rbt_analyzer *an, struct an_qp *qp,
				     int opcode, uint64_t bytes)
{
	int slot = an_opcode_slot(opcode), sc = an_size_class(bytes);
	struct an_group **g = &qp->groups[slot * AN_SIZE_CLASSES + sc];
	if (*g)
		return *g;
	if (an->n_groups == an->cap_groups) {
		uint32_t nc = an->cap_groups ? an->cap_groups * 2 : 64;
		struct an_group **ng = realloc(an->groups, nc * sizeof(*ng));
		if (!ng)
			return NULL;
		an->groups = ng;
		an->cap_groups = nc;
	}
	*g = calloc(1, sizeof(**g));
	if (!*g)
		return NULL;
	(*g)->qp = qp;
	(*g)->opcode = an_slot_opcode(slot);
	(*g)->size_class = sc;
	an->groups[an->n_groups++] = *g;
	return *g;
}

static void an_cq_track(struct an_cq *cq, int delta, uint64_t ts)
{
	if (!cq)
		return;
	cq->outstanding += delta;
	if (cq->outstanding > cq->peak) {
		cq->peak = cq->outstanding;
		cq->peak_ts = ts;
	}
}

/* ---- round trips across the two ends of a connection ----
 * Messages that consume a receive (SEND, WRITE_WITH_IMM, ...) are matched k-th to k-th
 * between a QP's posts and its peer's receive completions. A message posted by a
 * side that had just received one is the response to it; when that response arrives
 * back, the round trip is measured entirely on the requester's clock and split with
 * the responder's own measurement of its application time (its clock only). */

static bool an_consumes_recv(int op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
	       op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_INV;
}

static void an_rt_delivered(struct an_qp *rx, const struct an_rt_msg *m,
			    uint64_t poll_exit, uint64_t recv_post_exit)
{
	struct an_trace *t = rx->t;
	struct an_qp *tx = rx->peer;
	/* a receive posted after the message was sent: the message waited for it (RNR
	 * NAKs and retries on a real NIC) */
	double late = an_aligned_ns(t, (double)recv_post_exit) -
		      an_aligned_ns(tx->t, (double)(m->post_ts + m->post_dur));
	an_hist_add(&rx->late_recv, late > 0 ? (uint64_t)late : 0);
	if (late > rx->late_max_ns) {
		rx->late_max_ns = late;
		rx->late_max_ts = recv_post_exit;
	}
	/* one-way time on the aligned clocks: its minimum per direction refines the
	 * alignment (NTP-style), see docs/report.md */
	double ow = an_aligned_ns(t, (double)poll_exit) -
		    an_aligned_ns(tx->t, (double)m->post_ts);
	if (!rx->have_min_in || ow < rx->min_in_ns) {
		rx->min_in_ns = ow;
		rx->have_min_in = true;
	}
	if (m->resp_to < 0 || !rx->rt_msgs)
		return;
	const struct an_rt_msg *req = &rx->rt_msgs[(uint64_t)m->resp_to % AN_RT_N];
	if (req->seq != (uint64_t)m->resp_to || poll_exit < req->post_ts)
		return;
	/* the round trip on the requester's clock, split with the responder's own
	 * measurement of its application time (its clock only) */
	double rtt = (double)(poll_exit - req->post_ts) * t->ns_per_tick;
	double post = (double)req->post_dur * t->ns_per_tick;
	double rest = rtt - post - m->remote_app_ns;
	an_hist_add(&rx->rt_rtt, (uint64_t)rtt);
	an_hist_add(&rx->rt_local_post, (uint64_t)post);
	an_hist_add(&rx->rt_remote_app,
		    m->remote_app_ns > 0 ? (uint64_t)m->remote_app_ns : 0);
	an_hist_add(&rx->rt_nic_wire, rest > 0 ? (uint64_t)rest : 0);
	rx->rt_count++;
}

/* Messages are matched k-th to k-th between a QP's sends that consume a receive and
 * its peer's receive completions (RC delivers in order). Whether a send answers the
 * peer's last message is decided in the sender's own event order, so the order in
 * which the two traces are read does not matter. */
static void an_rt_send(struct an_qp *qp, uint64_t post_ts, uint64_t post_exit)
{
	struct an_qp *peer = qp->peer;
	if (!peer)
		return;
	if (!qp->rt_msgs) {
		qp->rt_msgs = malloc(AN_RT_N * sizeof(*qp->rt_msgs));
		if (!qp->rt_msgs)
			return;
		for (int i = 0; i < AN_RT_N; i++)
			qp->rt_msgs[i].seq = UINT64_MAX;
	}
	uint64_t seq = qp->rt_send_seq++;
	struct an_rt_msg *m = &qp->rt_msgs[seq % AN_RT_N];
	m->seq = seq;
	m->post_ts = post_ts;
	m->post_dur = post_exit - post_ts;
	m->resp_to = -1;
	m->remote_app_ns = 0;
	if (qp->rt_pending && post_exit >= qp->rt_req_poll_exit) {
		m->resp_to = (int64_t)qp->rt_req_seq;
		m->remote_app_ns =
			(double)(post_exit - qp->rt_req_poll_exit) * qp->t->ns_per_tick;
		qp->rt_pending = false;
	}
	/* the peer's receive of it may have been read already */
	while (peer->rt_wait.n) {
		struct an_rt_wait *w = an_ring_at(&peer->rt_wait, 0);
		if (w->seq > seq)
			break;
		uint64_t ws = w->seq, pe = w->poll_exit;
		an_ring_drop(&peer->rt_wait, 1);
		uint64_t rp = w->recv_post_exit;
		if (ws == seq) {
			an_rt_delivered(peer, m, pe, rp);
			break;
		}
	}
}

static void an_rt_recv(struct an_qp *rx, uint64_t poll_exit, uint64_t recv_post_exit)
{
	struct an_qp *tx = rx->peer;
	if (!tx)
		return;
	uint64_t j = rx->rt_recv_seq++;
	rx->rt_pending = true;
	rx->rt_req_poll_exit = poll_exit;
	rx->rt_req_seq = j;
	if (j < tx->rt_send_seq) {
		const struct an_rt_msg *m =
			tx->rt_msgs ? &tx->rt_msgs[j % AN_RT_N] : NULL;
		if (m && m->seq == j)
			an_rt_delivered(rx, m, poll_exit, recv_post_exit);
		return;
	}
	if (rx->rt_wait.n >= AN_RT_MAX)
		an_ring_drop(&rx->rt_wait, 1);
	struct an_rt_wait *w = an_ring_push(&rx->rt_wait);
	if (w) {
		w->seq = j;
		w->poll_exit = poll_exit;
		w->recv_post_exit = recv_post_exit;
	}
}

/* ---- attribution ---- */

#define AN_DEFER_MAX 65536

/* Holds a WR whose completion has a NIC timestamp but whose device has no clock
 * sample yet; false when the queue is full (the WR then gets a bound). */
static bool an_defer(struct an_trace *t, struct an_qp *qp, const struct an_swr *w,
		     const struct an_rwr *r, const struct an_comp *c)
{
	if (t->deferred.n >= AN_DEFER_MAX)
		return false;
	t->deferred.elem = sizeof(struct an_deferred);
	struct an_deferred *d = an_ring_push(&t->deferred);
	if (!d)
		return false;
	memset(d, 0, sizeof(*d));
	d->qp = qp;
	if (w)
		d->w = *w;
	if (r)
		d->r = *r;
	d->recv = r != NULL;
	d->c = *c;
	return true;
}

static void an_attribute_send(struct rbt_analyzer *an, struct an_trace *t,
			      struct an_qp *qp, const struct an_swr *w,
			      const struct an_comp *c, uint32_t n, uint32_t nsig);
static void an_attribute_recv(struct rbt_analyzer *an, struct an_trace *t,
			      struct an_qp *qp, const struct an_rwr *r,
			      const struct an_comp *c);

/* Attributes the deferred WRs now that a clock model may exist; at the end (final)
 * the ones still unmapped get bounds. */
static void an_drain_deferred(struct rbt_analyzer *an, struct an_trace *t, bool final)
{
	while (t->deferred.n) {
		struct an_deferred d = *(struct an_deferred *)an_ring_at(&t->deferred, 0);
		struct an_clock *clk = an_map_get(&t->clocks, d.c.ctx);
		if (!clk)
			clk = t->first_clock;
		d.c.exact = an_nic_to_host(clk, d.c.hw_ts, &d.c.host);
		if (!d.c.exact && !final)
			return;
		if (!d.c.exact)
			t->nic_unmapped++;
		d.c.hw_ts = 0; /* never deferred twice */
		an_ring_drop(&t->deferred, 1);
		if (d.recv)
			an_attribute_recv(an, t, d.qp, &d.r, &d.c);
		else
			an_attribute_send(an, t, d.qp, &d.w, &d.c, 1, d.w.signaled);
	}
}

static void an_attribute_send(struct rbt_analyzer *an, struct an_trace *t,
			      struct an_qp *qp, const struct an_swr *w,
			      const struct an_comp *c, uint32_t n, uint32_t nsig)
{
	/* n: identical WRs of one chain retired by one completion (same phases), nsig
	 * of them signaled (they differ in nothing else; never when deferred) */
	if (!c->exact && c->hw_ts) {
		uint32_t k = 0;
		while (k < n && an_defer(t, qp, w, NULL, c))
			k++;
		if (k == n)
			return;
		n -= k;
	}
	struct an_group *g = an_group_get(an, qp, w->opcode, w->bytes);
	an->counts.wrs_completed += n;
	if (!g)
		return;
	g->wrs += n;
	g->bytes += w->bytes * n;
	g->signaled += nsig;
	g->inlined += w->inl * n;
	if (c->status)
		g->errors += n;
	uint64_t pe = w->post_exit > w->post_ts ? w->post_exit : w->post_ts;
	uint64_t poll_exit = c->poll_exit > pe ? c->poll_exit : pe;
	an_hist_add_n(&g->h[RBT_PHASE_POST], an_ns(t, (double)w->share), n);
	an_hist_add_n(&g->h[RBT_PHASE_E2E],
		      an_ns(t, (double)w->share + (double)(poll_exit - pe)), n);
	if (c->exact) {
		double comp = c->host;
		if (comp < (double)w->post_ts || comp > (double)c->poll_exit) {
			an->counts.nic_outside_bound += n;
			t->nic_outside += n;
		}
		if (comp < (double)pe)
			comp = (double)pe;
		if (comp > (double)poll_exit)
			comp = (double)poll_exit;
		an_hist_add_n(&g->h[RBT_PHASE_NIC], an_ns(t, comp - (double)pe), n);
		an_hist_add_n(&g->h[RBT_PHASE_POLL], an_ns(t, (double)poll_exit - comp),
			      n);
		g->exact += n;
		an->counts.wrs_nic_exact += n;
	} else {
		uint64_t lo = c->lo > w->post_ts ? c->lo : w->post_ts;
		if (lo > poll_exit)
			lo = poll_exit;
		an_hist_add_n(&g->h[RBT_PHASE_NIC_LO],
			      lo > pe ? an_ns(t, (double)(lo - pe)) : 0, n);
		an_hist_add_n(&g->h[RBT_PHASE_NIC_HI], an_ns(t, (double)(poll_exit - pe)),
			      n);
		an_hist_add_n(&g->h[RBT_PHASE_POLL_HI],
			      an_ns(t, (double)(poll_exit - lo)), n);
		g->bounded += n;
		an->counts.wrs_bounded += n;
	}
	an_rate_add(&t->rate, an_aligned_u64(t, (double)c->poll_exit), n, w->bytes * n);
	if (an->opts.perfetto)
		an_pf_wr(an, t, qp, w, false, c);
}

static void an_attribute_recv(struct rbt_analyzer *an, struct an_trace *t,
			      struct an_qp *qp, const struct an_rwr *r,
			      const struct an_comp *c)
{
	if (!c->exact && c->hw_ts && an_defer(t, qp, NULL, r, c))
		return;
	struct an_group *g = an_group_get(an, qp, 128, c->byte_len);
	an->counts.recvs_completed++;
	if (!g)
		return;
	g->wrs++;
	g->bytes += c->byte_len;
	if (c->status)
		g->errors++;
	uint64_t poll_exit = c->poll_exit > r->post_exit ? c->poll_exit : r->post_exit;
	an_hist_add(&g->h[RBT_PHASE_RECV_WAIT],
		    an_ns(t, (double)(poll_exit - r->post_exit)));
	if (c->exact) {
		double comp = c->host;
		if (comp < (double)r->post_ts)
			comp = (double)r->post_ts;
		if (comp > (double)poll_exit)
			comp = (double)poll_exit;
		an_hist_add(&g->h[RBT_PHASE_RECV_POLL],
			    an_ns(t, (double)poll_exit - comp));
		g->exact++;
	} else {
		uint64_t lo = c->lo > r->post_ts ? c->lo : r->post_ts;
		if (lo > poll_exit)
			lo = poll_exit;
		an_hist_add(&g->h[RBT_PHASE_RECV_POLL_HI],
			    an_ns(t, (double)(poll_exit - lo)));
		g->bounded++;
	}
	an_rate_add(&t->rate, an_aligned_u64(t, (double)c->poll_exit), 1, c->byte_len);
	if (an->opts.perfetto) {
		struct an_swr w = { .wr_id = r->wr_id,
				    .post_ts = r->post_ts,
				    .post_exit = r->post_exit,
				    .bytes = c->byte_len,
				    .tid = r->tid,
				    .opcode = 128 };
		an_pf_wr(an, t, qp, &w, true, c);
	}
}

static void an_note_error(struct an_qp *qp, const struct an_comp *c,
			  const struct an_swr *w)
{
	if (!c->status)
		return;
	if (c->status == IBV_WC_WR_FLUSH_ERR) {
		qp->flushes++;
	} else if (!qp->err_seen) {
		qp->err_seen = true;
		qp->first_err = *c;
		if (qp->peer) {
			/* the peer's receive queue as the traces show it now */
			qp->first_err_peer_known = true;
			qp->first_err_peer_rq =
				qp->peer->srq ? qp->peer->srq->rq.n : qp->peer->rq.n;
			qp->first_err_peer_recvs = qp->peer->recv_wrs;
		}
		if (w) {
			qp->first_err_wr_opcode = w->opcode;
			qp->first_err_wr_bytes = w->bytes;
			qp->first_err_remote_addr = w->remote_addr;
			qp->first_err_rkey = w->rkey;
			qp->first_err_lkey = w->lkey;
			qp->first_err_sge_addr = w->sge_addr;
		} else {
			qp->first_err_wr_opcode = 255;
		}
	}
	if (qp->state != IBV_QPS_ERR) {
		an_qp_history(qp, c->poll_ts, IBV_QPS_ERR, 0, 0, true);
		qp->state = IBV_QPS_ERR;
	}
}

/* Completes the send WR of c and the unsignaled ones before it. */
static bool an_complete_send(struct rbt_analyzer *an, struct an_trace *t,
			     struct an_qp *qp, const struct an_comp *c)
{
	struct an_ring *r = &qp->sq;
	uint32_t i;
	/* only a signaled WR completes successfully: unsignaled ones with the same
	 * wr_id (perftest uses one wr_id for all) are retired with it, not by it */
	for (i = 0; i < r->n; i++) {
		const struct an_swr *x = an_ring_at(r, i);
		if (x->wr_id == c->wr_id && (x->signaled || c->status))
			break;
	}
	if (i == r->n)
		return false;
	struct an_swr *w = an_ring_at(r, i);
	an_note_error(qp, c, w);
	if (w->signaled)
		an_cq_track(qp->scq, -1, c->poll_ts);
	/* unsignaled WRs before it complete with it; a signaled one stays */
	bool all_unsig = true;
	for (uint32_t k = 0; k < i; k++)
		if (((struct an_swr *)an_ring_at(r, k))->signaled)
			all_unsig = false;
	struct an_comp cu = *c;
	cu.status = c->status == IBV_WC_SUCCESS ? 0 : c->status;
	/* A chain's unsignaled WRs and the signaled one that completes them are
	 * attributed together (one call, not two), unless they may be deferred one by
	 * one to wait for a clock sample (an_defer keeps each WR's own flags). */
	bool may_defer = !cu.exact && cu.hw_ts;
	for (uint32_t k = 0; k <= i;) {
		struct an_swr *x = an_ring_at(r, k);
		if (k < i && x->signaled) {
			k++;
			continue;
		}
		/* the WRs of one chain alike in every phase are attributed at once (not
		 * with a timeline: each WR is a slice there) */
		uint32_t m = 1, nsig = x->signaled;
		while (!an->opts.perfetto && k + m <= i) {
			struct an_swr *y = an_ring_at(r, k + m);
			if (y->post_ts != x->post_ts || y->opcode != x->opcode ||
			    y->bytes != x->bytes || y->inl != x->inl ||
			    (y->signaled && k + m < i) ||
			    (y->signaled != x->signaled && may_defer))
				break;
			nsig += y->signaled;
			m++;
		}
		an_attribute_send(an, t, qp, x, &cu, m, nsig);
		k += m;
	}
	if (all_unsig) {
		an_ring_drop(r, i + 1);
	} else {
		for (int k = (int)i; k >= 0; k--)
			if (k == (int)i || !((struct an_swr *)an_ring_at(r, k))->signaled)
				an_ring_remove(r, (uint32_t)k);
	}
	an->tracked_wrs -= i + 1;
	return true;
}

/* An XRC TGT QP has no SRQ of its own: the sender picked one of the domain's
 * XRC SRQs, so the receive is the one of any SRQ of the trace posted with this
 * wr_id. */
static struct an_ring *an_xrc_ring(struct an_trace *t, uint64_t wr_id)
{
	AN_MAP_FOREACH(&t->srqs, k)
	{
		struct an_ring *r = &((struct an_srq *)t->srqs.vals[k])->rq;
		for (uint32_t i = 0; i < r->n; i++)
			if (((struct an_rwr *)an_ring_at(r, i))->wr_id == wr_id)
				return r;
	}
	return NULL;
}

static bool an_complete_recv(struct rbt_analyzer *an, struct an_trace *t,
			     struct an_qp *qp, const struct an_comp *c)
{
	struct an_ring *r = qp->srq ? &qp->srq->rq : &qp->rq;
	bool xrc = !qp->srq && qp->type == IBV_QPT_XRC_RECV;
	uint32_t i;
	if (xrc && !(r = an_xrc_ring(t, c->wr_id)))
		return false;
	for (i = 0; i < r->n; i++)
		if (((struct an_rwr *)an_ring_at(r, i))->wr_id == c->wr_id)
			break;
	if (i == r->n)
		return false;
	struct an_rwr rw = *(struct an_rwr *)an_ring_at(r, i);
	an_ring_remove(r, i);
	an->tracked_wrs--;
	an_note_error(qp, c, NULL);
	if (!qp->srq && !xrc)
		an_cq_track(qp->rcq, -1, c->poll_ts);
	if (!qp->srq && !xrc && r->n == 0) {
		qp->rq_empty = true;
		qp->rq_empty_since = c->poll_exit;
		qp->rq_empty_count++;
	}
	if (!c->status)
		an_rt_recv(qp, c->poll_exit, rw.post_exit);
	an_attribute_recv(an, t, qp, &rw, c);
	return true;
}

static bool an_in_ring_send(struct an_qp *qp, uint64_t wr_id)
{
	for (uint32_t i = 0; i < qp->sq.n; i++)
		if (((struct an_swr *)an_ring_at(&qp->sq, i))->wr_id == wr_id)
			return true;
	return false;
}

static inline uint64_t an_park_bit(uint64_t wr_id)
{
	return 1ull << ((wr_id * 0x9e3779b97f4a7c15ull) >> 58);
}

static void an_park_mask(struct an_qp *qp)
{
	qp->park_mask = 0;
	for (uint32_t i = 0; i < qp->n_parked; i++)
		qp->park_mask |= an_park_bit(qp->parked[i].c.wr_id);
}

/* Parked completions whose post never came (lost events) would slow every post:
 * the ones 10 s older than now are given up and counted as unmatched. */
static void an_park_expire(struct rbt_analyzer *an, struct an_qp *qp, uint64_t now)
{
	uint64_t horizon = (uint64_t)(10e9 / qp->t->ns_per_tick);
	for (uint32_t i = 0; i < qp->n_parked;) {
		if (qp->parked[i].c.poll_exit + horizon < now) {
			qp->parked[i] = qp->parked[--qp->n_parked];
			an->counts.unmatched_completions++;
			continue;
		}
		i++;
	}
	an_park_mask(qp);
}

static void an_park(struct rbt_analyzer *an, struct an_qp *qp, const struct an_comp *c,
		    bool recv)
{
	if (qp->n_parked >= AN_PARK_MAX)
		an_park_expire(an, qp, c->poll_ts);
	if (qp->n_parked >= AN_PARK_MAX) {
		an->counts.unmatched_completions++;
		return;
	}
	if (qp->n_parked == qp->cap_parked) {
		uint32_t nc = qp->cap_parked ? qp->cap_parked * 2 : 8;
		struct an_parked *np = realloc(qp->parked, nc * sizeof(*np));
		if (!np) {
			an->counts.unmatched_completions++;
			return;
		}
		qp->parked = np;
		qp->cap_parked = nc;
	}
	qp->parked[qp->n_parked].c = *c;
	qp->parked[qp->n_parked].recv = recv;
	qp->n_parked++;
	qp->park_mask |= an_park_bit(c->wr_id);
}

static void an_unpark(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp)
{
	for (uint32_t i = 0; i < qp->n_parked;) {
		struct an_parked p = qp->parked[i];
		bool ok = p.recv ? an_complete_recv(an, t, qp, &p.c)
				 : an_complete_send(an, t, qp, &p.c);
		if (ok) {
			qp->parked[i] = qp->parked[--qp->n_parked];
			continue;
		}
		i++;
	}
	an_park_mask(qp);
}

static void an_on_post_send(struct rbt_analyzer *an, struct an_trace *t,
			    const struct rbt_event *ev)
{
	const struct rbt_ev_post_send *p = &ev->u.post_send;
	struct an_qp *qp = an_qp_find(t, p->qp, (uint32_t)p->qp_num, true);
	if (!qp)
		return;
	t->posts++;
	if (!t->any_post) {
		t->any_post = true;
		t->first_post_ts = ev->ts;
	}
	if (ev->ts > t->last_post_ts) {
		t->last_post_ts = ev->ts;
		/* registrations seen so far happened before this post: on the data path */
		t->mr_regs_traffic = t->mr_reg_cand_total;
		t->mr_deregs_traffic = t->mr_dereg_cand_total;
	}
	uint32_t n = p->n_wrs, posted = n;
	if (p->ret != 0) {
		t->post_fail++;
		posted = p->bad_wr < n ? (uint32_t)p->bad_wr : 0;
	}
	if (qp->state != IBV_QPS_RTS && qp->state != AN_STATE_UNKNOWN) {
		qp->bad_state_posts++;
		if (qp->n_bad_state < 8) {
			qp->bad_state_ts[qp->n_bad_state] = ev->ts;
			qp->bad_state_state[qp->n_bad_state] = (uint8_t)qp->state;
			qp->bad_state_recv[qp->n_bad_state] = false;
			qp->bad_state_ret[qp->n_bad_state] = p->ret;
			qp->n_bad_state++;
		}
	}
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	if (an->opts.perfetto)
		an_pf_call(an, t, ev->stream, "ibv_post_send", ev->ts, exit, NULL);
	if (!posted)
		return;
	qp->posts++;
	qp->post_wrs += posted;
	if (posted > qp->max_chain)
		qp->max_chain = posted;
	if (qp->sq.n)
		qp->posts_busy++;
	uint64_t posted_bits = 0;
	uint64_t share = (exit - ev->ts) / posted;
	for (uint32_t i = 0; i < posted; i++) {
		const struct rbt_send_wr *wr = &p->wrs[i];
		bool sig = (wr->send_flags & IBV_SEND_SIGNALED) || qp->sq_sig_all;
		bool inl = wr->send_flags & IBV_SEND_INLINE;
		uint64_t bytes = 0;
		for (uint32_t s = 0; s < wr->n_sges; s++)
			bytes += wr->sges[s].length;
		int op = (int)wr->opcode;
		bool data = op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
			    op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
		if (data && qp->max_inline > 0 && bytes > 0 && bytes <= qp->max_inline) {
			qp->inline_eligible++;
			if (!inl)
				qp->inline_missed++;
		}
		if (!inl && bytes >= 256 && wr->n_sges) {
			qp->data_wrs_256++;
			for (uint32_t s = 0; s < wr->n_sges; s++)
				if (wr->sges[s].addr & 63) {
					qp->unaligned++;
					break;
				}
		}
		if ((op == IBV_WR_ATOMIC_CMP_AND_SWP ||
		     op == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
		    (wr->remote_addr & 7)) {
			if (!qp->unaligned_atomic++)
				qp->unaligned_atomic_addr = wr->remote_addr;
		}
		if (!inl)
			for (uint32_t s = 0; s < wr->n_sges; s++)
				an_mr_use(t, qp, wr->sges[s].lkey);
		struct an_swr *w = an_ring_push(&qp->sq);
		if (!w)
			continue;
		w->wr_id = wr->wr_id;
		w->post_ts = ev->ts;
		w->post_exit = exit;
		w->share = share;
		w->bytes = bytes;
		w->opcode = (uint8_t)op;
		w->signaled = sig;
		w->inl = inl;
		w->tid = ev->stream;
		w->remote_addr = wr->remote_addr;
		w->rkey = wr->rkey;
		w->lkey = wr->n_sges ? wr->sges[0].lkey : 0;
		w->sge_addr = wr->n_sges ? wr->sges[0].addr : 0;
		w->flow = 0;
		if (an->opts.perfetto) {
			w->flow = ++an->flow_seq;
			an_pf_flow_start(an, t, ev->stream, ev->ts, w->flow);
		}
		qp->post_wrs_signaled += sig;
		qp->post_bytes += bytes;
		qp->inlined += inl;
		if (sig)
			an_cq_track(qp->scq, 1, ev->ts);
		if (++an->tracked_wrs > an->counts.peak_tracked_wrs)
			an->counts.peak_tracked_wrs = an->tracked_wrs;
		if (an_consumes_recv(op))
			an_rt_send(qp, ev->ts, exit);
		posted_bits |= an_park_bit(wr->wr_id);
	}
	if (qp->n_parked && (posted_bits & qp->park_mask))
		an_unpark(an, t, qp);
}

static void an_push_recvs(struct rbt_analyzer *an, struct an_ring *r,
			  const struct rbt_event *ev, const struct rbt_recv_wr *wrs,
			  uint32_t posted, uint64_t exit)
{
	for (uint32_t i = 0; i < posted; i++) {
		struct an_rwr *w = an_ring_push(r);
		if (!w)
			return;
		w->wr_id = wrs[i].wr_id;
		w->post_ts = ev->ts;
		w->post_exit = exit;
		w->tid = ev->stream;
		if (++an->tracked_wrs > an->counts.peak_tracked_wrs)
			an->counts.peak_tracked_wrs = an->tracked_wrs;
	}
}

static void an_on_post_recv(struct rbt_analyzer *an, struct an_trace *t,
			    const struct rbt_event *ev)
{
	const struct rbt_ev_post_recv *p = &ev->u.post_recv;
	struct an_qp *qp = an_qp_find(t, p->qp, (uint32_t)p->qp_num, true);
	if (!qp)
		return;
	uint32_t n = p->n_wrs, posted = n;
	if (p->ret != 0) {
		t->post_fail++;
		posted = p->bad_wr < n ? (uint32_t)p->bad_wr : 0;
	}
	if (qp->state == IBV_QPS_RESET) {
		qp->bad_state_posts++;
		if (qp->n_bad_state < 8) {
			qp->bad_state_ts[qp->n_bad_state] = ev->ts;
			qp->bad_state_state[qp->n_bad_state] = (uint8_t)qp->state;
			qp->bad_state_recv[qp->n_bad_state] = true;
			qp->bad_state_ret[qp->n_bad_state] = p->ret;
			qp->n_bad_state++;
		}
	}
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	if (an->opts.perfetto)
		an_pf_call(an, t, ev->stream, "ibv_post_recv", ev->ts, exit, NULL);
	if (!posted)
		return;
	qp->recv_posts++;
	qp->recv_wrs += posted;
	if (qp->rq_empty) {
		qp->rq_empty = false;
		if (ev->ts > qp->rq_empty_since &&
		    ev->ts - qp->rq_empty_since > qp->rq_empty_longest) {
			qp->rq_empty_longest = ev->ts - qp->rq_empty_since;
			qp->rq_empty_longest_ts = qp->rq_empty_since;
		}
	}
	for (uint32_t i = 0; i < posted; i++)
		an_cq_track(qp->rcq, 1, ev->ts);
	an_push_recvs(an, &qp->rq, ev, p->wrs, posted, exit);
	uint64_t posted_bits = 0;
	for (uint32_t i = 0; i < posted; i++)
		posted_bits |= an_park_bit(p->wrs[i].wr_id);
	if (qp->n_parked && (posted_bits & qp->park_mask))
		an_unpark(an, t, qp);
}

static void an_on_post_srq_recv(struct rbt_analyzer *an, struct an_trace *t,
				const struct rbt_event *ev)
{
	const struct rbt_ev_post_srq_recv *p = &ev->u.post_srq_recv;
	struct an_srq *srq = an_map_get(&t->srqs, p->srq);
	if (!srq)
		return;
	uint32_t n = p->n_wrs, posted = n;
	if (p->ret != 0) {
		t->post_fail++;
		posted = p->bad_wr < n ? (uint32_t)p->bad_wr : 0;
	}
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	an_push_recvs(an, &srq->rq, ev, p->wrs, posted, exit);
	for (struct an_qp *qp = t->qp_list; qp; qp = qp->next)
		if (qp->srq == srq && qp->n_parked)
			an_unpark(an, t, qp);
}

static bool an_in_ring_send(struct an_qp *qp, uint64_t wr_id);

/* A completion without a QP number (an extended poll that did not read it): the QP of
 * its CQ, or among several the one with that wr_id outstanding. */
static struct an_qp *an_cq_qp_for(struct an_cq *cq, uint64_t wr_id)
{
	if (cq->n_qps == 1)
		return cq->qps[0];
	for (uint32_t i = 0; i < cq->n_qps; i++) {
		struct an_qp *qp = cq->qps[i];
		if (an_in_ring_send(qp, wr_id))
			return qp;
		struct an_ring *r = qp->srq ? &qp->srq->rq : &qp->rq;
		for (uint32_t k = 0; k < r->n; k++)
			if (((struct an_rwr *)an_ring_at(r, k))->wr_id == wr_id)
				return qp;
	}
	return NULL;
}

static void an_on_poll(struct rbt_analyzer *an, struct an_trace *t,
		       const struct rbt_event *ev)
{
	const struct rbt_ev_poll_cq *p = &ev->u.poll_cq;
	struct an_cq *cq =
		t->c_cq && t->c_cq->handle == p->cq ? t->c_cq : an_cq_get(t, p->cq);
	if (!cq)
		return;
	t->c_cq = cq;
	uint64_t exit = p->ts_exit >= ev->ts ? p->ts_exit : ev->ts;
	uint64_t count = p->count ? p->count : 1;
	if (p->n_wcs == 0) {
		t->polls += count;
		t->empty_polls += count;
		cq->polls += count;
		cq->empty_polls += count;
		/* Folded empty polls: the last one began about one poll's length before
		 * the fold's end; the CQE arrived after that. */
		uint64_t lo = exit - (exit - ev->ts) / count;
		if (!cq->have_drained || lo >= cq->drained_lo) {
			cq->have_drained = true;
			cq->drained_lo = lo;
			cq->drained_ts = ev->ts;
		}
		return;
	}
	t->polls++;
	cq->polls++;
	cq->polled_wcs += p->n_wcs;
	struct an_clock *clk = NULL;
	bool clk_looked = false;
	if (an->opts.perfetto) {
		char args[64];
		snprintf(args, sizeof(args), "{\"wcs\":%u}", p->n_wcs);
		an_pf_call(an, t, ev->stream, "ibv_poll_cq", ev->ts, exit, args);
	}
	for (uint32_t i = 0; i < p->n_wcs; i++) {
		const struct rbt_wc *wc = &p->wcs[i];
		struct an_comp c = { 0 };
		c.poll_ts = ev->ts;
		c.poll_exit = exit;
		c.poll_tid = ev->stream;
		c.status = wc->status;
		c.vendor_err = wc->vendor_err;
		c.byte_len = wc->byte_len;
		c.opcode = wc->opcode;
		c.wr_id = wc->wr_id;
		if (cq->have_drained && cq->drained_lo <= ev->ts)
			c.lo = cq->drained_lo;
		if (wc->hw_ts) {
			if (!clk_looked) {
				clk = an_map_get(&t->clocks, cq->ctx);
				if (!clk)
					clk = t->first_clock;
				clk_looked = true;
			}
			c.exact = an_nic_to_host(clk, wc->hw_ts, &c.host);
			c.hw_ts = wc->hw_ts;
			c.ctx = cq->ctx;
		}
		struct an_qp *qp = t->c_qpn && t->c_qpn->qpn == wc->qp_num
					   ? t->c_qpn
					   : an_map_get(&t->qpns, wc->qp_num + 1ULL);
		t->c_qpn = qp;
		if (!qp && !wc->qp_num)
			qp = an_cq_qp_for(cq, wc->wr_id);
		/* a receive on one of our XRC SRQs through another process's TGT
		 * QP (they share the XRC domain): that QP, known by number only */
		if (!qp && wc->qp_num && an_xrc_ring(t, wc->wr_id)) {
			qp = an_qp_new(t, 0, (uint32_t)wc->qp_num);
			if (qp)
				qp->type = IBV_QPT_XRC_RECV;
		}
		if (!qp) {
			an->counts.unmatched_completions++;
			continue;
		}
		bool recv;
		if (wc->status == IBV_WC_SUCCESS)
			recv = (wc->opcode & IBV_WC_RECV) != 0;
		else
			recv = !an_in_ring_send(qp, wc->wr_id);
		bool ok = recv ? an_complete_recv(an, t, qp, &c)
			       : an_complete_send(an, t, qp, &c);
		if (!ok)
			an_park(an, qp, &c, recv);
	}
	if (p->api == 0 && p->asked > p->n_wcs) {
		/* this poll emptied the CQ: later CQEs arrived after its start */
		cq->have_drained = true;
		cq->drained_lo = ev->ts;
		cq->drained_ts = ev->ts;
	}
}

static void an_on_async(struct rbt_analyzer *an, struct an_trace *t,
			const struct rbt_event *ev)
{
	const struct rbt_ev_async_event *p = &ev->u.async_event;
	if (p->ret != 0)
		return;
	t->async_events++;
	if (p->event_type == IBV_EVENT_CQ_ERR) {
		struct an_cq *cq = an_map_get(&t->cqs, p->element);
		t->cq_err_events++;
		if (cq && !cq->overrun) {
			cq->overrun = true;
			cq->overrun_ts = ev->ts;
		}
	}
}

/* Bytes this process has read so far: the reader uses pread(2), so this follows its
 * position in the files without an API for it. */
static uint64_t an_rchar(void)
{
	char buf[512];
	FILE *f = fopen("/proc/self/io", "r");
	uint64_t v = 0;
	if (!f)
		return 0;
	while (fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "rchar: %lu", &v) == 1)
			break;
	fclose(f);
	return v;
}

static void an_progress(struct rbt_analyzer *an)
{
	if (!an->progress_next)
		an->progress_rchar0 = an_rchar();
	an->progress_next = an->counts.events + (1u << 20);
	double frac = 0;
	if (an->opts.progress_bytes)
		frac = (double)(an_rchar() - an->progress_rchar0) /
		       (double)an->opts.progress_bytes;
	if (frac > 1)
		frac = 1;
	char bar[41];
	int n = (int)(frac * 40);
	for (int i = 0; i < 40; i++)
		bar[i] = i < n ? '#' : '.';
	bar[40] = 0;
	fprintf(stderr, "\rrbtrace report: [%s] %3.0f%% %.1f M events", bar, frac * 100,
		(double)an->counts.events / 1e6);
}

int rbt_analyzer_feed(struct rbt_analyzer *an, int trace, const struct rbt_event *ev)
{
	if (trace < 0 || trace >= an->n_traces || an->finished)
		return -EINVAL;
	an_set_origin(an);
	struct an_trace *t = an->traces[trace];
	t->events++;
	an->counts.events++;
	if (ev->ts) {
		if (!t->any_ts || ev->ts < t->min_ts)
			t->min_ts = ev->ts;
		if (ev->ts > t->max_ts)
			t->max_ts = ev->ts;
		t->any_ts = true;
	}
	switch (ev->type) {
	case RBT_EV_POST_SEND:
		an_on_post_send(an, t, ev);
		break;
	case RBT_EV_POLL_CQ:
		an_on_poll(an, t, ev);
		break;
	case RBT_EV_POST_RECV:
		an_on_post_recv(an, t, ev);
		break;
	case RBT_EV_POST_SRQ_RECV:
		an_on_post_srq_recv(an, t, ev);
		break;
	case RBT_EV_THREAD: {
		struct an_thread *th = an_thread_get(an, t, (uint32_t)ev->u.thread.tid);
		if (th && ev->u.thread.name && !th->name) {
			th->name = an_strdup(ev->u.thread.name);
			if (an->opts.perfetto)
				an_pf_thread(an, t, th);
		}
		break;
	}
	case RBT_EV_CLOCK_SAMPLE:
		an_on_clock(an, t, ev);
		break;
	case RBT_EV_LOSS:
		t->lost_events += ev->u.loss.events;
		break;
	case RBT_EV_DEVICE_ATTR:
		break;
	case RBT_EV_CQ_CREATE: {
		const struct rbt_ev_cq_create *p = &ev->u.cq_create;
		if (p->ret != 0 || !p->cq)
			break;
		struct an_cq *cq = an_map_get(&t->cqs, p->cq);
		if (cq)
			memset(cq, 0, sizeof(*cq));
		else
			cq = an_cq_get(t, p->cq);
		if (!cq)
			break;
		cq->handle = p->cq;
		cq->cqe = p->cqe ? p->cqe : p->cqe_asked;
		cq->ctx = p->ctx;
		cq->ts_source = p->ts_source;
		break;
	}
	case RBT_EV_CQ_RESIZE: {
		struct an_cq *cq = an_map_get(&t->cqs, ev->u.cq_resize.cq);
		if (cq && ev->u.cq_resize.ret == 0)
			cq->cqe = ev->u.cq_resize.cqe;
		break;
	}
	case RBT_EV_CQ_DESTROY: {
		struct an_cq *cq = an_map_get(&t->cqs, ev->u.cq_destroy.cq);
		if (cq && ev->u.cq_destroy.ret == 0)
			cq->destroyed = true;
		break;
	}
	case RBT_EV_SRQ_CREATE: {
		const struct rbt_ev_srq_create *p = &ev->u.srq_create;
		if (p->ret != 0 || !p->srq || an_map_get(&t->srqs, p->srq))
			break;
		struct an_srq *s = calloc(1, sizeof(*s));
		if (!s)
			break;
		s->handle = p->srq;
		s->rq.elem = sizeof(struct an_rwr);
		if (an_map_put(&t->srqs, p->srq, s))
			free(s);
		break;
	}
	case RBT_EV_QP_CREATE:
		an_on_qp_create(an, t, ev);
		break;
	case RBT_EV_QP_MODIFY:
		an_on_qp_modify(an, t, ev);
		break;
	case RBT_EV_QP_DESTROY: {
		const struct rbt_ev_qp_destroy *p = &ev->u.qp_destroy;
		if (p->ret != 0)
			break;
		struct an_qp *qp = an_map_del(&t->qps, p->qp);
		t->c_qp = t->c_qpn = NULL;
		if (qp) {
			qp->destroyed = true;
			qp->destroy_ts = ev->ts;
		}
		break;
	}
	case RBT_EV_MR_REG:
		an_on_mr_reg(an, t, ev);
		break;
	case RBT_EV_MR_DEREG:
		an_on_mr_dereg(an, t, ev);
		break;
	case RBT_EV_ASYNC_EVENT:
		an_on_async(an, t, ev);
		break;
	default:
		break;
	}
	if (an->opts.progress && an->counts.events >= an->progress_next)
		an_progress(an);
	return 0;
}

void rbt_analyzer_set_reader_stats(struct rbt_analyzer *an, int trace,
				   const struct rbt_reader_stats *st, int finished)
{
	if (trace < 0 || trace >= an->n_traces || !st)
		return;
	an->traces[trace]->rstats = *st;
	an->traces[trace]->have_stats = true;
	an->traces[trace]->finished = finished;
}

/* ---- reading files ---- */

static bool an_is_data_path(uint32_t type)
{
	return type == RBT_EV_POST_SEND || type == RBT_EV_POST_RECV ||
	       type == RBT_EV_POST_SRQ_RECV || type == RBT_EV_POLL_CQ;
}

int rbt_analyzer_run_files(struct rbt_analyzer *an, const char *const *paths, int n,
			   char *errbuf, size_t errlen)
{
	struct rbt_reader **rd = calloc(n, sizeof(*rd));
	const struct rbt_event **cur = calloc(n, sizeof(*cur));
	int *idx = calloc(n, sizeof(*idx));
	int ret = 0;
	if (!rd || !cur || !idx) {
		ret = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		ret = rbt_reader_open(paths[i], &rd[i]);
		if (ret < 0) {
			/* the reader's -EINVAL for a path is a FIFO, device or socket */
			snprintf(errbuf, errlen, "%s: %s", paths[i],
				 ret == -EINVAL ? "not a regular file"
						: rbt_strerror(ret));
			goto out;
		}
		idx[i] = rbt_analyzer_add_trace(an, rbt_reader_header(rd[i]), paths[i]);
		if (idx[i] < 0) {
			ret = idx[i];
			snprintf(errbuf, errlen, "%s: %s", paths[i], rbt_strerror(ret));
			goto out;
		}
	}
	/* The same recording twice (one file named twice, or a copy) would count
	 * every WR twice and pair each QP with itself. A damaged header is all
	 * zero and proves nothing. */
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < i; j++) {
			if (rbt_header_same_recording(rbt_reader_header(rd[i]),
						      rbt_reader_header(rd[j]))) {
				snprintf(errbuf, errlen,
					 "%s: the same recording as %s (host, pid and "
					 "start "
					 "time): give each trace once",
					 paths[i], paths[j]);
				ret = -EINVAL;
				goto out;
			}
		}
	}
	an_set_origin(an);
	int live = 0;
	for (int i = 0; i < n; i++) {
		int r = rbt_reader_next(rd[i], &cur[i]);
		if (r <= 0)
			cur[i] = NULL;
		if (r < 0)
			snprintf(errbuf, errlen, "%s: %s", paths[i],
				 rbt_reader_error(rd[i]));
		live += r > 0;
	}
	if (n == 1) {
		/* one trace: no merge needed */
		while (cur[0]) {
			rbt_analyzer_feed(an, idx[0], cur[0]);
			if (rbt_reader_next(rd[0], &cur[0]) <= 0)
				cur[0] = NULL;
		}
	} else {
		/* Merge the data path by aligned time so both ends' outstanding work stays
		 * small. Other events go in at once: a recorder's background thread may
		 * write a late clock sample early in the file, and letting it set the
		 * pace would hold that whole trace back. */
		while (live) {
			int best = -1;
			double bt = 0;
			for (int i = 0; i < n; i++) {
				while (cur[i] && !an_is_data_path(cur[i]->type)) {
					rbt_analyzer_feed(an, idx[i], cur[i]);
					if (rbt_reader_next(rd[i], &cur[i]) <= 0) {
						cur[i] = NULL;
						live--;
					}
				}
				if (!cur[i])
					continue;
				double a = an_aligned_ns(an->traces[idx[i]],
							 (double)cur[i]->ts);
				if (best < 0 || a < bt) {
					best = i;
					bt = a;
				}
			}
			if (best < 0)
				break;
			rbt_analyzer_feed(an, idx[best], cur[best]);
			int r = rbt_reader_next(rd[best], &cur[best]);
			if (r <= 0) {
				cur[best] = NULL;
				live--;
			}
		}
	}
	for (int i = 0; i < n; i++)
		rbt_analyzer_set_reader_stats(an, idx[i], rbt_reader_stats(rd[i]),
					      rbt_reader_trailer(rd[i]) != NULL);
	if (an->opts.progress)
		fprintf(stderr, "\r\033[K");
	ret = 0;
out:
	if (rd)
		for (int i = 0; i < n; i++)
			rbt_reader_close(rd[i]);
	free(rd);
	free(cur);
	free(idx);
	return ret;
}

/* ---- the end ---- */

int rbt_analyzer_finish(struct rbt_analyzer *an)
{
	if (an->finished)
		return -EALREADY;
	an_set_origin(an);
	an->finished = true;
	for (int i = 0; i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		an_drain_deferred(an, t, true);
		for (struct an_qp *qp = t->qp_list; qp; qp = qp->next) {
			an->counts.unmatched_completions += qp->n_parked;
			for (uint32_t k = 0; k < qp->n_parked; k++)
				an_note_error(qp, &qp->parked[k].c, NULL);
			an->counts.outstanding_at_end += qp->sq.n + qp->rq.n;
			an->counts.recvs_outstanding_at_end += qp->rq.n;
		}
		AN_MAP_FOREACH(&t->srqs, k)
		{
			uint64_t n = ((struct an_srq *)t->srqs.vals[k])->rq.n;

			an->counts.outstanding_at_end += n;
			an->counts.recvs_outstanding_at_end += n;
		}
	}
	an_diagnose(an);
	an_sort_findings(an);
	if (an->opts.perfetto)
		an_pf_end(an);
	return 0;
}

static int an_sev_cmp(const void *a, const void *b)
{
	const struct an_finding_priv *x = a, *y = b;
	if (x->f.severity != y->f.severity)
		return y->f.severity - x->f.severity;
	return (x->f.time_ns > y->f.time_ns) - (x->f.time_ns < y->f.time_ns);
}

void an_sort_findings(struct rbt_analyzer *an)
{
	if (an->n_findings)
		qsort(an->findings, an->n_findings, sizeof(*an->findings), an_sev_cmp);
	free(an->pub_findings);
	an->pub_findings =
		calloc(an->n_findings ? an->n_findings : 1, sizeof(*an->pub_findings));
	if (!an->pub_findings)
		return;
	for (int i = 0; i < an->n_findings; i++)
		an->pub_findings[i] = an->findings[i].f;
}

int rbt_analyzer_findings(const struct rbt_analyzer *an, const struct rbt_finding **out)
{
	*out = an->pub_findings;
	return an->pub_findings ? an->n_findings : 0;
}

void rbt_analyzer_counts(const struct rbt_analyzer *an, struct rbt_analyzer_counts *out)
{
	*out = an->counts;
}

int rbt_analyzer_phase(const struct rbt_analyzer *an, int trace, uint32_t qp_num,
		       int opcode, enum rbt_phase phase, struct rbt_phase_summary *out)
{
	if ((int)phase < 0 || phase >= RBT_PHASE_COUNT)
		return -EINVAL;
	struct an_hist h = { 0 };
	for (uint32_t i = 0; i < an->n_groups; i++) {
		const struct an_group *g = an->groups[i];
		if (trace >= 0 && g->qp->t->idx != trace)
			continue;
		if (qp_num && g->qp->qpn != qp_num)
			continue;
		if (opcode >= 0 && g->opcode != opcode)
			continue;
		an_hist_merge(&h, &g->h[phase]);
	}
	memset(out, 0, sizeof(*out));
	if (!h.count) {
		an_hist_free(&h);
		return -ENOENT;
	}
	an_hist_summary(&h, out);
	an_hist_free(&h);
	return 0;
}

int rbt_analyzer_clock_fit(const struct rbt_analyzer *an, int trace,
			   struct rbt_clock_fit *out)
{
	memset(out, 0, sizeof(*out));
	if (trace < 0 || trace >= an->n_traces)
		return -EINVAL;
	const struct an_trace *t = an->traces[trace];
	const struct an_clock *c = t->first_clock;
	if (!c)
		return -ENOENT;
	out->samples = c->n;
	out->ns_per_nic_tick = c->b * t->ns_per_tick;
	out->max_residual_ns = c->max_resid_ticks * t->ns_per_tick;
	double sse = c->n >= 2 && c->m2x > 0 ? c->m2y - c->cxy * c->cxy / c->m2x : 0;
	out->rms_residual_ns = sse > 0 ? sqrt(sse / (double)c->n) * t->ns_per_tick : 0;
	return 0;
}

int rbt_analyzer_roundtrip(const struct rbt_analyzer *an, int trace, uint32_t qp_num,
			   struct rbt_roundtrip_summary *out)
{
	memset(out, 0, sizeof(*out));
	if (trace < 0 || trace >= an->n_traces)
		return -EINVAL;
	for (struct an_qp *qp = an->traces[trace]->qp_list; qp; qp = qp->next) {
		if (qp->qpn != qp_num || !qp->rt_count)
			continue;
		out->count = qp->rt_count;
		out->rtt_p50 = an_hist_quantile(&qp->rt_rtt, 0.5);
		out->local_post_p50 = an_hist_quantile(&qp->rt_local_post, 0.5);
		out->remote_app_p50 = an_hist_quantile(&qp->rt_remote_app, 0.5);
		out->nic_wire_p50 = an_hist_quantile(&qp->rt_nic_wire, 0.5);
		return 0;
	}
	return -ENOENT;
}
