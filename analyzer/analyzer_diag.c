/* analyzer_diag.c - the diagnoses: each finding with its severity, the events that
 * prove it and what to change.
 *
 * Runs once after the last event, over per-resource state only. A finding must be
 * provable from the trace: thresholds are chosen so that healthy programs
 * (ibv_rc_pingpong, perftest) carry no warning or error; never guess.
 */
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

static const struct rbt_finding_kind an_kinds[RBT_FINDING_COUNT] = {
#define AN_KIND(c, sev, al, t) [RBT_FINDING_##c] = { #c, sev, al, t },
	RBT_FINDING_LIST(AN_KIND)
#undef AN_KIND
};

const struct rbt_finding_kind *rbt_analyzer_finding_kinds(void)
{
	return an_kinds;
}

/* code: from the list; sev: its severity or its "also" (anything else is the
 * list's severity: the list and the docs say what each code can be). */
void an_add_finding(struct rbt_analyzer *an, int sev, int code, int trace, uint32_t qpn,
		    double time_ns, const char *title, const char *evidence,
		    const char *advice)
{
	if (code < 0 || code >= RBT_FINDING_COUNT)
		return;
	if (sev != an_kinds[code].severity && sev != an_kinds[code].also)
		sev = an_kinds[code].severity;
	if (rbt_grow(&an->findings, &an->cap_findings, (uint32_t)an->n_findings + 1,
		     sizeof(*an->findings), 16, 0))
		return;
	struct an_finding_priv *f = &an->findings[an->n_findings++];
	memset(f, 0, sizeof(*f));
	f->title = an_strdup(title);
	f->evidence = an_strdup(evidence);
	f->advice = an_strdup(advice);
	f->f.severity = sev;
	f->f.code = an_kinds[code].code;
	f->f.title = f->title;
	f->f.evidence = f->evidence;
	f->f.advice = f->advice;
	f->f.trace = trace;
	f->f.qp_num = qpn;
	f->f.time_ns = time_ns;
}

static double ms(const struct an_trace *t, uint64_t ticks)
{
	return an_ticks_ns(t, ticks) / 1e6;
}

static void an_setup_evidence(struct an_str *e, const struct an_qp *qp)
{
	const struct an_trace *t = qp->t;
	if (qp->m->have_rtr)
		an_str_printf(e,
			      "t=%.3f ms modify_qp(QP 0x%x -> RTR): dest_qp_num=0x%llx "
			      "path_mtu=%llu "
			      "rq_psn=%llu min_rnr_timer=%llu max_dest_rd_atomic=%llu "
			      "dlid=%llu\n",
			      ms(t, qp->m->rtr_ts), qp->m->qpn,
			      (unsigned long long)qp->m->dest_qpn,
			      (unsigned long long)qp->m->path_mtu,
			      (unsigned long long)qp->m->rq_psn,
			      (unsigned long long)qp->m->min_rnr_timer,
			      (unsigned long long)qp->m->max_dest_rd_atomic,
			      (unsigned long long)qp->m->ah_dlid);
	if (qp->m->have_rts)
		an_str_printf(
			e,
			"t=%.3f ms modify_qp(QP 0x%x -> RTS): sq_psn=%llu timeout=%llu "
			"retry_cnt=%llu rnr_retry=%llu max_rd_atomic=%llu\n",
			ms(t, qp->m->rts_ts), qp->m->qpn,
			(unsigned long long)qp->m->sq_psn,
			(unsigned long long)qp->m->timeout,
			(unsigned long long)qp->m->retry_cnt,
			(unsigned long long)qp->m->rnr_retry,
			(unsigned long long)qp->m->max_rd_atomic);
}

/* Looks a key up in the MRs of every other trace (the peer's, when traced). */
static const struct rbt_model_mr *an_find_rkey(struct rbt_analyzer *an,
					       const struct an_trace *self, uint64_t rkey,
					       int *trace)
{
	for (int i = 0; i < an->n_traces; i++) {
		const struct an_trace *o = an->traces[i];
		if (o == self && an->n_traces > 1)
			continue;
		const struct rbt_model_mr *mr = rbt_model_mr_by_rkey(an->model, i, rkey);
		if (mr) {
			*trace = i;
			return mr;
		}
	}
	return NULL;
}

