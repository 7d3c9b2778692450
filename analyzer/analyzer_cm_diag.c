/* analyzer_cm_diag.c - the connection manager's findings, one connection at a
 * time after the connections are built and paired (analyzer_cm_build.c): a
 * connect that failed (rejected, nobody listening, an address on no RDMA
 * device, timeouts, a QP set-up refused), CM events never acked or acked only
 * while rdma_destroy_id waited, posts after DISCONNECTED.
 *
 * Every string it puts in a finding comes from the records through an_cm_copy
 * (printable, bounded); it never changes a connection.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "analyzer/analyzer_cm_int.h"

/* A destroy that waited less than this for another thread's ack is the usual
 * race between a CM thread acking DISCONNECTED and the main thread destroying
 * the id (rping): not a finding */
#define CM_LATE_ACK_MIN_NS 10e6

/* Adds a finding of connection c and frees its title and evidence. */
static void cm_add(struct rbt_analyzer *an, int sev, int code, const struct an_trace *t,
		   const struct cm_conn *c, double at, struct an_str *title,
		   struct an_str *ev, const char *advice)
{
	an_add_finding(an, sev, code, t->idx, (uint32_t)c->qp_num, at, title->s, ev->s,
		       advice);
	an_str_free(title);
	an_str_free(ev);
}

static void cm_find_error(struct rbt_analyzer *an, struct an_trace *t,
			  const struct cm_conn *c)
{
	struct an_str title = { 0 }, ev = { 0 };
	double at = c->err_ts ? an_ticks_ns(t, c->err_ts) : 0;
	const char *dst = cm_addr(c->dst);

	int code = -1;
	const char *advice = NULL;
	an_str_printf(&ev, "id 0x%" PRIx64 " %s -> %s: %s status %" PRId64, c->id,
		      cm_addr(c->src), dst,
		      c->err_event == 1000 ? "rdma_connect failed"
					   : cm_ev_name((uint64_t)c->err_event),
		      c->err_status);
	if (c->t_connect != CM_NONE && c->err_ts >= c->t_connect)
		an_str_printf(&ev, ", %.3f ms after rdma_connect",
			      cm_span(t, c->t_connect, c->err_ts) / 1e6);
	switch (c->err_event) {
	case CM_EV_REJECTED:
		if (c->err_status == 8) {
			code = RBT_FINDING_cm_no_listener;
			an_str_printf(&title,
				      "connect to %s rejected: nobody listened there "
				      "(REJECTED, reason 8: invalid service ID)",
				      dst);
			advice = "start the server (rdma_listen) before the "
				 "client "
				 "connects, or retry the connect after REJECTED "
				 "(perftest and many programs do not retry)";
		} else {
			code = RBT_FINDING_cm_rejected;
			an_str_printf(&title,
				      "connect to %s rejected by the peer "
				      "(reason %" PRId64 "%s), %" PRIu64
				      " bytes of private data",
				      dst, c->err_status,
				      c->err_status == 28 ? ": consumer reject" : "",
				      c->err_pdlen);
			an_str_printf(&ev, ", private data %" PRIu64 " bytes",
				      c->err_pdlen);
			advice = "the passive side called rdma_reject: its "
				 "private "
				 "data (record with RBTRACE_PAYLOAD to see the "
				 "bytes) "
				 "and its log say why; check that both ends "
				 "agree on "
				 "the connection parameters";
		}
		break;
	case CM_EV_ADDR_ERROR:
		code = RBT_FINDING_cm_addr_error;
		an_str_printf(
			&title,
			"address resolution of %s failed (ADDR_ERROR %" PRId64 "%s)", dst,
			c->err_status,
			c->err_status == -19 ? ": the address is on no RDMA device" : "");
		advice = "use an address of an RDMA interface (IPoIB or RoCE "
			 "netdev "
			 "of the device; rdma link show, ibdev2netdev)";
		break;
	case CM_EV_ROUTE_ERROR:
		code = RBT_FINDING_cm_timeout;
		an_str_printf(&title,
			      "route resolution to %s failed (ROUTE_ERROR %" PRId64 "%s)",
			      dst, c->err_status,
			      c->err_status == -110 ? ": the path query timed out" : "");
		advice = "check the subnet manager (IB) or the route and "
			 "neighbour "
			 "to the peer (RoCE), or give rdma_resolve_route a longer "
			 "timeout";
		break;
	case CM_EV_UNREACHABLE:
		code = RBT_FINDING_cm_timeout;
		an_str_printf(&title,
			      "connect to %s timed out (UNREACHABLE %" PRId64
			      "): the peer never answered",
			      dst, c->err_status);
		advice = "the peer's CM did not reply: check that it is alive and "
			 "its application takes its events (rdma_get_cm_event), "
			 "and that nothing drops CM MADs between the ends";
		break;
	case CM_EV_CONNECT_ERROR:
	case 1000:
		code = RBT_FINDING_cm_connect_error;
		an_str_printf(&title, "connect to %s failed (%s %" PRId64 ")", dst,
			      c->err_event == 1000 ? "rdma_connect" : "CONNECT_ERROR",
			      c->err_status);
		advice = "the QP could not be moved to RTR/RTS with the peer's "
			 "parameters, or the call's arguments were refused: see "
			 "the qp_modify events around it";
		break;
	}
	if (code >= 0)
		cm_add(an, RBT_SEV_ERROR, code, t, c, at, &title, &ev, advice);
	an_str_free(&title);
	an_str_free(&ev);
}

