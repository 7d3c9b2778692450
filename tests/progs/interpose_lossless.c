/* interpose_lossless.c - four threads posting and polling flat out over softnic,
 * each counting its own calls in a shared file, and a way to end the process in
 * the middle of it: the fixture of interpose_lossless_test.sh, which compares
 * these counts with the trace the recorder wrote.
 *
 * Each worker has its own loopback RC pair and CQ and keeps up to 16 signaled
 * RDMA WRITEs in flight. Around every ibv_post_send and ibv_poll_cq it stores, in
 * the shared file, "started" before the call and "done" after it returned (and
 * the completions a poll returned before its "done"), so that whatever ends the
 * process, a call that returned to the program is counted done.
 *
 * usage: interpose_lossless COUNTERS MODE
 * MODE: wait (run until a signal from outside), tgkill (SIGTERM sent to worker 0
 * itself, 0.3 s after ready or once the file $LOSSLESS_GO exists), segv (a fifth thread faults),
 * exit (a fifth thread calls exit(3)), abort (a fifth thread calls abort()),
 * exec (a fifth thread execs /bin/true), exits (the fifth thread calls exit(3)
 * while a sixth calls exit(4) at the same moment), return-exit (main returns 3
 * while a sixth thread calls exit(4), as rping's event thread does). The fifth
 * thread acts once every worker has done 2000 posts; "ready" is set in the file
 * at that point.
 * Test fixture only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define NWORKERS 4
#define WINDOW	 16

/* The shared file's layout (read by the test as 64-bit words). */
struct counters {
	_Atomic uint64_t ready; /* 1: every worker did 2000 posts */
	_Atomic uint64_t nworkers;
	struct {
		_Atomic uint64_t tid;
		_Atomic uint64_t post_started, post_done;
		_Atomic uint64_t poll_started, poll_done;
		_Atomic uint64_t wc_done;
		uint64_t pad[2];
	} w[NWORKERS];
};

static struct counters *cnt;
static struct ibv_context *dev;
static struct ibv_pd *pd;
static uint16_t lid;

static void die(const char *what)
{
	fprintf(stderr, "interpose_lossless: %s: %s\n", what, strerror(errno));
	_exit(1);
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *at, int mask, const char *what)
{
	if (ibv_modify_qp(qp, at, mask))
		die(what);
}

/* a and b of one process connected to each other. */
static void connect_pair(struct ibv_qp *a, struct ibv_qp *b)
{
	struct ibv_qp *qs[2] = { a, b };

	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
		at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		modify(qs[i], &at,
		       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			       IBV_QP_ACCESS_FLAGS,
		       "modify INIT");
	}
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTR,
					  .path_mtu = IBV_MTU_1024,
					  .dest_qp_num = qs[1 - i]->qp_num,
					  .max_dest_rd_atomic = 1,
					  .min_rnr_timer = 1 };
		at.ah_attr.dlid = lid;
		at.ah_attr.port_num = 1;
		modify(qs[i], &at,
		       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			       IBV_QP_MIN_RNR_TIMER,
		       "modify RTR");
		struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS,
					   .timeout = 14,
					   .retry_cnt = 7,
					   .rnr_retry = 7,
					   .max_rd_atomic = 1 };
		modify(qs[i], &rts,
		       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
		       "modify RTS");
	}
}

