/* interpose_prog.c - a small verbs program for the recorder's tests. It prints
 * its own counts of what it did (the cross-check that does not come from the
 * tracer) and exercises the cases the recorder must survive.
 *
 *   interpose_prog basic N        N signaled sends + one chain of 8, all polled;
 *                                 two failing calls whose errno it checks
 *   interpose_prog threads T N    T threads, each with its own CQ and QP, N sends
 *   interpose_prog fork N         basic N in the parent and in a forked child
 *   interpose_prog spin N         basic N, prints "ready", then posts and polls
 *                                 until killed
 *   interpose_prog exec N         basic N, then exec itself to run basic N again
 *   interpose_prog wrapi N        N sends through ibv_wr_*, QP re-moved to RTS
 *                                 halfway (the provider rewrites its wr_* ops)
 *   interpose_prog twocq N        N empty polls on each of two CQs, in turn
 *   interpose_prog payload        six sends with known payloads: classic sge,
 *                                 classic inline, ibv_wr_* sge, inline data
 *                                 (buffer changed before wr_complete), inline
 *                                 data list, an RDMA read (no payload) and a
 *                                 compare-and-swap (its operands)
 *   interpose_prog crash N        basic N, then dies of SIGSEGV
 *   interpose_prog chains N LEN   N chains of LEN unsignaled sends (WR i has i % 4
 *                                 sges, wr_ids count up from 0), then one chain
 *                                 of 10 whose 6th WR the device refuses (17 sges)
 *   interpose_prog none           never calls a verb
 *   interpose_prog tsclose N      N times: open the device, create a CQ with
 *                                 completion timestamps, wait 25 ms (the
 *                                 recorder's writer samples the NIC clock),
 *                                 close it; prints "tsclose cycles=N"
 *
 * Runs on any device (the tests use their fake libibverbs). Never hangs: every
 * poll loop is bounded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

struct res {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char buf[4096];
};

static struct ibv_context *open_ctx(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx;

	if (!l || n < 1) {
		fprintf(stderr, "no device\n");
		exit(2);
	}
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!ctx) {
		fprintf(stderr, "open failed\n");
		exit(2);
	}
	return ctx;
}

static void setup(struct res *r, struct ibv_context *ctx, int cqe)
{
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr qa = { 0 };

	r->ctx = ctx;
	r->pd = ibv_alloc_pd(ctx);
	r->mr = ibv_reg_mr(r->pd, r->buf, sizeof(r->buf), IBV_ACCESS_LOCAL_WRITE);
	r->cq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
	if (!r->pd || !r->mr || !r->cq) {
		fprintf(stderr, "setup failed\n");
		exit(2);
	}
	ia.send_cq = ia.recv_cq = r->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = cqe;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	r->qp = ibv_create_qp(r->pd, &ia);
	if (!r->qp) {
		fprintf(stderr, "create_qp failed\n");
		exit(2);
	}
	qa.qp_state = IBV_QPS_INIT;
	qa.port_num = 1;
	ibv_modify_qp(r->qp, &qa,
		      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			      IBV_QP_ACCESS_FLAGS);
	qa.qp_state = IBV_QPS_RTR;
	ibv_modify_qp(r->qp, &qa, IBV_QP_STATE);
	qa.qp_state = IBV_QPS_RTS;
	ibv_modify_qp(r->qp, &qa, IBV_QP_STATE);
}

static void teardown(struct res *r)
{
	ibv_destroy_qp(r->qp);
	ibv_destroy_cq(r->cq);
	ibv_dereg_mr(r->mr);
	ibv_dealloc_pd(r->pd);
}

/* Posts n single signaled sends (polling as it goes); returns completions. */
static long run_sends(struct res *r, long n, long *posted)
{
	struct ibv_sge sge = { (uintptr_t)r->buf, 64, r->mr->lkey };
	struct ibv_wc wc[16];
	long done = 0, inflight = 0;

	for (long i = 0; i < n; i++) {
		struct ibv_send_wr wr = { 0 }, *bad;
		wr.wr_id = i;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		while (inflight >= 512) {
			int k = ibv_poll_cq(r->cq, 16, wc);
			done += k;
			inflight -= k;
		}
		if (ibv_post_send(r->qp, &wr, &bad)) {
			fprintf(stderr, "post_send failed\n");
			exit(3);
		}
		(*posted)++;
		inflight++;
	}
	for (long spins = 0; inflight && spins < 100000000; spins++) {
		int k = ibv_poll_cq(r->cq, 16, wc);
		done += k;
		inflight -= k;
	}
	return done;
}

