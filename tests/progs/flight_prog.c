/* flight_prog.c - a loopback verbs program for the flight recorder's and
 * rotation's tests over softnic. Two RC QPs of this process are connected to
 * each other; each iteration posts a receive on B and a signaled SEND on A and
 * polls both completions.
 *
 *   flight_prog run N          N iterations (deterministic: same WRs every run)
 *   flight_prog error N        N iterations, then a SEND with a bad lkey (an
 *                              error completion, polled), then N more on a
 *                              fresh QP pair
 *   flight_prog stall N MS     N iterations, then a signaled SEND whose
 *                              completion it does not poll for MS ms
 *   flight_prog wait N FILE    N iterations, prints "ready", then one iteration
 *                              per ms until FILE exists (at most 20 s)
 *   flight_prog qperr N        N iterations, then QP A modified to ERR
 *   flight_prog churn N K      K times: N iterations on a fresh QP pair, then
 *                              the pair destroyed
 *   flight_prog spin N SEC     N iterations, prints "ready", then iterates flat
 *                              out for SEC seconds (bench/flight_soak.sh)
 *   flight_prog big N MB       N iterations, then one signaled RDMA WRITE of MB
 *                              MiB from QP A into a second MR, polled: a post
 *                              (softnic moves the bytes inside it) or a poll
 *                              far slower than the others
 *   flight_prog async N        N iterations, then QP A moved to SQD: softnic
 *                              raises IBV_EVENT_SQ_DRAINED, which it reads and
 *                              acks (at most 5 s)
 *
 * Prints "flight_prog sends=S errors=E" at the end: its own counts. Test fixture
 * only; one line on stderr and exit 1 when a verb fails unexpectedly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tests/progs/prog_util.h"

static uint64_t now_ms(void)
{
	return prog_now_ns() / 1000000;
}

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	char *buf;
	uint16_t lid;
	long sends, errors;
};

static struct ibv_qp *make_qp(struct ctx *c)
{
	struct ibv_qp *qp = prog_rc_qp(c->pd, c->cq, 64, 64, 0, NULL);
	if (!qp)
		prog_die("ibv_create_qp");
	return qp;
}

static void connect_qp(struct ctx *c, struct ibv_qp *qp, uint32_t dest)
{
	struct prog_rc rc = prog_rc_quick(c->lid, dest);
	rc.access = IBV_ACCESS_REMOTE_WRITE;
	prog_rc_connect_or_die(qp, &rc);
}

static void pair(struct ctx *c)
{
	c->a = make_qp(c);
	c->b = make_qp(c);
	connect_qp(c, c->a, c->b->qp_num);
	connect_qp(c, c->b, c->a->qp_num);
}

static void post(struct ctx *c, uint64_t id, uint32_t lkey)
{
	if (prog_post_recv(c->b, id, c->buf + 8192, 4096, c->mr->lkey))
		prog_die("ibv_post_recv");
	if (prog_post_send(c->a, id, IBV_WR_SEND, IBV_SEND_SIGNALED, c->buf, 64, lkey, 0,
			   0))
		prog_die("ibv_post_send");
	c->sends++;
}

/* Polls until n completions came (at most 10 s). */
static void poll_n(struct ctx *c, int n)
{
	struct ibv_wc wc[8];
	uint64_t end = now_ms() + 10000;
	while (n > 0) {
		int k = ibv_poll_cq(c->cq, 8, wc);
		if (k < 0)
			prog_die("ibv_poll_cq");
		for (int i = 0; i < k; i++)
			c->errors += wc[i].status != IBV_WC_SUCCESS;
		n -= k;
		if (now_ms() > end) {
			fprintf(stderr, "flight_prog: timed out polling\n");
			exit(1);
		}
	}
}

