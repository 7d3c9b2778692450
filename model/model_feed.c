/* model_feed.c - the model's life cycle and its event path: traces declared, each
 * event dispatched to the resource tables, the clocks or the join (with the
 * consumer's before/after callbacks around it), several files read merged by
 * aligned time, and the end.
 *
 * Never trusts an event and never prints: errors go to the caller's errbuf.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"
#include "util/rbt_grow.h"

static const struct rbt_model_ops mt_no_ops;

int rbt_model_create(const struct rbt_model_opts *opts, struct rbt_model **out)
{
	struct rbt_model *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->ops = opts && opts->ops ? *opts->ops : mt_no_ops;
	if (opts) {
		m->arg = opts->arg;
		m->batch = opts->batch;
		m->keep_events = opts->keep_events;
		m->threads = opts->threads;
	}
	*out = m;
	return 0;
}

void rbt_model_destroy(struct rbt_model *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->n_traces; i++)
		mt_trace_free(m->traces[i]);
	free(m->traces);
	free(m);
}

static char *mt_strdup(const char *s)
{
	return strdup(s ? s : "");
}

int rbt_model_add_trace(struct rbt_model *m, const struct rbt_header *hdr,
			const char *name)
{
	if (m->origin_set)
		return -EBUSY; /* the timeline's origin is already fixed */
	if (rbt_grow(&m->traces, &m->cap_traces, (uint32_t)m->n_traces + 1,
		     sizeof(*m->traces), 4, 0))
		return -ENOMEM;
	struct mt_trace *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->pub.idx = m->n_traces;
	t->pub.hdr = *hdr;
	t->host = mt_strdup(hdr->host);
	t->cmdline = mt_strdup(hdr->cmdline);
	t->tool = mt_strdup(hdr->tool);
	t->name = mt_strdup(name);
	t->pub.hdr.host = t->host;
	t->pub.hdr.cmdline = t->cmdline;
	t->pub.hdr.tool = t->tool;
	t->pub.name = t->name;
	t->pub.ns_per_tick = hdr->clock_hz ? 1e9 / (double)hdr->clock_hz : 1.0;
	m->traces[m->n_traces++] = t;
	return t->pub.idx;
}

int rbt_model_n_traces(const struct rbt_model *m)
{
	return m->n_traces;
}

const struct rbt_model_trace *rbt_model_trace(const struct rbt_model *m, int trace)
{
	return trace >= 0 && trace < m->n_traces ? &m->traces[trace]->pub : NULL;
}

void rbt_model_stats(const struct rbt_model *m, struct rbt_model_stats *out)
{
	*out = m->stats;
}

void rbt_model_set_reader_stats(struct rbt_model *m, int trace,
				const struct rbt_reader_stats *st, int finished)
{
	if (trace < 0 || trace >= m->n_traces || !st)
		return;
	m->traces[trace]->pub.rstats = *st;
	m->traces[trace]->pub.have_stats = true;
	m->traces[trace]->pub.finished = finished;
}

static void mt_on_thread(struct rbt_model *m, int trace, const struct rbt_event *ev)
{
	struct rbt_model_thread *th =
		rbt_model_thread(m, trace, (uint32_t)ev->u.thread.tid);
	if (th && ev->u.thread.name && !th->name) {
		th->name = strdup(ev->u.thread.name);
		if (th->name && m->ops.thread)
			m->ops.thread(m->arg, trace, th);
	}
}

static bool mt_is_data_path(uint32_t type)
{
	return type == RBT_EV_POST_SEND || type == RBT_EV_POST_RECV ||
	       type == RBT_EV_POST_SRQ_RECV || type == RBT_EV_POLL_CQ;
}

/* The object a data-path event works on, resolved before the consumer sees it. */
static struct rbt_model_res *mt_data_res(struct rbt_model *m, struct mt_trace *t,
					 const struct rbt_event *ev)
{
	bool send = ev->type == RBT_EV_POST_SEND;
	switch (ev->type) {
	case RBT_EV_POST_SEND:
	case RBT_EV_POST_RECV: {
		struct rbt_model_qp *qp =
			mt_qp_find(m, t, send ? ev->u.post_send.qp : ev->u.post_recv.qp,
				   (uint32_t)(send ? ev->u.post_send.qp_num
						   : ev->u.post_recv.qp_num));
		return qp ? &qp->res : NULL;
	}
	case RBT_EV_POST_SRQ_RECV:
		return rbt_map_get(&t->tab[RBT_MODEL_SRQ], ev->u.post_srq_recv.srq);
	case RBT_EV_POLL_CQ: {
		uint64_t h = ev->u.poll_cq.cq;
		struct rbt_model_cq *cq = t->c_cq && t->c_cq->res.handle == h
						  ? t->c_cq
						  : mt_cq_get(m, t, h);
		t->c_cq = cq;
		return cq ? &cq->res : NULL;
	}
	default:
		return NULL;
	}
}

static void mt_apply(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev,
		     struct rbt_model_res **r)
{
	void *q = *r;
	if (mt_is_data_path(ev->type)) {
		if (!q)
			return;
		if (ev->type == RBT_EV_POST_SEND)
			mt_on_post_send(m, t, ev, q);
		else if (ev->type == RBT_EV_POST_RECV)
			mt_on_post_recv(m, t, ev, q);
		else if (ev->type == RBT_EV_POST_SRQ_RECV)
			mt_on_post_srq_recv(m, t, ev, q);
		else
			mt_on_poll(m, t, ev, q);
		return;
	}
	switch (ev->type) {
	case RBT_EV_THREAD:
		mt_on_thread(m, t->pub.idx, ev);
		break;
	case RBT_EV_CLOCK_SAMPLE:
		mt_on_clock(m, t, ev);
		break;
	default: {
		struct rbt_model_res *res = mt_on_resource(m, t, ev);
		if (res || !*r)
			*r = res;
		break;
	}
	}
}

