/* replay_match.c - the replay's completions against the recording's, per QP
 * and queue: the k-th against the k-th (a UD QP's by sender), mismatches and
 * missing ones as divergences (the first five of a queue listed), those beyond
 * the recorded count accepted only as successes; a streamed window's matched
 * part dropped as it goes (rp_match_trim); each QP's end state.
 *
 * Adds divergences: runs before anything of the report is printed.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "replay/replay_int.h"

static int rp_wc_equal(const struct rp_wcrec *a, const struct rp_wcrec *b)
{
	if (a->status != b->status)
		return 0;
	if (a->status != IBV_WC_SUCCESS)
		return 1; /* opcode and length are undefined in error completions */
	if (a->opcode != b->opcode)
		return 0;
	/* byte_len is defined for receives, reads and atomics only (IB spec) */
	if ((a->opcode & IBV_WC_RECV) || a->opcode == IBV_WC_RDMA_READ ||
	    a->opcode == IBV_WC_COMP_SWAP || a->opcode == IBV_WC_FETCH_ADD)
		return a->no_len || b->no_len || a->byte_len == b->byte_len;
	return 1;
}

static int rp_cmp_sender(const void *a, const void *b)
{
	const struct rp_wcrec *x = a, *y = b;

	if (x->src_qp != y->src_qp)
		return x->src_qp < y->src_qp ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* A UD QP receives from many senders: the order between two senders'
 * messages is the fabric's timing (HERD's workers answering one client),
 * only each sender's own order is the program's. Both lists are put in
 * sender order (the recorded number of the sender; the replay's translated
 * through the directory), each sender's messages in the order they came. */
static void rp_sender_rec(struct rp_job *j, struct rp_wclist *r, struct rp_wclist *p)
{
	for (uint32_t k = 0; k < p->n; k++) {
		struct rp_wcrec *w = &p->v[k];

		for (int i = 0; !w->src_rec && i < j->dir.nqp; i++)
			if (j->dir.qps[i].new_qpn == w->src_qp) {
				w->src_qp = j->dir.qps[i].rec_qpn;
				break;
			}
		w->src_rec = 1;
		w->order = k;
	}
	for (uint32_t k = 0; k < r->n; k++)
		r->v[k].order = k;
}

static void rp_by_sender(struct rp_job *j, struct rp_wclist *r, struct rp_wclist *p)
{
	rp_sender_rec(j, r, p);
	qsort(r->v, r->n, sizeof(*r->v), rp_cmp_sender);
	qsort(p->v, p->n, sizeof(*p->v), rp_cmp_sender);
}

/* The senders of a UD receive queue's two lists: how many of each sender's
 * messages both have (take), and how many a pass has seen. */
struct rp_senders {
	struct rp_sender {
		uint32_t src, nr, np, seen;
	} * v;
	int n, cap;
};

static struct rp_sender *rp_sender_of(struct rp_senders *t, uint32_t src)
{
	for (int k = 0; k < t->n; k++)
		if (t->v[k].src == src)
			return &t->v[k];
	if (!RP_GROW(t->v, t->n, t->cap))
		return NULL;
	t->v[t->n] = (struct rp_sender){ .src = src };
	return &t->v[t->n++];
}

static int rp_cmp_src(const void *a, const void *b, void *arg)
{
	const struct rp_sender *v = arg;
	uint32_t x = v[*(const int *)a].src, y = v[*(const int *)b].src;

	return x < y ? -1 : x > y;
}

/* The front of l: of each sender, its first min(nr, np) messages, in sender
 * order (the rest after, in the order they came); *nfront their count.
 * Each sender's messages keep the order they came in, as rp_cmp_sender
 * orders them (their order grows along l): a counting sort by sender.
 * 0: out of memory. */
