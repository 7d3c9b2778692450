/* shim_flight.c - the flight recorder (RBTRACE_FLIGHT) and rotation
 * (RBTRACE_ROTATE), both on the writer thread.
 *
 * Flight: the writer's finished chunks go to a bounded in-memory ring (oldest
 * dropped first) instead of the file. Resource events (devices, PDs, MRs, MWs,
 * CQs, SRQs, QPs and their modifies, AHs, threads, modules, stacks, the first
 * clock sample) are also kept aside, each in a small chunk of its own marked
 * carried, so that a snapshot - the carried events from before its window, the
 * window's chunks, a snapshot event saying what fired it, a trailer - is a
 * complete trace. Triggers are found in the events this thread encodes (error
 * completions, QPs moved to ERR, async events, slow posts and polls, a stall),
 * plus SIGUSR2 and `rbtrace snapshot` (SIGUSR2 queued with RBT_SNAPSHOT_SIGVAL).
 *
 * Rotation: when the file reaches RBTRACE_ROTATE's size or age it is ended
 * ("rotated") and the next file of the series begins with the carried events.
 *
 * Their settings (RBTRACE_FLIGHT*, RBTRACE_ROTATE) are read by shim_env.c.
 *
 * Runs only on the writer thread (with rbt_writer_lock held), except the
 * SIGUSR2 handler, which only sets a flag and writes the wake pipe. It must never
 * touch the application's data path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "interpose/rbt_interpose.h"
#include "interpose/shim.h"

#include "interpose/shim_rec.h"

/* ---- stored chunks ----------------------------------------------------------------- */
struct rbt_fchunk {
	uint8_t *buf;
	size_t len;
	uint64_t first_ts, last_ts;
	uint64_t seq;	 /* flight: the ring chunk its event is also in */
	uint64_t reach;	 /* ring: the oldest chunk with posts it completes */
	uint64_t handle; /* carried: the resource it belongs to (0: none) */
	int destroys;	 /* carried: it ends that resource */
};

struct rbt_fvec {
	struct rbt_fchunk *v;
	size_t head, n, cap; /* a deque: v[(head + i) % cap] */
	uint64_t bytes;
};

static struct rbt_fchunk *rbt_fvec_at(struct rbt_fvec *q, size_t i)
{
	return &q->v[(q->head + i) % q->cap];
}

static int rbt_fvec_push(struct rbt_fvec *q, const struct rbt_fchunk *c)
{
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 256;
		struct rbt_fchunk *v = malloc(cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		for (size_t i = 0; i < q->n; i++)
			v[i] = *rbt_fvec_at(q, i);
		free(q->v);
		q->v = v;
		q->cap = cap;
		q->head = 0;
	}
	q->v[(q->head + q->n) % q->cap] = *c;
	q->n++;
	q->bytes += c->len;
	return 0;
}

/* Pushes c with a copy of chunk's len bytes as its buffer. */
static int rbt_fvec_push_copy(struct rbt_fvec *q, struct rbt_fchunk *c, const void *chunk,
			      size_t len)
{
	c->buf = malloc(len);
	if (!c->buf)
		return -ENOMEM;
	memcpy(c->buf, chunk, len);
	if (rbt_fvec_push(q, c)) {
		free(c->buf);
		return -ENOMEM;
	}
	return 0;
}

static void rbt_fvec_pop(struct rbt_fvec *q)
{
	struct rbt_fchunk *c = rbt_fvec_at(q, 0);
	q->bytes -= c->len;
	free(c->buf);
	q->head = (q->head + 1) % q->cap;
	q->n--;
}

static struct rbt_fvec rbt_ring_q;  /* flight: the window's chunks */
static struct rbt_fvec rbt_carry_q; /* resource events, one chunk each */
static uint64_t rbt_main_seq;	    /* chunks the main writer finished */
static uint64_t rbt_ring_dropped;   /* chunks dropped off the ring's end */
static struct rbt_writer *rbt_carry_w;
static uint64_t rbt_cur_handle;
static int rbt_cur_destroys;
static struct rbt_header rbt_fhdr;
static char rbt_fhost[256], rbt_fcmd[4096], rbt_ftool[128], rbt_fseries[PATH_MAX];
static uint64_t rbt_cur_reach = UINT64_MAX; /* of the open chunk: see below */
static int rbt_clock_carried;		    /* the first clock sample is kept aside */
static int rbt_final_fd = -1; /* flight: the trace file, written at the end */

static int rbt_ring_sink(void *arg, const void *chunk, size_t len, uint64_t first_ts,
			 uint64_t last_ts)
{
	(void)arg;
	struct rbt_fchunk c = { .len = len,
				.first_ts = first_ts,
				.last_ts = last_ts,
				.seq = rbt_main_seq++ };
	c.reach = rbt_cur_reach;
	rbt_cur_reach = UINT64_MAX;
	if (rbt_fvec_push_copy(&rbt_ring_q, &c, chunk, len))
		return -ENOMEM;
	while (rbt_ring_q.n > 1 && rbt_ring_q.bytes > rbt_fcfg.flight_bytes) {
		rbt_fvec_pop(&rbt_ring_q);
		rbt_ring_dropped++;
	}
	return 0;
}

