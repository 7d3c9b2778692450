/* replay_diff.c - `rbtrace diff A B`: compares two traces of the same job (an
 * original and its replay) per QP, paired in creation order, and per opcode:
 * post counts and sizes, completion counts, statuses and lengths, and the
 * post-to-completion latency distributions.
 *
 * Counts, sizes and statuses that differ are divergences; latencies are shown,
 * never judged (a replay on another machine is meant to differ in time).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "replay/rbt_replay.h"
#include "trace_format/rbt_format.h"

#define DF_NOPS 32
#define DF_NWC	256
#define DF_NST	32

struct df_pend {
	uint64_t wr_id, ts;
};

struct df_lat {
	uint64_t *v;
	size_t n, cap;
};

struct df_qp {
	uint64_t h, qpn;
	int sig_all;
	uint64_t post_n[DF_NOPS], post_bytes[DF_NOPS], post_min[DF_NOPS],
		post_max[DF_NOPS];
	uint64_t wc_n[DF_NWC], wc_bytes[DF_NWC];
	uint64_t st[DF_NST]; /* completions by status */
	struct df_lat lat[DF_NWC];
	struct df_pend *pend;
	size_t npend, cappend;
};

struct df_trace {
	const char *path;
	struct rbt_header hdr;
	struct df_qp *qp;
	int nqp, capqp;
	uint64_t posts, wcs;
};

static struct df_qp *df_qp_h(struct df_trace *t, uint64_t h)
{
	for (int i = t->nqp - 1; i >= 0; i--)
		if (t->qp[i].h == h)
			return &t->qp[i];
	return NULL;
}

static struct df_qp *df_qp_n(struct df_trace *t, uint64_t qpn)
{
	for (int i = t->nqp - 1; i >= 0; i--)
		if (t->qp[i].qpn == qpn)
			return &t->qp[i];
	return NULL;
}

static void df_lat_push(struct df_lat *l, uint64_t v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		uint64_t *p = realloc(l->v, cap * sizeof(*p));

		if (!p)
			return;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = v;
}

static double df_ns(const struct df_trace *t, uint64_t ticks)
{
	double hz = t->hdr.clock_hz ? (double)t->hdr.clock_hz : 1e9;

	return (double)(int64_t)(ticks - t->hdr.start.ticks) * 1e9 / hz;
}

