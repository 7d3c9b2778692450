/* analyzer_diff.c - `rbtrace diff A B` (rbt_analyzer_diff): two traces of one job,
 * each analysed on its own through the model, compared per QP (paired in creation
 * order) and opcode with the report's own numbers: WRs posted, WRs completed,
 * completions by status (judged), and the report's phases (shown, never judged).
 *
 * It never joins or converts a clock itself: the analyses did. Writes only to the
 * FILE * it is given; JSON through the one writer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

struct an_diff_side {
	struct rbt_analyzer *an;
	struct an_qp **qps; /* created QPs, oldest first */
	int n;
};

struct an_diff {
	struct rbt_json j;
	FILE *f;
	bool json;
	int ndiv;
};

/* The phases one row shows, per opcode slot of a QP, merged over size classes. */
struct an_diff_ph {
	uint64_t wrs, bytes, errors;
	struct rbt_phase_summary p[RBT_PHASE_COUNT];
};

static void an_diff_warn(FILE *log, const char *path, const struct rbt_model_trace *t)
{
	const struct rbt_reader_stats *s = &t->rstats;
	bool damaged = s->bad_chunks || s->truncated || s->bad_bytes;
	if (!t->have_stats || (!damaged && t->finished))
		return;
	/* one line, as report gives: a damaged header loses the clock rate, a missing
	 * trailer the recording's last moments; what could be read is compared */
	fprintf(log,
		"rbtrace diff: warning: %s: %s%s%s%s; comparing what could be read\n",
		path, damaged ? "damaged (" : "", damaged ? t->reader_error : "",
		damaged ? ")" : "",
		t->finished || s->truncated ? ""
		: damaged		    ? ", not finished cleanly (no trailer)"
			  : "not finished cleanly (no trailer: the recorder was "
			    "killed or is still running)");
}

static int an_diff_load(struct an_diff_side *d, const char *path, FILE *log)
{
	char err[512] = "";
	int ret = rbt_analyzer_create(NULL, &d->an);
	if (ret)
		return ret;
	ret = rbt_analyzer_run_files(d->an, &path, 1, err, sizeof(err));
	if (ret < 0) {
		fprintf(log, "rbtrace diff: %s\n", err[0] ? err : rbt_strerror(ret));
		return ret;
	}
	rbt_analyzer_finish(d->an);
	an_diff_warn(log, path, d->an->traces[0]->mt);
	for (struct an_qp *q = d->an->traces[0]->qp_list; q; q = q->next)
		d->n += q->m->res.created;
	d->qps = calloc(d->n ? d->n : 1, sizeof(*d->qps));
	if (!d->qps)
		return -ENOMEM;
	int k = d->n;
	for (struct an_qp *q = d->an->traces[0]->qp_list; q; q = q->next)
		if (q->m->res.created)
			d->qps[--k] = q;
	return 0;
}

static void an_diff_ph(const struct an_qp *qp, int slot, struct an_diff_ph *out)
{
	memset(out, 0, sizeof(*out));
	if (!qp)
		return;
	for (int p = 0; p < RBT_PHASE_COUNT; p++) {
		struct an_hist h = { 0 };
		for (int sc = 0; sc < AN_SIZE_CLASSES; sc++) {
			const struct an_group *g =
				qp->groups[slot * AN_SIZE_CLASSES + sc];
			if (!g)
				continue;
			an_hist_merge(&h, &g->h[p]);
			if (p == 0) {
				out->wrs += g->wrs;
				out->bytes += g->bytes;
				out->errors += g->errors;
			}
		}
		an_hist_summary(&h, &out->p[p]);
		an_hist_free(&h);
	}
}

static const char *const an_diff_phase[] = {
	[RBT_PHASE_POST] = "post",	     [RBT_PHASE_NIC] = "nic",
	[RBT_PHASE_POLL] = "poll",	     [RBT_PHASE_E2E] = "e2e",
	[RBT_PHASE_NIC_LO] = "nic_lo",	     [RBT_PHASE_NIC_HI] = "nic_hi",
	[RBT_PHASE_POLL_HI] = "poll_hi",     [RBT_PHASE_RECV_WAIT] = "recv_wait",
	[RBT_PHASE_RECV_POLL] = "recv_poll", [RBT_PHASE_RECV_POLL_HI] = "recv_poll_hi",
};