static const char *an_status_advice(uint64_t st)
{
	switch (st) {
	case IBV_WC_LOC_LEN_ERR:
		return "A receive buffer is smaller than the message, or a message "
		       "exceeds the "
		       "port's max message size: post receives at least as large as the "
		       "largest "
		       "send.";
	case IBV_WC_LOC_QP_OP_ERR:
		return "The WR is not valid for this QP (opcode for the QP type, too "
		       "many SGEs, "
		       "inline data larger than max_inline_data).";
	case IBV_WC_LOC_PROT_ERR:
		return "An SGE's lkey does not cover its address range, or the MR lacks "
		       "local "
		       "write access for a receive/READ: check lkey, address and length "
		       "against "
		       "the registered MR.";
	case IBV_WC_REM_ACCESS_ERR:
		return "The peer refused the remote access: the rkey is wrong or "
		       "deregistered, the "
		       "range leaves the peer's MR, or the MR lacks "
		       "REMOTE_WRITE/READ/ATOMIC "
		       "access. Exchange rkey and address after the peer registered the "
		       "MR.";
	case IBV_WC_REM_INV_REQ_ERR:
		return "The peer found the request invalid (e.g. a message larger than "
		       "its receive "
		       "buffer, or an opcode its QP does not allow by qp_access_flags).";
	case IBV_WC_REM_OP_ERR:
		return "The peer could not complete the operation (e.g. its receive WR "
		       "was "
		       "invalid); look at the peer's trace.";
	case IBV_WC_RETRY_EXC_ERR:
		return "The peer never acknowledged: wrong dest QP number / LID / GID, "
		       "PSNs that "
		       "do not match, the peer QP not in RTR, or the peer gone. Raise "
		       "timeout / "
		       "retry_cnt only if the path is really that slow.";
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return "The peer had no receive posted when the message arrived, more "
		       "times than "
		       "rnr_retry allows: post receives before the peer sends (keep the "
		       "receive "
		       "queue full), set rnr_retry=7 (infinite) and a suitable "
		       "min_rnr_timer.";
	case IBV_WC_BAD_RESP_ERR:
		return "Unexpected transport response: usually a PSN or QP mix-up "
		       "between the ends.";
	default:
		return "Look at the WR and the QP set-up shown above.";
	}
}

static void an_diag_qp_error(struct rbt_analyzer *an, struct an_trace *t,
			     struct an_qp *qp)
{
	struct an_str e = { 0 }, title = { 0 };
	const struct rbt_model_comp *c = &qp->first_err;
	bool rnr = c->status == IBV_WC_RNR_RETRY_EXC_ERR;
	an_str_printf(&title, "QP 0x%x went to ERR: first error completion %s (%llu)%s",
		      qp->m->qpn, an_wc_status_name(c->status),
		      (unsigned long long)c->status,
		      rnr ? ": the peer had no receive posted (RNR)" : "");
	an_str_printf(&e,
		      "t=%.3f ms poll_cq returned wr_id=0x%llx status=%s(%llu) "
		      "vendor_err=0x%llx on "
		      "QP 0x%x\n",
		      ms(t, c->poll_ts), (unsigned long long)c->wr_id,
		      an_wc_status_name(c->status), (unsigned long long)c->status,
		      (unsigned long long)c->vendor_err, qp->m->qpn);
	if (qp->first_err_wr_opcode != 255)
		an_str_printf(&e,
			      "the WR: %s %llu bytes, local addr=0x%llx lkey=0x%llx, "
			      "remote_addr=0x%llx "
			      "rkey=0x%llx\n",
			      an_wr_opcode_name((int)qp->first_err_wr_opcode),
			      (unsigned long long)qp->first_err_wr_bytes,
			      (unsigned long long)qp->first_err_sge_addr,
			      (unsigned long long)qp->first_err_lkey,
			      (unsigned long long)qp->first_err_remote_addr,
			      (unsigned long long)qp->first_err_rkey);
	an_setup_evidence(&e, qp);
	if (c->status == IBV_WC_REM_ACCESS_ERR && qp->first_err_wr_opcode != 255) {
		int tr = -1;
		const struct rbt_model_mr *mr =
			an_find_rkey(an, t, qp->first_err_rkey, &tr);
		if (!mr)
			an_str_printf(&e,
				      "rkey 0x%llx matches no MR registered (and still "
				      "alive) in "
				      "the %s\n",
				      (unsigned long long)qp->first_err_rkey,
				      an->n_traces > 1 ? "other traces" : "trace");
		else if (mr) {
			uint64_t a = qp->first_err_remote_addr,
				 n = qp->first_err_wr_bytes;
			if (a < mr->addr || a + n > mr->addr + mr->length)
				an_str_printf(&e,
					      "rkey 0x%llx is trace %d's MR [0x%llx, "
					      "+%llu): the "
					      "access [0x%llx, +%llu) leaves it\n",
					      (unsigned long long)mr->rkey, tr,
					      (unsigned long long)mr->addr,
					      (unsigned long long)mr->length,
					      (unsigned long long)a,
					      (unsigned long long)n);
			else
				an_str_printf(&e,
					      "rkey 0x%llx is trace %d's MR with access "
					      "0x%llx\n",
					      (unsigned long long)mr->rkey, tr,
					      (unsigned long long)mr->access);
		}
	}
	if (c->status == IBV_WC_LOC_PROT_ERR && qp->first_err_wr_opcode != 255) {
		const struct rbt_model_mr *mr =
			rbt_model_mr_by_lkey(an->model, t->idx, qp->first_err_lkey);
		if (!mr)
			an_str_printf(&e, "lkey 0x%llx matches no registered MR\n",
				      (unsigned long long)qp->first_err_lkey);
	}
	if (qp->peer) {
		const struct an_qp *p = qp->peer;
		an_str_printf(&e, "peer: trace %d QP 0x%x (state %s)\n", p->t->idx,
			      p->m->qpn, an_qp_state_name(p->m->state));
		an_setup_evidence(&e, p);
		if (qp->first_err_peer_known)
			an_str_printf(&e,
				      "when the error was polled the peer had %llu "
				      "receives posted "
				      "(%llu posted since it was created)\n",
				      (unsigned long long)qp->first_err_peer_rq,
				      (unsigned long long)qp->first_err_peer_recvs);
		if (p->rq_empty_count)
			an_str_printf(&e,
				      "peer's receive queue ran empty %llu times, the "
				      "longest for "
				      "%.3f ms from t=%.3f ms (receives posted late)\n",
				      (unsigned long long)p->rq_empty_count,
				      p->rq_empty_longest * p->t->mt->ns_per_tick / 1e6,
				      ms(p->t, p->rq_empty_longest_ts));
	} else if (rnr) {
		an_str_printf(
			&e,
			"the peer is not among the traces given: record it too to see "
			"when its receives were posted\n");
	}
	if (qp->flushes)
		an_str_printf(&e, "%llu further WRs completed with WR_FLUSH_ERR\n",
			      (unsigned long long)qp->flushes);
	an_add_finding(an, RBT_SEV_ERROR,
		       rnr ? RBT_FINDING_rnr_retry_exceeded : RBT_FINDING_qp_error,
		       t->idx, qp->m->qpn, an_ticks_ns(t, c->poll_ts), title.s, e.s,
		       an_status_advice(c->status));
	an_str_free(&e);
	an_str_free(&title);
}