static int df_load(struct df_trace *t, const char *path, FILE *log)
{
	struct rbt_reader *r;
	const struct rbt_event *ev;
	int rc;

	t->path = path;
	rc = rbt_reader_open(path, &r);
	if (rc < 0) {
		fprintf(log, "rbtrace diff: %s: %s\n", path, rbt_strerror(rc));
		return rc;
	}
	t->hdr = *rbt_reader_header(r);
	t->hdr.host = t->hdr.cmdline = t->hdr.tool = NULL;
	while ((rc = rbt_reader_next(r, &ev)) == 1) {
		if (ev->type == RBT_EV_QP_CREATE) {
			const struct rbt_ev_qp_create *c = &ev->u.qp_create;

			if (!c->qp || c->err || c->ret < 0)
				continue;
			if (t->nqp == t->capqp) {
				int cap = t->capqp ? 2 * t->capqp : 8;
				struct df_qp *v =
					realloc(t->qp, (size_t)cap * sizeof(*v));

				if (!v) {
					rc = -ENOMEM;
					break;
				}
				t->qp = v;
				t->capqp = cap;
			}
			memset(&t->qp[t->nqp], 0, sizeof(t->qp[0]));
			t->qp[t->nqp].h = c->qp;
			t->qp[t->nqp].qpn = c->qp_num;
			t->qp[t->nqp].sig_all = (int)c->sq_sig_all;
			t->nqp++;
		} else if (ev->type == RBT_EV_POST_SEND) {
			const struct rbt_ev_post_send *p = &ev->u.post_send;
			struct df_qp *q = df_qp_h(t, p->qp);
			uint32_t upto = p->ret ? (uint32_t)p->bad_wr : p->n_wrs;

			if (!q)
				continue;
			for (uint32_t i = 0; i < upto && i < p->n_wrs; i++) {
				const struct rbt_send_wr *w = &p->wrs[i];
				uint64_t len = 0, op = w->opcode < DF_NOPS ? w->opcode
									   : DF_NOPS - 1;

				for (uint32_t g = 0; g < w->n_sges; g++)
					len += w->sges[g].length;
				if (!q->post_n[op] || len < q->post_min[op])
					q->post_min[op] = len;
				if (len > q->post_max[op])
					q->post_max[op] = len;
				q->post_n[op]++;
				q->post_bytes[op] += len;
				t->posts++;
				if ((w->send_flags & IBV_SEND_SIGNALED) || q->sig_all) {
					if (q->npend == q->cappend) {
						size_t cap =
							q->cappend ? 2 * q->cappend : 64;
						struct df_pend *v = realloc(
							q->pend, cap * sizeof(*v));

						if (!v)
							continue;
						q->pend = v;
						q->cappend = cap;
					}
					q->pend[q->npend++] =
						(struct df_pend){ w->wr_id, ev->ts };
				}
			}
		} else if (ev->type == RBT_EV_POLL_CQ) {
			const struct rbt_ev_poll_cq *p = &ev->u.poll_cq;

			for (uint32_t i = 0; i < p->n_wcs; i++) {
				const struct rbt_wc *w = &p->wcs[i];
				struct df_qp *q = df_qp_n(t, w->qp_num);
				uint64_t op = w->opcode < DF_NWC ? w->opcode : DF_NWC - 1;

				if (!q)
					continue;
				t->wcs++;
				q->st[w->status < DF_NST ? w->status : DF_NST - 1]++;
				if (w->status != IBV_WC_SUCCESS)
					op = DF_NWC - 1; /* opcode undefined in errors */
				q->wc_n[op]++;
				/* byte_len means something for receives, reads, atomics */
				if ((w->opcode & IBV_WC_RECV) ||
				    w->opcode == IBV_WC_RDMA_READ ||
				    w->opcode == IBV_WC_COMP_SWAP ||
				    w->opcode == IBV_WC_FETCH_ADD)
					q->wc_bytes[op] += w->byte_len;
				if (w->opcode & IBV_WC_RECV)
					continue;
				/* send side: join to the post on (QP, wr_id), oldest first */
				for (size_t k = 0; k < q->npend; k++) {
					if (q->pend[k].wr_id != w->wr_id)
						continue;
					if (w->status == IBV_WC_SUCCESS)
						df_lat_push(
							&q->lat[op],
							(uint64_t)(df_ns(t, p->ts_exit) -
								   df_ns(t,
									 q->pend[k].ts)));
					memmove(&q->pend[k], &q->pend[k + 1],
						(q->npend - k - 1) * sizeof(*q->pend));
					q->npend--;
					break;
				}
			}
		}
	}
	if (rc == 0) {
		/* One warning line per incomplete trace, as report gives: a
		 * damaged file header (bad_bytes alone) loses the clock rate, a
		 * missing trailer the recording's last moments. Neither changes
		 * the exit code: what could be read is compared and judged. */
		const struct rbt_reader_stats *s = rbt_reader_stats(r);
		int damaged = s->bad_chunks || s->truncated || s->bad_bytes;

		if (damaged || !s->finished)
			fprintf(log,
				"rbtrace diff: warning: %s: %s%s%s%s; comparing what "
				"could be read\n",
				path, damaged ? "damaged (" : "",
				damaged ? rbt_reader_error(r) : "", damaged ? ")" : "",
				s->finished || s->truncated ? ""
				: damaged ? ", not finished cleanly (no trailer)"
					  : "not finished cleanly (no trailer: the "
					    "recorder was killed or is still "
					    "running)");
	}
	rbt_reader_close(r);
	if (rc < 0)
		fprintf(log, "rbtrace diff: %s: %s\n", path, rbt_strerror(rc));
	return rc < 0 ? rc : 0;
}

static void df_free(struct df_trace *t)
{
	for (int i = 0; i < t->nqp; i++) {
		for (int k = 0; k < DF_NWC; k++)
			free(t->qp[i].lat[k].v);
		free(t->qp[i].pend);
	}
	free(t->qp);
}

static int df_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double df_pct(struct df_lat *l, double p)
{
	size_t i;

	if (!l->n)
		return 0;
	i = (size_t)(p * (double)(l->n - 1) + 0.5);
	return (double)l->v[i < l->n ? i : l->n - 1] / 1e3;
}

