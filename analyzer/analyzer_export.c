/* analyzer_export.c - `rbtrace export`: rows for the engines users already run
 * (DuckDB, Spark, pandas): one row per completed WR, streamed while the traces are
 * read, or one row per resource after the analysis; CSV with a header line, or
 * NDJSON (one JSON object a line, through util/rbt_json.h). The columns and their
 * meaning are docs/export.md; a WR's phases are the numbers the report's
 * histograms get (an_wr_times()), so a percentile computed from the rows agrees
 * with the report's within its histogram's bucket width.
 *
 * It keeps nothing per WR and never reorders: rows come in completion order.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

/* One row: columns in schema order, each a number, a string, or empty (null). */
enum { EX_NONE, EX_U64, EX_STR };
struct ex_col {
	const char *name;
	int type;
	uint64_t u;
	const char *s;
};

static void ex_csv_str(FILE *f, const char *s)
{
	if (!s)
		return;
	if (!s[strcspn(s, ",\"\n\r")]) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static void ex_row(struct rbt_analyzer *an, FILE *f, const struct ex_col *c, int n,
		   bool *header)
{
	if (!an->opts.export_ndjson) {
		if (!*header) {
			for (int i = 0; i < n; i++)
				fprintf(f, "%s%s", i ? "," : "", c[i].name);
			fputc('\n', f);
			*header = true;
		}
		for (int i = 0; i < n; i++) {
			if (i)
				fputc(',', f);
			if (c[i].type == EX_U64)
				fprintf(f, "%" PRIu64, c[i].u);
			else if (c[i].type == EX_STR)
				ex_csv_str(f, c[i].s);
		}
		fputc('\n', f);
		return;
	}
	struct rbt_json j;
	rbt_json_init(&j, f);
	rbt_json_obj(&j);
	for (int i = 0; i < n; i++) {
		rbt_json_key(&j, c[i].name);
		if (c[i].type == EX_U64)
			rbt_json_u64(&j, c[i].u);
		else if (c[i].type == EX_STR)
			rbt_json_str(&j, c[i].s);
		else
			rbt_json_null(&j);
	}
	rbt_json_obj_end(&j);
	fputc('\n', f);
}

#define U(n, v) ((struct ex_col){ n, EX_U64, (uint64_t)(v), NULL })
#define S(n, v) ((struct ex_col){ n, EX_STR, 0, (v) })
#define OPT(n, have, v) \
	((struct ex_col){ n, (have) ? EX_U64 : EX_NONE, (uint64_t)(v), NULL })
/* the columns every row starts with: which trace */
#define EX_TRACE_COLS(t) \
	U("trace", (t)->idx), S("trace_name", (t)->mt->name), U("pid", (t)->mt->hdr.pid)

static void ex_wr(struct rbt_analyzer *an, struct an_trace *t, struct an_qp *qp,
		  const struct rbt_model_wr *w, const struct rbt_model_comp *c)
{
	struct an_wr_times x;
	an_wr_times(t, w, c, &x);
	bool s = !w->recv;
	char wrid[24];
	snprintf(wrid, sizeof(wrid), "0x%" PRIx64, w->wr_id);
	struct ex_col col[] = {
		EX_TRACE_COLS(t),
		U("tid", w->tid),
		U("qp_num", qp->m->qpn),
		S("qp_type", an_qp_type_name(qp->m->type)),
		S("kind", s ? "send" : "recv"),
		S("opcode", an_wr_opcode_name(w->recv ? RBT_MODEL_RECV : w->opcode)),
		S("wr_id", wrid),
		U("bytes", w->bytes),
		U("signaled", s ? w->signaled : 1),
		U("inline", w->inl),
		U("post_ns", rbt_model_aligned_u64(t->mt, (double)w->post_ts)),
		U("poll_exit_ns", rbt_model_aligned_u64(t->mt, (double)x.poll_exit)),
		OPT("post_share_ns", s, x.post),
		OPT("nic_ns", s && c->exact, x.nic),
		OPT("poll_ns", c->exact, x.poll),
		OPT("nic_lo_ns", s && !c->exact, x.nic_lo),
		OPT("nic_hi_ns", s && !c->exact, x.nic_hi),
		OPT("poll_hi_ns", !c->exact, x.poll_hi),
		OPT("e2e_ns", s, x.e2e),
		OPT("recv_wait_ns", !s, x.recv_wait),
		U("nic_exact", c->exact),
		S("status", an_wc_status_name(c->status)),
		U("vendor_err", c->vendor_err),
	};
	ex_row(an, an->opts.export_wrs, col, (int)(sizeof(col) / sizeof(col[0])),
	       &an->export_header);
}

static void ex_res(struct rbt_analyzer *an, FILE *f, const struct an_trace *t,
		   const struct rbt_model_res *r)
{
	const struct rbt_model_qp *q = r->kind == RBT_MODEL_QP ? (const void *)r : NULL;
	const struct rbt_model_cq *cq = r->kind == RBT_MODEL_CQ ? (const void *)r : NULL;
	const struct rbt_model_mr *mr = r->kind == RBT_MODEL_MR ? (const void *)r : NULL;
	const struct an_qp *aq = q ? an_qp_of(q) : NULL;
	const struct an_cq *ac = cq ? an_cq_of(cq) : NULL;
	char h[24];
	snprintf(h, sizeof(h), "0x%" PRIx64, r->handle);
	struct ex_col col[] = {
		EX_TRACE_COLS(t),
		S("kind", rbt_model_kind_name(r->kind)),
		U("id", r->id),
		S("handle", h),
		OPT("create_ns", r->created,
		    rbt_model_aligned_u64(t->mt, (double)r->create_ts)),
		OPT("destroy_ns", r->destroyed,
		    rbt_model_aligned_u64(t->mt, (double)r->destroy_ts)),
		OPT("qp_num", q, q ? q->qpn : 0),
		S("qp_type", q ? an_qp_type_name(q->type) : NULL),
		S("qp_state", q ? an_qp_state_name(q->state) : NULL),
		OPT("dest_qp_num", q && q->have_rtr, q ? q->dest_qpn : 0),
		OPT("peer_trace", q && q->peer, q && q->peer ? q->peer->res.trace : 0),
		OPT("send_wrs", aq, aq ? aq->post_wrs : 0),
		OPT("recv_wrs", aq, aq ? aq->recv_wrs : 0),
		OPT("send_bytes", aq, aq ? aq->post_bytes : 0),
		OPT("cqe", cq, cq ? cq->cqe : 0),
		OPT("polls", ac, ac ? ac->polls : 0),
		OPT("empty_polls", ac, ac ? ac->empty_polls : 0),
		OPT("completions", ac, ac ? ac->polled_wcs : 0),
		OPT("peak_outstanding", cq, cq && cq->peak > 0 ? cq->peak : 0),
		OPT("mr_addr", mr, mr ? mr->addr : 0),
		OPT("mr_length", mr, mr ? mr->length : 0),
		OPT("lkey", mr, mr ? mr->lkey : 0),
		OPT("rkey", mr, mr ? mr->rkey : 0),
	};
	ex_row(an, f, col, (int)(sizeof(col) / sizeof(col[0])), &an->export_header);
}

int rbt_analyzer_write_resources(struct rbt_analyzer *an, FILE *out)
{
	if (!an->finished)
		return -EINVAL;
	an->export_header = false;
	for (int i = 0; i < an->n_traces; i++) {
		const struct an_trace *t = an->traces[i];
		if (!an_filter_shows_trace(an, t))
			continue;
		for (int k = 0; k < RBT_MODEL_KINDS; k++) {
			/* oldest first: the lists are newest first */
			uint32_t n = 0, cap = 0;
			const struct rbt_model_res **v = NULL;
			for (struct rbt_model_res *r =
				     rbt_model_list(an->model, t->idx, k);
			     r; r = r->next_of_kind) {
				if (rbt_grow(&v, &cap, n + 1, sizeof(*v), 64, 0)) {
					free(v);
					return -ENOMEM;
				}
				v[n++] = r;
			}
			while (n) {
				const struct rbt_model_res *r = v[--n];
				if (k != RBT_MODEL_QP || !r->user ||
				    an_filter_shows_qp(an, r->user))
					ex_res(an, out, t, r);
			}
			free(v);
		}
	}
	return ferror(out) ? -EIO : 0;
}

const struct an_sink_ops an_sink_export = {
	.name = "export",
	.per_wr = true,
	.wr = ex_wr,
};