static long run_chain(struct res *r, long *posted)
{
	struct ibv_sge sge = { (uintptr_t)r->buf, 8, r->mr->lkey };
	struct ibv_send_wr wr[8], *bad;
	struct ibv_wc wc[16];
	long done = 0;

	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < 8; i++) {
		wr[i].wr_id = 1000 + i;
		wr[i].sg_list = &sge;
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_SEND;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		wr[i].next = i < 7 ? &wr[i + 1] : NULL;
	}
	if (ibv_post_send(r->qp, wr, &bad)) {
		fprintf(stderr, "chain failed\n");
		exit(3);
	}
	*posted += 8;
	for (long spins = 0; done < 8 && spins < 100000000; spins++)
		done += ibv_poll_cq(r->cq, 16, wc);
	return done;
}

/* Failing calls: the recorder must hand back the same result and errno. */
static int check_errors(struct res *r)
{
	struct ibv_qp_attr qa = { 0 };
	int ok = 1;

	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(r->pd, r->buf, 0, IBV_ACCESS_LOCAL_WRITE);
	if (mr || errno != EINVAL)
		ok = 0;
	errno = 12345;
	int ret = ibv_modify_qp(r->qp, &qa, 0);
	if (ret != EINVAL)
		ok = 0;
	return ok;
}

static void basic(long n, const char *who)
{
	struct res r;
	long posted = 0, done;

	setup(&r, open_ctx(), 1024);
	done = run_sends(&r, n, &posted);
	done += run_chain(&r, &posted);
	int ok = check_errors(&r);
	teardown(&r);
	printf("%s pid=%d posted=%ld completions=%ld errno_ok=%d\n", who, (int)getpid(),
	       posted, done, ok);
	fflush(stdout);
}

/* An RC QP with the ibv_wr_* API (sends only), moved to RTS, on a fresh
 * context with one CQ and one registered buffer; exits when anything fails. */
struct wrqp {
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
};

static struct wrqp make_wrqp(void *buf, size_t len, const char *who)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_qp_init_attr_ex a = { 0 };
	struct ibv_qp_attr qa = { 0 };
	struct wrqp w = { 0 };

	w.mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	w.cq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	a.send_cq = a.recv_cq = w.cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 64;
	a.cap.max_send_sge = 2;
	a.cap.max_inline_data = 64;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = pd;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	w.qp = ibv_create_qp_ex(ctx, &a);
	w.qpx = w.qp ? ibv_qp_to_qp_ex(w.qp) : NULL;
	if (!pd || !w.mr || !w.cq || !w.qpx) {
		fprintf(stderr, "%s setup failed\n", who);
		exit(2);
	}
	int states[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	for (int i = 0; i < 3; i++) {
		qa.qp_state = states[i];
		ibv_modify_qp(w.qp, &qa, IBV_QP_STATE);
	}
	return w;
}

/* n sends through the ibv_wr_* API; halfway the QP is moved to RTS again, on
 * which the provider reinstalls its wr_* pointers. */
static void wrapi(long n)
{
	static char buf[4096];
	struct wrqp q = make_wrqp(buf, sizeof(buf), "wrapi");
	struct ibv_qp *qp = q.qp;
	struct ibv_qp_ex *qpx = q.qpx;
	struct ibv_mr *mr = q.mr;
	struct ibv_cq *cq = q.cq;
	struct ibv_qp_attr qa = { 0 };
	struct ibv_wc wc[16];
	long done = 0, posted = 0;

	for (long i = 0; i < n; i++) {
		if (i == n / 2) {
			qa.qp_state = IBV_QPS_RTS;
			ibv_modify_qp(qp, &qa, IBV_QP_STATE);
		}
		ibv_wr_start(qpx);
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(qpx);
		ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buf, 64);
		if (ibv_wr_complete(qpx)) {
			fprintf(stderr, "wr_complete failed\n");
			exit(3);
		}
		posted++;
		for (long spins = 0; done < posted && spins < 1000000; spins++)
			done += ibv_poll_cq(cq, 16, wc);
	}
	printf("wrapi posted=%ld completions=%ld\n", posted, done);
}

/* Sends whose payloads the recorder's test knows: buf[i] = i * 7 + 1, inline
 * buffers 'A'.., 'a'.., '0'.., each overwritten with 'X' once posted. */
