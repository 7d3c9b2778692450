/* analyzer_cm_int.h - the state shared by the connection manager's files of the
 * analyzer: analyzer_cm.c (the records, fed), analyzer_cm_build.c (connections
 * and their pairing, built at the end), analyzer_cm_diag.c (the CM findings),
 * analyzer_cm_out.c (the text, JSON and HTML sections). Not public.
 *
 * Nothing here may print or trust a record: handles are identities only,
 * strings are bounded, counts are clamped.
 */
#ifndef RBT_ANALYZER_CM_INT_H
#define RBT_ANALYZER_CM_INT_H

#include <stdint.h>

#include "analyzer/analyzer_internal.h"
#include "util/rbt_map.h"

#define CM_ADDR 48
#define CM_NONE UINT64_MAX

/* enum rdma_cm_event_type (librdmacm ABI; the analyzer does not include it) */
enum {
	CM_EV_ADDR_RESOLVED = 0,
	CM_EV_ADDR_ERROR = 1,
	CM_EV_ROUTE_RESOLVED = 2,
	CM_EV_ROUTE_ERROR = 3,
	CM_EV_CONNECT_REQUEST = 4,
	CM_EV_CONNECT_RESPONSE = 5,
	CM_EV_CONNECT_ERROR = 6,
	CM_EV_UNREACHABLE = 7,
	CM_EV_REJECTED = 8,
	CM_EV_ESTABLISHED = 9,
	CM_EV_DISCONNECTED = 10,
};

struct cm_rec {
	uint64_t key; /* sort key: an event's return, a call's entry */
	uint64_t ts, ts_exit;
	uint32_t seq, tid;
	uint16_t type, what; /* RBT_EV_CM_*; fn or event type */
	uint16_t nested;
	int64_t ret, status;
	uint64_t err, id, listen_id, ev, qp, qp_num, conn_qp_num, pdlen, arg, why;
	char src[CM_ADDR], dst[CM_ADDR];
};

/* handle -> index maps (util/rbt_map holds 1 + the index: a NULL value is an
 * empty slot); handle 0 is no handle. Lookups stay O(1) however many ids,
 * events or QPs a (hostile) trace holds. */
static inline bool cm_map_get(const struct rbt_map *m, uint64_t k, uint32_t *v)
{
	void *p = k ? rbt_map_get(m, k) : NULL;
	if (!p)
		return false;
	*v = (uint32_t)((uintptr_t)p - 1);
	return true;
}

static inline void cm_map_put(struct rbt_map *m, uint64_t k, uint32_t v)
{
	if (k)
		(void)rbt_map_put(m, k, (void *)((uintptr_t)v + 1));
}

struct cm_qp_posts {
	uint64_t qp, last_post, posts;
};

enum cm_role { CM_ROLE_NONE, CM_ROLE_ACTIVE, CM_ROLE_PASSIVE, CM_ROLE_LISTEN };

struct cm_conn {
	int trace;
	uint64_t id, listen_id, qp, qp_num, peer_qpn, qp_type, ps;
	enum cm_role role;
	char src[CM_ADDR], dst[CM_ADDR];
	bool sync; /* its events were taken inside librdmacm (synchronous id) */
	/* ticks; CM_NONE: never */
	uint64_t t_create, t_raddr, t_raddr_done, t_rroute, t_rroute_done, t_connect,
		t_established, t_request, t_accept, t_disc_call, t_disc_ev,
		t_destroy_begin, t_destroyed;
	int err_event; /* -1: none */
	int64_t err_status;
	uint64_t err_pdlen, err_ts;
	uint64_t events, wait_ticks, acked, ack_lag_sum, ack_lag_max, unacked;
	uint64_t unacked_ts;
	int unacked_type;
	/* an ack that came only while rdma_destroy_id waited for it */
	uint64_t late_ack_ts, late_ack_ev_ts;
	int late_ack_type;
	uint64_t posts_after_disc, last_post;
	int peer_trace, peer; /* index in the peer trace's conns, -1: none */
	uint32_t pend_head;   /* 1 + its latest pending event, 0: none */
};

struct cm_trace {
	struct cm_rec *recs;
	uint32_t n, cap;
	struct cm_qp_posts *qps;
	uint32_t nq, capq;
	struct rbt_map qp_map, conn_map; /* QP handle -> qps[], id -> latest conns[] */
	struct cm_conn *conns;
	uint32_t nc, capc;
};

struct an_cm {
	struct cm_trace *t;
	int nt;
	bool done;
};

static inline const char *cm_ev_name(uint64_t e)
{
	const char *n = rbt_verbs_name(RBT_NAMES_CM_EVENT, e);
	return n ? n : "?";
}

static inline const char *cm_addr(const char *s)
{
	return s && *s ? s : "?";
}

/* ns from one tick stamp to another, -1 when either is missing */
static inline double cm_span(const struct an_trace *t, uint64_t from, uint64_t to)
{
	if (from == CM_NONE || to == CM_NONE || to < from)
		return -1;
	return an_ticks_ns(t, to) - an_ticks_ns(t, from);
}

/* analyzer_cm.c: an address or name from the trace, kept printable */
void an_cm_copy(char *dst, const char *s);
/* analyzer_cm_build.c: a trace's connections from its records; then the pairs */
void an_cm_build(struct cm_trace *ct, int trace);
void an_cm_pair(struct an_cm *cm);
/* analyzer_cm_diag.c: the findings of one connection */
void an_cm_findings(struct rbt_analyzer *an, struct an_trace *t, struct cm_conn *c);

#endif
