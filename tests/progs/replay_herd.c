/*
 * replay_herd - the HERD pattern in two roles, for the replayer's memory
 * dependencies (tests/replay_deps_test.sh):
 *   replay_herd server DIR NCLIENTS NREQ   one MR of request slots, one UC QP
 *                                          per client, one UD QP; polls each
 *                                          client's slot in memory and answers
 *                                          each request with a UD SEND
 *   replay_herd client DIR C NREQ          RDMA WRITEs NREQ requests (one at a
 *                                          time) into slot C of the server's
 *                                          MR over UC, checks each answer
 *   replay_herd late DIR NREQ A_MS B_MS     as rdma_bench's herd workers: two
 *                                          server threads, each with its own
 *                                          device, UD QP and CQ, answer one
 *                                          client; thread A starts answering
 *                                          after A_MS, thread B sets its QP up
 *                                          only after B_MS (a worker still
 *                                          starting up)
 *   replay_herd lateclient DIR NREQ        request r goes to thread r % 2's
 *                                          slot, alternately 16 and 24 bytes
 *                                          long (a GET, a PUT), unsignaled but
 *                                          every 8th, as herd's clients post
 * The server learns of a request only by reading its memory: no completion
 * on its side tells it, which is what the replayer must infer.
 *
 * Processes meet through files in DIR ("NAME" holds "lid qpn qpn2 rkey addr",
 * written whole with a rename). Every wait is bounded: a failure prints one
 * line naming what was missing and exits 1; never a hang.
 */
#define _GNU_SOURCE
#include "tests/progs/meet.h"
#include "tests/progs/prog_util.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOT 16 /* bytes per request slot: value, client, seq (last) */
#define QKEY 0x22222222
#define MAXC 8

static void poll1(struct meet_dev *d, struct ibv_wc *wc, const char *what)
{
	if (!meet_poll(d, wc, meet_now_s() + MEET_TIMEOUT_S))
		prog_fail("no completion for %s", what);
}

struct req { /* one slot: written whole, seq last */
	uint64_t value;
	uint32_t client;
	volatile uint32_t seq; /* request number + 1; 0 = empty */
};

struct resp {
	uint64_t value;
	uint32_t seq, client;
};

static uint64_t answer(uint64_t v)
{
	return v * 3 + 7;
}

static int run_server(unsigned nclients, unsigned nreq)
{
	struct req *slots = calloc(MAXC, sizeof(*slots));
	struct resp *out = calloc(1, sizeof(*out));
	struct ibv_ah *ah[MAXC];
	unsigned uqpn[MAXC];
	struct ibv_wc wc;
	char name[64];
	struct meet_dev d;

	prog_role = "server";
	if (nclients < 1 || nclients > MAXC)
		prog_fail("1 to %d clients", MAXC);
	meet_dev_open(&d, 256);
	struct ibv_mr *mr = meet_reg(&d, slots, MAXC * sizeof(*slots));
	struct ibv_mr *omr = meet_reg(&d, out, sizeof(*out));
	struct ibv_qp *ud = meet_qp_new(&d, IBV_QPT_UD, 64, QKEY);

	meet_qp_up(ud, 0, 0);
	for (unsigned c = 0; c < nclients; c++) {
		struct ibv_qp *uc = meet_qp_new(&d, IBV_QPT_UC, 64, QKEY);
		struct meet_info i = { d.lid, uc->qp_num, ud->qp_num, mr->rkey,
				       (uintptr_t)&slots[c] };
		struct ibv_ah_attr aa = { .port_num = 1 };

		snprintf(name, sizeof(name), "server-%u", c);
		meet_publish(name, &i);
		snprintf(name, sizeof(name), "client-%u", c);
		i = meet_lookup(name);
		meet_qp_up(uc, i.lid, i.qpn);
		aa.dlid = (uint16_t)i.lid;
		ah[c] = ibv_create_ah(d.pd, &aa);
		if (!ah[c])
			prog_fail("ibv_create_ah failed");
		uqpn[c] = i.qpn2;
		snprintf(name, sizeof(name), "server-%u-ready", c);
		meet_publish(name, &i);
	}
	for (unsigned r = 0; r < nreq; r++)
		for (unsigned c = 0; c < nclients; c++) {
			double t0 = meet_now_s();

			while (slots[c].seq != r + 1) {
				if (meet_now_s() - t0 > MEET_TIMEOUT_S)
					prog_fail("request %u of client %u never landed",
						  r, c);
				sched_yield();
			}
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			out->value = slots[c].client == c ? answer(slots[c].value) : 0;
			out->seq = r + 1;
			out->client = c;
			if (meet_ud_send(ud, r * MAXC + c, out, sizeof(*out), omr->lkey,
					 ah[c], uqpn[c], QKEY))
				prog_fail("ibv_post_send of an answer failed");
			poll1(&d, &wc, "an answer");
		}
	printf("server: answered %u requests of %u clients\n", nreq * nclients, nclients);
	/* the clients' last answers must arrive before the QPs go */
	for (unsigned c = 0; c < nclients; c++) {
		snprintf(name, sizeof(name), "client-%u-done", c);
		meet_lookup(name);
	}
	return 0;
}

