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
 * The server learns of a request only by reading its memory: no completion
 * on its side tells it, which is what the replayer must infer.
 *
 * Processes meet through files in DIR ("NAME" holds "lid qpn qpn2 rkey addr",
 * written whole with a rename). Every wait is bounded: a failure prints one
 * line naming what was missing and exits 1; never a hang.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOT	  16 /* bytes per request slot: value, client, seq (last) */
#define QKEY	  0x22222222
#define TIMEOUT_S 30
#define MAXC	  8

static const char *dir;
static const char *me = "replay_herd";

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: ", me);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

struct info {
	unsigned lid, qpn, qpn2, rkey;
	unsigned long long addr;
};

static void publish(const char *name, const struct info *i)
{
	char p[512], t[520];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	snprintf(t, sizeof(t), "%s.tmp", p);
	f = fopen(t, "w");
	if (!f ||
	    fprintf(f, "%u %u %u %u %llu\n", i->lid, i->qpn, i->qpn2, i->rkey, i->addr) <
		    0 ||
	    fclose(f) || rename(t, p))
		die("cannot write %s", p);
}

static struct info lookup(const char *name)
{
	double t0 = now_s();
	struct info i;
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	for (;;) {
		FILE *f = fopen(p, "r");

		if (f) {
			int n = fscanf(f, "%u %u %u %u %llu", &i.lid, &i.qpn, &i.qpn2,
				       &i.rkey, &i.addr);

			fclose(f);
			if (n == 5)
				return i;
		}
		if (now_s() - t0 > TIMEOUT_S)
			die("%s never appeared", name);
		usleep(10000);
	}
}

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	unsigned lid;
};

static void dev_open(struct dev *d)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_port_attr pa;

	if (!l || !l[0])
		die("no RDMA device");
	d->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!d->ctx || ibv_query_port(d->ctx, 1, &pa))
		die("cannot open the device");
	d->lid = pa.lid;
	d->pd = ibv_alloc_pd(d->ctx);
	d->cq = ibv_create_cq(d->ctx, 256, NULL, NULL, 0);
	if (!d->pd || !d->cq)
		die("cannot create a PD or CQ");
}

