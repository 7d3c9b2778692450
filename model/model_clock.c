/* model_clock.c - the one clock conversion of rbtrace: trace ticks to ns (since the
 * trace's start, on the timeline shared by the traces, on the trace's
 * CLOCK_MONOTONIC) and a NIC clock to host ticks through a least-squares model
 * fitted on the clock samples of its device.
 *
 * The fit is a running (Welford-style) one: constant memory per device, stable with
 * large tick counts. Its residual is measured honestly: each new sample against the
 * model as it was before that sample. Never trusts a sample: a device without a
 * rate, or samples that do not move, leave the model unusable, not wrong.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_int.h"

uint64_t rbt_model_mono_ns(const struct rbt_model_trace *t, uint64_t ticks)
{
	const struct rbt_header *h = &t->hdr;
	double d = (double)(int64_t)(ticks - h->start.ticks);
	double hz = h->clock_hz ? (double)h->clock_hz : 1e9;

	double ns = d * 1e9 / hz;

	/* a damaged header's clock (1 Hz, say) puts ticks beyond int64 ns */
	if (!(ns > -9.2e18))
		ns = -9.2e18;
	else if (ns > 9.2e18)
		ns = 9.2e18;
	return h->start.mono_ns + (uint64_t)(int64_t)ns;
}

struct mt_clock *mt_clock_of(const struct mt_trace *t, uint64_t ctx)
{
	struct mt_clock *c = rbt_map_get(&t->clocks, ctx);
	return c ? c : t->first_clock;
}

bool mt_clock_covers(const struct mt_clock *c, uint64_t nic)
{
	return c && c->n && (int64_t)(nic - c->x_last) <= 0;
}

bool mt_clock_map(const struct mt_clock *c, uint64_t nic, double *host)
{
	if (!c || !c->n || c->b <= 0)
		return false;
	double x = (double)(int64_t)(nic - c->x0);
	*host = (double)c->y0 + c->my + c->b0 * c->mx + c->b * (x - c->mx);
	return true;
}

int rbt_model_nic_to_host(const struct rbt_model *m, int trace, uint64_t ctx,
			  uint64_t nic, double *host_ticks)
{
	if (trace < 0 || trace >= m->n_traces)
		return -EINVAL;
	return mt_clock_map(mt_clock_of(m->traces[trace], ctx), nic, host_ticks)
		       ? 0
		       : -ENOENT;
}

void mt_on_clock(struct rbt_model *m, struct mt_trace *t, const struct rbt_event *ev)
{
	const struct rbt_ev_clock_sample *p = &ev->u.clock_sample;
	if (!p->ctx || !p->nic_ts)
		return;
	struct mt_clock *c = rbt_map_get(&t->clocks, p->ctx);
	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c || rbt_map_put(&t->clocks, p->ctx, c)) {
			free(c);
			return;
		}
		c->ctx = p->ctx;
		c->x0 = p->nic_ts;
		c->y0 = ev->ts;
		c->nic_hz = (double)p->nic_hz;
		c->b = c->nic_hz > 0 ? (double)t->pub.hdr.clock_hz / c->nic_hz : 0;
		c->b0 = c->b;
		if (!t->first_clock)
			t->first_clock = c;
	}
	if (!c->n || (int64_t)(p->nic_ts - c->x_last) > 0)
		c->x_last = p->nic_ts;
	double x = (double)(int64_t)(p->nic_ts - c->x0);
	double y = (double)(int64_t)(ev->ts - c->y0) - c->b0 * x;
	if (c->n >= 1 && c->b > 0) {
		/* how wrong the model as used so far was: the honest residual */
		double pred = c->my + (c->b - c->b0) * (x - c->mx);
		double r = fabs(y - pred);
		if (r > c->max_resid_ticks)
			c->max_resid_ticks = r;
	}
	c->n++;
	double dx = x - c->mx;
	double dy = y - c->my;
	c->mx += dx / (double)c->n;
	c->my += dy / (double)c->n;
	c->cxy += dx * (y - c->my);
	c->m2x += dx * (x - c->mx);
	c->m2y += dy * (y - c->my);
	if (c->n >= 2 && c->m2x > 0)
		c->b = c->b0 + c->cxy / c->m2x;
	if (t->deferred.n)
		mt_drain_deferred(m, t, false);
}

int rbt_model_clock_fit(const struct rbt_model *m, int trace,
			struct rbt_model_clock_fit *out)
{
	memset(out, 0, sizeof(*out));
	if (trace < 0 || trace >= m->n_traces)
		return -EINVAL;
	const struct mt_trace *t = m->traces[trace];
	const struct mt_clock *c = t->first_clock;
	if (!c)
		return -ENOENT;
	double npt = t->pub.ns_per_tick;
	out->ctx = c->ctx;
	out->samples = c->n;
	out->ns_per_nic_tick = c->b * npt;
	out->max_residual_ns = c->max_resid_ticks * npt;
	double sse = c->n >= 2 && c->m2x > 0 ? c->m2y - c->cxy * c->cxy / c->m2x : 0;
	out->rms_residual_ns = sse > 0 ? sqrt(sse / (double)c->n) * npt : 0;
	return 0;
}
