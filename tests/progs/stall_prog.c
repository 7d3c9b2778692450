/* stall_prog.c - a request/response service that hangs the way rdma_bench's herd did
 * (its clients at 100 % empty polls for seconds, their sends never completed), for the
 * report's stall finding.
 *
 * The server accepts N clients over TCP, gives each an RC QP, and answers the first A
 * requests of each with a SEND; then it stops answering: it posts no more receives and
 * stops polling, so each client's next request is retried forever (the client's
 * rnr_retry is 7) and never completes. A client sends requests one at a time (post a
 * receive for the answer, post the request, poll for both) and, when nothing
 * completes, keeps polling for S seconds (--mode spin) or stops polling, sleeps S
 * seconds and makes one last verbs call (--mode stop); then it exits, its QP left as
 * it was.
 *
 * usage: stall_prog server PORT NCLIENTS ANSWER
 *        stall_prog client HOST PORT SECONDS [spin|stop]
 * Test fixture only: exits 0 when the scenario ran as intended (a client: it got
 * exactly ANSWER answers, then none), prints one line on failure.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

struct wire {
	uint32_t lid, qpn, answer;
};

static void die(const char *what)
{
	fprintf(stderr, "stall_prog: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void xfer(int fd, void *p, size_t n, int out)
{
	char *c = p;
	while (n) {
		ssize_t k = out ? write(fd, c, n) : read(fd, c, n);
		if (k <= 0)
			die(out ? "write" : "read");
		c += k;
		n -= (size_t)k;
	}
}

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	char *buf;
	uint32_t lid;
};

static void dev_open(struct dev *d)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || !n)
		die("no device");
	d->ctx = ibv_open_device(l[0]);
	if (!d->ctx)
		die("ibv_open_device");
	struct ibv_port_attr pa;
	if (ibv_query_port(d->ctx, 1, &pa))
		die("ibv_query_port");
	d->lid = pa.lid;
	d->pd = ibv_alloc_pd(d->ctx);
	d->buf = aligned_alloc(4096, 1 << 16);
	if (!d->pd || !d->buf)
		die("ibv_alloc_pd");
	memset(d->buf, 0, 1 << 16);
	d->mr = ibv_reg_mr(d->pd, d->buf, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
	d->cq = ibv_create_cq(d->ctx, 256, NULL, NULL, 0);
	if (!d->mr || !d->cq)
		die("ibv_reg_mr / ibv_create_cq");
}

static struct ibv_qp *qp_make(struct dev *d)
{
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = d->cq;
	ia.recv_cq = d->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 64;
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS))
		die("modify INIT");
	return qp;
}

static void qp_connect(struct dev *d, struct ibv_qp *qp, const struct wire *w)
{
	struct ibv_qp_attr at;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = w->qpn;
	at.rq_psn = 0;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.dlid = (uint16_t)w->lid;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER))
		die("modify RTR");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7; /* retried for ever: a receiver that never posts hangs us */
	at.sq_psn = 0;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &at,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify RTS");
	(void)d;
}

static void post_recv(struct dev *d, struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)d->buf + 4096 + (id % 8) * 64,
			     .length = 64,
			     .lkey = d->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		die("ibv_post_recv");
}

static void post_send(struct dev *d, struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)d->buf,
			     .length = 32,
			     .lkey = d->mr->lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	if (ibv_post_send(qp, &wr, &bad))
		die("ibv_post_send");
}