/* The state of a QP at time ts, from its (time-ordered) history. */
static uint32_t an_state_at(const struct an_qp *qp, uint64_t ts, uint32_t fallback)
{
	/* the latest change at or before ts (the history may be out of time order
	 * when the modify was recorded by another thread) */
	uint32_t st = fallback;
	bool any = false;
	uint64_t best = 0;
	for (uint32_t i = 0; i < qp->m->n_hist; i++) {
		const struct rbt_model_state_change *h = &qp->m->hist[i];
		if (h->ret != 0 || h->ts > ts || (any && h->ts < best))
			continue;
		st = h->to;
		best = h->ts;
		any = true;
	}
	return st;
}

static void an_diag_bad_state(struct rbt_analyzer *an, struct an_trace *t,
			      struct an_qp *qp)
{
	uint32_t confirmed = 0, first = 0;
	for (uint32_t i = 0; i < qp->n_bad_state; i++) {
		uint32_t st =
			an_state_at(qp, qp->bad_state_ts[i], qp->bad_state_state[i]);
		bool bad =
			qp->bad_state_recv[i] ? st == IBV_QPS_RESET : st != IBV_QPS_RTS;
		if (bad && !confirmed++)
			first = i;
		qp->bad_state_state[i] = (uint8_t)st;
	}
	if (!confirmed)
		return;
	struct an_str e = { 0 }, title = { 0 };
	an_str_printf(&title, "%llu post%s on QP 0x%x while it was not in %s",
		      (unsigned long long)qp->bad_state_posts,
		      qp->bad_state_posts > 1 ? "s" : "", qp->m->qpn,
		      qp->bad_state_recv[first] ? "INIT/RTR/RTS" : "RTS");
	an_str_printf(&e, "t=%.3f ms %s on QP 0x%x in state %s returned %lld\n",
		      ms(t, qp->bad_state_ts[first]),
		      qp->bad_state_recv[first] ? "post_recv" : "post_send", qp->m->qpn,
		      an_qp_state_name(qp->bad_state_state[first]),
		      (long long)qp->bad_state_ret[first]);
	an_str_printf(&e, "state history:");
	for (uint32_t i = 0; i < qp->m->n_hist && i < 12; i++)
		an_str_printf(&e, " t=%.3f ms %s%s%s", ms(t, qp->m->hist[i].ts),
			      an_qp_state_name(qp->m->hist[i].to),
			      qp->m->hist[i].ret ? "(failed)" : "",
			      qp->m->hist[i].implicit ? "(by error completion)" : "");
	an_str_printf(&e, "\n");
	an_add_finding(
		an, RBT_SEV_ERROR, RBT_FINDING_post_not_rts, t->idx, qp->m->qpn,
		an_ticks_ns(t, qp->bad_state_ts[first]), title.s, e.s,
		"Send WRs are only processed in RTS (receives from INIT): finish the "
		"RESET->INIT->RTR->RTS transitions before posting, and check the return "
		"code of every ibv_modify_qp and ibv_post_*.");
	an_str_free(&e);
	an_str_free(&title);
}

