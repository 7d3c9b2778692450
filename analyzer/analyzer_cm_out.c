/* analyzer_cm_out.c - the connection manager's sections of the report: the
 * "connections" block of the text report, the "connections" array of the JSON
 * report (absent when the traces hold no rdma_cm), the HTML table.
 *
 * It only reads the connections analyzer_cm_build.c made; addresses were made
 * printable (no control characters, <, &, " or \\) when they were copied.
 */
#include <inttypes.h>
#include <stdio.h>

#include "analyzer/analyzer_cm_int.h"

static const char *cm_role_name(enum cm_role r)
{
	static const char *const n[] = { "id", "active", "passive", "listener" };
	return n[r];
}

static uint32_t cm_count(const struct an_cm *cm)
{
	uint32_t n = 0;
	for (int i = 0; cm && i < cm->nt; i++)
		n += cm->t[i].nc;
	return n;
}

static void cm_text_span(FILE *f, const char *label, double ns, bool *first)
{
	if (ns < 0)
		return;
	if (ns < 1e6)
		fprintf(f, "%s%s %.1f us", *first ? "    " : ", ", label, ns / 1e3);
	else
		fprintf(f, "%s%s %.3f ms", *first ? "    " : ", ", label, ns / 1e6);
	*first = false;
}

void an_cm_write_text(struct rbt_analyzer *an, FILE *f)
{
	struct an_cm *cm = an->cm;
	uint32_t n = cm_count(cm);
	if (!n)
		return;
	fprintf(f, "== connections (rdma_cm): %u id%s\n", n, n == 1 ? "" : "s");
	for (int i = 0; i < cm->nt && i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		for (uint32_t k = 0; k < cm->t[i].nc; k++) {
			const struct cm_conn *c = &cm->t[i].conns[k];
			const char *qt = rbt_verbs_name(RBT_NAMES_QP_TYPE, c->qp_type);
			fprintf(f, "  trace %d id 0x%" PRIx64 " %s%s %s -> %s", i, c->id,
				cm_role_name(c->role), c->sync ? " (synchronous)" : "",
				cm_addr(c->src), cm_addr(c->dst));
			if (c->qp_num)
				fprintf(f, ", QP %" PRIu64 " (%s)", c->qp_num,
					qt ? qt : "?");
			if (c->peer_qpn)
				fprintf(f, " <-> peer QP %" PRIu64, c->peer_qpn);
			fputc('\n', f);
			bool first = true;
			cm_text_span(f, "address resolution",
				     cm_span(t, c->t_raddr, c->t_raddr_done), &first);
			cm_text_span(f, "route resolution",
				     cm_span(t, c->t_rroute, c->t_rroute_done), &first);
			cm_text_span(f, "connect -> ESTABLISHED",
				     cm_span(t, c->t_connect, c->t_established), &first);
			cm_text_span(f, "CONNECT_REQUEST -> accept",
				     cm_span(t, c->t_request, c->t_accept), &first);
			cm_text_span(f, "accept -> ESTABLISHED",
				     cm_span(t, c->t_accept, c->t_established), &first);
			if (!first)
				fputc('\n', f);
			fprintf(f,
				"    %" PRIu64
				" event%s, blocked in rdma_get_cm_event %.3f ms, "
				"%" PRIu64 " acked",
				c->events, c->events == 1 ? "" : "s",
				(double)c->wait_ticks * t->mt->ns_per_tick / 1e6,
				c->acked);
			if (c->acked)
				fprintf(f, " (ack lag mean %.1f us, max %.1f us)",
					(double)c->ack_lag_sum * t->mt->ns_per_tick /
						(double)c->acked / 1e3,
					(double)c->ack_lag_max * t->mt->ns_per_tick /
						1e3);
			if (c->unacked)
				fprintf(f, ", %" PRIu64 " never acked", c->unacked);
			fputc('\n', f);
			if (c->err_event >= 0)
				fprintf(f,
					"    failed: %s status %" PRId64 " at %.3f ms\n",
					c->err_event == 1000
						? "rdma_connect"
						: cm_ev_name((uint64_t)c->err_event),
					c->err_status, an_ticks_ns(t, c->err_ts) / 1e6);
			if (c->t_disc_call != CM_NONE || c->t_disc_ev != CM_NONE) {
				fprintf(f, "    disconnect:");
				if (c->t_disc_call != CM_NONE)
					fprintf(f, " rdma_disconnect at %.3f ms",
						an_ticks_ns(t, c->t_disc_call) / 1e6);
				if (c->t_disc_ev != CM_NONE)
					fprintf(f, "%s DISCONNECTED at %.3f ms",
						c->t_disc_call != CM_NONE ? "," : "",
						an_ticks_ns(t, c->t_disc_ev) / 1e6);
				double up =
					cm_span(t, c->t_established,
						c->t_disc_call != CM_NONE ? c->t_disc_call
									  : c->t_disc_ev);
				if (up >= 0)
					fprintf(f, " (connected %.3f ms)", up / 1e6);
				fputc('\n', f);
			}
			if (c->peer >= 0)
				fprintf(f, "    peer: trace %d id 0x%" PRIx64 "\n",
					c->peer_trace,
					cm->t[c->peer_trace].conns[c->peer].id);
		}
	}
	fputc('\n', f);
}

