/* wr_latency.c - an example of librbtformat: prints every work request's latency,
 * from the start of the post that carried it to the end of the poll that handed
 * its completion to the application.
 *
 *	cc wr_latency.c $(pkg-config --cflags --libs rbtformat) -o wr_latency
 *	./wr_latency client.rbt
 *
 * Posts are joined to completions on (QP number, wr_id), never wr_id alone;
 * among posts with the same pair the oldest is taken (programs reuse wr_ids).
 * Receives are listed too, but their time is mostly waiting for the peer.
 * Unsignaled sends have no completion of their own: they are counted at the
 * end, not guessed. `rbtrace report` does the full attribution (post / NIC /
 * poll phases, hardware timestamps); this program shows how to read events.
 * It uses only the public header and library, as a program outside rbtrace would.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rbtrace/rbt_format.h>

struct pending {
	struct pending *next;
	uint64_t qp_num, wr_id, ts;
	int recv;
	unsigned opcode;
};

#define NBUCKETS 4096

static struct pending *buckets[NBUCKETS];
static uint64_t npending;

static unsigned bucket(uint64_t qp_num, uint64_t wr_id)
{
	return (unsigned)((qp_num * 0x9e3779b97f4a7c15ull ^ wr_id) % NBUCKETS);
}

static int remember(uint64_t qp_num, uint64_t wr_id, uint64_t ts, int recv,
		    unsigned opcode)
{
	struct pending *p = calloc(1, sizeof(*p)), **tail;

	if (!p)
		return -1;
	*p = (struct pending){ NULL, qp_num, wr_id, ts, recv, opcode };
	/* appended at the tail: the first match in a chain is the oldest post */
	for (tail = &buckets[bucket(qp_num, wr_id)]; *tail; tail = &(*tail)->next)
		;
	*tail = p;
	npending++;
	return 0;
}

static struct pending *take(uint64_t qp_num, uint64_t wr_id)
{
	for (struct pending **pp = &buckets[bucket(qp_num, wr_id)]; *pp;
	     pp = &(*pp)->next)
		if ((*pp)->qp_num == qp_num && (*pp)->wr_id == wr_id) {
			struct pending *p = *pp;
			*pp = p->next;
			npending--;
			return p;
		}
	return NULL;
}

int main(int argc, char **argv)
{
	struct rbt_reader *r;
	const struct rbt_event *ev;
	uint64_t joined = 0, orphans = 0;
	int err;

	if (argc != 2) {
		fprintf(stderr, "usage: wr_latency TRACE.rbt\n");
		return 2;
	}
	err = rbt_reader_open(argv[1], &r);
	if (err) {
		fprintf(stderr, "wr_latency: %s: %s\n", argv[1], rbt_strerror(err));
		return 1;
	}
	const struct rbt_header *h = rbt_reader_header(r);

	printf("%-8s %-20s %-6s %-22s %12s\n", "qp_num", "wr_id", "kind", "opcode",
	       "latency_ns");
	while ((err = rbt_reader_next(r, &ev)) > 0) {
		if (ev->type == RBT_EV_POST_SEND && ev->u.post_send.ret == 0) {
			const struct rbt_ev_post_send *ps = &ev->u.post_send;
			for (uint32_t i = 0; i < ps->n_wrs; i++)
				if (remember(ps->qp_num, ps->wrs[i].wr_id, ev->ts, 0,
					     (unsigned)ps->wrs[i].opcode))
					goto nomem;
		} else if (ev->type == RBT_EV_POST_RECV && ev->u.post_recv.ret == 0) {
			const struct rbt_ev_post_recv *pr = &ev->u.post_recv;
			for (uint32_t i = 0; i < pr->n_wrs; i++)
				if (remember(pr->qp_num, pr->wrs[i].wr_id, ev->ts, 1, 0))
					goto nomem;
		} else if (ev->type == RBT_EV_POLL_CQ) {
			const struct rbt_ev_poll_cq *pc = &ev->u.poll_cq;
			double done = rbt_ticks_to_ns(h, pc->ts_exit);
			for (uint32_t i = 0; i < pc->n_wcs; i++) {
				const struct rbt_wc *wc = &pc->wcs[i];
				struct pending *p = take(wc->qp_num, wc->wr_id);
				if (!p) {
					orphans++; /* posted before the trace began, or an SRQ */
					continue;
				}
				const char *op =
					p->recv ? rbt_verbs_name(RBT_NAMES_WC_OPCODE,
								 wc->opcode)
						: rbt_verbs_name(RBT_NAMES_WR_OPCODE,
								 p->opcode);
				printf("%-8" PRIu64 " %-20" PRIu64 " %-6s %-22s %12.0f\n",
				       p->qp_num, p->wr_id, p->recv ? "recv" : "send",
				       op ? op : "?", done - rbt_ticks_to_ns(h, p->ts));
				joined++;
				free(p);
			}
		}
	}
	if (err < 0) {
		fprintf(stderr, "wr_latency: %s: %s (%s)\n", argv[1], rbt_strerror(err),
			rbt_reader_error(r));
		rbt_reader_close(r);
		return 1;
	}
	printf("# %" PRIu64 " work requests completed, %" PRIu64
	       " posted without a completion of their own (unsignaled or outstanding), "
	       "%" PRIu64 " completions of WRs posted elsewhere\n",
	       joined, npending, orphans);
	rbt_reader_close(r);
	return 0;
nomem:
	fprintf(stderr, "wr_latency: out of memory\n");
	rbt_reader_close(r);
	return 1;
}