static void an_diag_qp(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp)
{
	char title[256], ev[768];
	if (qp->err_seen) {
		an_diag_qp_error(an, t, qp);
	} else if (qp->flushes && !qp->m->modified_to_err) {
		snprintf(title, sizeof(title),
			 "QP 0x%x went to ERR without a recorded error completion",
			 qp->m->qpn);
		snprintf(ev, sizeof(ev),
			 "%llu WRs completed with WR_FLUSH_ERR; no modify_qp to ERR was "
			 "recorded\n",
			 (unsigned long long)qp->flushes);
		an_add_finding(an, RBT_SEV_WARNING, RBT_FINDING_qp_error, t->idx,
			       qp->m->qpn, 0, title, ev,
			       "Look for an asynchronous event (QP_FATAL) or an error "
			       "completion "
			       "lost from the trace.");
	}
	if (qp->n_bad_state)
		an_diag_bad_state(an, t, qp);
	/* Per-WR costs (a CQE, a doorbell) matter when WRs are small and many are in
	 * flight; a 64 KiB WRITE stream is limited by the wire, not by them. */
	bool busy = qp->posts >= 1000 && qp->posts_busy * 2 >= qp->posts &&
		    qp->post_wrs && qp->post_bytes / qp->post_wrs <= 4096;
	if (busy && qp->post_wrs && qp->post_wrs_signaled == qp->post_wrs) {
		snprintf(title, sizeof(title), "every send WR on QP 0x%x is signaled",
			 qp->m->qpn);
		snprintf(ev, sizeof(ev),
			 "%llu of %llu send WRs signaled (sq_sig_all=%llu); %llu of %llu "
			 "posts "
			 "were made while earlier WRs were still outstanding\n",
			 (unsigned long long)qp->post_wrs_signaled,
			 (unsigned long long)qp->post_wrs,
			 (unsigned long long)qp->m->sq_sig_all,
			 (unsigned long long)qp->posts_busy,
			 (unsigned long long)qp->posts);
		an_add_finding(an, RBT_SEV_WARNING, RBT_FINDING_all_signaled, t->idx,
			       qp->m->qpn, 0, title, ev,
			       "Signal one WR in N (e.g. every 16th, and the last of a "
			       "burst): each "
			       "completion costs a CQE write and a poll. Unsignaled WRs "
			       "complete "
			       "with the next signaled one.");
	}
	if (busy && qp->max_chain == 1) {
		snprintf(title, sizeof(title), "one WR per doorbell on busy QP 0x%x",
			 qp->m->qpn);
		snprintf(ev, sizeof(ev),
			 "%llu post_send calls carried one WR each; %llu of them were "
			 "made while "
			 "earlier WRs were outstanding\n",
			 (unsigned long long)qp->posts,
			 (unsigned long long)qp->posts_busy);
		an_add_finding(
			an, RBT_SEV_INFO, RBT_FINDING_one_wr_per_doorbell, t->idx,
			qp->m->qpn, 0, title, ev,
			"Chain WRs (wr->next) and post them with one ibv_post_send: one "
			"doorbell (MMIO write) per batch instead of per WR.");
	}
	if (qp->inline_missed >= 100 && qp->inline_missed * 2 >= qp->inline_eligible) {
		snprintf(title, sizeof(title),
			 "small messages on QP 0x%x not sent inline though it allows "
			 "%llu bytes",
			 qp->m->qpn, (unsigned long long)qp->m->max_inline);
		snprintf(ev, sizeof(ev),
			 "%llu of %llu SEND/WRITE WRs of at most max_inline_data=%llu "
			 "bytes were "
			 "posted without IBV_SEND_INLINE\n",
			 (unsigned long long)qp->inline_missed,
			 (unsigned long long)qp->inline_eligible,
			 (unsigned long long)qp->m->max_inline);
		an_add_finding(
			an, RBT_SEV_WARNING, RBT_FINDING_not_inlined, t->idx, qp->m->qpn,
			0, title, ev,
			"Set IBV_SEND_INLINE on small sends: the data goes with the "
			"doorbell and the NIC saves a DMA read (and the buffer is free "
			"at "
			"once).");
	}
	if (qp->unaligned >= 16 && qp->unaligned * 2 >= qp->data_wrs_256) {
		snprintf(title, sizeof(title), "unaligned buffers on QP 0x%x",
			 qp->m->qpn);
		snprintf(ev, sizeof(ev),
			 "%llu of %llu WRs of >= 256 bytes have an SGE address not "
			 "aligned to 64 "
			 "bytes\n",
			 (unsigned long long)qp->unaligned,
			 (unsigned long long)qp->data_wrs_256);
		an_add_finding(
			an, RBT_SEV_WARNING, RBT_FINDING_unaligned_buffer, t->idx,
			qp->m->qpn, 0, title, ev,
			"Align buffers to the cache line (64 B) or better: unaligned DMA "
			"costs extra PCIe transactions.");
	}
	if (qp->unaligned_atomic) {
		snprintf(title, sizeof(title),
			 "atomic on QP 0x%x to an unaligned remote address", qp->m->qpn);
		snprintf(ev, sizeof(ev),
			 "%llu atomic WRs with remote_addr not 8-byte aligned, first "
			 "0x%llx\n",
			 (unsigned long long)qp->unaligned_atomic,
			 (unsigned long long)qp->unaligned_atomic_addr);
		an_add_finding(an, RBT_SEV_ERROR, RBT_FINDING_unaligned_buffer, t->idx,
			       qp->m->qpn, 0, title, ev,
			       "Atomics need an 8-byte aligned remote address.");
	}
}