static struct ibv_qp *qp_new(struct dev *d, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = d->cq,
		.recv_cq = d->cq,
		.qp_type = type,
		.cap = { .max_send_wr = 64,
			 .max_recv_wr = 64,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	if (!qp)
		die("ibv_create_qp failed");
	if (type == IBV_QPT_UD) {
		a.qkey = QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("modify to INIT failed");
	return qp;
}

static void qp_up(struct ibv_qp *qp, unsigned dlid, unsigned dqpn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask = IBV_QP_STATE;

	if (qp->qp_type == IBV_QPT_UC) {
		a.path_mtu = IBV_MTU_4096;
		a.dest_qp_num = dqpn;
		a.ah_attr.dlid = (uint16_t)dlid;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("modify to RTR failed");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("modify to RTS failed");
}

static struct ibv_mr *reg(struct dev *d, void *buf, size_t len)
{
	struct ibv_mr *mr = ibv_reg_mr(d->pd, buf, len,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	if (!mr)
		die("ibv_reg_mr of %zu bytes failed", len);
	return mr;
}

static void poll1(struct dev *d, struct ibv_wc *wc, const char *what)
{
	double t0 = now_s();
	int n;

	while ((n = ibv_poll_cq(d->cq, 1, wc)) == 0) {
		if (now_s() - t0 > TIMEOUT_S)
			die("no completion for %s", what);
		sched_yield();
	}
	if (n < 0)
		die("ibv_poll_cq failed");
	if (wc->status != IBV_WC_SUCCESS)
		die("%s: %s", what, ibv_wc_status_str(wc->status));
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
	struct dev d;

	me = "server";
	if (nclients < 1 || nclients > MAXC)
		die("1 to %d clients", MAXC);
	dev_open(&d);
	struct ibv_mr *mr = reg(&d, slots, MAXC * sizeof(*slots));
	struct ibv_mr *omr = reg(&d, out, sizeof(*out));
	struct ibv_qp *ud = qp_new(&d, IBV_QPT_UD);

	qp_up(ud, 0, 0);
	for (unsigned c = 0; c < nclients; c++) {
		struct ibv_qp *uc = qp_new(&d, IBV_QPT_UC);
		struct info i = { d.lid, uc->qp_num, ud->qp_num, mr->rkey,
				  (uintptr_t)&slots[c] };
		struct ibv_ah_attr aa = { .port_num = 1 };

		snprintf(name, sizeof(name), "server-%u", c);
		publish(name, &i);
		snprintf(name, sizeof(name), "client-%u", c);
		i = lookup(name);
		qp_up(uc, i.lid, i.qpn);
		aa.dlid = (uint16_t)i.lid;
		ah[c] = ibv_create_ah(d.pd, &aa);
		if (!ah[c])
			die("ibv_create_ah failed");
		uqpn[c] = i.qpn2;
		snprintf(name, sizeof(name), "server-%u-ready", c);
		publish(name, &i);
	}
	for (unsigned r = 0; r < nreq; r++)
		for (unsigned c = 0; c < nclients; c++) {
			double t0 = now_s();

			while (slots[c].seq != r + 1) {
				if (now_s() - t0 > TIMEOUT_S)
					die("request %u of client %u never landed", r, c);
				sched_yield();
			}
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			out->value = slots[c].client == c ? answer(slots[c].value) : 0;
			out->seq = r + 1;
			out->client = c;
			struct ibv_sge sg = { (uintptr_t)out, sizeof(*out), omr->lkey };
			struct ibv_send_wr wr = { .wr_id = r * MAXC + c,
						  .sg_list = &sg,
						  .num_sge = 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED },
					   *bad;

			wr.wr.ud.ah = ah[c];
			wr.wr.ud.remote_qpn = uqpn[c];
			wr.wr.ud.remote_qkey = QKEY;
			if (ibv_post_send(ud, &wr, &bad))
				die("ibv_post_send of an answer failed");
			poll1(&d, &wc, "an answer");
		}
	printf("server: answered %u requests of %u clients\n", nreq * nclients, nclients);
	/* the clients' last answers must arrive before the QPs go */
	for (unsigned c = 0; c < nclients; c++) {
		snprintf(name, sizeof(name), "client-%u-done", c);
		lookup(name);
	}
	return 0;
}

static int run_client(unsigned c, unsigned nreq)
{
	struct req *rq = calloc(1, sizeof(*rq));
	char *in = calloc(1, 40 + sizeof(struct resp));
	unsigned correct = 0;
	struct ibv_wc wc;
	char name[64];
	struct dev d;

	me = "client";
	dev_open(&d);
	struct ibv_mr *rmr = reg(&d, rq, sizeof(*rq));
	struct ibv_mr *imr = reg(&d, in, 40 + sizeof(struct resp));
	struct ibv_qp *uc = qp_new(&d, IBV_QPT_UC), *ud = qp_new(&d, IBV_QPT_UD);
	struct info i = { d.lid, uc->qp_num, ud->qp_num, 0, 0 };

	qp_up(ud, 0, 0);
	snprintf(name, sizeof(name), "client-%u", c);
	publish(name, &i);
	snprintf(name, sizeof(name), "server-%u", c);
	struct info s = lookup(name);

	qp_up(uc, s.lid, s.qpn);
	snprintf(name, sizeof(name), "server-%u-ready", c);
	lookup(name);
	for (unsigned r = 0; r < nreq; r++) {
		struct ibv_sge rs = { (uintptr_t)in, 40 + sizeof(struct resp),
				      imr->lkey };
		struct ibv_recv_wr rw = { .wr_id = r, .sg_list = &rs, .num_sge = 1 },
				   *rbad;
		struct ibv_sge sg = { (uintptr_t)rq, sizeof(*rq), rmr->lkey };
		struct ibv_send_wr wr = { .wr_id = r,
					  .sg_list = &sg,
					  .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		if (ibv_post_recv(ud, &rw, &rbad))
			die("ibv_post_recv failed");
		rq->value = 0x1000000ull * (c + 1) + r;
		rq->client = c;
		rq->seq = r + 1;
		wr.wr.rdma.remote_addr = s.addr;
		wr.wr.rdma.rkey = s.rkey;
		if (ibv_post_send(uc, &wr, &bad))
			die("ibv_post_send of a request failed");
		poll1(&d, &wc, "a request's WRITE");
		poll1(&d, &wc, "an answer");
		const struct resp *a = (const struct resp *)(in + 40);

		if (a->seq == r + 1 && a->client == c && a->value == answer(rq->value))
			correct++;
	}
	printf("client %u: %u of %u answers correct\n", c, correct, nreq);
	snprintf(name, sizeof(name), "client-%u-done", c);
	publish(name, &i);
	return correct == nreq ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "server")) {
		dir = argv[2];
		return run_server((unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]));
	}
	if (argc == 5 && !strcmp(argv[1], "client")) {
		dir = argv[2];
		return run_client((unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]));
	}
	fprintf(stderr, "usage: replay_herd server DIR NCLIENTS NREQ\n"
			"       replay_herd client DIR C NREQ\n");
	return 2;
}