static int rbt_carry_sink(void *arg, const void *chunk, size_t len, uint64_t first_ts,
			  uint64_t last_ts)
{
	(void)arg;
	struct rbt_fchunk c = {
		.len = len, .first_ts = first_ts, .last_ts = last_ts, .seq = rbt_main_seq
	};
	c.handle = rbt_cur_handle;
	c.destroys = rbt_cur_destroys;
	return rbt_fvec_push_copy(&rbt_carry_q, &c, chunk, len);
}

/* Marks in drop[] the carried events of resources destroyed before seq: the
 * destroy and everything older about that handle (an earlier life of a reused
 * handle ended too); a later life of the handle stays. 0, or -ENOMEM. */
static int rbt_carry_mark_dead(uint64_t seq, uint8_t *drop)
{
	struct rbt_fvec *q = &rbt_carry_q;
	size_t nd = 0, cap = 0;
	uint64_t *dead = NULL;

	for (size_t i = q->n; i-- > 0;) {
		struct rbt_fchunk *c = rbt_fvec_at(q, i);
		if (!c->handle || c->seq >= seq)
			continue;
		size_t k = 0;
		while (k < nd && dead[k] != c->handle)
			k++;
		if (k < nd) {
			drop[i] = 1;
		} else if (c->destroys) {
			if (nd == cap) {
				size_t nc = cap ? cap * 2 : 64;
				uint64_t *d = realloc(dead, nc * sizeof(*d));
				if (!d) {
					free(dead);
					return -ENOMEM;
				}
				dead = d;
				cap = nc;
			}
			dead[nd++] = c->handle;
			drop[i] = 1;
		}
	}
	free(dead);
	return 0;
}

/* Drops the carried events of resources destroyed before seq, keeping the
 * order of the rest. */
static void rbt_carry_compact(uint64_t seq)
{
	struct rbt_fvec *q = &rbt_carry_q;
	size_t n = q->n;
	uint8_t *drop = calloc(n ? n : 1, 1);

	if (!drop || rbt_carry_mark_dead(seq, drop)) {
		free(drop);
		return;
	}
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		struct rbt_fchunk c = *rbt_fvec_at(q, i);
		if (drop[i]) {
			q->bytes -= c.len;
			free(c.buf);
		} else {
			*rbt_fvec_at(q, out++) = c;
		}
	}
	q->n = out;
	free(drop);
}

/* The resource an event creates, changes or ends; whether it keeps it aside. */
static int rbt_carried_kind(const struct rbt_event *ev, uint64_t *h, int *destroys)
{
	*h = 0;
	*destroys = 0;
	switch (ev->type) {
	case RBT_EV_THREAD:
	case RBT_EV_MODULE_MAP:
	case RBT_EV_NOTE:
	case RBT_EV_DEVICE_LIST:
	case RBT_EV_DEVICE_ATTR:
	case RBT_EV_PORT_ATTR:
		return 1;
	case RBT_EV_STACK:
		*h = rbt_cur_handle; /* belongs to the event before it */
		return 1;
	case RBT_EV_CLOCK_SAMPLE: {
		int r = !rbt_clock_carried;
		rbt_clock_carried = 1;
		return r;
	}
#define RBT_CARRY(T, f, d)     \
	case RBT_EV_##T:       \
		*h = ev->u.f;  \
		*destroys = d; \
		return 1;
		RBT_CARRY(DEVICE_OPEN, device_open.ctx, 0)
		RBT_CARRY(DEVICE_CLOSE, device_close.ctx, 1)
		RBT_CARRY(PD_ALLOC, pd_alloc.pd, 0)
		RBT_CARRY(PD_DEALLOC, pd_dealloc.pd, 1)
		RBT_CARRY(MR_REG, mr_reg.mr, 0)
		RBT_CARRY(MR_REREG, mr_rereg.mr, 0)
		RBT_CARRY(MR_DEREG, mr_dereg.mr, 1)
		RBT_CARRY(MW_ALLOC, mw_alloc.mw, 0)
		RBT_CARRY(MW_DEALLOC, mw_dealloc.mw, 1)
		RBT_CARRY(XRCD_OPEN, xrcd_open.xrcd, 0)
		RBT_CARRY(XRCD_CLOSE, xrcd_close.xrcd, 1)
		RBT_CARRY(CHANNEL_CREATE, channel_create.channel, 0)
		RBT_CARRY(CHANNEL_DESTROY, channel_destroy.channel, 1)
		RBT_CARRY(CQ_CREATE, cq_create.cq, 0)
		RBT_CARRY(CQ_RESIZE, cq_resize.cq, 0)
		RBT_CARRY(CQ_DESTROY, cq_destroy.cq, 1)
		RBT_CARRY(SRQ_CREATE, srq_create.srq, 0)
		RBT_CARRY(SRQ_MODIFY, srq_modify.srq, 0)
		RBT_CARRY(SRQ_DESTROY, srq_destroy.srq, 1)
		RBT_CARRY(QP_CREATE, qp_create.qp, 0)
		RBT_CARRY(QP_MODIFY, qp_modify.qp, 0)
		RBT_CARRY(QP_DESTROY, qp_destroy.qp, 1)
		RBT_CARRY(AH_CREATE, ah_create.ah, 0)
		RBT_CARRY(AH_DESTROY, ah_destroy.ah, 1)
#undef RBT_CARRY
	/* rdma_cm: every call, event and id state of a CM id (rare: a few per
	 * connection), so that a window's report has its connections */
	case RBT_EV_CM_CALL:
		*h = ev->u.cm_call.id;
		*destroys = ev->u.cm_call.fn == RBT_CM_DESTROY_ID && !ev->u.cm_call.ret;
		return 1;
	case RBT_EV_CM_EVENT:
		*h = ev->u.cm_event.id;
		return 1;
	case RBT_EV_CM_ACK:
		*h = ev->u.cm_ack.id;
		return 1;
	case RBT_EV_CM_ID:
		*h = ev->u.cm_id.id;
		return 1;
	default:
		return 0;
	}
}