static void cm_json_ns(struct rbt_json *j, const char *key, double ns)
{
	rbt_json_key(j, key);
	if (ns < 0)
		rbt_json_null(j);
	else
		rbt_json_dbl(j, "%.0f", ns);
}

static void cm_json_at(struct rbt_json *j, const char *key, const struct an_trace *t,
		       uint64_t ts)
{
	cm_json_ns(j, key, ts == CM_NONE ? -1 : an_ticks_ns(t, ts));
}

static void cm_json_hex(struct rbt_json *j, const char *key, uint64_t v)
{
	char b[24];
	snprintf(b, sizeof(b), "0x%" PRIx64, v);
	rbt_json_kstr(j, key, b);
}

void an_cm_write_json(struct rbt_analyzer *an, struct rbt_json *j)
{
	struct an_cm *cm = an->cm;
	if (!cm_count(cm))
		return; /* no rdma_cm in the traces: no key (older reports' shape) */
	rbt_json_key(j, "connections");
	rbt_json_arr(j);
	for (int i = 0; i < cm->nt && i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		double nst = t->mt->ns_per_tick;
		for (uint32_t k = 0; k < cm->t[i].nc; k++) {
			const struct cm_conn *c = &cm->t[i].conns[k];
			const char *qt = rbt_verbs_name(RBT_NAMES_QP_TYPE, c->qp_type);
			rbt_json_obj(j);
			rbt_json_ki64(j, "trace", i);
			cm_json_hex(j, "id", c->id);
			rbt_json_kstr(j, "role", cm_role_name(c->role));
			rbt_json_kstr(j, "src", c->src);
			rbt_json_kstr(j, "dst", c->dst);
			rbt_json_kbool(j, "synchronous", c->sync);
			rbt_json_ku64(j, "qp_num", c->qp_num);
			rbt_json_kstr(j, "qp_type", qt ? qt : "");
			rbt_json_ku64(j, "peer_qp_num", c->peer_qpn);
			cm_json_ns(j, "addr_resolve_ns",
				   cm_span(t, c->t_raddr, c->t_raddr_done));
			cm_json_ns(j, "route_resolve_ns",
				   cm_span(t, c->t_rroute, c->t_rroute_done));
			cm_json_ns(j, "connect_ns",
				   cm_span(t, c->t_connect, c->t_established));
			cm_json_ns(j, "accept_delay_ns",
				   cm_span(t, c->t_request, c->t_accept));
			cm_json_ns(j, "accept_to_established_ns",
				   cm_span(t, c->t_accept, c->t_established));
			cm_json_at(j, "established_at_ns", t, c->t_established);
			rbt_json_ku64(j, "events", c->events);
			rbt_json_kdbl(j, "get_event_wait_ns", "%.0f",
				      (double)c->wait_ticks * nst);
			rbt_json_ku64(j, "acked", c->acked);
			rbt_json_ku64(j, "unacked", c->unacked);
			cm_json_ns(j, "ack_lag_mean_ns",
				   c->acked ? (double)c->ack_lag_sum * nst /
						      (double)c->acked
					    : -1);
			cm_json_ns(j, "ack_lag_max_ns",
				   c->acked ? (double)c->ack_lag_max * nst : -1);
			rbt_json_key(j, "error");
			if (c->err_event >= 0) {
				rbt_json_obj(j);
				rbt_json_kstr(
					j, "event",
					c->err_event == 1000
						? "rdma_connect"
						: cm_ev_name((uint64_t)c->err_event));
				rbt_json_ki64(j, "status", c->err_status);
				rbt_json_ku64(j, "private_data_len", c->err_pdlen);
				rbt_json_kdbl(j, "at_ns", "%.0f",
					      an_ticks_ns(t, c->err_ts));
				rbt_json_obj_end(j);
			} else {
				rbt_json_null(j);
			}
			cm_json_at(j, "disconnect_call_ns", t, c->t_disc_call);
			cm_json_at(j, "disconnected_event_ns", t, c->t_disc_ev);
			rbt_json_key(j, "peer");
			if (c->peer >= 0) {
				rbt_json_obj(j);
				rbt_json_ki64(j, "trace", c->peer_trace);
				cm_json_hex(j, "id",
					    cm->t[c->peer_trace].conns[c->peer].id);
				rbt_json_obj_end(j);
			} else {
				rbt_json_null(j);
			}
			rbt_json_obj_end(j);
		}
	}
	rbt_json_arr_end(j);
}