static int rp_front(struct rp_wclist *l, struct rp_senders *t, uint32_t *nfront)
{
	struct rp_wcrec *tmp = malloc(((size_t)l->n + 1) * sizeof(*tmp));
	uint32_t *pos = malloc(((size_t)t->n + 1) * sizeof(*pos));
	int *by = malloc(((size_t)t->n + 1) * sizeof(*by));
	uint32_t f = 0, b;

	if (!tmp || !pos || !by) {
		free(tmp);
		free(pos);
		free(by);
		return 0;
	}
	/* each sender's place in the front: after those of lower numbers */
	for (int k = 0; k < t->n; k++)
		by[k] = k;
	qsort_r(by, (size_t)t->n, sizeof(*by), rp_cmp_src, t->v);
	for (int k = 0; k < t->n; k++) {
		struct rp_sender *x = &t->v[by[k]];

		pos[by[k]] = f;
		f += x->nr < x->np ? x->nr : x->np;
		x->seen = 0;
	}
	b = f;
	for (uint32_t k = 0; k < l->n; k++) {
		struct rp_sender *x = rp_sender_of(t, l->v[k].src_qp);
		uint32_t m = x ? (x->nr < x->np ? x->nr : x->np) : 0;

		if (x && x->seen++ < m)
			tmp[pos[x - t->v]++] = l->v[k];
		else
			tmp[b++] = l->v[k];
	}
	memcpy(l->v, tmp, (size_t)l->n * sizeof(*tmp));
	free(tmp);
	free(pos);
	free(by);
	*nfront = f;
	return 1;
}

/* A streamed window's UD receive queue: what both lists have of each sender
 * goes to their front in sender order; the count to match and drop, the
 * rest (in the order it came) waits for the next window. */
static uint32_t rp_trim_by_sender(struct rp_job *j, struct rp_wclist *r,
				  struct rp_wclist *p)
{
	struct rp_senders t = { 0 };
	uint32_t fr = 0, fp = 0, n = r->n < p->n ? r->n : p->n;
	int ok = 1;

	rp_sender_rec(j, r, p);
	for (uint32_t k = 0; ok && k < r->n; k++) {
		struct rp_sender *x = rp_sender_of(&t, r->v[k].src_qp);

		ok = x && ++x->nr;
	}
	for (uint32_t k = 0; ok && k < p->n; k++) {
		struct rp_sender *x = rp_sender_of(&t, p->v[k].src_qp);

		ok = x && ++x->np;
	}
	if (ok && rp_front(r, &t, &fr) && rp_front(p, &t, &fp) && fr == fp)
		n = fr;
	free(t.v);
	return n;
}

/* ---- completions: the replay's against the recording, per QP and queue ---- */
/* The first n of both lists, compared (numbered from the queue's base). */
static void rp_match_run(struct rp_job *j, struct rp_side *s, struct rp_qp *q, int d,
			 uint32_t n)
{
	struct rp_wclist *r = &q->rec_wc[d], *p = &q->rep_wc[d];

	for (uint32_t k = 0; k < n; k++) {
		if (rp_wc_equal(&r->v[k], &p->v[k])) {
			q->wc_matched[d]++;
			continue;
		}
		if (q->wc_shown[d]++ < 5)
			rp_diverge(j,
				   "%s: QP %llu %s completion #%llu: recorded status %s "
				   "opcode %u len %u, replay status %s opcode %u len %u",
				   s->path, (unsigned long long)q->rec.qp_num,
				   d ? "recv" : "send",
				   (unsigned long long)(q->wc_base[d] + k),
				   ibv_wc_status_str(r->v[k].status), r->v[k].opcode,
				   r->v[k].byte_len, ibv_wc_status_str(p->v[k].status),
				   p->v[k].opcode, p->v[k].byte_len);
	}
}