/* ---- where the oldest outstanding WR was posted ------------------------------------------
 * Per QP (by number) and queue, the ring chunks in which its WRs still waiting
 * for their completion were posted, oldest first, as runs {seq, count}.
 * Completions of a queue come in post order, so each completion's post is the
 * front run's chunk: every ring chunk remembers the oldest chunk whose posts it
 * completes (reach), and a snapshot's window reaches back to it, so that every
 * completion in the window has its post (signaled sends and receives on QPs;
 * SRQ receives are not followed). */
struct rbt_orun {
	uint64_t seq;
	uint64_t n;
};
struct rbt_oq {
	struct rbt_orun *v;
	uint32_t head, len, cap;
};
struct rbt_oqp {
	uint32_t qp_num;    /* 0: free slot (QP 0 is never RC/UC/UD data) */
	struct rbt_oq q[2]; /* 0 send, 1 recv */
};
#define RBT_OQP_SLOTS 4096
static struct rbt_oqp *rbt_oqps;

static struct rbt_oqp *rbt_oqp(uint32_t qpn)
{
	static struct rbt_oqp *last[2]; /* a post and its completion, two QPs */
	static unsigned turn;

	if (!qpn)
		return NULL;
	if (last[0] && last[0]->qp_num == qpn)
		return last[0];
	if (last[1] && last[1]->qp_num == qpn)
		return last[1];
	if (!rbt_oqps && !(rbt_oqps = calloc(RBT_OQP_SLOTS, sizeof(*rbt_oqps))))
		return NULL;
	uint32_t h = (qpn * 2654435761u) % RBT_OQP_SLOTS;
	for (uint32_t k = 0; k < RBT_OQP_SLOTS; k++) {
		struct rbt_oqp *o = &rbt_oqps[(h + k) % RBT_OQP_SLOTS];
		if (o->qp_num == qpn || !o->qp_num) {
			o->qp_num = qpn;
			return last[turn++ & 1] = o;
		}
	}
	return NULL; /* full: that QP is not followed */
}

static void rbt_oq_push(struct rbt_oq *q, uint64_t seq, uint64_t n)
{
	if (q->len && q->v[(q->head + q->len - 1) % q->cap].seq == seq) {
		q->v[(q->head + q->len - 1) % q->cap].n += n;
		return;
	}
	if (q->len == q->cap) {
		uint32_t cap = q->cap ? q->cap * 2 : 8;
		struct rbt_orun *v = malloc(cap * sizeof(*v));
		if (!v)
			return;
		for (uint32_t i = 0; i < q->len; i++)
			v[i] = q->v[(q->head + i) % q->cap];
		free(q->v);
		q->v = v;
		q->cap = cap;
		q->head = 0;
	}
	q->v[(q->head + q->len) % q->cap] = (struct rbt_orun){ seq, n };
	q->len++;
}

static void rbt_oq_pop(struct rbt_oq *q, int all)
{
	while (q->len) {
		struct rbt_orun *r = &q->v[q->head];
		if (!all && r->seq < rbt_cur_reach)
			rbt_cur_reach = r->seq;
		if (!all && --r->n)
			return;
		q->head = (q->head + 1) % q->cap;
		q->len--;
		if (!all)
			return;
	}
}

