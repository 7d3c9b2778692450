/* replay_threads.c - a real multi-threaded verbs program: T threads (T even),
 * each with one RC QP of its own (its own CQ and buffer); QP t is connected to
 * QP t^1 of this process. Each pair ping-pongs N times: the even thread sends
 * one SEND every U microseconds and polls its send completion and the answer,
 * the odd thread polls the message and answers it. Then a relay the recording
 * proves the order of: thread t (t > 0) waits until thread t-1 is done, then
 * RDMA-WRITEs into its peer's buffer and polls that (--relay 0: no relay, SENDs
 * only). Recorded with librbtrace, its trace tests that replay keeps each
 * thread's order and timing on a thread of its own.
 *
 * usage: replay_threads [--threads T] [--iters N] [--interval-us U] [--relay 0|1]
 *                       [--yield 0|1]
 * --yield 1: a poll that finds nothing gives the CPU away (sched_yield), as a
 * program with more polling threads than cores must to run at a steady rate;
 * without it, 8 busy-polling threads on 2 cores run at whatever rate the
 * scheduler's placement of each pair allows (seen: 0.16 s to 21 s for the same
 * run).
 * Prints "threads: T x N sends in X us (R msg/s)". Exits 1 on any verbs failure.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include "tests/progs/prog_util.h"
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 64
#define MSG	    64

struct lane {
	int id;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	int failed;
};

static int iters = 500, interval = 20, nthreads = 8, relay = 1, yield;
static struct lane lanes[MAX_THREADS];
static int relay_done[MAX_THREADS]; /* atomic: thread i polled its last */

/* n successful completions off the lane's CQ. */
static int wait_n(struct lane *l, int n)
{
	struct ibv_wc wc[2];

	while (n > 0) {
		int got = ibv_poll_cq(l->cq, n < 2 ? n : 2, wc);

		if (got < 0)
			return -1;
		if (!got && yield)
			sched_yield();
		for (int k = 0; k < got; k++)
			if (wc[k].status != IBV_WC_SUCCESS)
				return -1;
		n -= got;
	}
	return 0;
}

static int post_recv(struct lane *l, uint64_t wr_id)
{
	struct ibv_sge rs = { (uintptr_t)l->buf + MSG, MSG, l->mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = wr_id, .sg_list = &rs, .num_sge = 1 }, *br;

	return ibv_post_recv(l->qp, &rw, &br);
}

static int post_send(struct lane *l, uint64_t wr_id, int write)
{
	struct lane *peer = &lanes[l->id ^ 1];
	struct ibv_sge ss = { (uintptr_t)l->buf, MSG, l->mr->lkey };
	struct ibv_send_wr sw = { .wr_id = wr_id,
				  .sg_list = &ss,
				  .num_sge = 1,
				  .opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bs;

	sw.wr.rdma.remote_addr = (uintptr_t)peer->buf + 2 * MSG;
	sw.wr.rdma.rkey = peer->mr->rkey;
	return ibv_post_send(l->qp, &sw, &bs);
}

static void *run(void *arg)
{
	struct lane *l = arg;
	uint64_t next = prog_now_ns();
	int even = !(l->id & 1);

	for (int i = 0; i < iters && !l->failed; i++) {
		if (even) {
			while (prog_now_ns() < next)
				;
			/* the send's completion and the answer */
			l->failed = post_send(l, (uint64_t)i, 0) || wait_n(l, 2) ||
				    post_recv(l, (uint64_t)i + 1);
			next += (uint64_t)interval * 1000;
		} else {
			l->failed = wait_n(l, 1) || post_recv(l, (uint64_t)i + 1) ||
				    post_send(l, (uint64_t)i, 0) || wait_n(l, 1);
		}
	}
	/* the relay: after the previous thread is done */
	if (!relay)
		return NULL;
	if (l->id > 0)
		while (!__atomic_load_n(&relay_done[l->id - 1], __ATOMIC_ACQUIRE))
			if (yield)
				sched_yield();
	if (!l->failed)
		l->failed = post_send(l, 1000000, 1) || wait_n(l, 1);
	__atomic_store_n(&relay_done[l->id], 1, __ATOMIC_RELEASE);
	return NULL;
}

int main(int argc, char **argv)
{

	struct ibv_context *ctx;
	uint16_t lid;
	struct ibv_pd *pd;
	pthread_t thr[MAX_THREADS];
	uint64_t t0;
	int bad = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--threads"))
			nthreads = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--iters"))
			iters = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--interval-us"))
			interval = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--relay"))
			relay = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--yield"))
			yield = atoi(argv[i + 1]);
	}
	if (nthreads < 2 || nthreads > MAX_THREADS || nthreads % 2 || iters < 0 ||
	    interval < 0) {
		fprintf(stderr,
			"replay_threads: --threads 2..%d, even; --iters and "
			"--interval-us >= 0\n",
			MAX_THREADS);
		return 2;
	}
	ctx = prog_open_first(&lid);
	pd = ibv_alloc_pd(ctx);
	if (!pd) {
		fprintf(stderr, "replay_threads: opening the device failed\n");
		return 1;
	}
	for (int t = 0; t < nthreads; t++) {
		struct lane *l = &lanes[t];
		l->id = t;
		l->buf = calloc(1, 3 * MSG);
		l->mr = l->buf ? ibv_reg_mr(pd, l->buf, 3 * MSG,
					    IBV_ACCESS_LOCAL_WRITE |
						    IBV_ACCESS_REMOTE_WRITE)
			       : NULL;
		l->cq = l->mr ? ibv_create_cq(ctx, 32, NULL, NULL, 0) : NULL;
		l->qp = l->cq ? prog_rc_qp(pd, l->cq, 16, 16, 0, NULL) : NULL;
		if (!l->qp) {
			fprintf(stderr,
				"replay_threads: creating thread %d's QP failed\n", t);
			return 1;
		}
	}
	for (int t = 0; t < nthreads; t++)
		if (prog_rc_connect_patient(lanes[t].qp, lid, lanes[t ^ 1].qp->qp_num,
					    IBV_ACCESS_REMOTE_WRITE, 100u + (uint32_t)t,
					    100u + (uint32_t)(t ^ 1), 7) ||
		    post_recv(&lanes[t], 0)) {
			fprintf(stderr,
				"replay_threads: connecting thread %d's QP failed\n", t);
			return 1;
		}
	t0 = prog_now_ns();
	for (int t = 0; t < nthreads; t++)
		if (pthread_create(&thr[t], NULL, run, &lanes[t])) {
			fprintf(stderr, "replay_threads: pthread_create failed\n");
			return 1;
		}
	for (int t = 0; t < nthreads; t++) {
		pthread_join(thr[t], NULL);
		bad |= lanes[t].failed;
	}
	{
		double us = (double)(prog_now_ns() - t0) / 1e3;

		printf("threads: %d threads, %d round trips per pair in %.0f us (%.0f "
		       "msg/s)\n",
		       nthreads, iters, us, (double)nthreads * iters / (us / 1e6));
	}
	for (int t = 0; t < nthreads; t++) {
		ibv_destroy_qp(lanes[t].qp);
		ibv_destroy_cq(lanes[t].cq);
		ibv_dereg_mr(lanes[t].mr);
		free(lanes[t].buf);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	if (bad)
		fprintf(stderr, "replay_threads: a completion failed\n");
	return bad;
}