static void an_diag_cqs(struct rbt_analyzer *an, struct an_trace *t)
{
	char title[256], ev[512];
	uint32_t pos = 0;
	for (struct an_cq *cq; (cq = an_cq_next(an, t, &pos));) {
		if (cq->overrun) {
			snprintf(title, sizeof(title),
				 "CQ 0x%llx overran (IBV_EVENT_CQ_ERR)",
				 (unsigned long long)cq->m->res.handle);
			snprintf(ev, sizeof(ev),
				 "t=%.3f ms async event CQ_ERR on CQ 0x%llx (depth %llu, "
				 "peak "
				 "outstanding %lld)\n",
				 ms(t, cq->overrun_ts),
				 (unsigned long long)cq->m->res.handle,
				 (unsigned long long)cq->m->cqe, (long long)cq->m->peak);
			an_add_finding(an, RBT_SEV_ERROR, RBT_FINDING_cq_overrun, t->idx,
				       0, an_ticks_ns(t, cq->overrun_ts), title, ev,
				       "Make the CQ at least as deep as the completions "
				       "that can be "
				       "outstanding (signaled sends + posted receives of "
				       "every QP "
				       "on it), and poll it more often.");
		} else if (cq->m->cqe && cq->m->peak > (int64_t)cq->m->cqe &&
			   cq->m->capacity > cq->m->cqe) {
			snprintf(title, sizeof(title),
				 "CQ 0x%llx too small: %lld completions outstanding, "
				 "depth %llu",
				 (unsigned long long)cq->m->res.handle,
				 (long long)cq->m->peak, (unsigned long long)cq->m->cqe);
			snprintf(ev, sizeof(ev),
				 "t=%.3f ms: %lld signaled sends and posted receives "
				 "awaited a "
				 "completion on CQ 0x%llx of depth %llu; the QPs on it "
				 "can have "
				 "%llu WRs outstanding\n",
				 ms(t, cq->m->peak_ts), (long long)cq->m->peak,
				 (unsigned long long)cq->m->res.handle,
				 (unsigned long long)cq->m->cqe,
				 (unsigned long long)cq->m->capacity);
			an_add_finding(an, RBT_SEV_ERROR, RBT_FINDING_cq_too_small,
				       t->idx, 0, an_ticks_ns(t, cq->m->peak_ts), title,
				       ev,
				       "Create the CQ with cqe >= the sum of max_send_wr "
				       "(signaled) "
				       "and max_recv_wr of the QPs using it; an overrun "
				       "moves the "
				       "CQ and its QPs to error.");
		}
	}
}