static int server(int port, int nclients, int answer)
{
	struct dev d;
	dev_open(&d);
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 8))
		die("listen");
	int fds[8];
	struct ibv_qp *qps[8];
	int answered[8] = { 0 };
	if (nclients < 1 || nclients > 8)
		nclients = 1;
	for (int i = 0; i < nclients; i++) {
		fds[i] = accept(ls, NULL, NULL);
		if (fds[i] < 0)
			die("accept");
		struct wire peer, me;
		xfer(fds[i], &peer, sizeof(peer), 0);
		qps[i] = qp_make(&d);
		/* receives for exactly the requests it will answer */
		for (int k = 0; k < answer && k < 64; k++)
			post_recv(&d, qps[i], (uint64_t)i << 32 | (uint64_t)k);
		qp_connect(&d, qps[i], &peer);
		me = (struct wire){ d.lid, qps[i]->qp_num, (uint32_t)answer };
		xfer(fds[i], &me, sizeof(me), 1);
	}
	int todo = nclients * answer, sends = 0;
	uint64_t deadline = now_ns() + 30000000000ull;
	while (todo || sends) {
		struct ibv_wc wc[8];
		int k = ibv_poll_cq(d.cq, 8, wc);
		if (k < 0)
			die("ibv_poll_cq");
		for (int j = 0; j < k; j++) {
			if (wc[j].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "stall_prog: server completion %s\n",
					ibv_wc_status_str(wc[j].status));
				return 1;
			}
			if (wc[j].opcode == IBV_WC_SEND) {
				sends--;
				continue;
			}
			int c = (int)(wc[j].wr_id >> 32);
			post_send(&d, qps[c], wc[j].wr_id);
			sends++;
			answered[c]++;
			todo--;
		}
		if (now_ns() > deadline) {
			fprintf(stderr, "stall_prog: server timed out\n");
			return 1;
		}
	}
	/* hung: no receives, no polls, until the clients give up */
	for (int i = 0; i < nclients; i++) {
		char c;
		while (read(fds[i], &c, 1) > 0)
			;
		close(fds[i]);
	}
	return 0;
}

static int client(const char *host, const char *port, int seconds, int stop)
{
	struct dev d;
	dev_open(&d);
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	if (getaddrinfo(host, port, &hints, &ai))
		die("getaddrinfo");
	int fd = -1;
	for (int tries = 0; tries < 100; tries++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			break;
		close(fd);
		fd = -1;
		usleep(50000);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		die("connect");
	struct ibv_qp *qp = qp_make(&d);
	struct wire me = { d.lid, qp->qp_num, 0 }, peer;
	xfer(fd, &me, sizeof(me), 1);
	xfer(fd, &peer, sizeof(peer), 0);
	qp_connect(&d, qp, &peer);
	uint32_t got = 0;
	for (uint64_t id = 1;; id++) {
		post_recv(&d, qp, id);
		post_send(&d, qp, id);
		int need = 2;
		uint64_t last = now_ns();
		while (need) {
			struct ibv_wc wc[4];
			int k = ibv_poll_cq(d.cq, 4, wc);
			if (k < 0)
				die("ibv_poll_cq");
			for (int j = 0; j < k; j++) {
				if (wc[j].status != IBV_WC_SUCCESS) {
					fprintf(stderr,
						"stall_prog: client completion %s\n",
						ibv_wc_status_str(wc[j].status));
					return 1;
				}
				need--;
			}
			if (k) {
				last = now_ns();
				continue;
			}
			uint64_t idle = now_ns() - last;
			if (stop && idle > 50000000ull) {
				/* stopped polling with the request outstanding */
				sleep((unsigned)seconds);
				struct ibv_qp_attr at;
				struct ibv_qp_init_attr ia;
				ibv_query_qp(qp, &at, IBV_QP_STATE, &ia);
				goto out;
			}
			if (idle > (uint64_t)seconds * 1000000000ull)
				goto out;
		}
		got++;
	}
out:
	close(fd);
	if (got != peer.answer) {
		fprintf(stderr, "stall_prog: %u answers, the server gave %u\n", got,
			peer.answer);
		return 1;
	}
	printf("stalled after %u answers\n", got);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3], atoi(argv[4]),
			      argc == 6 && !strcmp(argv[5], "stop"));
	fprintf(stderr, "usage: stall_prog server PORT NCLIENTS ANSWER | "
			"stall_prog client HOST PORT SECONDS [spin|stop]\n");
	return 2;
}