void an_cm_write_html(struct rbt_analyzer *an, FILE *f)
{
	uint32_t n = cm_count(an->cm);
	if (!n)
		return;
	fprintf(f,
		"<h2>Connections (rdma_cm): %u</h2>\n<table border=\"1\" "
		"cellspacing=\"0\" cellpadding=\"3\">\n<tr><th>trace</th><th>id</th>"
		"<th>role</th><th>src &rarr; dst</th><th>QP</th><th>addr</th>"
		"<th>route</th><th>connect &rarr; ESTABLISHED</th>"
		"<th>request &rarr; accept</th><th>events</th><th>result</th></tr>\n",
		n);
	struct an_cm *cm = an->cm;
	for (int i = 0; i < cm->nt && i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		for (uint32_t k = 0; k < cm->t[i].nc; k++) {
			const struct cm_conn *c = &cm->t[i].conns[k];
			double sp[4] = { cm_span(t, c->t_raddr, c->t_raddr_done),
					 cm_span(t, c->t_rroute, c->t_rroute_done),
					 cm_span(t, c->t_connect, c->t_established),
					 cm_span(t, c->t_request, c->t_accept) };
			/* addresses are kept printable without <, & or " (cm_copy) */
			fprintf(f,
				"<tr><td>%d</td><td>0x%" PRIx64 "</td><td>%s</td><td>%s "
				"&rarr; %s",
				i, c->id, cm_role_name(c->role), c->src, c->dst);
			fprintf(f, "</td><td>%" PRIu64 "</td>", c->qp_num);
			for (int s = 0; s < 4; s++) {
				if (sp[s] < 0)
					fputs("<td></td>", f);
				else
					fprintf(f, "<td>%.3f ms</td>", sp[s] / 1e6);
			}
			fprintf(f, "<td>%" PRIu64 "</td><td>%s", c->events,
				c->err_event >= 0
					? (c->err_event == 1000
						   ? "rdma_connect failed"
						   : cm_ev_name((uint64_t)c->err_event))
				: c->t_established != CM_NONE ? "ESTABLISHED"
							      : "");
			if (c->err_event >= 0)
				fprintf(f, " %" PRId64, c->err_status);
			fputs("</td></tr>\n", f);
		}
	}
	fputs("</table>\n", f);
}