static void an_diag_trace(struct rbt_analyzer *an, struct an_trace *t)
{
	char title[256], ev[768];
	uint64_t lost = t->lost_events + t->mt->rstats.lost_events_in_bad_chunks;
	/* bad_bytes alone: a damaged file header (clock calibration unknown, so
	 * times may be raw ticks) or bytes after the trailer. No trailer: the
	 * recorder was killed, and its last moments may be missing. */
	bool unfinished = t->mt->have_stats && !t->mt->finished;
	if (lost || t->mt->rstats.bad_chunks || t->mt->rstats.truncated ||
	    t->mt->rstats.bad_bytes || unfinished) {
		snprintf(title, sizeof(title), "trace %s is incomplete", t->mt->name);
		snprintf(ev, sizeof(ev),
			 "%llu events lost by the recorder or in damaged chunks; %llu "
			 "damaged "
			 "chunks, %llu damaged bytes, %s%s\n",
			 (unsigned long long)lost,
			 (unsigned long long)t->mt->rstats.bad_chunks,
			 (unsigned long long)t->mt->rstats.bad_bytes,
			 t->mt->rstats.truncated ? "the file is truncated"
						 : "not truncated",
			 unfinished
				 ? ", not finished (no trailer: the recorder was killed "
				   "or is still running)"
				 : "");
		an_add_finding(
			an, RBT_SEV_WARNING, RBT_FINDING_trace_incomplete, t->idx, 0, 0,
			title, ev,
			"This report's numbers count only what could be read of the "
			"trace; joins across the gap may be missing.");
	}
	if (t->mr_traffic.regs || t->mr_traffic.deregs) {
		snprintf(
			title, sizeof(title),
			"%llu MR registrations and %llu deregistrations on the data path",
			(unsigned long long)t->mr_traffic.regs,
			(unsigned long long)t->mr_traffic.deregs);
		snprintf(ev, sizeof(ev),
			 "between the first post (t=%.3f ms) and the last (t=%.3f ms); "
			 "first "
			 "registration at t=%.3f ms; %.3f ms spent in reg/dereg during "
			 "traffic\n",
			 ms(t, t->first_post_ts), ms(t, t->last_post_ts),
			 t->mr_traffic.n_ts ? ms(t, t->mr_reg_ts[0]) : 0.0,
			 t->mr_traffic.ns / 1e6);
		an_add_finding(
			an, RBT_SEV_WARNING, RBT_FINDING_mr_on_datapath, t->idx, 0,
			t->mr_traffic.n_ts ? an_ticks_ns(t, t->mr_reg_ts[0]) : 0, title,
			ev,
			"Registering memory pins pages and updates the NIC's tables "
			"(tens of us to ms): register buffers once up front, or use a "
			"pool of registered buffers.");
	}
	if (t->early_dereg) {
		snprintf(title, sizeof(title),
			 "MR deregistered while QP 0x%x that used it still existed",
			 t->early_dereg_qpn);
		snprintf(ev, sizeof(ev),
			 "t=%.3f ms dereg_mr of [0x%llx, +%llu) lkey=0x%llx, used by QP "
			 "0x%x which "
			 "was not destroyed yet%s; %llu such deregistrations\n",
			 ms(t, t->early_dereg_ts),
			 (unsigned long long)t->early_dereg_addr,
			 (unsigned long long)t->early_dereg_len,
			 (unsigned long long)t->early_dereg_lkey, t->early_dereg_qpn,
			 t->early_dereg_outstanding ? " and had WRs outstanding" : "",
			 (unsigned long long)t->early_dereg);
		an_add_finding(
			an, t->early_dereg_outstanding ? RBT_SEV_ERROR : RBT_SEV_WARNING,
			RBT_FINDING_mr_dereg_before_qp, t->idx, t->early_dereg_qpn,
			an_ticks_ns(t, t->early_dereg_ts), title, ev,
			"Destroy (or drain) the QPs first, then deregister their MRs: "
			"a WR still in flight on a deregistered MR fails with a "
			"protection error.");
	}
	for (struct an_qp *qp = t->qp_list; qp; qp = qp->next)
		an_diag_qp(an, t, qp);
	an_diag_cqs(an, t);
}