static void an_diff_json_side(struct rbt_json *j, const char *key,
			      const struct an_diff_ph *s)
{
	rbt_json_key(j, key);
	rbt_json_obj(j);
	rbt_json_ku64(j, "n", s->wrs);
	rbt_json_ku64(j, "bytes", s->bytes);
	rbt_json_ku64(j, "errors", s->errors);
	rbt_json_key(j, "phases");
	rbt_json_obj(j);
	for (int p = 0; p < RBT_PHASE_COUNT; p++) {
		if (!s->p[p].count)
			continue;
		rbt_json_key(j, an_diff_phase[p]);
		rbt_json_obj(j);
		rbt_json_ku64(j, "count", s->p[p].count);
		rbt_json_kdbl(j, "p50_ns", "%.1f", s->p[p].p50);
		rbt_json_kdbl(j, "p99_ns", "%.1f", s->p[p].p99);
		rbt_json_obj_end(j);
	}
	rbt_json_obj_end(j);
	rbt_json_obj_end(j);
}

/* "post 300 ns  nic 1.9..2.5 us  poll <= 550 ns  e2e 2.8 / 2.8 us" for a side. */
static void an_diff_text_phases(FILE *f, const struct an_diff_ph *s, bool recv)
{
	const struct rbt_phase_summary *p = s->p;
	if (!s->wrs) {
		fputs("none", f);
		return;
	}
	if (recv) {
		fprintf(f, "wait p50 %.0f p99 %.0f", p[RBT_PHASE_RECV_WAIT].p50,
			p[RBT_PHASE_RECV_WAIT].p99);
		return;
	}
	fprintf(f, "post %.0f", p[RBT_PHASE_POST].p50);
	if (p[RBT_PHASE_NIC].count)
		fprintf(f, " nic %.0f poll %.0f", p[RBT_PHASE_NIC].p50,
			p[RBT_PHASE_POLL].p50);
	if (p[RBT_PHASE_NIC_HI].count)
		fprintf(f, " nic %.0f..%.0f poll <=%.0f", p[RBT_PHASE_NIC_LO].p50,
			p[RBT_PHASE_NIC_HI].p50, p[RBT_PHASE_POLL_HI].p50);
	fprintf(f, " e2e p50 %.0f p99 %.0f", p[RBT_PHASE_E2E].p50, p[RBT_PHASE_E2E].p99);
}

/* Opens a JSON row of QP #i: {"qp": i, "kind": kind, ... */
static struct rbt_json *an_diff_row(struct an_diff *d, int i, const char *kind)
{
	rbt_json_obj(&d->j);
	rbt_json_ki64(&d->j, "qp", i);
	rbt_json_kstr(&d->j, "kind", kind);
	return &d->j;
}

static void an_diff_posts(struct an_diff *d, int i, const struct an_qp *a,
			  const struct an_qp *b)
{
	for (int k = 0; k < 14; k++) {
		if (!a->op_posts[k] && !b->op_posts[k])
			continue;
		bool dv = a->op_posts[k] != b->op_posts[k] ||
			  a->op_bytes[k] != b->op_bytes[k] ||
			  a->op_min[k] != b->op_min[k] || a->op_max[k] != b->op_max[k];
		d->ndiv += dv;
		const char *op = an_wr_opcode_name(an_slot_opcode(k));
		if (!d->json) {
			fprintf(d->f,
				"%c  post %-20s count %8llu / %-8llu bytes %llu / %llu  "
				"size %llu..%llu / %llu..%llu\n",
				dv ? '!' : ' ', op, (unsigned long long)a->op_posts[k],
				(unsigned long long)b->op_posts[k],
				(unsigned long long)a->op_bytes[k],
				(unsigned long long)b->op_bytes[k],
				(unsigned long long)a->op_min[k],
				(unsigned long long)a->op_max[k],
				(unsigned long long)b->op_min[k],
				(unsigned long long)b->op_max[k]);
			continue;
		}
		struct rbt_json *j = an_diff_row(d, i, "post");
		rbt_json_kstr(j, "op", op);
		for (int s = 0; s < 2; s++) {
			const struct an_qp *q = s ? b : a;
			rbt_json_key(j, s ? "b" : "a");
			rbt_json_obj(j);
			rbt_json_ku64(j, "n", q->op_posts[k]);
			rbt_json_ku64(j, "bytes", q->op_bytes[k]);
			rbt_json_ku64(j, "min", q->op_min[k]);
			rbt_json_ku64(j, "max", q->op_max[k]);
			rbt_json_obj_end(j);
		}
		rbt_json_kbool(j, "diverges", dv);
		rbt_json_obj_end(j);
	}
}