/* A client's device, request and answer MRs, UC QP met with server-C and
 * UD QP for the answers. */
struct hclient {
	struct meet_dev d;
	struct ibv_mr *rmr, *imr;
	struct ibv_qp *uc, *ud;
	struct meet_info i, s;
};

static void hclient_up(struct hclient *h, unsigned c, void *rq, size_t rqlen, char *in)
{
	prog_role = "client";
	meet_dev_open(&h->d, 256);
	h->rmr = meet_reg(&h->d, rq, rqlen);
	h->imr = meet_reg(&h->d, in, 40 + sizeof(struct resp));
	h->uc = meet_qp_new(&h->d, IBV_QPT_UC, 64, QKEY);
	h->ud = meet_qp_new(&h->d, IBV_QPT_UD, 64, QKEY);
	h->i = (struct meet_info){ h->d.lid, h->uc->qp_num, h->ud->qp_num, 0, 0 };
	meet_qp_up(h->ud, 0, 0);
	h->s = meet_client(h->uc, c, &h->i, "server");
}

static int run_client(unsigned c, unsigned nreq)
{
	struct req *rq = calloc(1, sizeof(*rq));
	char *in = calloc(1, 40 + sizeof(struct resp));
	unsigned correct = 0;
	struct ibv_wc wc;
	char name[64];
	struct hclient h;

	hclient_up(&h, c, rq, sizeof(*rq), in);
	struct meet_dev d = h.d;
	struct ibv_mr *rmr = h.rmr, *imr = h.imr;
	struct ibv_qp *uc = h.uc, *ud = h.ud;
	struct meet_info i = h.i, s = h.s;

	for (unsigned r = 0; r < nreq; r++) {
		if (prog_post_recv(ud, r, in, 40 + sizeof(struct resp), imr->lkey))
			prog_fail("ibv_post_recv failed");
		rq->value = 0x1000000ull * (c + 1) + r;
		rq->client = c;
		rq->seq = r + 1;
		if (prog_post_send(uc, r, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, rq,
				   sizeof(*rq), rmr->lkey, s.addr, s.rkey))
			prog_fail("ibv_post_send of a request failed");
		poll1(&d, &wc, "a request's WRITE");
		poll1(&d, &wc, "an answer");
		const struct resp *a = (const struct resp *)(in + 40);

		if (a->seq == r + 1 && a->client == c && a->value == answer(rq->value))
			correct++;
	}
	printf("client %u: %u of %u answers correct\n", c, correct, nreq);
	snprintf(name, sizeof(name), "client-%u-done", c);
	meet_publish(name, &i);
	return correct == nreq ? 0 : 1;
}

/* replay_herd late: a slot per server thread, written by one client. */
struct lslot {
	uint64_t value;
	uint32_t client;
	volatile uint32_t seq; /* request number + 1 */
	uint64_t put;	       /* the 8 more bytes of a PUT */
};

struct lworker {
	unsigned id, nreq, late_ms, uqpn, ulid;
	struct lslot *slot;
};

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Thread id answers requests id, id + 2, ... once late_ms have passed; B sets
 * its device and QP up only then. */