/* Cross-trace checks of connected QPs: MTU, PSNs, dest QPN. */
void an_pair_qps(struct rbt_analyzer *an)
{
	char title[256], ev[1024];
	for (int i = 0; i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		for (struct an_qp *qp = t->qp_list; qp; qp = qp->next) {
			if (!qp->m->have_rtr ||
			    (qp->m->type != IBV_QPT_RC && qp->m->type != IBV_QPT_UC))
				continue;
			struct an_qp *p = qp->peer;
			if (p) {
				/* report each pair once: from its first end */
				bool first = qp->t->idx < p->t->idx ||
					     (qp->t == p->t && qp->m->qpn < p->m->qpn);
				if (first && qp->m->path_mtu != p->m->path_mtu) {
					snprintf(title, sizeof(title),
						 "path MTU mismatch: QP 0x%x (trace %d) "
						 "uses %llu, "
						 "its peer QP 0x%x (trace %d) %llu",
						 qp->m->qpn, t->idx,
						 (unsigned long long)qp->m->path_mtu,
						 p->m->qpn, p->t->idx,
						 (unsigned long long)p->m->path_mtu);
					snprintf(ev, sizeof(ev),
						 "t=%.3f ms modify_qp(QP 0x%x -> RTR) "
						 "path_mtu=%llu; "
						 "t=%.3f ms modify_qp(QP 0x%x -> RTR) "
						 "path_mtu=%llu "
						 "(enum ibv_mtu: 1=256 ... 5=4096)\n",
						 ms(t, qp->m->rtr_ts), qp->m->qpn,
						 (unsigned long long)qp->m->path_mtu,
						 ms(p->t, p->m->rtr_ts), p->m->qpn,
						 (unsigned long long)p->m->path_mtu);
					an_add_finding(
						an, RBT_SEV_WARNING,
						RBT_FINDING_mtu_mismatch, -1, qp->m->qpn,
						an_ticks_ns(t, qp->m->rtr_ts), title, ev,
						"Use the same path MTU on both ends: the "
						"smaller active_mtu of the two ports.");
				}
				for (int d = 0; d < 2; d++) {
					struct an_qp *a = d ? p : qp, *b = d ? qp : p;
					if (!first || !a->m->have_rts ||
					    a->m->sq_psn == b->m->rq_psn)
						continue;
					snprintf(title, sizeof(title),
						 "PSN mismatch: QP 0x%x (trace %d) "
						 "starts sending at "
						 "PSN %llu, its peer QP 0x%x (trace %d) "
						 "expects %llu",
						 a->m->qpn, a->t->idx,
						 (unsigned long long)a->m->sq_psn,
						 b->m->qpn, b->t->idx,
						 (unsigned long long)b->m->rq_psn);
					snprintf(ev, sizeof(ev),
						 "t=%.3f ms modify_qp(QP 0x%x -> RTS) "
						 "sq_psn=%llu; "
						 "t=%.3f ms modify_qp(QP 0x%x -> RTR) "
						 "rq_psn=%llu\n",
						 ms(a->t, a->m->rts_ts), a->m->qpn,
						 (unsigned long long)a->m->sq_psn,
						 ms(b->t, b->m->rtr_ts), b->m->qpn,
						 (unsigned long long)b->m->rq_psn);
					an_add_finding(an, RBT_SEV_ERROR,
						       RBT_FINDING_psn_mismatch, -1,
						       a->m->qpn,
						       an_ticks_ns(a->t, a->m->rts_ts),
						       title, ev,
						       "Each end's sq_psn must equal the "
						       "other end's "
						       "rq_psn: exchange the PSN with "
						       "the QP number.");
				}
				continue;
			}
			if (an->n_traces < 2)
				continue;
			struct an_qp *target = NULL;
			for (int k = 0; k < an->n_traces && !target; k++)
				target = an_qp_of(rbt_model_qp_by_num(
					an->model, k, (uint32_t)qp->m->dest_qpn));
			if (target == qp)
				target = NULL;
			if (target) {
				snprintf(title, sizeof(title),
					 "QP 0x%x (trace %d) targets QP 0x%x, which "
					 "targets 0x%llx",
					 qp->m->qpn, t->idx, target->m->qpn,
					 (unsigned long long)target->m->dest_qpn);
				snprintf(ev, sizeof(ev),
					 "t=%.3f ms modify_qp(QP 0x%x -> RTR) "
					 "dest_qp_num=0x%llx; QP "
					 "0x%x in trace %d has dest_qp_num=0x%llx\n",
					 ms(t, qp->m->rtr_ts), qp->m->qpn,
					 (unsigned long long)qp->m->dest_qpn,
					 target->m->qpn, target->t->idx,
					 (unsigned long long)target->m->dest_qpn);
				an_add_finding(
					an, RBT_SEV_ERROR, RBT_FINDING_dest_qpn_mismatch,
					t->idx, qp->m->qpn, an_ticks_ns(t, qp->m->rtr_ts),
					title, ev,
					"The two ends must name each other: exchange QP "
					"numbers out of band and use the peer's.");
			} else {
				snprintf(title, sizeof(title),
					 "dest QP number 0x%llx of QP 0x%x (trace %d) "
					 "matches no QP "
					 "in the traces",
					 (unsigned long long)qp->m->dest_qpn, qp->m->qpn,
					 t->idx);
				snprintf(ev, sizeof(ev),
					 "t=%.3f ms modify_qp(QP 0x%x -> RTR) "
					 "dest_qp_num=0x%llx; no QP "
					 "of the %d traces has that number\n",
					 ms(t, qp->m->rtr_ts), qp->m->qpn,
					 (unsigned long long)qp->m->dest_qpn,
					 an->n_traces);
				an_add_finding(an, RBT_SEV_WARNING,
					       RBT_FINDING_dest_qpn_unmatched, t->idx,
					       qp->m->qpn, an_ticks_ns(t, qp->m->rtr_ts),
					       title, ev,
					       "Check the QP number exchanged out of "
					       "band (a stale "
					       "or mistyped number gives RETRY_EXC_ERR), "
					       "or give "
					       "the peer's trace too.");
			}
		}
	}
}

