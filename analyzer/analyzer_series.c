/* analyzer_series.c - counters over time: per QP the send WRs posted and completed,
 * the receives completed, the send WRs outstanding, the round trips and their split,
 * the end-to-end latency of the send WRs; per CQ the completions due on it. Binned
 * on the analyzer's one time base (aligned ns), AN_SERIES_BINS bins that double in
 * width as the trace grows, so memory is flat in the trace's length.
 *
 * The attribution and the resource counters call the an_ser_*() samplers; the sinks
 * read the series after the analysis. Nothing here names an output, allocates more
 * than one block per QP / CQ, or trusts a timestamp (a sample before the time base's
 * start falls into its first bin).
 */
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

int an_tb_bin_slow(struct an_timebase *tb, uint64_t t, bool start)
{
	if (!tb->started && !start)
		return -1;
	if (!tb->started) {
		tb->started = true;
		tb->t0 = t;
		tb->hi = t;
		tb->shift = AN_SERIES_SHIFT0;
	}
	if (t < tb->t0)
		t = tb->t0; /* slight reordering across threads and traces */
	if (t > tb->hi)
		tb->hi = t;
	uint64_t d = t - tb->t0;
	while ((d >> tb->shift) >= AN_SERIES_BINS && tb->shift < 62)
		tb->shift++;
	uint64_t bin = d >> tb->shift;
	return bin < AN_SERIES_BINS ? (int)bin : AN_SERIES_BINS - 1;
}

int an_tb_bins(const struct an_timebase *tb)
{
	if (!tb->started)
		return 0;
	uint64_t n = ((tb->hi - tb->t0) >> tb->shift) + 1;
	return n < AN_SERIES_BINS ? (int)n : AN_SERIES_BINS;
}

/* Folds pairs of bins until the series has the time base's width. */
void an_series_sync(const struct an_timebase *tb, struct an_series *s)
{
	if (!s->shift)
		s->shift = tb->shift;
	for (; s->shift < tb->shift; s->shift++) {
		for (int i = 0; i < AN_SERIES_BINS / 2; i++)
			s->v[i] = s->v[2 * i] + s->v[2 * i + 1];
		memset(s->v + AN_SERIES_BINS / 2, 0, sizeof(s->v) / 2);
	}
}

void an_gauge_sync(const struct an_timebase *tb, struct an_gauge *g)
{
	if (!g->shift)
		g->shift = tb->shift;
	for (; g->shift < tb->shift; g->shift++) {
		for (int i = 0; i < AN_SERIES_BINS / 2; i++) {
			uint64_t a = g->b[2 * i].max, b = g->b[2 * i + 1].max;
			uint64_t la = g->b[2 * i].last, lb = g->b[2 * i + 1].last;
			g->b[i].max = a > b ? a : b;
			g->b[i].last = lb ? lb : la;
		}
		memset(g->b + AN_SERIES_BINS / 2, 0, sizeof(g->b) / 2);
	}
}

void an_lat_sync(const struct an_timebase *tb, struct an_lat_series *l)
{
	if (!l->shift)
		l->shift = tb->shift;
	for (; l->shift < tb->shift; l->shift++) {
		for (int i = 0; i < AN_SERIES_BINS / 2; i++)
			for (int k = 0; k < AN_LAT_BUCKETS; k++) {
				uint64_t v =
					(uint64_t)l->b[2 * i][k] + l->b[2 * i + 1][k];
				l->b[i][k] = v < UINT32_MAX ? (uint32_t)v : UINT32_MAX;
			}
		memset(l->b[AN_SERIES_BINS / 2], 0,
		       sizeof(l->b[0]) * (AN_SERIES_BINS / 2));
	}
}

static int an_lat_bucket(uint64_t ns)
{
	if (ns < 4)
		return (int)ns;
	int e = 63 - __builtin_clzll(ns);
	if (e > 39)
		return AN_LAT_BUCKETS - 1;
	return (e - 1) * 4 + (int)((ns >> (e - 2)) & 3);
}

static double an_lat_mid(int k)
{
	if (k < 4)
		return k;
	int e = k / 4 + 1, sub = k % 4;
	double lo = (double)((uint64_t)(4 + sub) << (e - 2));
	return lo * (1 + 0.5 / (4 + sub));
}