int rbt_model_feed(struct rbt_model *m, int trace, const struct rbt_event *ev)
{
	if (trace < 0 || trace >= m->n_traces || m->finished)
		return -EINVAL;
	mt_set_origin(m);
	struct mt_trace *t = m->traces[trace];
	t->pub.events++;
	m->stats.events++;
	if (ev->ts) {
		if (!t->pub.any_ts || ev->ts < t->pub.min_ts)
			t->pub.min_ts = ev->ts;
		if (ev->ts > t->pub.max_ts)
			t->pub.max_ts = ev->ts;
		t->pub.any_ts = true;
	}
	struct rbt_model_res *r =
		mt_is_data_path(ev->type) ? mt_data_res(m, t, ev) : mt_resource_of(t, ev);
	if (m->ops.before)
		m->ops.before(m->arg, trace, ev, r);
	mt_apply(m, t, ev, &r);
	if (m->ops.after)
		m->ops.after(m->arg, trace, ev, r);
	return 0;
}

/* ---- reading files ---- */

static int mt_open_all(struct rbt_model *m, struct rbt_reader **rd, int *idx,
		       const char *const *paths, int n, char *errbuf, size_t errlen)
{
	/* Several files: fewer threads each, but never none (one file is often
	 * most of the work); the workers of a file ahead of the others wait. */
	struct rbt_reader_opts ro = { .threads = m->threads };
	if (n > 1 && ro.threads > 2)
		ro.threads = ro.threads / (unsigned)n > 2 ? ro.threads / (unsigned)n : 2;
	for (int i = 0; i < n; i++) {
		int ret = rbt_reader_open_opts(paths[i], &ro, &rd[i]);
		if (ret < 0) {
			/* the reader's -EINVAL for a path is a FIFO, device or socket */
			snprintf(errbuf, errlen, "%s: %s", paths[i],
				 ret == -EINVAL ? "not a regular file"
						: rbt_strerror(ret));
			return ret;
		}
		idx[i] = rbt_model_add_trace(m, rbt_reader_header(rd[i]), paths[i]);
		if (idx[i] < 0) {
			snprintf(errbuf, errlen, "%s: %s", paths[i],
				 rbt_strerror(idx[i]));
			return idx[i];
		}
	}
	/* The same recording twice (one file named twice, or a copy) would count
	 * every WR twice and pair each QP with itself. A damaged header is all zero
	 * and proves nothing. */
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			if (rbt_header_same_recording(rbt_reader_header(rd[i]),
						      rbt_reader_header(rd[j]))) {
				snprintf(errbuf, errlen,
					 "%s: the same recording as %s (host, pid and "
					 "start time): give each trace once",
					 paths[i], paths[j]);
				return -EINVAL;
			}
	return 0;
}

/* Merges the data path by aligned time so both ends' outstanding work stays small.
 * Other events go in at once: a recorder's background thread may write a late clock
 * sample early in the file, and letting it set the pace would hold that whole trace
 * back. */
static void mt_merge(struct rbt_model *m, struct rbt_reader **rd,
		     const struct rbt_event **cur, const int *idx, int n, int live)
{
	while (live) {
		int best = -1;
		double bt = 0;
		for (int i = 0; i < n; i++) {
			while (cur[i] && (n == 1 || !mt_is_data_path(cur[i]->type))) {
				rbt_model_feed(m, idx[i], cur[i]);
				if (rbt_reader_next(rd[i], &cur[i]) <= 0) {
					cur[i] = NULL;
					live--;
				}
			}
			if (!cur[i])
				continue;
			double a = rbt_model_aligned_ns(&m->traces[idx[i]]->pub,
							(double)cur[i]->ts);
			if (best < 0 || a < bt) {
				best = i;
				bt = a;
			}
		}
		if (best < 0)
			break;
		rbt_model_feed(m, idx[best], cur[best]);
		if (rbt_reader_next(rd[best], &cur[best]) <= 0) {
			cur[best] = NULL;
			live--;
		}
	}
}

int rbt_model_run_files(struct rbt_model *m, const char *const *paths, int n,
			char *errbuf, size_t errlen)
{
	struct rbt_reader **rd = calloc(n ? n : 1, sizeof(*rd));
	const struct rbt_event **cur = calloc(n ? n : 1, sizeof(*cur));
	int *idx = calloc(n ? n : 1, sizeof(*idx));
	int ret = -ENOMEM;
	if (!rd || !cur || !idx)
		goto out;
	ret = mt_open_all(m, rd, idx, paths, n, errbuf, errlen);
	if (ret < 0)
		goto out;
	mt_set_origin(m);
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
	mt_merge(m, rd, cur, idx, n, live);
	for (int i = 0; i < n; i++) {
		rbt_model_set_reader_stats(m, idx[i], rbt_reader_stats(rd[i]),
					   rbt_reader_trailer(rd[i]) != NULL);
		snprintf(m->traces[idx[i]]->pub.reader_error,
			 sizeof(m->traces[idx[i]]->pub.reader_error), "%s",
			 rbt_reader_error(rd[i]));
	}
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

int rbt_model_finish(struct rbt_model *m)
{
	if (m->finished)
		return -EALREADY;
	mt_set_origin(m);
	m->finished = true;
	for (int i = 0; i < m->n_traces; i++)
		mt_join_finish(m, m->traces[i]);
	return 0;
}