static void rp_report_match_queue(struct rp_job *j, struct rp_side *s, struct rp_qp *q,
				  int d, struct rbt_replay_summary *sum)
{
	struct rp_wclist *r = &q->rec_wc[d], *p = &q->rep_wc[d];
	uint32_t n = r->n < p->n ? r->n : p->n;
	uint64_t base = q->wc_base[d];

	if (d == 1 && q->rec.qp_type == IBV_QPT_UD && r->n == p->n && r->n)
		rp_by_sender(j, r, p);

	sum->completions_expected += base + r->n;
	/* streamed: the windows never read past the stop, the first reading did */
	sum->completions_recorded +=
		s->sm ? q->rec_count[d]
		      : base + (q->rec_all[d] > r->n ? q->rec_all[d] : r->n);
	rp_match_run(j, s, q, d, n);
	sum->completions_matched += q->wc_matched[d];
	if (q->wc_shown[d] > 5)
		rp_diverge(j, "%s: QP %llu %s: %u more mismatching completions", s->path,
			   (unsigned long long)q->rec.qp_num, d ? "recv" : "send",
			   q->wc_shown[d] - 5);
	if (r->n > p->n)
		rp_diverge(j, "%s: QP %llu %s: recorded %llu completions, replay %llu",
			   s->path, (unsigned long long)q->rec.qp_num,
			   d ? "recv" : "send", (unsigned long long)(base + r->n),
			   (unsigned long long)(base + p->n));
	/* Beyond the recorded count: completions of WRs the
	 * replay posted as recorded that the program never
	 * polled (it stopped polling, or its polls of a shared
	 * CQ took another QP's). Fine if they succeeded; an
	 * error the program never saw is still a divergence. */
	for (uint32_t k = r->n; k < p->n; k++) {
		if (p->v[k].status == IBV_WC_SUCCESS) {
			sum->completions_unpolled++;
			continue;
		}
		rp_diverge(j,
			   "%s: QP %llu %s completion #%u, which the program never "
			   "polled: replay status %s",
			   s->path, (unsigned long long)q->rec.qp_num,
			   d ? "recv" : "send", (unsigned)(base + k),
			   ibv_wc_status_str(p->v[k].status));
	}
}

/* A streamed window's end: the completions both lists have are matched and
 * dropped (the rest waits for the next window). */
void rp_match_trim(struct rp_job *j, struct rp_side *s)
{
	for (int qi = 0; qi < s->nqp; qi++) {
		struct rp_qp *q = &s->qp[qi];

		for (int d = 0; d < 2; d++) {
			struct rp_wclist *r = &q->rec_wc[d], *p = &q->rep_wc[d];
			uint32_t n = r->n < p->n ? r->n : p->n;

			if (!n)
				continue;
			/* UD: each sender's messages against its own */
			if (d == 1 && q->rec.qp_type == IBV_QPT_UD)
				n = rp_trim_by_sender(j, r, p);
			rp_match_run(j, s, q, d, n);
			memmove(r->v, r->v + n, (r->n - n) * sizeof(*r->v));
			memmove(p->v, p->v + n, (p->n - n) * sizeof(*p->v));
			r->n -= n;
			p->n -= n;
			q->wc_base[d] += n;
		}
	}
}

/* Completion matching adds divergences: it runs before anything is printed. */
void rp_report_match(struct rp_job *j, struct rbt_replay_summary *sum)
{
	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];

		/* our QPs, then other processes' TGT QPs our XRC SRQs received
		 * through (no state of ours to compare) */
		for (int qi = 0; qi < s->nqp + s->nxqp; qi++) {
			struct rp_qp *q = qi < s->nqp ? &s->qp[qi] : &s->xqp[qi - s->nqp];

			for (int d = 0; d < 2; d++)
				rp_report_match_queue(j, s, q, d, sum);
			/* a side stopped early (signal, --max-time, divergence)
			 * did not get to the recorded end state */
			if (qi < s->nqp && !s->stop_why &&
			    q->replay_state != q->rec_final_state)
				rp_diverge(j,
					   "%s: QP %llu ends in state %s, recorded %s%s",
					   s->path, (unsigned long long)q->rec.qp_num,
					   rp_state_name(q->replay_state),
					   rp_state_name(q->rec_final_state),
					   rp_final_src_text(q));
		}
	}
}
