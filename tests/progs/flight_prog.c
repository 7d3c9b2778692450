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

static void die(const char *what)
{
	fprintf(stderr, "flight_prog: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
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
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = c->cq;
	ia.recv_cq = c->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 64;
	ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(c->pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	return qp;
}

static void connect_qp(struct ctx *c, struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS))
		die("modify INIT");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = dest;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 1;
	at.ah_attr.dlid = c->lid;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER))
		die("modify RTR");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 10;
	at.retry_cnt = 2;
	at.rnr_retry = 7;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify RTS");
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
	struct ibv_sge rs = { .addr = (uintptr_t)c->buf + 8192,
			      .length = 4096,
			      .lkey = c->mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = id, .sg_list = &rs, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(c->b, &rw, &rbad))
		die("ibv_post_recv");
	struct ibv_sge s = { .addr = (uintptr_t)c->buf, .length = 64, .lkey = lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(c->a, &wr, &bad))
		die("ibv_post_send");
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
			die("ibv_poll_cq");
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
	int ndev;
	struct ibv_device **list = ibv_get_device_list(&ndev);
	if (!list || !ndev)
		die("no device");
	c.dev = ibv_open_device(list[0]);
	if (!c.dev)
		die("ibv_open_device");
	struct ibv_port_attr pa;
	if (ibv_query_port(c.dev, 1, &pa))
		die("ibv_query_port");
	c.lid = pa.lid;
	c.pd = ibv_alloc_pd(c.dev);
	c.buf = aligned_alloc(4096, 1 << 16);
	if (!c.pd || !c.buf)
		die("alloc");
	c.mr = ibv_reg_mr(c.pd, c.buf, 1 << 16,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	c.cq = ibv_create_cq(c.dev, 256, NULL, NULL, 0);
	if (!c.mr || !c.cq)
		die("reg_mr/create_cq");
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
			die("modify ERR");
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
			die("big MR");
		memset(big, 1, len);
		struct ibv_sge s = { .addr = (uintptr_t)big,
				     .length = (uint32_t)len,
				     .lkey = mr->lkey };
		struct ibv_send_wr wr, *bad;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 555555;
		wr.sg_list = &s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = (uintptr_t)big + len;
		wr.wr.rdma.rkey = mr->rkey;
		if (ibv_post_send(c.a, &wr, &bad))
			die("ibv_post_send (big)");
		c.sends++;
		poll_n(&c, 1);
		if (big[2 * len - 1] != 1)
			die("the big write did not land");
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
			die("big MR");
		memset(big, 1, len);
		struct ibv_sge s = { .addr = (uintptr_t)big,
				     .length = (uint32_t)len,
				     .lkey = mr->lkey };
		struct ibv_send_wr wr, *bad;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 666666;
		wr.sg_list = &s;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		if (ibv_post_send(c.a, &wr, &bad))
			die("ibv_post_send (big)");
		c.sends++;
		usleep(20000);
		struct ibv_sge rs = { .addr = (uintptr_t)big + len,
				      .length = (uint32_t)len,
				      .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 666666, .sg_list = &rs, .num_sge = 1 },
				   *rbad;
		if (ibv_post_recv(c.b, &rw, &rbad))
			die("ibv_post_recv (big)");
		poll_n(&c, 2);
		iterate(&c, n);
		ibv_dereg_mr(mr);
		free(big);
	} else if (!strcmp(mode, "async")) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_SQD,
					  .en_sqd_async_notify = 1 };
		if (ibv_modify_qp(c.a, &at, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY))
			die("modify SQD");
		struct ibv_async_event ev;
		struct pollfd pfd = { .fd = c.dev->async_fd, .events = POLLIN };
		if (poll(&pfd, 1, 5000) != 1)
			die("no async event");
		if (ibv_get_async_event(c.dev, &ev))
			die("ibv_get_async_event");
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
	ibv_free_device_list(list);
	printf("flight_prog sends=%ld errors=%ld\n", c.sends, c.errors);
	return 0;
}