static void rbt_follow(const struct rbt_event *ev)
{
	struct rbt_oqp *o;

	switch (ev->type) {
	case RBT_EV_POST_SEND: {
		const struct rbt_ev_post_send *p = &ev->u.post_send;
		uint64_t n = 0;
		/* up to the failing WR: those after it were not posted */
		for (uint32_t i = 0; i < p->n_wrs; i++) {
			if (p->ret && p->bad_wr == i)
				break;
			n += !!(p->wrs[i].send_flags & IBV_SEND_SIGNALED);
		}
		if (n && (o = rbt_oqp((uint32_t)p->qp_num)))
			rbt_oq_push(&o->q[0], rbt_main_seq, n);
		break;
	}
	case RBT_EV_POST_RECV: {
		const struct rbt_ev_post_recv *p = &ev->u.post_recv;
		uint64_t n = p->ret ? p->bad_wr : p->n_wrs;
		if (n > p->n_wrs)
			n = p->n_wrs;
		if (n && (o = rbt_oqp((uint32_t)p->qp_num)))
			rbt_oq_push(&o->q[1], rbt_main_seq, n);
		break;
	}
	case RBT_EV_POLL_CQ:
		for (uint32_t i = 0; i < ev->u.poll_cq.n_wcs; i++) {
			const struct rbt_wc *w = &ev->u.poll_cq.wcs[i];
			if (!rbt_oqps || !(o = rbt_oqp((uint32_t)w->qp_num)))
				continue;
			/* a flushed WR's opcode is not defined: its queue is not
			 * known, and it is not followed */
			if (w->status == IBV_WC_WR_FLUSH_ERR)
				continue;
			rbt_oq_pop(&o->q[w->opcode & IBV_WC_RECV ? 1 : 0], 0);
		}
		break;
	case RBT_EV_QP_DESTROY:
		/* handles are not QP numbers: forget nothing here; a destroyed
		 * QP's queue is dropped when its number comes back (create) */
		break;
	case RBT_EV_QP_CREATE:
		if ((o = rbt_oqp((uint32_t)ev->u.qp_create.qp_num))) {
			rbt_oq_pop(&o->q[0], 1);
			rbt_oq_pop(&o->q[1], 1);
		}
		break;
	default:
		break;
	}
}

/* ---- triggers ------------------------------------------------------------------------ */
static _Atomic int rbt_sig_snap, rbt_req_snap;
static struct rbt_ev_snapshot rbt_pend; /* trigger != 0: a snapshot is pending */
static uint64_t rbt_pend_due;		/* when it is written (ticks) */
static uint64_t rbt_last_snap;		/* ticks of the last one written */
static uint32_t rbt_snaps;
static uint64_t rbt_suppressed;
/* The stall detector: signaled send WRs outstanding, the last completion. */
static int64_t rbt_outstanding;
static uint64_t rbt_last_progress;

static uint64_t rbt_ms_ticks(uint64_t ms)
{
	return (rbt_tsc_hz ? rbt_tsc_hz : 1000000000ull) / 1000 * ms;
}

static void rbt_fire(uint64_t trigger, uint64_t ts, uint64_t qp, uint64_t qp_num,
		     uint64_t wr_id, uint64_t detail)
{
	if (rbt_pend.trigger) {
		rbt_pend.also_fired++;
		return;
	}
	if (!rbt_writer)
		return;
	if (rbt_snaps >= rbt_fcfg.max_snaps ||
	    (rbt_last_snap && ts < rbt_last_snap + rbt_ms_ticks(rbt_fcfg.gap_ms) &&
	     trigger != RBT_TRIGGER_REQUEST)) {
		rbt_suppressed++;
		return;
	}
	memset(&rbt_pend, 0, sizeof(rbt_pend));
	rbt_pend.trigger = trigger;
	rbt_pend.trigger_ts = ts;
	rbt_pend.qp = qp;
	rbt_pend.qp_num = qp_num;
	rbt_pend.wr_id = wr_id;
	rbt_pend.detail = detail;
	rbt_pend_due = rbt_now() + rbt_ms_ticks(rbt_fcfg.after_ms);
	rbt_log("flight: %s fired; snapshot in %u ms", rbt_trigger_name(trigger),
		rbt_fcfg.after_ms);
}