static void cm_find_late_ack(struct rbt_analyzer *an, struct an_trace *t,
			     const struct cm_conn *c, struct an_str *title,
			     struct an_str *ev)
{
	if (!c->late_ack_ts)
		return;
	double waited = cm_span(t, c->t_destroy_begin, c->late_ack_ts);
	if (waited < CM_LATE_ACK_MIN_NS)
		return;
	an_str_printf(title,
		      "rdma_destroy_id of id 0x%" PRIx64
		      " waited %.3f ms for a CM event to be acked",
		      c->id, waited / 1e6);
	an_str_printf(ev,
		      "%s delivered at %.3f ms; rdma_destroy_id entered at %.3f ms; "
		      "the ack at %.3f ms",
		      cm_ev_name((uint64_t)c->late_ack_type),
		      an_ticks_ns(t, c->late_ack_ev_ts) / 1e6,
		      an_ticks_ns(t, c->t_destroy_begin) / 1e6,
		      an_ticks_ns(t, c->late_ack_ts) / 1e6);
	cm_add(an, RBT_SEV_WARNING, RBT_FINDING_cm_event_not_acked, t, c,
	       an_ticks_ns(t, c->t_destroy_begin), title, ev,
	       "ack every event with rdma_ack_cm_event before "
	       "rdma_destroy_id: the destroy blocks until then (forever when "
	       "the ack never comes)");
}

/* cm_event_not_acked: events never acked, or acked only while rdma_destroy_id
 * waited for them. */
static void cm_find_not_acked(struct rbt_analyzer *an, struct an_trace *t,
			      const struct cm_conn *c)
{
	struct an_str title = { 0 }, ev = { 0 };

	if (!c->unacked) {
		cm_find_late_ack(an, t, c, &title, &ev);
		return;
	}
	bool hang = c->t_destroy_begin != CM_NONE && c->t_destroyed == CM_NONE;
	an_str_printf(&title, "%" PRIu64 " CM event%s on id 0x%" PRIx64 " never acked%s",
		      c->unacked, c->unacked == 1 ? "" : "s", c->id,
		      hang ? ": rdma_destroy_id waits for it forever" : "");
	an_str_printf(&ev, "%s delivered at %.3f ms, no rdma_ack_cm_event",
		      cm_ev_name((uint64_t)c->unacked_type),
		      an_ticks_ns(t, c->unacked_ts) / 1e6);
	if (hang)
		an_str_printf(&ev,
			      "; rdma_destroy_id entered at %.3f ms, never "
			      "returned",
			      an_ticks_ns(t, c->t_destroy_begin) / 1e6);
	cm_add(an, hang ? RBT_SEV_ERROR : RBT_SEV_WARNING, RBT_FINDING_cm_event_not_acked,
	       t, c, an_ticks_ns(t, c->unacked_ts), &title, &ev,
	       "ack every event with rdma_ack_cm_event (after copying "
	       "what it carries) before rdma_destroy_id or "
	       "rdma_destroy_event_channel");
}

static void cm_find_post_after_disc(struct rbt_analyzer *an, struct an_trace *t,
				    const struct cm_conn *c)
{
	struct an_str title = { 0 }, ev = { 0 };

	an_str_printf(&title, "QP %" PRIu64 " posted to after its DISCONNECTED event",
		      c->qp_num);
	an_str_printf(&ev, "id 0x%" PRIx64 ": DISCONNECTED at %.3f ms, a post at %.3f ms",
		      c->id, an_ticks_ns(t, c->t_disc_ev) / 1e6,
		      an_ticks_ns(t, c->last_post) / 1e6);
	cm_add(an, RBT_SEV_WARNING, RBT_FINDING_cm_qp_after_disconnect, t, c,
	       an_ticks_ns(t, c->last_post), &title, &ev,
	       "after DISCONNECTED the QP is in the error state and its "
	       "work completes in error: stop posting, drain the CQ, then "
	       "rdma_destroy_qp");
}

void an_cm_findings(struct rbt_analyzer *an, struct an_trace *t, struct cm_conn *c)
{
	if (c->err_event >= 0)
		cm_find_error(an, t, c);
	cm_find_not_acked(an, t, c);
	if (c->posts_after_disc)
		cm_find_post_after_disc(an, t, c);
}