static void payload(void)
{
	static uint8_t buf[4096];
	char inl[64], l1[32], l2[32];
	int posted = 0;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 1);
	struct wrqp q = make_wrqp(buf, sizeof(buf), "payload");
	struct ibv_qp *qp = q.qp;
	struct ibv_qp_ex *qpx = q.qpx;
	struct ibv_mr *mr = q.mr;
	struct ibv_sge sge = { (uintptr_t)buf, 300, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	wr.opcode = IBV_WR_SEND;
	posted += !ibv_post_send(qp, &wr, &bad);
	memset(inl, 'A', sizeof(inl));
	for (int i = 0; i < 40; i++)
		inl[i] = (char)('A' + i % 26);
	struct ibv_sge isge = { (uintptr_t)inl, 40, 0 };
	wr.wr_id = 2;
	wr.sg_list = &isge;
	wr.send_flags = IBV_SEND_INLINE;
	posted += !ibv_post_send(qp, &wr, &bad);
	memset(inl, 'X', sizeof(inl));

	ibv_wr_start(qpx);
	qpx->wr_id = 3;
	qpx->wr_flags = IBV_SEND_INLINE; /* but its data comes from an sge */
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buf + 100, 200);
	posted += !ibv_wr_complete(qpx);

	for (int i = 0; i < 50; i++)
		inl[i] = (char)('a' + i % 26);
	ibv_wr_start(qpx);
	qpx->wr_id = 4;
	qpx->wr_flags = IBV_SEND_INLINE;
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, inl, 50);
	memset(inl, 'X', sizeof(inl)); /* the provider has copied it already */
	for (int i = 0; i < 32; i++) {
		l1[i] = (char)('0' + i % 10);
		l2[i] = (char)('K' + i % 10);
	}
	struct ibv_data_buf list[2] = { { l1, 20 }, { l2, 30 } };
	qpx->wr_id = 5;
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data_list(qpx, 2, list);
	memset(l1, 'X', sizeof(l1));
	memset(l2, 'X', sizeof(l2));
	posted += 2 * !ibv_wr_complete(qpx);

	wr.wr_id = 6;
	wr.sg_list = &sge;
	wr.send_flags = 0;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = 0x1000;
	wr.wr.rdma.rkey = 7;
	posted += !ibv_post_send(qp, &wr, &bad);

	struct ibv_sge asge = { (uintptr_t)buf, 8, mr->lkey };
	wr.wr_id = 7;
	wr.sg_list = &asge;
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.remote_addr = 0x3000;
	wr.wr.atomic.rkey = 9;
	wr.wr.atomic.compare_add = 0x1111;
	wr.wr.atomic.swap = 0x2222;
	posted += !ibv_post_send(qp, &wr, &bad);
	printf("payload posted=%d\n", posted);
}

struct targ {
	struct ibv_context *ctx;
	long n, posted, done;
};

static void *thread_main(void *p)
{
	struct targ *t = p;
	struct res *r = calloc(1, sizeof(*r));

	setup(r, t->ctx, 1024);
	t->done = run_sends(r, t->n, &t->posted);
	teardown(r);
	free(r);
	return NULL;
}

/* Chains of all lengths of WR, long ones split into several records: the
 * recorder must keep every WR, in order, across its ring's end. */
