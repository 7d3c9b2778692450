/*
 * cm_bench.c - softnic's connection manager: rdma_connect -> ESTABLISHED
 * latency and whole connections per second (create id, resolve address and
 * route, create QP, connect, disconnect, destroy), beside a TCP connect on
 * loopback (socket, connect, close) measured in the same run, rounds
 * interleaved so a noisy moment on a shared machine hurts neither alone.
 *
 * It re-executes itself with LD_LIBRARY_PATH on softnic's librdmacm.so.1 and
 * libibverbs.so.1 and a fabric of its own; the passive side (an rdma_cm
 * listener that accepts every request with a QP, and a TCP listener) is a
 * child process. Prints numbers and ratios, never pass/fail.
 *
 * usage: cm_bench [CONNECTIONS]   (default 2000, at least 100)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"

#define ROUNDS 5

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC };

	a.cap.max_send_wr = a.cap.max_recv_wr = 16;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	return a;
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch,
				    enum rdma_cm_event_type t)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ch, &ev))
		bench_die("rdma_get_cm_event: %s", strerror(errno));
	if (ev->event != t)
		bench_die("got %s (status %d), wanted %s", rdma_event_str(ev->event),
			  ev->status, rdma_event_str(t));
	return ev;
}

/* ---------------- the passive side ---------------- */

static void *tcp_server(void *arg)
{
	int l = (int)(intptr_t)arg;

	for (;;) {
		int fd = accept(l, NULL, NULL);
		char b;

		if (fd < 0)
			continue;
		/* the client closes at once: wait for that, then close */
		if (read(fd, &b, 1) < 0)
			(void)0;
		close(fd);
	}
	return NULL;
}

static void serve(int cm_port, int tcp_listen, int ready)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)cm_port) };
	struct rdma_cm_id *l;
	struct rdma_cm_event *ev;
	pthread_t t;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!ch || rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(l, (struct sockaddr *)&a) || rdma_listen(l, 128))
		bench_die("server: cannot listen: %s", strerror(errno));
	pthread_create(&t, NULL, tcp_server, (void *)(intptr_t)tcp_listen);
	if (write(ready, "r", 1) != 1)
		bench_die("server: pipe");
	while (!rdma_get_cm_event(ch, &ev)) {
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type e = ev->event;

		rdma_ack_cm_event(ev);
		if (e == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct ibv_qp_init_attr qa = qp_attr();
			struct rdma_conn_param p = { .responder_resources = 1,
						     .initiator_depth = 1,
						     .rnr_retry_count = 7 };

			if (rdma_create_qp(id, NULL, &qa) || rdma_accept(id, &p))
				bench_die("server: accept: %s", strerror(errno));
		} else if (e == RDMA_CM_EVENT_DISCONNECTED) {
			rdma_disconnect(id);
			rdma_destroy_qp(id);
			rdma_destroy_id(id);
		}
	}
	exit(0);
}

/* ---------------- the active side ---------------- */

/* one whole connection; *conn_us = rdma_connect to ESTABLISHED */
static void cm_one(struct rdma_event_channel *ch, struct sockaddr_in *dst,
		   double *conn_us)
{
	struct rdma_cm_id *id;
	struct ibv_qp_init_attr qa = qp_attr();
	struct rdma_conn_param p = { .responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7 };
	double t0;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, 2000))
		bench_die("resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 2000))
		bench_die("resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	if (rdma_create_qp(id, NULL, &qa))
		bench_die("create_qp: %s", strerror(errno));
	t0 = now_us();
	if (rdma_connect(id, &p))
		bench_die("connect: %s", strerror(errno));
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	*conn_us = now_us() - t0;
	rdma_disconnect(id);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

static void tcp_one(struct sockaddr_in *dst, double *conn_us)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 }; /* no TIME_WAIT pile-up */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	double t0;

	if (fd < 0)
		bench_die("socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	t0 = now_us();
	if (connect(fd, (struct sockaddr *)dst, sizeof(*dst)))
		bench_die("tcp connect: %s", strerror(errno));
	*conn_us = now_us() - t0;
	close(fd);
}

static void reexec_on_softnic(char **argv)
{
	char dir[PATH_MAX], fab[] = "/dev/shm/softnic-cmbench-XXXXXX";

	if (getenv("CM_BENCH_REEXEC"))
		return;
	if (bench_softnic_dir("librdmacm.so.1", dir, sizeof(dir)))
		bench_die("softnic's librdmacm.so.1 not found (build //softnic first)");
	if (!mkdtemp(fab))
		bench_die("mkdtemp %s: %s", fab, strerror(errno));
	setenv("SOFTNIC_FABRIC", fab, 1);
	bench_reexec(argv, dir, "CM_BENCH_REEXEC");
}

static void stats(const char *name, double *v, long n, double total_us, double *p50)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	*p50 = v[n / 2];
	printf("  %-28s p50 %8.1f us  p99 %8.1f us  %8.0f connections/s\n", name,
	       v[n / 2], v[n * 99 / 100], n / (total_us / 1e6));
}

