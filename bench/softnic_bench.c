/*
 * softnic_bench - softnic's half round trip (8-byte SEND ping-pong over RC)
 * and message rate (64-byte RDMA WRITE stream), printed beside a plain
 * UNIX-socket ping-pong and stream between two processes measured in the
 * same run, plus the cost of one post_send and one poll_cq call.
 *
 *   bazel run //bench:softnic_bench [-- ITERS]
 *
 * It re-executes itself with LD_LIBRARY_PATH on softnic's libibverbs.so.1.
 * Prints numbers and ratios only; it never passes or fails on them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"

#define DIE(...)                                                \
	do {                                                    \
		fprintf(stderr, "softnic_bench: " __VA_ARGS__); \
		fputc('\n', stderr);                            \
		_exit(1);                                       \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void xwrite(int fd, const void *p, size_t n)
{
	if (write(fd, p, n) != (ssize_t)n)
		DIE("write: %s", strerror(errno));
}

static void xread(int fd, void *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, (char *)p + got, n - got);

		if (r <= 0)
			DIE("read: %s", r ? strerror(errno) : "EOF");
		got += (size_t)r;
	}
}

/* ---------------- baseline: UNIX sockets ---------------- */

/* A forked child running child(its end of a stream socket pair, n), then
 * exiting 0; *fd: our end. */
static pid_t sock_child(int *fd, void (*child)(int fd, long n), long n)
{
	int sv[2];
	pid_t p;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		DIE("socketpair");
	p = fork();
	close(p == 0 ? sv[0] : sv[1]);
	if (p == 0) {
		child(sv[1], n);
		_exit(0);
	}
	*fd = sv[0];
	return p;
}

/* Our end closed, the child waited for. */
static void sock_join(int fd, pid_t p)
{
	close(fd);
	waitpid(p, NULL, 0);
}

/* ns for parent(our end, n) against child(its end, n) in a forked child. */
static double sock_time(void (*parent)(int fd, long n), void (*child)(int fd, long n),
			long n)
{
	int fd;
	pid_t p = sock_child(&fd, child, n);
	uint64_t t0 = now_ns();

	parent(fd, n);
	uint64_t t1 = now_ns();
	sock_join(fd, p);
	return (double)(t1 - t0);
}

/* iters 8-byte exchanges: one side sends first, the other answers. */
static void sock_ping(int fd, long iters)
{
	char b[8] = { 0 };

	for (long i = 0; i < iters; i++) {
		xwrite(fd, b, 8);
		xread(fd, b, 8);
	}
}

static void sock_pong(int fd, long iters)
{
	char b[8] = { 0 };

	for (long i = 0; i < iters; i++) {
		xread(fd, b, 8);
		xwrite(fd, b, 8);
	}
}

static double sock_pingpong(long iters)
{
	return sock_time(sock_ping, sock_pong, iters) / (double)iters / 2.0;
}

/* msgs 64-byte messages, one per write (a message API); then the sink's byte. */
static void sock_source(int fd, long msgs)
{
	char b[64] = { 0 };

	for (long i = 0; i < msgs; i++)
		xwrite(fd, b, 64);
	xread(fd, b, 1);
}

/* Reads msgs 64-byte messages in large reads, then says so with one byte. */
static void sock_sink(int fd, long msgs)
{
	char big[65536];
	long want = msgs * 64, got = 0;

	while (got < want) {
		ssize_t r = read(fd, big, sizeof(big));

		if (r <= 0)
			_exit(1);
		got += r;
	}
	xwrite(fd, big, 1);
}

static double sock_stream(long msgs)
{
	return (double)msgs * 1e9 / sock_time(sock_source, sock_sink, msgs);
}

/* ---------------- softnic ---------------- */

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

struct info {
	uint32_t qpn, rkey;
	uint16_t lid;
	uint64_t addr;
};

#define BUFSZ (1 << 20)

