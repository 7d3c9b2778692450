/* analyzer_output.c - what the output sinks share (names, merged histograms, time
 * formats) and the public writers, each one a sink of the one interface
 * (struct an_sink_ops in analyzer_internal.h).
 *
 * Reads the finished analysis only; writes only to the FILE * it is given.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

const char *const an_phase_name[RBT_PHASE_COUNT] = {
	"post",	  "nic",     "poll",	  "e2e",       "nic_lo",
	"nic_hi", "poll_hi", "recv_wait", "recv_poll", "recv_poll_hi",
};

const char *an_sev_name(int s)
{
	return s == RBT_SEV_ERROR ? "error" : s == RBT_SEV_WARNING ? "warning" : "info";
}

const char *an_qp_type_name(uint32_t t)
{
	const char *n = rbt_verbs_name(RBT_NAMES_QP_TYPE, t);

	return n ? n : "?";
}

const char *an_fmt_ns(char *buf, size_t n, double ns)
{
	if (ns < 1e3)
		snprintf(buf, n, "%.0f ns", ns);
	else if (ns < 1e6)
		snprintf(buf, n, "%.2f us", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, n, "%.3f ms", ns / 1e6);
	else
		snprintf(buf, n, "%.3f s", ns / 1e9);
	return buf;
}

/* Merged histograms of a trace (or all when t == NULL), per phase. */
void an_trace_hists(const struct rbt_analyzer *an, const struct an_trace *t,
		    const struct an_qp *qp, struct an_hist h[RBT_PHASE_COUNT])
{
	memset(h, 0, sizeof(struct an_hist) * RBT_PHASE_COUNT);
	for (uint32_t i = 0; i < an->n_groups; i++) {
		const struct an_group *g = an->groups[i];
		if ((t && g->qp->t != t) || (qp && g->qp != qp))
			continue;
		for (int p = 0; p < RBT_PHASE_COUNT; p++)
			an_hist_merge(&h[p], &g->h[p]);
	}
}

void an_hists_free(struct an_hist h[RBT_PHASE_COUNT])
{
	for (int p = 0; p < RBT_PHASE_COUNT; p++)
		an_hist_free(&h[p]);
}

double an_trace_dur_ns(const struct an_trace *t)
{
	return t->mt->any_ts
		       ? (double)(t->mt->max_ts - t->mt->min_ts) * t->mt->ns_per_tick
		       : 0;
}

static int an_write(const struct an_sink_ops *s, struct rbt_analyzer *an, FILE *f)
{
	if (!an->finished)
		return -EINVAL;
	return s->write(an, f);
}

int rbt_analyzer_write_text(struct rbt_analyzer *an, FILE *f)
{
	return an_write(&an_sink_text, an, f);
}

int rbt_analyzer_write_json(struct rbt_analyzer *an, FILE *f)
{
	return an_write(&an_sink_json, an, f);
}

int rbt_analyzer_write_html(struct rbt_analyzer *an, FILE *f)
{
	return an_write(&an_sink_html, an, f);
}