/* Messages that waited for a receive: counted beyond the refined clock offset plus a
 * margin, so clock error alone never makes one. */
static void an_diag_late_recvs(struct rbt_analyzer *an)
{
	char title[256], ev[1024];
	for (int i = 0; i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		for (struct an_qp *qp = t->qp_list; qp; qp = qp->next) {
			struct an_qp *tx = qp->peer;
			if (!tx || !qp->late_recv.count)
				continue;
			double theta =
				0; /* how far our aligned clock runs ahead of tx's */
			if (qp->have_min_in && tx->have_min_in)
				theta = (qp->min_in_ns - tx->min_in_ns) / 2;
			double margin = (theta > 0 ? theta : -theta) + 5000;
			uint64_t late = 0;
			uint32_t idx = 0;
			double lo, hi;
			uint64_t n;
			while (an_hist_next_bucket(&qp->late_recv, &idx, &lo, &hi, &n))
				if (lo - theta > margin)
					late += n;
			uint64_t msgs = qp->late_recv.count;
			if (late < 10 || late * 100 < msgs)
				continue;
			snprintf(title, sizeof(title),
				 "receives posted late on QP 0x%x: %llu of %llu messages "
				 "from QP "
				 "0x%x were sent before their receive was posted",
				 qp->m->qpn, (unsigned long long)late,
				 (unsigned long long)msgs, tx->m->qpn);
			snprintf(ev, sizeof(ev),
				 "up to %.3f ms late: the receive posted at t=%.3f ms "
				 "(trace %d) "
				 "took a message sent that long before by QP 0x%x (trace "
				 "%d); "
				 "clock offset %.0f ns allowed for\n"
				 "receiver QP 0x%x min_rnr_timer=%llu; sender QP 0x%x "
				 "rnr_retry=%llu "
				 "timeout=%llu\n"
				 "receive queue of QP 0x%x ran empty %llu times\n",
				 (qp->late_max_ns - theta) / 1e6,
				 an_ticks_ns(t, qp->late_max_ts) / 1e6, t->idx,
				 tx->m->qpn, tx->t->idx, margin - 5000, qp->m->qpn,
				 (unsigned long long)qp->m->min_rnr_timer, tx->m->qpn,
				 (unsigned long long)tx->m->rnr_retry,
				 (unsigned long long)tx->m->timeout, qp->m->qpn,
				 (unsigned long long)qp->rq_empty_count);
			an_add_finding(an, RBT_SEV_WARNING, RBT_FINDING_rnr_late_receives,
				       t->idx, qp->m->qpn,
				       an_ticks_ns(t, qp->late_max_ts), title, ev,
				       "A message that finds no receive is NAKed (RNR) "
				       "and resent "
				       "after min_rnr_timer, or fails once rnr_retry "
				       "runs out: keep "
				       "receives posted ahead of the peer's sends (post "
				       "them before "
				       "the request that triggers the answer, and refill "
				       "early).");
		}
	}
}

void an_diagnose(struct rbt_analyzer *an)
{
	an_diag_late_recvs(an);
	for (int i = 0; i < an->n_traces; i++)
		an_diag_trace(an, an->traces[i]);
	an_stall_diagnose(an);
	an_pair_qps(an);
}