static void chains(long n, long len)
{
	struct res r;
	struct ibv_sge sge[17];
	struct ibv_send_wr *wr = calloc(len > 10 ? len : 10, sizeof(*wr)), *bad;
	long id = 0, posted = 0;

	setup(&r, open_ctx(), 1024);
	for (int i = 0; i < 17; i++)
		sge[i] = (struct ibv_sge){ (uintptr_t)r.buf + i, 1, r.mr->lkey };
	for (long c = 0; c < n; c++) {
		for (long i = 0; i < len; i++) {
			wr[i] = (struct ibv_send_wr){ .wr_id = id++,
						      .sg_list = sge,
						      .num_sge = (int)(i % 4),
						      .opcode = IBV_WR_RDMA_WRITE,
						      .next = i + 1 < len ? &wr[i + 1]
									  : NULL };
		}
		if (ibv_post_send(r.qp, wr, &bad)) {
			fprintf(stderr, "chain failed\n");
			exit(3);
		}
		posted += len;
	}
	for (long i = 0; i < 10; i++)
		wr[i] = (struct ibv_send_wr){ .wr_id = id++,
					      .sg_list = sge,
					      .num_sge = i == 5 ? 17 : 1,
					      .opcode = IBV_WR_SEND,
					      .next = i < 9 ? &wr[i + 1] : NULL };
	int ret = ibv_post_send(r.qp, wr, &bad);
	teardown(&r);
	printf("chains posted=%ld refused=%d bad=%ld\n", posted, ret,
	       ret ? (long)(bad - wr) : -1L);
	free(wr);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";

	if (!strcmp(mode, "none")) {
		printf("no verbs\n");
		return 0;
	}
	if (!strcmp(mode, "basic")) {
		basic(argc > 2 ? atol(argv[2]) : 1000, "basic");
		return 0;
	}
	if (!strcmp(mode, "fork")) {
		long n = argc > 2 ? atol(argv[2]) : 1000;
		basic(n, "parent");
		pid_t pid = fork();
		if (pid == 0) {
			basic(n, "child");
			exit(0);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		basic(n, "parent-after");
		return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	}
	if (!strcmp(mode, "twocq")) {
		/* Empty polls of two CQs in turn, as a loop over send and receive
		 * CQs does: both runs must fold. */
		long n = argc > 2 ? atol(argv[2]) : 1000, empty = 0;
		struct ibv_context *ctx = open_ctx();
		struct ibv_cq *a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_cq *b = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_wc wc[4];
		for (long i = 0; i < n; i++) {
			empty += ibv_poll_cq(a, 4, wc) == 0;
			empty += ibv_poll_cq(b, 4, wc) == 0;
		}
		printf("twocq empty=%ld\n", empty);
		return 0;
	}
	if (!strcmp(mode, "chains")) {
		chains(argc > 2 ? atol(argv[2]) : 100, argc > 3 ? atol(argv[3]) : 8);
		return 0;
	}
	if (!strcmp(mode, "payload")) {
		payload();
		return 0;
	}
	if (!strcmp(mode, "wrapi")) {
		wrapi(argc > 2 ? atol(argv[2]) : 1000);
		return 0;
	}
	if (!strcmp(mode, "crash")) {
		basic(argc > 2 ? atol(argv[2]) : 1000, "before-crash");
		/* A real fault: a store into a read-only page. */
		volatile int *p =
			mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		*p = 1;
		return 0;
	}
	if (!strcmp(mode, "exec")) {
		const char *n = argc > 2 ? argv[2] : "1000";
		basic(atol(n), "before-exec");
		char *args[] = { argv[0], "basic", (char *)n, NULL };
		execv("/proc/self/exe", args);
		perror("execv");
		return 1;
	}
	if (!strcmp(mode, "threads")) {
		int nt = argc > 2 ? atoi(argv[2]) : 4;
		long n = argc > 3 ? atol(argv[3]) : 100000;
		struct ibv_context *ctx = open_ctx();
		pthread_t th[64];
		struct targ t[64];
		long posted = 0, done = 0;
		if (nt > 64)
			nt = 64;
		for (int i = 0; i < nt; i++) {
			t[i] = (struct targ){ .ctx = ctx, .n = n };
			pthread_create(&th[i], NULL, thread_main, &t[i]);
		}
		for (int i = 0; i < nt; i++) {
			pthread_join(th[i], NULL);
			posted += t[i].posted;
			done += t[i].done;
		}
		printf("threads posted=%ld completions=%ld\n", posted, done);
		return 0;
	}
	if (!strcmp(mode, "tsclose")) {
		/* Contexts closed while the recorder samples their NIC clock. */
		long n = argc > 2 ? atol(argv[2]) : 10, ok = 0;
		for (long i = 0; i < n; i++) {
			struct ibv_context *ctx = open_ctx();
			struct ibv_cq_init_attr_ex a = {
				.cqe = 16,
				.wc_flags = IBV_WC_STANDARD_FLAGS |
					    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
			};
			struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);
			if (!cq) {
				perror("ibv_create_cq_ex");
				return 1;
			}
			struct timespec d = { 0, 25000000 };
			nanosleep(&d, NULL);
			if (ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) ||
			    ibv_close_device(ctx)) {
				perror("destroy/close");
				return 1;
			}
			ok++;
		}
		printf("tsclose cycles=%ld\n", ok);
		return 0;
	}
	if (!strcmp(mode, "spin")) {
		struct res r;
		long posted = 0;
		setup(&r, open_ctx(), 1024);
		run_sends(&r, argc > 2 ? atol(argv[2]) : 1000, &posted);
		printf("ready posted=%ld\n", posted);
		fflush(stdout);
		for (;;)
			run_sends(&r, 1000, &posted);
	}
	fprintf(stderr, "unknown mode %s\n", mode);
	return 2;
}
