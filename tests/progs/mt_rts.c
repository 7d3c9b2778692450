/* mt_rts.c - a verbs program whose QP setup and data path run on two threads, as
 * rping's CM thread and CQ thread do: the main thread moves two loopback RC QPs
 * to RTR, waits past the recorder's flush, moves them to RTS and then lets a second thread (created first, so the recorder drains
 * its ring into the file ahead of the main thread's) post at once: receives on
 * B, signaled SENDs on A, each polled to its completion.
 *
 * usage: mt_rts [--iters N]
 * Test fixture only: exits 0 when every completion came with success, else
 * prints one line and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tests/progs/prog_util.h"

static struct ibv_context *dev;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static struct ibv_cq *cq;
static struct ibv_qp *qa, *qb;
static char buf[8192];
static uint16_t lid;
static int iters = 20;
static atomic_int ready;

static void to_rtr(struct ibv_qp *qp, uint32_t dest)
{
	struct prog_rc rc = prog_rc_quick(lid, dest); /* no remote access */
	if (prog_rc_init(qp, &rc))
		prog_die("modify INIT");
	if (prog_rc_rtr(qp, &rc))
		prog_die("modify RTR");
}

static void to_rts(struct ibv_qp *qp)
{
	struct prog_rc rc = prog_rc_quick(lid, 0);
	if (prog_rc_rts(qp, &rc))
		prog_die("modify RTS");
}

static void poll_one(void)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0)
		prog_die("ibv_poll_cq");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "mt_rts: completion status %s\n",
			ibv_wc_status_str(wc.status));
		exit(1);
	}
}

static void *data_path(void *arg)
{
	(void)arg;
	while (!atomic_load(&ready))
		;
	for (int i = 0; i < iters; i++) {
		if (prog_post_recv(qb, (uint64_t)i, buf + 4096, 64, mr->lkey))
			prog_die("ibv_post_recv");
		if (prog_post_send(qa, (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED, buf,
				   64, mr->lkey, 0, 0))
			prog_die("ibv_post_send");
		poll_one(); /* the send's and the receive's */
		poll_one();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
			iters = atoi(argv[++i]);
		} else {
			fprintf(stderr, "mt_rts: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	dev = prog_open_first(&lid);
	pd = ibv_alloc_pd(dev);
	cq = pd ? ibv_create_cq(dev, 64, NULL, NULL, 0) : NULL;
	mr = cq ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		prog_die("pd, cq or mr");
	qa = prog_rc_qp(pd, cq, 16, 16, 0, NULL);
	qb = qa ? prog_rc_qp(pd, cq, 16, 16, 0, NULL) : NULL;
	if (!qb)
		prog_die("ibv_create_qp");
	to_rtr(qa, qb->qp_num);
	to_rtr(qb, qa->qp_num);
	/* Past the recorder's flush (RBTRACE_FLUSH_MS, 100 ms): what came so far
	 * is in the file, the RTS will be in a later chunk than the QPs' creation,
	 * after the data thread's chunk of posts (its ring is newer: drained first). */
	usleep(250000);
	pthread_t t;
	if (pthread_create(&t, NULL, data_path, NULL))
		prog_die("pthread_create");
	to_rts(qa);
	to_rts(qb);
	atomic_store(&ready, 1);
	pthread_join(t, NULL);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(dev);
	return 0;
}