static void end_open(struct end *e, int depth)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { 0 };

	if (!l || !l[0] || strcmp(ibv_get_device_name(l[0]), "softnic0"))
		DIE("not running on softnic");
	e->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	e->pd = ibv_alloc_pd(e->ctx);
	if (posix_memalign((void **)&e->buf, 4096, BUFSZ))
		DIE("memalign");
	memset(e->buf, 0, BUFSZ);
	e->mr = ibv_reg_mr(e->pd, e->buf, BUFSZ,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	e->cq = ibv_create_cq(e->ctx, depth * 2, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = e->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = (uint32_t)depth;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 64;
	e->qp = ibv_create_qp(e->pd, &ia);
	if (!e->mr || !e->cq || !e->qp)
		DIE("set-up failed: %s", strerror(errno));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS))
		DIE("INIT");
}

static void end_connect(struct end *e, int fd, struct info *peer)
{
	struct ibv_port_attr pa;
	struct info me;
	struct ibv_qp_attr a = { 0 };

	ibv_query_port(e->ctx, 1, &pa);
	me.qpn = e->qp->qp_num;
	me.rkey = e->mr->rkey;
	me.lid = pa.lid;
	me.addr = (uint64_t)(uintptr_t)e->buf;
	xwrite(fd, &me, sizeof(me));
	xread(fd, peer, sizeof(*peer));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = peer->qpn;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER))
		DIE("RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS");
	{
		char c = 0;

		xwrite(fd, &c, 1);
		xread(fd, &c, 1);
	}
}

static void post_recv(struct end *e)
{
	struct ibv_sge s = { (uint64_t)(uintptr_t)e->buf, 64, e->mr->lkey };
	struct ibv_recv_wr wr = { .sg_list = &s, .num_sge = 1 }, *bad;

	if (ibv_post_recv(e->qp, &wr, &bad))
		DIE("post_recv");
}

static void send8(struct end *e)
{
	struct ibv_sge s = { (uint64_t)(uintptr_t)e->buf + 4096, 8, e->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &s,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE },
			   *bad;

	if (ibv_post_send(e->qp, &wr, &bad))
		DIE("post_send");
}

/* wait for one receive completion, reaping send completions on the way */
static void wait_recv(struct end *e)
{
	struct ibv_wc wc[4];

	for (;;) {
		int n = ibv_poll_cq(e->cq, 4, wc);

		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				DIE("completion %s", ibv_wc_status_str(wc[i].status));
			if (wc[i].opcode == IBV_WC_RECV)
				return;
		}
	}
}

/* One end opened (queues of depth), recvs receives posted, connected to the peer
 * over fd. */
static void end_ready(struct end *e, int depth, int recvs, int fd, struct info *peer)
{
	end_open(e, depth);
	for (int i = 0; i < recvs; i++)
		post_recv(e);
	end_connect(e, fd, peer);
}

/* The answering end of the ping-pong: iters SENDs answered, then one byte. */
static void sn_pong(int fd, long iters)
{
	struct end e;
	struct info peer;
	char c = 0;

	end_ready(&e, 64, 32, fd, &peer);
	for (long i = 0; i < iters; i++) {
		wait_recv(&e);
		post_recv(&e);
		send8(&e);
	}
	xwrite(fd, &c, 1);
}

static double sn_pingpong(long iters)
{
	struct end e;
	struct info peer;
	uint64_t t0, t1;
	char c;
	int fd;
	pid_t p = sock_child(&fd, sn_pong, iters);

	end_ready(&e, 64, 32, fd, &peer);
	t0 = now_ns();
	for (long i = 0; i < iters; i++) {
		send8(&e);
		wait_recv(&e);
		post_recv(&e);
	}
	t1 = now_ns();
	xread(fd, &c, 1);
	sock_join(fd, p);
	return (double)(t1 - t0) / (double)iters / 2.0;
}

/* The written-to end of the stream: its memory, until the writer's byte says
 * the stream is done. */
static void sn_target(int fd, long msgs)
{
	struct end e;
	struct info peer;
	char c;

	end_ready(&e, 256, 0, fd, &peer);
	xread(fd, &c, 1);
}