static void rbt_check_triggers(const struct rbt_event *ev)
{
	uint64_t us = rbt_tsc_hz / 1000000 + 1;

	switch (ev->type) {
	case RBT_EV_POST_SEND: {
		const struct rbt_ev_post_send *p = &ev->u.post_send;
		if (p->ret == 0) {
			int64_t was = rbt_outstanding;
			for (uint32_t i = 0; i < p->n_wrs; i++)
				rbt_outstanding +=
					!!(p->wrs[i].send_flags & IBV_SEND_SIGNALED);
			if (was <= 0 && rbt_outstanding > 0)
				rbt_last_progress = p->ts_exit; /* the wait starts now */
		}
		if (rbt_fcfg.slow_post_us && p->ts_exit > ev->ts &&
		    (p->ts_exit - ev->ts) / us >= rbt_fcfg.slow_post_us)
			rbt_fire(RBT_TRIGGER_SLOW_POST, ev->ts, p->qp, p->qp_num,
				 p->n_wrs ? p->wrs[0].wr_id : 0,
				 (p->ts_exit - ev->ts) / us);
		break;
	}
	case RBT_EV_POST_RECV:
	case RBT_EV_POST_SRQ_RECV: {
		uint64_t te = ev->type == RBT_EV_POST_RECV ? ev->u.post_recv.ts_exit
							   : ev->u.post_srq_recv.ts_exit;
		if (rbt_fcfg.slow_post_us && te > ev->ts &&
		    (te - ev->ts) / us >= rbt_fcfg.slow_post_us)
			rbt_fire(RBT_TRIGGER_SLOW_POST, ev->ts,
				 ev->type == RBT_EV_POST_RECV ? ev->u.post_recv.qp : 0,
				 ev->type == RBT_EV_POST_RECV ? ev->u.post_recv.qp_num
							      : 0,
				 0, (te - ev->ts) / us);
		break;
	}
	case RBT_EV_POLL_CQ: {
		const struct rbt_ev_poll_cq *p = &ev->u.poll_cq;
		for (uint32_t i = 0; i < p->n_wcs; i++) {
			const struct rbt_wc *w = &p->wcs[i];
			if (!(w->opcode & IBV_WC_RECV))
				rbt_outstanding--;
			if (w->status != IBV_WC_SUCCESS)
				rbt_fire(RBT_TRIGGER_ERROR_WC, ev->ts, 0, w->qp_num,
					 w->wr_id, w->status);
		}
		if (rbt_outstanding < 0)
			rbt_outstanding = 0; /* sq_sig_all QPs complete unsignaled WRs */
		if (p->n_wcs)
			rbt_last_progress = p->ts_exit;
		if (rbt_fcfg.slow_poll_us && p->ts_exit > ev->ts &&
		    (p->ts_exit - ev->ts) / us >= rbt_fcfg.slow_poll_us)
			rbt_fire(RBT_TRIGGER_SLOW_POLL, ev->ts, p->cq, 0, 0,
				 (p->ts_exit - ev->ts) / us);
		break;
	}
	case RBT_EV_QP_MODIFY: {
		const struct rbt_ev_qp_modify *m = &ev->u.qp_modify;
		if (m->ret == 0 && (m->attr_mask & IBV_QP_STATE) &&
		    m->qp_state == IBV_QPS_ERR)
			rbt_fire(RBT_TRIGGER_QP_ERR, ev->ts, m->qp, 0, 0, 0);
		break;
	}
	case RBT_EV_ASYNC_EVENT:
		if (ev->u.async_event.ret == 0)
			rbt_fire(RBT_TRIGGER_ASYNC_EVENT, ev->ts,
				 ev->u.async_event.element, 0, 0,
				 ev->u.async_event.event_type);
		break;
	default:
		break;
	}
}

void rbt_flight_note(const struct rbt_event *ev)
{
	uint64_t h;
	int destroys;

	if (rbt_carried_kind(ev, &h, &destroys) && rbt_carry_w) {
		/* a stack belongs to the event before it: its handle, its end */
		if (ev->type != RBT_EV_STACK) {
			rbt_cur_handle = h;
			rbt_cur_destroys = destroys;
		}
		if (rbt_writer_begin_chunk(rbt_carry_w, ev->stream) == 0 &&
		    rbt_writer_append(rbt_carry_w, ev) == 0)
			rbt_writer_end_chunk(rbt_carry_w);
	}
	if (rbt_fcfg.flight_bytes) {
		rbt_check_triggers(ev);
		rbt_follow(ev);
	}
}

/* ---- SIGUSR2 and rbtrace snapshot ------------------------------------------------------ */
static void rbt_on_usr2(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	int saved = errno;
	if (si && si->si_code == SI_QUEUE &&
	    si->si_value.sival_int == RBT_SNAPSHOT_SIGVAL)
		atomic_store(&rbt_req_snap, 1);
	else
		atomic_store(&rbt_sig_snap, 1);
	rbt_wake_drainer();
	errno = saved;
}

void rbt_flight_install_signal(void)
{
	struct sigaction old, sa = { .sa_sigaction = rbt_on_usr2 };

	if (!rbt_fcfg.flight_bytes || sigaction(SIGUSR2, NULL, &old))
		return;
	if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL) {
		rbt_warn("SIGUSR2 has a handler: snapshots only on the other triggers");
		return;
	}
	if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction == rbt_on_usr2)
		return;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
}