static void iterate(struct ctx *c, long n)
{
	for (long i = 0; i < n; i++) {
		post(c, (uint64_t)i, c->mr->lkey);
		poll_n(c, 2);
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "run";
	long n = argc > 2 ? atol(argv[2]) : 100;
	struct ctx c;
	memset(&c, 0, sizeof(c));
	c.dev = prog_open_first(&c.lid);
	c.pd = ibv_alloc_pd(c.dev);
	c.buf = aligned_alloc(4096, 1 << 16);
	if (!c.pd || !c.buf)
		prog_die("alloc");
	c.mr = ibv_reg_mr(c.pd, c.buf, 1 << 16,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	c.cq = ibv_create_cq(c.dev, 256, NULL, NULL, 0);
	if (!c.mr || !c.cq)
		prog_die("reg_mr/create_cq");
	pair(&c);
	iterate(&c, n);
	if (!strcmp(mode, "error")) {
		/* the send fails (local protection); the receive is flushed when
		 * the QPs are destroyed, so only the send completion is polled */
		post(&c, 999999, c.mr->lkey + 1000);
		poll_n(&c, 1);
		ibv_destroy_qp(c.a);
		ibv_destroy_qp(c.b);
		struct ibv_wc wc[8];
		while (ibv_poll_cq(c.cq, 8, wc) > 0)
			;
		pair(&c);
		iterate(&c, n);
	} else if (!strcmp(mode, "stall")) {
		long ms = argc > 3 ? atol(argv[3]) : 1000;
		post(&c, 777777, c.mr->lkey);
		usleep((useconds_t)ms * 1000);
		poll_n(&c, 2);
	} else if (!strcmp(mode, "wait")) {
		const char *file = argc > 3 ? argv[3] : "/nonexistent";
		printf("ready\n");
		fflush(stdout);
		uint64_t end = now_ms() + 20000;
		while (access(file, F_OK) && now_ms() < end) {
			iterate(&c, 1);
			usleep(1000);
		}
	} else if (!strcmp(mode, "qperr")) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
		if (ibv_modify_qp(c.a, &at, IBV_QP_STATE))
			prog_die("modify ERR");
		usleep(200000);
	} else if (!strcmp(mode, "churn")) {
		long k = argc > 3 ? atol(argv[3]) : 10;
		for (long i = 0; i < k; i++) {
			ibv_destroy_qp(c.a);
			ibv_destroy_qp(c.b);
			pair(&c);
			iterate(&c, n);
		}
	} else if (!strcmp(mode, "spin")) {
		uint64_t end =
			now_ms() + 1000 * (uint64_t)(argc > 3 ? atol(argv[3]) : 10);
		printf("ready\n");
		fflush(stdout);
		while (now_ms() < end)
			iterate(&c, 1000);
	} else if (!strcmp(mode, "big")) {
		size_t len = (size_t)(argc > 3 ? atol(argv[3]) : 16) << 20;
		char *big = aligned_alloc(4096, 2 * len);
		struct ibv_mr *mr =
			big ? ibv_reg_mr(c.pd, big, 2 * len,
					 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
			    : NULL;
		if (!mr)
			prog_die("big MR");
		memset(big, 1, len);
		if (prog_post_send(c.a, 555555, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, big,
				   (uint32_t)len, mr->lkey, (uintptr_t)big + len,
				   mr->rkey))
			prog_die("ibv_post_send (big)");
		c.sends++;
		poll_n(&c, 1);
		if (big[2 * len - 1] != 1)
			prog_die("the big write did not land");
		iterate(&c, n);
		ibv_dereg_mr(mr);
		free(big);
	} else if (!strcmp(mode, "bigsend")) {
		size_t len = (size_t)(argc > 3 ? atol(argv[3]) : 16) << 20;
		char *big = aligned_alloc(4096, 2 * len);
		struct ibv_mr *mr =
			big ? ibv_reg_mr(c.pd, big, 2 * len, IBV_ACCESS_LOCAL_WRITE)
			    : NULL;
		if (!mr)
			prog_die("big MR");
		memset(big, 1, len);
		if (prog_post_send(c.a, 666666, IBV_WR_SEND, IBV_SEND_SIGNALED, big,
				   (uint32_t)len, mr->lkey, 0, 0))
			prog_die("ibv_post_send (big)");
		c.sends++;
		usleep(20000);
		if (prog_post_recv(c.b, 666666, big + len, (uint32_t)len, mr->lkey))
			prog_die("ibv_post_recv (big)");
		poll_n(&c, 2);
		iterate(&c, n);
		ibv_dereg_mr(mr);
		free(big);
	} else if (!strcmp(mode, "async")) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_SQD,
					  .en_sqd_async_notify = 1 };
		if (ibv_modify_qp(c.a, &at, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY))
			prog_die("modify SQD");
		struct ibv_async_event ev;
		struct pollfd pfd = { .fd = c.dev->async_fd, .events = POLLIN };
		if (poll(&pfd, 1, 5000) != 1)
			prog_die("no async event");
		if (ibv_get_async_event(c.dev, &ev))
			prog_die("ibv_get_async_event");
		printf("flight_prog async event %s\n", ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
		usleep(200000);
	} else if (strcmp(mode, "run")) {
		fprintf(stderr, "flight_prog: unknown mode %s\n", mode);
		return 2;
	}
	ibv_destroy_qp(c.a);
	ibv_destroy_qp(c.b);
	ibv_destroy_cq(c.cq);
	ibv_dereg_mr(c.mr);
	ibv_dealloc_pd(c.pd);
	ibv_close_device(c.dev);
	printf("flight_prog sends=%ld errors=%ld\n", c.sends, c.errors);
	return 0;
}