static void *late_worker(void *arg)
{
	struct lworker *w = arg;
	struct resp *out = calloc(1, sizeof(*out));
	struct ibv_ah_attr aa = { .port_num = 1 };
	struct meet_dev d;
	struct ibv_wc wc;

	if (w->id == 1)
		sleep_ms(w->late_ms);
	meet_dev_open(&d, 256);
	struct ibv_mr *omr = meet_reg(&d, out, sizeof(*out));
	struct ibv_qp *ud = meet_qp_new(&d, IBV_QPT_UD, 64, QKEY);

	meet_qp_up(ud, 0, 0);
	aa.dlid = (uint16_t)w->ulid;
	struct ibv_ah *ah = ibv_create_ah(d.pd, &aa);

	if (!ah)
		prog_fail("ibv_create_ah failed");
	if (w->id == 0)
		sleep_ms(w->late_ms);
	for (unsigned r = w->id; r < w->nreq; r += 2) {
		double t0 = meet_now_s();

		while (w->slot->seq != r + 1) {
			if (meet_now_s() - t0 > MEET_TIMEOUT_S)
				prog_fail("request %u never landed", r);
			sched_yield();
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		out->value = answer(w->slot->value);
		out->seq = r + 1;
		out->client = 0;
		if (meet_ud_send(ud, r, out, sizeof(*out), omr->lkey, ah, w->uqpn, QKEY))
			prog_fail("ibv_post_send of an answer failed");
		poll1(&d, &wc, "an answer");
	}
	return NULL;
}

static int run_late(unsigned nreq, unsigned a_ms, unsigned b_ms)
{
	struct lslot *slots = calloc(2, sizeof(*slots));
	struct lworker w[2];
	pthread_t t[2];
	struct meet_dev d;

	prog_role = "server";
	meet_dev_open(&d, 256);
	struct ibv_mr *mr = meet_reg(&d, slots, 2 * sizeof(*slots));
	struct ibv_qp *uc = meet_qp_new(&d, IBV_QPT_UC, 64, QKEY);
	struct meet_info i = { d.lid, uc->qp_num, 0, mr->rkey, (uintptr_t)slots };

	meet_publish("server-0", &i);
	i = meet_lookup("client-0");
	meet_qp_up(uc, i.lid, i.qpn);
	meet_publish("server-0-ready", &i);
	for (unsigned k = 0; k < 2; k++) {
		w[k] = (struct lworker){ k,	 nreq,	k ? b_ms : a_ms,
					 i.qpn2, i.lid, &slots[k] };
		if (pthread_create(&t[k], NULL, late_worker, &w[k]))
			prog_fail("pthread_create failed");
	}
	for (unsigned k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	printf("server: answered %u requests\n", nreq);
	meet_lookup("client-0-done");
	return 0;
}

static int run_lateclient(unsigned nreq)
{
	struct lslot *rq = calloc(1, sizeof(*rq));
	char *in = calloc(1, 40 + sizeof(struct resp));
	unsigned correct = 0, signaled = 0, sent = 0;
	struct ibv_wc wc;
	struct hclient h;

	hclient_up(&h, 0, rq, sizeof(*rq), in);
	struct meet_dev d = h.d;
	struct ibv_mr *rmr = h.rmr, *imr = h.imr;
	struct ibv_qp *uc = h.uc, *ud = h.ud;
	struct meet_info i = h.i, s = h.s;

	for (unsigned r = 0; r < nreq; r++) {
		const struct resp *a = (const struct resp *)(in + 40);
		int got = 0;

		if (prog_post_recv(ud, r, in, 40 + sizeof(struct resp), imr->lkey))
			prog_fail("ibv_post_recv failed");
		rq->value = 0x1000000ull + r;
		rq->client = 0;
		rq->seq = r + 1;
		rq->put = r;
		if (prog_post_send(uc, r, IBV_WR_RDMA_WRITE,
				   r % 8 == 7 ? IBV_SEND_SIGNALED : 0, rq,
				   (r / 2) % 2 ? 24 : 16, rmr->lkey,
				   s.addr + (r % 2) * sizeof(*rq), s.rkey))
			prog_fail("ibv_post_send of a request failed");
		signaled += r % 8 == 7;
		while (!got) { /* the answer; a WRITE's completion may come first */
			poll1(&d, &wc, "an answer");
			if (wc.opcode == IBV_WC_RECV)
				got = 1;
			else
				sent++;
		}
		if (a->seq == r + 1 && a->value == answer(rq->value))
			correct++;
	}
	while (sent < signaled) {
		poll1(&d, &wc, "a request's WRITE");
		sent++;
	}
	printf("client 0: %u of %u answers correct\n", correct, nreq);
	meet_publish("client-0-done", &i);
	return correct == nreq ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "server")) {
		meet_dir = argv[2];
		return run_server((unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]));
	}
	if (argc == 5 && !strcmp(argv[1], "client")) {
		meet_dir = argv[2];
		return run_client((unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]));
	}
	if (argc == 6 && !strcmp(argv[1], "late")) {
		meet_dir = argv[2];
		return run_late((unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]),
				(unsigned)atoi(argv[5]));
	}
	if (argc == 4 && !strcmp(argv[1], "lateclient")) {
		meet_dir = argv[2];
		return run_lateclient((unsigned)atoi(argv[3]));
	}
	fprintf(stderr, "usage: replay_herd server DIR NCLIENTS NREQ\n"
			"       replay_herd client DIR C NREQ\n"
			"       replay_herd late DIR NREQ A_MS B_MS\n"
			"       replay_herd lateclient DIR NREQ\n");
	return 2;
}