/* ---- files ------------------------------------------------------------------------------ */
static void rbt_copy_header(const struct rbt_header *hdr)
{
	rbt_fhdr = *hdr;
	snprintf(rbt_fhost, sizeof(rbt_fhost), "%s", hdr->host ? hdr->host : "");
	snprintf(rbt_fcmd, sizeof(rbt_fcmd), "%s", hdr->cmdline ? hdr->cmdline : "");
	snprintf(rbt_ftool, sizeof(rbt_ftool), "%s", hdr->tool ? hdr->tool : "");
	rbt_fhdr.host = rbt_fhost;
	rbt_fhdr.cmdline = rbt_fcmd;
	rbt_fhdr.tool = rbt_ftool;
	rbt_fhdr.series = "";
	rbt_fhdr.series_index = 0;
}

static const char *rbt_base(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static struct rbt_writer_opts rbt_carry_opts = { .sink = rbt_carry_sink,
						 .chunk_flags = RBT_CHUNK_CARRIED };
static uint32_t rbt_series_idx;
static uint64_t rbt_file_t0; /* rotation: when the file began (ticks) */

struct rbt_writer *rbt_flight_open(const struct rbt_header *hdr, int fd, int *err)
{
	struct rbt_writer *w = NULL;

	*err = 0;
	/* A fork child starts afresh: what the parent kept is not its own. */
	while (rbt_ring_q.n)
		rbt_fvec_pop(&rbt_ring_q);
	while (rbt_carry_q.n)
		rbt_fvec_pop(&rbt_carry_q);
	memset(&rbt_pend, 0, sizeof(rbt_pend));
	rbt_snaps = 0;
	rbt_last_snap = 0;
	rbt_suppressed = 0;
	rbt_ring_dropped = 0;
	rbt_outstanding = 0;
	rbt_last_progress = 0;
	rbt_carry_w = NULL;
	rbt_clock_carried = 0;
	rbt_copy_header(hdr);
	rbt_main_seq = 0;
	rbt_series_idx = 0;
	*err = rbt_writer_open_sink(&rbt_fhdr, &rbt_carry_opts, &rbt_carry_w);
	if (*err) {
		close(fd);
		return NULL;
	}
	if (rbt_fcfg.flight_bytes) {
		struct rbt_writer_opts o = { .sink = rbt_ring_sink };
		rbt_final_fd = fd;
		*err = rbt_writer_open_sink(&rbt_fhdr, &o, &w);
		return w;
	}
	snprintf(rbt_fseries, sizeof(rbt_fseries), "%s", rbt_base(rbt_path));
	rbt_fhdr.series = rbt_fseries;
	rbt_file_t0 = rbt_now();
	*err = rbt_writer_open_fd(fd, &rbt_fhdr, NULL, &w);
	return w;
}

/* A new file beside the trace, named like it; O_EXCL so that nothing is
 * overwritten. Listed in the manifest. */
static int rbt_open_beside(const char *name, char *path, size_t len)
{
	const char *slash = strrchr(rbt_path, '/');
	int dl = slash ? (int)(slash - rbt_path + 1) : 0;
	if (snprintf(path, len, "%.*s%s", dl, rbt_path, name) >= (int)len)
		return -ENAMETOOLONG;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	rbt_manifest_add(path);
	return fd;
}

/* Writes the carried events from before seq into w (all when seq is ~0),
 * but those of resources destroyed before seq: a window that begins after a
 * QP's end must not bring it back (its peer may be gone from the carried
 * events already, and a replay would look for it). */
static int rbt_write_carried(struct rbt_writer *w, uint64_t seq)
{
	uint8_t *drop = calloc(rbt_carry_q.n ? rbt_carry_q.n : 1, 1);
	int err = drop ? rbt_carry_mark_dead(seq, drop) : -ENOMEM;

	for (size_t i = 0; !err && i < rbt_carry_q.n; i++) {
		struct rbt_fchunk *c = rbt_fvec_at(&rbt_carry_q, i);
		if (c->seq >= seq)
			break;
		if (!drop[i])
			err = rbt_writer_copy_chunk(w, c->buf, c->len);
	}
	free(drop);
	return err;
}

static void rbt_trailer_now(struct rbt_trailer *tr, uint32_t how)
{
	memset(tr, 0, sizeof(*tr));
	rbt_clock_pair(&tr->end);
	tr->end_how = how;
}

/* One snapshot file: fd, or a new file beside the trace when fd < 0. */
static int rbt_write_snapshot(struct rbt_ev_snapshot *s, int fd,
			      const struct rbt_trailer *end)
{
	char name[PATH_MAX], path[PATH_MAX + 64];
	struct rbt_writer *w;
	int err;

	if (fd < 0) {
		const char *b = rbt_base(rbt_path);
		size_t n = strlen(b);
		if (n > 4 && !strcmp(b + n - 4, ".rbt"))
			n -= 4;
		for (uint32_t k = rbt_snaps + 1; k < rbt_snaps + 1000; k++) {
			snprintf(name, sizeof(name), "%.*s-snap%u.rbt", (int)n, b, k);
			fd = rbt_open_beside(name, path, sizeof(path));
			if (fd != -EEXIST)
				break;
		}
		if (fd < 0) {
			rbt_warn("cannot write a flight snapshot beside %s: %s", rbt_path,
				 rbt_strerror(fd));
			return fd;
		}
	} else {
		snprintf(path, sizeof(path), "%s", rbt_path);
	}
	/* The window: the newest chunks back to trigger - before. */
	size_t first = 0;
	if (rbt_fcfg.before_ms && s->trigger_ts > rbt_ms_ticks(rbt_fcfg.before_ms)) {
		uint64_t from = s->trigger_ts - rbt_ms_ticks(rbt_fcfg.before_ms);
		while (first < rbt_ring_q.n &&
		       rbt_fvec_at(&rbt_ring_q, first)->last_ts < from)
			first++;
	}
	/* Back to the posts of the WRs outstanding at its start, when the ring
	 * still has them (else their completions are in it without their posts:
	 * docs/recording.md). */
	/* The window [i, n) is whole when every completion in it has its post in
	 * it: the oldest chunk its chunks reach back to is not before i. Take the
	 * whole window that starts closest before the wanted start; when the ring
	 * no longer holds the posts, the oldest whole one after it. */
	size_t pick = rbt_ring_q.n, lowest = rbt_ring_q.n;
	uint64_t reach = UINT64_MAX;
	for (size_t i = rbt_ring_q.n; i-- > 0;) {
		struct rbt_fchunk *c = rbt_fvec_at(&rbt_ring_q, i);
		if (c->reach < reach)
			reach = c->reach;
		if (reach >= c->seq) {
			lowest = i;
			if (i <= first) {
				pick = i;
				break;
			}
		}
	}
	rbt_log("flight: window wanted from chunk %zu of %zu; whole from %zu (lowest "
		"%zu)",
		first, rbt_ring_q.n, pick, lowest);
	if (pick < rbt_ring_q.n)
		first = pick;
	else if (lowest < rbt_ring_q.n)
		first = lowest;
	uint64_t seq = first < rbt_ring_q.n ? rbt_fvec_at(&rbt_ring_q, first)->seq
					    : rbt_main_seq;
	s->seq = rbt_snaps + 1;
	s->dropped_chunks = rbt_ring_dropped + first;
	s->window_end = rbt_now();
	s->window_start = s->window_end;
	err = rbt_writer_open_fd(fd, &rbt_fhdr, NULL, &w);
	if (err)
		goto fail;
	err = rbt_write_carried(w, seq);
	for (size_t i = first; !err && i < rbt_ring_q.n; i++) {
		struct rbt_fchunk *c = rbt_fvec_at(&rbt_ring_q, i);
		err = rbt_writer_copy_chunk(w, c->buf, c->len);
	}
	if (!err) {
		struct rbt_event ev = { .type = RBT_EV_SNAPSHOT, .ts = s->window_end };
		ev.stream = (uint32_t)atomic_load(&rbt_drainer_tid);
		for (size_t i = first; i < rbt_ring_q.n; i++)
			if (rbt_fvec_at(&rbt_ring_q, i)->first_ts < s->window_start)
				s->window_start = rbt_fvec_at(&rbt_ring_q, i)->first_ts;
		ev.u.snapshot = *s;
		err = rbt_writer_begin_chunk(w, ev.stream);
		if (!err)
			err = rbt_writer_append(w, &ev);
	}
	struct rbt_trailer tr;
	if (end)
		tr = *end;
	else
		rbt_trailer_now(&tr, RBT_END_SNAPSHOT);
	int e2 = rbt_writer_close(w, err ? NULL : &tr);
	if (!err)
		err = e2;
	if (err)
		goto fail;
	rbt_snaps++;
	rbt_log("flight snapshot %s: %s, %zu chunks", path, rbt_trigger_name(s->trigger),
		rbt_ring_q.n - first);
	return 0;
fail:
	rbt_warn("cannot write flight snapshot %s: %s", path, rbt_strerror(err));
	return err;
}

/* Rotation: end the file, begin the next of the series. */
static void rbt_rotate(void)
{
	char name[PATH_MAX], path[PATH_MAX + 64];
	struct rbt_trailer tr;
	struct rbt_writer *w;

	rbt_series_idx++;
	rbt_series_path(rbt_fseries, rbt_series_idx, name, sizeof(name));
	int fd = rbt_open_beside(name, path, sizeof(path));
	if (fd < 0) {
		rbt_warn("cannot start %s: %s; the trace goes on in the current file",
			 name, rbt_strerror(fd));
		rbt_series_idx--;
		rbt_fcfg.rotate_bytes = rbt_fcfg.rotate_ms = 0;
		return;
	}
	rbt_fhdr.series_index = rbt_series_idx;
	int err = rbt_writer_open_fd(fd, &rbt_fhdr, NULL, &w);
	if (!err)
		err = rbt_write_carried(w, UINT64_MAX);
	if (err) {
		rbt_warn("cannot start %s: %s; the trace goes on in the current file",
			 path, rbt_strerror(err));
		rbt_writer_close(w, NULL);
		rbt_series_idx--;
		rbt_fcfg.rotate_bytes = rbt_fcfg.rotate_ms = 0;
		return;
	}
	rbt_trailer_now(&tr, RBT_END_ROTATED);
	tr.lost_events = rbt_lost_total;
	rbt_writer_close(rbt_writer, &tr);
	rbt_lost_total = 0;
	rbt_writer = w;
	rbt_file_t0 = rbt_now();
	if (strlen(path) < sizeof(rbt_path))
		memcpy(rbt_path, path, strlen(path) + 1);
	/* From here on a resource destroyed before this file needs no carrying. */
	rbt_main_seq++;
	rbt_carry_compact(rbt_main_seq);
	rbt_log("rotated to %s", path);
}

/* Called by the writer thread after each drain pass, with rbt_writer_lock held. */
void rbt_flight_tick(uint64_t now)
{
	if (!rbt_writer)
		return;
	if (rbt_fcfg.rotate_bytes || rbt_fcfg.rotate_ms) {
		if ((rbt_fcfg.rotate_bytes &&
		     rbt_writer_bytes(rbt_writer) >= rbt_fcfg.rotate_bytes) ||
		    (rbt_fcfg.rotate_ms &&
		     now - rbt_file_t0 >= rbt_ms_ticks(rbt_fcfg.rotate_ms)))
			rbt_rotate();
		return;
	}
	if (!rbt_fcfg.flight_bytes)
		return;
	if (atomic_exchange(&rbt_req_snap, 0))
		rbt_fire(RBT_TRIGGER_REQUEST, now, 0, 0, 0, 0);
	if (atomic_exchange(&rbt_sig_snap, 0))
		rbt_fire(RBT_TRIGGER_SIGNAL, now, 0, 0, 0, 0);
	if (rbt_fcfg.stall_ms && rbt_outstanding > 0 && rbt_last_progress &&
	    now > rbt_last_progress &&
	    now - rbt_last_progress >= rbt_ms_ticks(rbt_fcfg.stall_ms)) {
		rbt_fire(RBT_TRIGGER_STALL, now, 0, 0, 0,
			 (now - rbt_last_progress) / (rbt_tsc_hz / 1000000 + 1));
		rbt_last_progress = now; /* once per stall period */
	}
	if (rbt_pend.trigger && now >= rbt_pend_due) {
		rbt_writer_end_chunk(rbt_writer); /* the open chunk into the ring */
		rbt_write_snapshot(&rbt_pend, -1, NULL);
		rbt_last_snap = now;
		memset(&rbt_pend, 0, sizeof(rbt_pend));
	}
	/* Resources destroyed before the ring's oldest chunk need no carrying. */
	static size_t compacted_at;
	if (rbt_carry_q.n > 2 * compacted_at + 64 && rbt_ring_q.n) {
		rbt_carry_compact(rbt_fvec_at(&rbt_ring_q, 0)->seq);
		compacted_at = rbt_carry_q.n;
	}
}

/* Is a snapshot due before `ticks` from now? The writer loop's wait bound. */
int rbt_flight_wait_ms(uint64_t now)
{
	if (!rbt_pend.trigger)
		return rbt_fcfg.stall_ms && rbt_outstanding > 0 ? 100 : 1000;
	if (rbt_pend_due <= now)
		return 0;
	return (int)((rbt_pend_due - now) / (rbt_tsc_hz / 1000 + 1)) + 1;
}

/* The end: a pending snapshot is written now; flight mode writes the ring's
 * last window as the trace file itself (trigger "end"). */
void rbt_flight_close(const struct rbt_trailer *tr)
{
	if (rbt_fcfg.flight_bytes && rbt_writer) {
		rbt_writer_end_chunk(rbt_writer);
		if (rbt_pend.trigger)
			rbt_write_snapshot(&rbt_pend, -1, tr);
		struct rbt_ev_snapshot s = { .trigger = RBT_TRIGGER_END,
					     .trigger_ts = tr->end.ticks };
		s.also_fired = rbt_suppressed;
		uint32_t n = rbt_snaps;
		rbt_snaps = 0; /* the final one is never rate-limited or counted */
		if (rbt_final_fd >= 0)
			rbt_write_snapshot(&s, rbt_final_fd, tr);
		rbt_final_fd = -1;
		rbt_snaps = n;
		rbt_writer_close(rbt_writer, NULL);
	} else if (rbt_writer) {
		rbt_writer_close(rbt_writer, tr);
	}
	rbt_writer = NULL;
	rbt_writer_close(rbt_carry_w, NULL);
	rbt_carry_w = NULL;
	while (rbt_ring_q.n)
		rbt_fvec_pop(&rbt_ring_q);
	while (rbt_carry_q.n)
		rbt_fvec_pop(&rbt_carry_q);
}