void an_lat_add(const struct an_timebase *tb, struct an_lat_series *l, int bin,
		uint64_t ns, uint64_t n)
{
	if (bin < 0)
		return;
	an_lat_sync(tb, l);
	uint32_t *c = &l->b[bin][an_lat_bucket(ns)];
	*c = *c + n < UINT32_MAX ? (uint32_t)(*c + n) : UINT32_MAX;
}

void an_gauge_levels(const struct an_gauge *g, int n, uint64_t *out)
{
	uint64_t carry = g->pre;
	for (int i = 0; i < n && i < AN_SERIES_BINS; i++) {
		/* a bin starts at the level before it */
		uint64_t m = g->b[i].max ? g->b[i].max - 1 : 0;
		out[i] = m > carry ? m : carry;
		if (g->b[i].last)
			carry = g->b[i].last - 1;
	}
}

double an_lat_quantile(const struct an_lat_series *l, int bin, double q)
{
	uint64_t tot = 0, cum = 0;
	for (int k = 0; k < AN_LAT_BUCKETS; k++)
		tot += l->b[bin][k];
	if (!tot)
		return -1;
	uint64_t want = (uint64_t)(q * (double)tot);
	if (want >= tot)
		want = tot - 1;
	for (int k = 0; k < AN_LAT_BUCKETS; k++) {
		cum += l->b[bin][k];
		if (cum > want)
			return an_lat_mid(k);
	}
	return an_lat_mid(AN_LAT_BUCKETS - 1);
}

/* ---- the samplers ---- */

struct an_qp_series *an_qp_series_get(struct rbt_analyzer *an, struct an_qp *qp)
{
	if (qp->ser || !an->opts.series)
		return qp->ser;
	qp->ser = calloc(1, sizeof(*qp->ser));
	if (qp->ser && an->n_lat_qps < AN_LAT_QPS_MAX) {
		qp->ser->lat = calloc(1, sizeof(*qp->ser->lat));
		an->n_lat_qps += qp->ser->lat != NULL;
	}
	return qp->ser;
}

/* The bin of a trace's ticks. Samples come in time order and many fall in the bin of
 * the one before: that bin's range in the trace's ticks (rounded inwards) is kept. */
static inline int an_ser_bin(struct rbt_analyzer *an, struct an_trace *t, uint64_t ticks,
			     bool start)
{
	struct an_timebase *tb = &an->tb;
	if (__builtin_expect(t->ser_shift == tb->shift && ticks >= t->ser_lo &&
				     ticks < t->ser_hi,
			     1))
		return t->ser_bin;
	int bin = an_tb_bin(tb, rbt_model_aligned_u64(t->mt, (double)ticks), start);
	if (bin < 0 || !(t->mt->ns_per_tick > 0))
		return bin;
	/* aligned ns = (ticks - start) * npt + align_ns: back to ticks */
	const struct rbt_model_trace *mt = t->mt;
	double lo_ns = (double)tb->t0 + (double)((uint64_t)bin << tb->shift);
	double hi_ns = lo_ns + (double)(1ull << tb->shift);
	double lo = (lo_ns - (double)mt->align_ns) / mt->ns_per_tick +
		    (double)mt->hdr.start.ticks;
	double hi = (hi_ns - (double)mt->align_ns) / mt->ns_per_tick +
		    (double)mt->hdr.start.ticks;
	if (!(lo >= 0 && hi < 1.8e19 && hi - lo > 4)) {
		t->ser_shift = 0; /* no cache */
		return bin;
	}
	t->ser_lo = (uint64_t)lo + 1;
	t->ser_hi = (uint64_t)hi - 1;
	t->ser_bin = bin;
	t->ser_shift = tb->shift;
	return bin;
}

/* qp's series and the bin of ticks (start as an_tb_bin takes it); NULL
 * when no series are kept. */
static struct an_qp_series *ser_at(struct rbt_analyzer *an, struct an_qp *qp,
				   uint64_t ticks, bool start, int *bin)
{
	if (!an->opts.series)
		return NULL;
	struct an_qp_series *s = an_qp_series_get(an, qp);
	if (s)
		*bin = an_ser_bin(an, qp->t, ticks, start);
	return s;
}

/* A send WR entered its QP's queue (the model has queued it). */
void an_ser_posted(struct rbt_analyzer *an, struct an_qp *qp, uint64_t ticks)
{
	int bin;
	struct an_qp_series *s = ser_at(an, qp, ticks, true, &bin);
	if (!s)
		return;
	an_series_add(&an->tb, &s->posted, bin, 1);
	an_gauge_set(&an->tb, &s->outstanding, bin, qp->m->sq.n);
	if (qp->scq)
		an_ser_cq(an, qp->t, qp->scq, ticks, bin);
}