static const char *df_wr_name(int op)
{
	const char *n =
		op >= 0 ? rbt_verbs_name(RBT_NAMES_WR_OPCODE, (uint64_t)op) : NULL;

	return n ? n : "OTHER";
}

static const char *df_wc_name(int op)
{
	switch (op) {
	case IBV_WC_SEND:
		return "SEND";
	case IBV_WC_RDMA_WRITE:
		return "RDMA_WRITE";
	case IBV_WC_RDMA_READ:
		return "RDMA_READ";
	case IBV_WC_COMP_SWAP:
		return "COMP_SWAP";
	case IBV_WC_FETCH_ADD:
		return "FETCH_ADD";
	case IBV_WC_BIND_MW:
		return "BIND_MW";
	case IBV_WC_LOCAL_INV:
		return "LOCAL_INV";
	case IBV_WC_RECV:
		return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM:
		return "RECV_RDMA_WITH_IMM";
	case DF_NWC - 1:
		return "ERROR";
	}
	return "OTHER";
}

int rbt_replay_diff(const char *a, const char *b, const struct rbt_diff_opts *o)
{
	FILE *f = o && o->out ? o->out : stdout, *log = o && o->log ? o->log : stderr;
	int json = o && o->json, ndiv = 0, first = 1, nq;
	struct df_trace t[2];
	int rc;

	memset(t, 0, sizeof(t));
	rc = df_load(&t[0], a, log);
	if (!rc)
		rc = df_load(&t[1], b, log);
	if (rc) {
		df_free(&t[0]);
		df_free(&t[1]);
		return rc;
	}
	nq = t[0].nqp > t[1].nqp ? t[0].nqp : t[1].nqp;
	if (json)
		fprintf(f, "{\"a\":\"%s\",\"b\":\"%s\",\"rows\":[", a, b);
	else
		fprintf(f, "diff %s (A) vs %s (B): QPs paired in creation order\n", a, b);
	if (t[0].nqp != t[1].nqp) {
		ndiv++;
		if (!json)
			fprintf(f, "! QP count: A %d, B %d\n", t[0].nqp, t[1].nqp);
	}
	for (int i = 0; i < nq; i++) {
		struct df_qp z = { 0 }, *qa = i < t[0].nqp ? &t[0].qp[i] : &z,
			     *qb = i < t[1].nqp ? &t[1].qp[i] : &z;

		for (int k = 0; k < DF_NWC; k++) {
			if (qa->lat[k].n)
				qsort(qa->lat[k].v, qa->lat[k].n, sizeof(uint64_t),
				      df_cmp);
			if (qb->lat[k].n)
				qsort(qb->lat[k].v, qb->lat[k].n, sizeof(uint64_t),
				      df_cmp);
		}
		if (!json)
			fprintf(f, "QP #%d (A qpn %llu, B qpn %llu)\n", i,
				(unsigned long long)qa->qpn, (unsigned long long)qb->qpn);
		for (int k = 0; k < DF_NOPS; k++) {
			int d;

			if (!qa->post_n[k] && !qb->post_n[k])
				continue;
			d = qa->post_n[k] != qb->post_n[k] ||
			    qa->post_bytes[k] != qb->post_bytes[k] ||
			    qa->post_min[k] != qb->post_min[k] ||
			    qa->post_max[k] != qb->post_max[k];
			ndiv += d;
			if (json)
				fprintf(f,
					"%s{\"qp\":%d,\"kind\":\"post\",\"op\":\"%s\","
					"\"a\":{\"n\":%llu,"
					"\"bytes\":%llu,\"min\":%llu,\"max\":%llu},\"b\":"
					"{\"n\":%llu,"
					"\"bytes\":%llu,\"min\":%llu,\"max\":%llu},"
					"\"diverges\":%s}",
					first ? "" : ",", i, df_wr_name(k),
					(unsigned long long)qa->post_n[k],
					(unsigned long long)qa->post_bytes[k],
					(unsigned long long)qa->post_min[k],
					(unsigned long long)qa->post_max[k],
					(unsigned long long)qb->post_n[k],
					(unsigned long long)qb->post_bytes[k],
					(unsigned long long)qb->post_min[k],
					(unsigned long long)qb->post_max[k],
					d ? "true" : "false");
			else
				fprintf(f,
					"%c  post %-20s count %8llu / %-8llu bytes %llu "
					"/ %llu  size "
					"%llu..%llu / %llu..%llu\n",
					d ? '!' : ' ', df_wr_name(k),
					(unsigned long long)qa->post_n[k],
					(unsigned long long)qb->post_n[k],
					(unsigned long long)qa->post_bytes[k],
					(unsigned long long)qb->post_bytes[k],
					(unsigned long long)qa->post_min[k],
					(unsigned long long)qa->post_max[k],
					(unsigned long long)qb->post_min[k],
					(unsigned long long)qb->post_max[k]);
			first = 0;
		}
		for (int k = 0; k < DF_NWC; k++) {
			int d;

			if (!qa->wc_n[k] && !qb->wc_n[k])
				continue;
			d = qa->wc_n[k] != qb->wc_n[k] ||
			    qa->wc_bytes[k] != qb->wc_bytes[k];
			ndiv += d;
			if (json)
				fprintf(f,
					"%s{\"qp\":%d,\"kind\":\"completion\",\"op\":\"%"
					"s\",\"a\":{"
					"\"n\":%llu,\"bytes\":%llu,\"lat_p50_us\":%.2f,"
					"\"lat_p99_us\":"
					"%.2f},\"b\":{\"n\":%llu,\"bytes\":%llu,\"lat_"
					"p50_us\":%.2f,"
					"\"lat_p99_us\":%.2f},\"diverges\":%s}",
					first ? "" : ",", i, df_wc_name(k),
					(unsigned long long)qa->wc_n[k],
					(unsigned long long)qa->wc_bytes[k],
					df_pct(&qa->lat[k], .5), df_pct(&qa->lat[k], .99),
					(unsigned long long)qb->wc_n[k],
					(unsigned long long)qb->wc_bytes[k],
					df_pct(&qb->lat[k], .5), df_pct(&qb->lat[k], .99),
					d ? "true" : "false");
			else {
				fprintf(f,
					"%c  wc   %-20s count %8llu / %-8llu bytes %llu "
					"/ %llu",
					d ? '!' : ' ', df_wc_name(k),
					(unsigned long long)qa->wc_n[k],
					(unsigned long long)qb->wc_n[k],
					(unsigned long long)qa->wc_bytes[k],
					(unsigned long long)qb->wc_bytes[k]);
				if (qa->lat[k].n || qb->lat[k].n)
					fprintf(f,
						"  latency us p50 %.2f / %.2f  p99 %.2f "
						"/ %.2f  max "
						"%.2f / %.2f",
						df_pct(&qa->lat[k], .5),
						df_pct(&qb->lat[k], .5),
						df_pct(&qa->lat[k], .99),
						df_pct(&qb->lat[k], .99),
						df_pct(&qa->lat[k], 1),
						df_pct(&qb->lat[k], 1));
				fputc('\n', f);
			}
			first = 0;
		}
		for (int k = 0; k < DF_NST; k++) {
			int d;

			if (!qa->st[k] && !qb->st[k])
				continue;
			d = qa->st[k] != qb->st[k];
			ndiv += d;
			if (json)
				fprintf(f,
					"%s{\"qp\":%d,\"kind\":\"status\",\"status\":\"%"
					"s\",\"a\":%llu,"
					"\"b\":%llu,\"diverges\":%s}",
					first ? "" : ",", i,
					ibv_wc_status_str((enum ibv_wc_status)k),
					(unsigned long long)qa->st[k],
					(unsigned long long)qb->st[k],
					d ? "true" : "false");
			else
				fprintf(f, "%c  status %-29s %8llu / %llu\n",
					d ? '!' : ' ',
					ibv_wc_status_str((enum ibv_wc_status)k),
					(unsigned long long)qa->st[k],
					(unsigned long long)qb->st[k]);
			first = 0;
		}
	}
	if (json)
		fprintf(f, "],\"divergences\":%d}\n", ndiv);
	else
		fprintf(f, "%s: %d divergence(s)\n", ndiv ? "DIVERGES" : "same", ndiv);
	df_free(&t[0]);
	df_free(&t[1]);
	return ndiv;
}
