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

#include "tests/progs/prog_util.h"

struct wire {
	uint32_t lid, qpn, answer;
};

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
	uint16_t lid;
	d->ctx = prog_open_first(&lid);
	d->lid = lid;
	d->pd = ibv_alloc_pd(d->ctx);
	d->buf = aligned_alloc(4096, 1 << 16);
	if (!d->pd || !d->buf)
		prog_die("ibv_alloc_pd");
	memset(d->buf, 0, 1 << 16);
	d->mr = ibv_reg_mr(d->pd, d->buf, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
	d->cq = ibv_create_cq(d->ctx, 256, NULL, NULL, 0);
	if (!d->mr || !d->cq)
		prog_die("ibv_reg_mr / ibv_create_cq");
}

static struct ibv_qp *qp_make(struct dev *d)
{
	struct ibv_qp *qp = prog_rc_qp(d->pd, d->cq, 16, 64, 64, NULL);
	struct prog_rc rc = prog_rc_patient(0, 0);
	if (!qp)
		prog_die("ibv_create_qp");
	if (prog_rc_init(qp, &rc))
		prog_die("modify INIT");
	return qp;
}

static void qp_connect(struct ibv_qp *qp, const struct wire *w)
{
	/* the RNR NAK retried for ever: a receiver that never posts hangs us */
	struct prog_rc rc = prog_rc_patient((uint16_t)w->lid, w->qpn);
	if (prog_rc_rtr(qp, &rc))
		prog_die("modify RTR");
	if (prog_rc_rts(qp, &rc))
		prog_die("modify RTS");
}

static void post_recv(struct dev *d, struct ibv_qp *qp, uint64_t id)
{
	if (prog_post_recv(qp, id, d->buf + 4096 + (id % 8) * 64, 64, d->mr->lkey))
		prog_die("ibv_post_recv");
}

static void post_send(struct dev *d, struct ibv_qp *qp, uint64_t id)
{
	if (prog_post_send(qp, id, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE,
			   d->buf, 32, d->mr->lkey, 0, 0))
		prog_die("ibv_post_send");
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
		prog_die("listen");
	int fds[8];
	struct ibv_qp *qps[8];
	int answered[8] = { 0 };
	if (nclients < 1 || nclients > 8)
		nclients = 1;
	for (int i = 0; i < nclients; i++) {
		fds[i] = accept(ls, NULL, NULL);
		if (fds[i] < 0)
			prog_die("accept");
		struct wire peer, me;
		prog_xfer(fds[i], &peer, sizeof(peer), 0);
		qps[i] = qp_make(&d);
		/* receives for exactly the requests it will answer */
		for (int k = 0; k < answer && k < 64; k++)
			post_recv(&d, qps[i], (uint64_t)i << 32 | (uint64_t)k);
		qp_connect(qps[i], &peer);
		me = (struct wire){ d.lid, qps[i]->qp_num, (uint32_t)answer };
		prog_xfer(fds[i], &me, sizeof(me), 1);
	}
	int todo = nclients * answer, sends = 0;
	uint64_t deadline = prog_now_ns() + 30000000000ull;
	while (todo || sends) {
		struct ibv_wc wc[8];
		int k = ibv_poll_cq(d.cq, 8, wc);
		if (k < 0)
			prog_die("ibv_poll_cq");
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
		if (prog_now_ns() > deadline) {
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
		prog_die("getaddrinfo");
	int fd = -1;
	/* The server may not listen yet: retry for up to 30 s (a recorded server on
	 * a loaded machine can take seconds to get there). */
	for (int tries = 0; tries < 600; tries++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			break;
		close(fd);
		fd = -1;
		usleep(50000);
	}
	freeaddrinfo(ai);
	if (fd < 0)
		prog_die("connect");
	struct ibv_qp *qp = qp_make(&d);
	struct wire me = { d.lid, qp->qp_num, 0 }, peer;
	prog_xfer(fd, &me, sizeof(me), 1);
	prog_xfer(fd, &peer, sizeof(peer), 0);
	qp_connect(qp, &peer);
	uint32_t got = 0;
	for (uint64_t id = 1;; id++) {
		post_recv(&d, qp, id);
		post_send(&d, qp, id);
		int need = 2;
		uint64_t last = prog_now_ns();
		while (need) {
			struct ibv_wc wc[4];
			int k = ibv_poll_cq(d.cq, 4, wc);
			if (k < 0)
				prog_die("ibv_poll_cq");
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
				last = prog_now_ns();
				continue;
			}
			uint64_t idle = prog_now_ns() - last;
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