/* n WRs completed, handed to the program by the poll that returned at ticks. */
void an_ser_done(struct rbt_analyzer *an, struct an_qp *qp, uint64_t ticks, bool recv,
		 uint64_t e2e_ns, uint32_t n)
{
	int bin;
	struct an_qp_series *s = ser_at(an, qp, ticks, true, &bin);
	if (!s)
		return;
	if (recv) {
		an_series_add(&an->tb, &s->recvs, bin, n);
		return;
	}
	an_series_add(&an->tb, &s->done, bin, n);
	if (s->lat)
		an_lat_add(&an->tb, s->lat, bin, e2e_ns, n);
}

/* The completions due on a CQ (signaled sends, posted receives) changed. */
void an_ser_cq(struct rbt_analyzer *an, struct an_trace *t, struct an_cq *cq,
	       uint64_t ticks, int bin)
{
	if (!an->opts.series)
		return;
	if (!cq->occ) {
		cq->occ = calloc(1, sizeof(*cq->occ));
		if (!cq->occ)
			return;
	}
	int64_t o = cq->m->outstanding;
	if (bin == -2)
		bin = an_ser_bin(an, t, ticks, false);
	an_gauge_set(&an->tb, cq->occ, bin, o > 0 ? (uint64_t)o : 0);
}

/* count polls of cq came back empty between ts and ts_exit (the recorder folds a run of
 * empty polls into one event): spread evenly over the bins they span. */
void an_ser_empty(struct rbt_analyzer *an, struct an_trace *t, struct an_cq *cq,
		  uint64_t ts, uint64_t ts_exit, uint64_t count)
{
	if (!an->opts.series)
		return;
	int b1 = an_ser_bin(an, t, ts_exit, false);
	if (b1 < 0)
		return; /* polls while the program sets up */
	int b0 = an_ser_bin(an, t, ts, false);
	if (b0 < 0 || b0 > b1)
		b0 = b1;
	if (!cq->empty) {
		cq->empty = calloc(1, sizeof(*cq->empty));
		if (!cq->empty)
			return;
	}
	uint64_t per = count / (uint64_t)(b1 - b0 + 1);
	for (int b = b0; b < b1; b++)
		an_series_add(&an->tb, cq->empty, b, per);
	an_series_add(&an->tb, cq->empty, b1, count - per * (uint64_t)(b1 - b0));
}

/* A poll returned completions: the CQ's level and its senders' queues. */
void an_ser_poll(struct rbt_analyzer *an, struct an_trace *t, struct an_cq *cq,
		 uint64_t ticks)
{
	if (!an->opts.series)
		return;
	int bin = an_ser_bin(an, t, ticks, false);
	an_ser_cq(an, t, cq, ticks, bin);
	for (uint32_t i = 0; i < cq->n_senders; i++) {
		struct an_qp *qp = cq->senders[i];
		if (!qp->ser)
			continue;
		an_gauge_set(&an->tb, &qp->ser->outstanding, bin, qp->m->sq.n);
	}
}

/* A round trip of qp (the requester) ended at ticks, split in three. */
void an_ser_roundtrip(struct rbt_analyzer *an, struct an_qp *qp, uint64_t ticks,
		      double post_ns, double wire_ns, double app_ns)
{
	int bin;
	struct an_qp_series *s = ser_at(an, qp, ticks, false, &bin);
	if (!s)
		return;
	an_series_add(&an->tb, &s->rt_n, bin, 1);
	an_series_add(&an->tb, &s->rt_post, bin, post_ns > 0 ? (uint64_t)post_ns : 0);
	an_series_add(&an->tb, &s->rt_wire, bin, wire_ns > 0 ? (uint64_t)wire_ns : 0);
	an_series_add(&an->tb, &s->rt_app, bin, app_ns > 0 ? (uint64_t)app_ns : 0);
}

/* After the last event: the axis runs on to the end of the longest trace, so a level
 * that held after the last sample (WRs that never completed) shows as long as it
 * lasted. */
void an_ser_end(struct rbt_analyzer *an)
{
	if (!an->tb.started)
		return;
	for (int i = 0; i < an->n_traces; i++) {
		const struct rbt_model_trace *mt = an->traces[i]->mt;
		if (mt && mt->any_ts)
			an_tb_bin(&an->tb, rbt_model_aligned_u64(mt, (double)mt->max_ts),
				  false);
	}
}