static void *worker(void *arg)
{
	int i = (int)(intptr_t)arg;
	char *buf;
	struct ibv_wc wc[WINDOW];
	int outstanding = 0;

	if (posix_memalign((void **)&buf, 4096, 8192))
		die("posix_memalign");
	memset(buf, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_cq *cq = ibv_create_cq(dev, 4 * WINDOW, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(dev, 4 * WINDOW, NULL, NULL, 0);
	if (!mr || !cq || !rcq)
		die("mr/cq");
	struct ibv_qp_init_attr ia = { .send_cq = cq,
				       .recv_cq = rcq,
				       .qp_type = IBV_QPT_RC };
	ia.cap.max_send_wr = 2 * WINDOW;
	ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	if (!a || !b)
		die("ibv_create_qp");
	connect_pair(a, b);
	atomic_store(&cnt->w[i].tid, (uint64_t)syscall(SYS_gettid));

	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &s,
				  .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
	wr.wr.rdma.rkey = mr->rkey;
	for (uint64_t n = 0;; n++) {
		if (outstanding < WINDOW) {
			wr.wr_id = n;
			atomic_fetch_add(&cnt->w[i].post_started, 1);
			int ret = ibv_post_send(a, &wr, &bad);
			atomic_fetch_add(&cnt->w[i].post_done, 1);
			if (ret) {
				errno = ret;
				die("ibv_post_send");
			}
			outstanding++;
		}
		atomic_fetch_add(&cnt->w[i].poll_started, 1);
		int got = ibv_poll_cq(cq, WINDOW, wc);
		if (got > 0)
			atomic_fetch_add(&cnt->w[i].wc_done, (uint64_t)got);
		atomic_fetch_add(&cnt->w[i].poll_done, 1);
		if (got < 0)
			die("ibv_poll_cq");
		for (int k = 0; k < got; k++)
			if (wc[k].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "interpose_lossless: completion %s\n",
					ibv_wc_status_str(wc[k].status));
				_exit(1);
			}
		outstanding -= got;
	}
	return NULL;
}

/* The sixth thread of "exits" and "return-exit": exit(4) the moment main
 * goes. */
static _Atomic int exit_go;

static void *exiter(void *arg)
{
	(void)arg;
	atomic_fetch_add(&exit_go, 1);
	while (atomic_load(&exit_go) < 2)
		;
	exit(4);
}

static int all_ready(void)
{
	for (int i = 0; i < NWORKERS; i++)
		if (atomic_load(&cnt->w[i].post_done) < 2000)
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: interpose_lossless COUNTERS "
				"wait|tgkill|segv|exit|exits|return-exit|abort|exec\n");
		return 2;
	}
	const char *mode = argv[2];
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, sizeof(*cnt)))
		die(argv[1]);
	cnt = mmap(NULL, sizeof(*cnt), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (cnt == MAP_FAILED)
		die("mmap");
	atomic_store(&cnt->nworkers, NWORKERS);

	int ndev;
	struct ibv_device **list = ibv_get_device_list(&ndev);
	if (!list || !ndev)
		die("no device");
	dev = ibv_open_device(list[0]);
	struct ibv_port_attr pa;
	if (!dev || ibv_query_port(dev, 1, &pa))
		die("ibv_open_device/query_port");
	lid = pa.lid;
	pd = ibv_alloc_pd(dev);
	if (!pd)
		die("ibv_alloc_pd");

	pthread_t t[NWORKERS];
	for (int i = 0; i < NWORKERS; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i))
			die("pthread_create");
	while (!all_ready()) {
		struct timespec d = { 0, 1000000 };
		nanosleep(&d, NULL);
	}
	atomic_store(&cnt->ready, 1);
	if (!strcmp(mode, "wait")) {
		for (;;)
			pause();
	}
	if (!strcmp(mode, "tgkill")) {
		/* SIGTERM to worker 0 itself: it is most likely inside a verb.
		 * LOSSLESS_GO=FILE: once FILE exists (the test has stalled the
		 * device and seen every worker held), not 0.3 s after ready. */
		const char *go = getenv("LOSSLESS_GO");
		if (go && !*go)
			go = NULL;
		struct timespec d = { 0, go ? 10000000 : 300000000 };
		nanosleep(&d, NULL);
		while (go && access(go, F_OK))
			nanosleep(&d, NULL);
		syscall(SYS_tgkill, getpid(), (pid_t)atomic_load(&cnt->w[0].tid),
			SIGTERM);
		for (;;)
			pause();
	}
	/* The fifth thread: this one, not a worker. */
	if (!strcmp(mode, "segv")) {
		/* a page nobody may touch: a real fault, not a null store that
		 * UBSan would stop first */
		volatile int *nowhere =
			mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		*nowhere = 1;
	} else if (!strcmp(mode, "exit")) {
		exit(3);
	} else if (!strcmp(mode, "exits") || !strcmp(mode, "return-exit")) {
		pthread_t x;
		if (pthread_create(&x, NULL, exiter, NULL))
			die("pthread_create");
		while (atomic_load(&exit_go) < 1)
			;
		atomic_fetch_add(&exit_go, 1);
		if (!strcmp(mode, "exits"))
			exit(3);
		return 3;
	} else if (!strcmp(mode, "abort")) {
		abort();
	} else if (!strcmp(mode, "exec")) {
		char *args[] = { "true", NULL };
		execv("/bin/true", args);
		die("execv");
	}
	fprintf(stderr, "interpose_lossless: unknown mode %s\n", mode);
	return 2;
}