int main(int argc, char **argv)
{
	long conns = argc > 1 ? atol(argv[1]) : 2000, per, n = 0;
	struct sockaddr_in cm_dst = { .sin_family = AF_INET }, tcp_dst;
	struct rdma_event_channel *ch;
	double *cml, *tcpl, cm_total = 0, tcp_total = 0, cm50, tcp50;
	int pfd[2], tl, port;
	socklen_t sl = sizeof(tcp_dst);
	pid_t pid;
	char c;

	reexec_on_softnic(argv);
	if (conns < 100)
		conns = 100;
	per = conns / ROUNDS;
	conns = per * ROUNDS;
	signal(SIGPIPE, SIG_IGN);
	tl = socket(AF_INET, SOCK_STREAM, 0);
	memset(&tcp_dst, 0, sizeof(tcp_dst));
	tcp_dst.sin_family = AF_INET;
	tcp_dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (tl < 0 || bind(tl, (struct sockaddr *)&tcp_dst, sizeof(tcp_dst)) ||
	    listen(tl, 128) || getsockname(tl, (struct sockaddr *)&tcp_dst, &sl))
		bench_die("tcp listen: %s", strerror(errno));
	port = 20000 + getpid() % 30000;
	if (pipe(pfd))
		bench_die("pipe");
	pid = fork();
	if (pid == 0)
		serve(port, tl, pfd[1]);
	if (pid < 0 || read(pfd[0], &c, 1) != 1)
		bench_die("server did not start");
	close(tl);
	cm_dst.sin_port = htons((uint16_t)port);
	cm_dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ch = rdma_create_event_channel();
	cml = calloc((size_t)conns, sizeof(double));
	tcpl = calloc((size_t)conns, sizeof(double));
	if (!ch || !cml || !tcpl)
		bench_die("setup: %s", strerror(errno));
	for (int w = 0; w < 20; w++) { /* warm both paths */
		double d;

		cm_one(ch, &cm_dst, &d);
		tcp_one(&tcp_dst, &d);
	}
	for (int r = 0; r < ROUNDS; r++) {
		double t0 = now_us();

		for (long i = 0; i < per; i++)
			cm_one(ch, &cm_dst, &cml[n + i]);
		cm_total += now_us() - t0;
		t0 = now_us();
		for (long i = 0; i < per; i++)
			tcp_one(&tcp_dst, &tcpl[n + i]);
		tcp_total += now_us() - t0;
		n += per;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	printf("cm_bench (%ld connections each, %d interleaved rounds, 2 processes)\n",
	       conns, ROUNDS);
	stats("softnic CM connect->ESTAB", cml, conns, cm_total, &cm50);
	stats("TCP loopback connect()", tcpl, conns, tcp_total, &tcp50);
	printf("  connect latency p50: CM/TCP = %.2fx; connections/s: CM/TCP = %.2fx\n",
	       cm50 / tcp50, tcp_total / cm_total);
	printf("  (CM connections/s count the whole cycle: create id, resolve address "
	       "and "
	       "route, create QP, connect, disconnect, destroy; TCP: socket, connect, "
	       "close)\n");
	rmdir(getenv("SOFTNIC_FABRIC")); /* only when softnic left nothing in it */
	return 0;
}