static double sn_write_stream(long msgs, double *post_ns, double *poll_ns)
{
	struct end e;
	struct info peer;
	struct ibv_wc wc[16];
	uint64_t t0, t1, tpost = 0, tpoll = 0, npoll = 0;
	long outstanding = 0;
	double r;
	char c = 0;
	int fd;
	pid_t p = sock_child(&fd, sn_target, msgs);

	end_ready(&e, 256, 0, fd, &peer);
	t0 = now_ns();
	for (long i = 0; i < msgs; i += 64) {
		struct ibv_sge s = { (uint64_t)(uintptr_t)e.buf, 64, e.mr->lkey };
		struct ibv_send_wr wr = { .sg_list = &s,
					  .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE },
				   *bad;
		uint64_t a, b;

		while (outstanding >= 192) {
			int n = ibv_poll_cq(e.cq, 16, wc);

			outstanding -= n * 64;
		}
		/* 64 posts between two clock reads; every 64th signaled, as
		 * perftest does, so the SQ drains */
		a = now_ns();
		for (int k = 0; k < 64; k++) {
			wr.wr_id = (uint64_t)(i + k);
			wr.send_flags = k == 63 ? IBV_SEND_SIGNALED : 0;
			wr.wr.rdma.remote_addr =
				peer.addr + (uint64_t)((i + k) & 1023) * 64;
			wr.wr.rdma.rkey = peer.rkey;
			if (ibv_post_send(e.qp, &wr, &bad))
				DIE("post_send %ld", i + k);
		}
		b = now_ns();
		tpost += b - a;
		outstanding += 64;
	}
	while (outstanding > 63) {
		int n = ibv_poll_cq(e.cq, 16, wc);

		outstanding -= n * 64;
	}
	t1 = now_ns();
	/* the poll call itself: on an empty CQ (the common case of a
	 * spinning program), many calls between two clock reads */
	{
		uint64_t a = now_ns();

		for (int k = 0; k < 1000; k++)
			npoll += (uint64_t)ibv_poll_cq(e.cq, 16, wc) + 1;
		tpoll = now_ns() - a;
	}
	xwrite(fd, &c, 1);
	sock_join(fd, p);
	r = (double)msgs * 1e9 / (double)(t1 - t0);
	*post_ns = (double)tpost / (double)msgs;
	*poll_ns = npoll ? (double)tpoll / (double)npoll : 0;
	return r;
}

static void reexec_on_softnic(char **argv)
{
	char dir[PATH_MAX];

	if (getenv("SOFTNIC_BENCH_REEXEC"))
		return;
	if (bench_softnic_dir("libibverbs.so.1", dir, sizeof(dir)))
		DIE("softnic's libibverbs.so.1 not found (build //softnic first)");
	bench_reexec(argv, dir, "SOFTNIC_BENCH_REEXEC");
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 200000;
	double sp, ss, np, ns, post = 0, poll = 0;

	reexec_on_softnic(argv);
	if (iters < 1000)
		iters = 1000;
	/* latency: best of 7 rounds for both, interleaved, so that a noisy
	 * moment on a shared machine hurts neither side alone */
	sp = np = 1e18;
	for (int r = 0; r < 7; r++) {
		double a = sock_pingpong(iters / 28), b = sn_pingpong(iters / 28);

		sp = a < sp ? a : sp;
		np = b < np ? b : np;
	}
	ss = sock_stream(iters * 5);
	ns = sn_write_stream(iters * 5, &post, &poll);
	printf("softnic_bench (7 x %ld ping-pongs, best round; %ld stream messages; "
	       "2 processes)\n",
	       iters / 28, iters * 5);
	printf("  half round trip, 8 B:  UNIX socket %8.0f ns   softnic SEND  %8.0f ns   "
	       "socket/softnic = %.2fx\n",
	       sp, np, sp / np);
	printf("  message rate, 64 B:    UNIX socket %8.2f M/s  softnic WRITE %8.2f M/s  "
	       "softnic/socket = %.2fx\n",
	       ss / 1e6, ns / 1e6, ns / ss);
	printf("  per call: ibv_post_send (64 B WRITE) %.0f ns, ibv_poll_cq (empty CQ) "
	       "%.0f ns\n",
	       post, poll);
	return 0;
}