static void an_diff_done(struct an_diff *d, int i, const struct an_qp *a,
			 const struct an_qp *b)
{
	for (int k = 0; k < 14; k++) {
		struct an_diff_ph pa, pb;
		an_diff_ph(a, k, &pa);
		an_diff_ph(b, k, &pb);
		if (!pa.wrs && !pb.wrs)
			continue;
		bool dv = pa.wrs != pb.wrs || pa.bytes != pb.bytes ||
			  pa.errors != pb.errors;
		d->ndiv += dv;
		int opc = an_slot_opcode(k);
		const char *op = an_wr_opcode_name(opc);
		if (d->json) {
			an_diff_row(d, i, "completion");
			rbt_json_kstr(&d->j, "op", op);
			an_diff_json_side(&d->j, "a", &pa);
			an_diff_json_side(&d->j, "b", &pb);
			rbt_json_kbool(&d->j, "diverges", dv);
			rbt_json_obj_end(&d->j);
			continue;
		}
		fprintf(d->f,
			"%c  done %-20s count %8llu / %-8llu bytes %llu / %llu  errors "
			"%llu / %llu\n",
			dv ? '!' : ' ', op, (unsigned long long)pa.wrs,
			(unsigned long long)pb.wrs, (unsigned long long)pa.bytes,
			(unsigned long long)pb.bytes, (unsigned long long)pa.errors,
			(unsigned long long)pb.errors);
		fprintf(d->f, "       ns A: ");
		an_diff_text_phases(d->f, &pa, opc == 128);
		fprintf(d->f, "\n       ns B: ");
		an_diff_text_phases(d->f, &pb, opc == 128);
		fputc('\n', d->f);
	}
}

static void an_diff_statuses(struct an_diff *d, int i, const struct an_qp *a,
			     const struct an_qp *b)
{
	for (int k = 0; k < 32; k++) {
		if (!a->wc_status[k] && !b->wc_status[k])
			continue;
		bool dv = a->wc_status[k] != b->wc_status[k];
		d->ndiv += dv;
		const char *st = k == 31 ? "OTHER" : an_wc_status_name((uint64_t)k);
		if (!d->json) {
			fprintf(d->f, "%c  status %-29s %8llu / %llu\n", dv ? '!' : ' ',
				st, (unsigned long long)a->wc_status[k],
				(unsigned long long)b->wc_status[k]);
			continue;
		}
		an_diff_row(d, i, "status");
		rbt_json_kstr(&d->j, "status", st);
		rbt_json_ku64(&d->j, "a", a->wc_status[k]);
		rbt_json_ku64(&d->j, "b", b->wc_status[k]);
		rbt_json_kbool(&d->j, "diverges", dv);
		rbt_json_obj_end(&d->j);
	}
}

static void an_diff_write(struct an_diff *d, const char *a, const char *b,
			  const struct an_diff_side *s)
{
	int nq = s[0].n > s[1].n ? s[0].n : s[1].n;
	if (d->json) {
		rbt_json_obj(&d->j);
		rbt_json_kstr(&d->j, "a", a);
		rbt_json_kstr(&d->j, "b", b);
		rbt_json_key(&d->j, "rows");
		rbt_json_arr(&d->j);
	} else {
		fprintf(d->f, "diff %s (A) vs %s (B): QPs paired in creation order\n", a,
			b);
	}
	if (s[0].n != s[1].n) {
		d->ndiv++;
		if (!d->json)
			fprintf(d->f, "! QP count: A %d, B %d\n", s[0].n, s[1].n);
	}
	static const struct an_qp none;
	for (int i = 0; i < nq; i++) {
		const struct an_qp *qa = i < s[0].n ? s[0].qps[i] : NULL;
		const struct an_qp *qb = i < s[1].n ? s[1].qps[i] : NULL;
		if (!d->json)
			fprintf(d->f, "QP #%d (A qpn %u, B qpn %u)\n", i,
				qa ? qa->m->qpn : 0, qb ? qb->m->qpn : 0);
		/* posts and statuses count a missing QP as one with none */
		an_diff_posts(d, i, qa ? qa : &none, qb ? qb : &none);
		an_diff_done(d, i, qa, qb);
		an_diff_statuses(d, i, qa ? qa : &none, qb ? qb : &none);
	}
	if (d->json) {
		rbt_json_arr_end(&d->j);
		rbt_json_ki64(&d->j, "divergences", d->ndiv);
		rbt_json_obj_end(&d->j);
		fputc('\n', d->f);
	} else {
		fprintf(d->f, "%s: %d divergence(s)\n", d->ndiv ? "DIVERGES" : "same",
			d->ndiv);
	}
}

int rbt_analyzer_diff(const char *a, const char *b,
		      const struct rbt_analyzer_diff_opts *o)
{
	FILE *log = o && o->log ? o->log : stderr;
	struct an_diff d = { .f = o && o->out ? o->out : stdout, .json = o && o->json };
	struct an_diff_side s[2];
	memset(s, 0, sizeof(s));
	int ret = an_diff_load(&s[0], a, log);
	if (!ret)
		ret = an_diff_load(&s[1], b, log);
	if (!ret) {
		rbt_json_init(&d.j, d.f);
		an_diff_write(&d, a, b, s);
		ret = d.ndiv;
	}
	for (int i = 0; i < 2; i++) {
		free(s[i].qps);
		rbt_analyzer_destroy(s[i].an);
	}
	return ret;
}
