/*
 * shm_prog - registered memory that other processes share, the way DMA sees
 * it: an RDMA WRITE into an MR must be seen by every process that maps the
 * MR's pages, not only by the one that registered them.
 *
 * The HERD pattern (rdma_bench's herd and ws-sequencer):
 *   shm_prog master DIR KEY NCLIENTS [huge]   SysV segment KEY, registered
 *   shm_prog worker DIR KEY W NWORKERS NCLIENTS NREQ   shmat KEY, poll it,
 *                                             answer each request by UD SEND
 *   shm_prog client DIR C NWORKERS NREQ       WRITE NREQ requests into the
 *                                             master's MR over UC, count and
 *                                             check the answers
 * Shared mappings of other kinds:
 *   shm_prog target DIR KIND [WAIT_S]         KIND: file, memfd (its fd kept
 *                                             open), memfd-closed,
 *                                             memfd-huge, mixed (one MR
 *                                             over private and shared
 *                                             pages), anon,
 *                                             anon-regfirst, sysv; a forked
 *                                             (or, for file, separately
 *                                             opened) watcher maps the same
 *                                             pages and waits for the pattern
 *   shm_prog writer DIR                       WRITE the pattern into the
 *                                             target's MR, then SEND "done"
 *   shm_prog canreopen                        exit 0 if /proc/self/map_files
 *                                             may be opened (privileged)
 *
 * Processes meet through files in DIR ("NAME" holds "lid qpn rkey addr",
 * written whole with a rename). Every wait is bounded: a failure prints one
 * line naming what was missing and exits 1; never a hang.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WIN	   4  /* outstanding requests per client */
#define SLOT	   16 /* bytes per request slot */
#define QKEY	   0x11111111
#define TIMEOUT_S  30
#define HUGE_BYTES (2u << 20)
#define PATTERN_N  8192

static const char *dir;
static const char *me = "shm_prog";

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
	d->cq = ibv_create_cq(d->ctx, 1024, NULL, NULL, 0);
	if (!d->pd || !d->cq)
		die("cannot create a PD or CQ");
}

static struct ibv_qp *qp_new(struct dev *d, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = d->cq,
		.recv_cq = d->cq,
		.qp_type = type,
		.cap = { .max_send_wr = 256,
			 .max_recv_wr = 256,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	if (!qp)
		die("ibv_create_qp: %s", strerror(errno));
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

/* INIT -> RTR -> RTS; a UD QP needs no peer */
static void qp_up(struct ibv_qp *qp, unsigned dlid, unsigned dqpn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask = IBV_QP_STATE;

	if (qp->qp_type != IBV_QPT_UD) {
		a.path_mtu = IBV_MTU_4096;
		a.dest_qp_num = dqpn;
		a.rq_psn = 0;
		a.ah_attr.dlid = (uint16_t)dlid;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qp->qp_type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 1;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("modify to RTR failed");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("modify to RTS failed");
}

static struct ibv_mr *reg(struct dev *d, void *buf, size_t len)
{
	struct ibv_mr *mr = ibv_reg_mr(d->pd, buf, len,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	if (!mr)
		die("ibv_reg_mr of %zu bytes: %s", len, strerror(errno));
	return mr;
}

static int poll1(struct dev *d, struct ibv_wc *wc, double deadline)
{
	int n;

	/* spin politely: tests run beside each other on few cores */
	while ((n = ibv_poll_cq(d->cq, 1, wc)) == 0) {
		if (now_s() > deadline)
			return 0;
		sched_yield();
	}
	if (n < 0)
		die("ibv_poll_cq failed");
	if (wc->status != IBV_WC_SUCCESS)
		die("completion wr_id %llu: %s", (unsigned long long)wc->wr_id,
		    ibv_wc_status_str(wc->status));
	return 1;
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint32_t len,
		      uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)buf, len, mr->lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	if (ibv_post_recv(qp, &w, &bad))
		die("ibv_post_recv failed");
}

/* ---------------- the HERD pattern ---------------- */

struct req { /* what a client WRITEs into a slot; seq last, landing last */
	uint64_t value;
	uint32_t client;
	volatile uint32_t seq; /* request number + 1; 0 = empty */
};

struct resp { /* what a worker SENDs back */
	uint64_t value;
	uint32_t seq, worker;
};

static uint64_t req_value(unsigned c, unsigned r)
{
	return 0x1000000ull * (c + 1) + r;
}

static uint64_t resp_value(uint64_t v)
{
	return v * 3 + 7;
}

static size_t region_len(unsigned nworkers, unsigned nclients)
{
	size_t n = (size_t)nworkers * nclients * WIN * SLOT;

	return (n + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES;
}

static size_t slot_off(unsigned w, unsigned c, unsigned s, unsigned nclients)
{
	return (((size_t)w * nclients + c) * WIN + s) * SLOT;
}

static int run_master(int key, unsigned nclients, int huge)
{
	size_t len = region_len(16, nclients); /* room for up to 16 workers */
	int id = shmget(key, len, IPC_CREAT | 0666 | (huge ? SHM_HUGETLB : 0));
	struct dev d;
	char name[64];
	void *buf;

	me = "master";
	if (id < 0)
		die("shmget(%d, %zu%s): %s", key, len, huge ? ", SHM_HUGETLB" : "",
		    strerror(errno));
	buf = shmat(id, NULL, 0);
	if (buf == (void *)-1)
		die("shmat: %s", strerror(errno));
	memset(buf, 0, len);
	dev_open(&d);
	struct ibv_mr *mr = reg(&d, buf, len);

	for (unsigned c = 0; c < nclients; c++) {
		struct ibv_qp *qp = qp_new(&d, IBV_QPT_UC);
		struct info i = { d.lid, qp->qp_num, nclients, mr->rkey, (uintptr_t)buf };

		snprintf(name, sizeof(name), "master-%u", c);
		publish(name, &i);
		snprintf(name, sizeof(name), "client-%u", c);
		i = lookup(name);
		qp_up(qp, i.lid, i.qpn);
		snprintf(name, sizeof(name), "master-%u-ready", c);
		publish(name, &i);
	}
	printf("master: registered %zu-byte SysV segment %d%s, %u clients connected\n",
	       len, id, huge ? " (hugepages)" : "", nclients);
	fflush(stdout);
	/* the MR must outlive the clients' writes: the test says when */
	double t0 = now_s();
	char p[512];

	snprintf(p, sizeof(p), "%s/all-done", dir);
	while (access(p, F_OK)) {
		if (now_s() - t0 > TIMEOUT_S)
			die("nobody wrote %s", p);
		usleep(10000);
	}
	ibv_dereg_mr(mr);
	shmdt(buf);
	shmctl(id, IPC_RMID, NULL);
	printf("master: done\n");
	return 0;
}

static int run_worker(int key, unsigned w, unsigned nworkers, unsigned nclients,
		      unsigned nreq)
{
	int id = shmget(key, 0, 0);
	unsigned served = 0, expect = 0, next[64] = { 0 };
	struct ibv_ah *ah[64];
	unsigned qpn[64];
	struct resp *out;
	struct dev d;
	char name[64];
	char *rr;

	me = "worker";
	if (nclients > 64 || w >= nworkers || nworkers > 16)
		die("at most 64 clients and 16 workers");
	if (id < 0)
		die("shmget(%d): %s", key, strerror(errno));
	rr = shmat(id, NULL, 0); /* never registered here: the master did */
	if (rr == (void *)-1)
		die("shmat: %s", strerror(errno));
	dev_open(&d);
	out = calloc(256, sizeof(*out));
	struct ibv_mr *mr = reg(&d, out, 256 * sizeof(*out));
	struct ibv_qp *qp = qp_new(&d, IBV_QPT_UD);

	qp_up(qp, 0, 0);
	for (unsigned c = 0; c < nclients; c++) {
		struct ibv_ah_attr aa = { .port_num = 1 };

		snprintf(name, sizeof(name), "client-%u", c);
		struct info i = lookup(name);

		aa.dlid = (uint16_t)i.lid;
		ah[c] = ibv_create_ah(d.pd, &aa);
		if (!ah[c])
			die("ibv_create_ah failed");
		qpn[c] = i.qpn2;
		for (unsigned r = w; r < nreq; r += nworkers)
			expect++;
		next[c] = w; /* the next request number this worker gets from c */
	}
	double t0 = now_s();
	unsigned outstanding = 0;

	while (served < expect) {
		unsigned before = served;

		for (unsigned c = 0; c < nclients; c++) {
			if (next[c] >= nreq)
				continue;
			unsigned s = next[c] % WIN;
			struct req *q = (struct req *)(rr + slot_off(w, c, s, nclients));

			if (q->seq != next[c] + 1)
				continue;
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			struct resp *o = &out[served % 256];

			o->value = q->client == c ? resp_value(q->value) : 0;
			o->seq = q->seq;
			o->worker = w;
			q->seq = 0; /* the slot is free again (shared with the master) */
			struct ibv_sge sg = { (uintptr_t)o, sizeof(*o), mr->lkey };
			struct ibv_send_wr wr = { .wr_id = served,
						  .sg_list = &sg,
						  .num_sge = 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED },
					   *bad;

			wr.wr.ud.ah = ah[c];
			wr.wr.ud.remote_qpn = qpn[c];
			wr.wr.ud.remote_qkey = QKEY;
			if (ibv_post_send(qp, &wr, &bad))
				die("ibv_post_send of a response failed");
			outstanding++;
			served++;
			next[c] += nworkers;
		}
		struct ibv_wc wc;

		while (outstanding && ibv_poll_cq(d.cq, 1, &wc) == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				die("response send: %s", ibv_wc_status_str(wc.status));
			outstanding--;
		}
		if (served == before)
			sched_yield();
		if (now_s() - t0 > TIMEOUT_S)
			die("worker %u: served %u of %u requests; the master's segment "
			    "never showed the others",
			    w, served, expect);
	}
	while (outstanding) {
		struct ibv_wc wc;

		if (!poll1(&d, &wc, now_s() + 5))
			die("response completions missing");
		outstanding--;
	}
	printf("worker %u: served %u requests\n", w, served);
	return 0;
}

static int run_client(unsigned c, unsigned nworkers, unsigned nreq)
{
	unsigned answered = 0, correct = 0, posted = 0;
	unsigned char *done = calloc(nreq + 1, 1);
	char name[64];
	struct dev d;

	me = "client";
	dev_open(&d);
	struct req *reqs = calloc(WIN, sizeof(struct req));
	char *rbuf = calloc(64, 64 + 40);
	struct ibv_mr *rmr = reg(&d, reqs, WIN * sizeof(struct req));
	struct ibv_mr *inmr = reg(&d, rbuf, 64 * (64 + 40));
	struct ibv_qp *uc = qp_new(&d, IBV_QPT_UC), *ud = qp_new(&d, IBV_QPT_UD);
	struct info i = { d.lid, uc->qp_num, ud->qp_num, 0, 0 };

	qp_up(ud, 0, 0);
	for (unsigned k = 0; k < 64; k++)
		post_recv(ud, inmr, rbuf + k * (64 + 40), 64 + 40, 1000000 + k);
	snprintf(name, sizeof(name), "client-%u", c);
	publish(name, &i);
	snprintf(name, sizeof(name), "master-%u", c);
	struct info m = lookup(name);

	qp_up(uc, m.lid, m.qpn);
	snprintf(name, sizeof(name), "master-%u-ready", c);
	lookup(name);
	double t0 = now_s();

	while (answered < nreq) {
		/* request r reuses slot r % WIN once r - WIN was answered */
		while (posted < nreq && (posted < WIN || done[posted - WIN])) {
			unsigned r = posted, w = r % nworkers;
			struct req *q = &reqs[r % WIN];
			struct ibv_sge sg = { (uintptr_t)q, sizeof(*q), rmr->lkey };
			struct ibv_send_wr wr = { .wr_id = r,
						  .sg_list = &sg,
						  .num_sge = 1,
						  .opcode = IBV_WR_RDMA_WRITE,
						  .send_flags = IBV_SEND_SIGNALED },
					   *bad;

			q->value = req_value(c, r);
			q->client = c;
			q->seq = r + 1;
			/* the master says how many clients share its region */
			wr.wr.rdma.remote_addr = m.addr + slot_off(w, c, r % WIN, m.qpn2);
			wr.wr.rdma.rkey = m.rkey;
			if (ibv_post_send(uc, &wr, &bad))
				die("ibv_post_send of request %u failed", r);
			posted++;
		}
		struct ibv_wc wc;

		if (!poll1(&d, &wc, t0 + TIMEOUT_S))
			die("client %u: %u of %u requests answered, then nothing", c,
			    answered, nreq);
		if (wc.opcode != IBV_WC_RECV)
			continue; /* a WRITE completed: its slot's bytes left */
		struct resp *o =
			(struct resp *)(rbuf + (wc.wr_id - 1000000) * (64 + 40) + 40);
		unsigned r = o->seq - 1;

		if (wc.byte_len == 40 + sizeof(*o) && r < nreq && !done[r] &&
		    o->worker == r % nworkers && o->value == resp_value(req_value(c, r)))
			correct++;
		if (r < nreq)
			done[r] = 1;
		answered++;
		post_recv(ud, inmr, rbuf + (wc.wr_id - 1000000) * (64 + 40), 64 + 40,
			  wc.wr_id);
	}
	printf("client %u: %u answers, %u correct\n", c, answered, correct);
	free(done);
	return correct == nreq ? 0 : 1;
}

/* ---------------- other shared mappings ---------------- */

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 131 + 17);
}

static double watch_s = TIMEOUT_S; /* how long a watcher waits */

/* Waits until bytes [from, PATTERN_N) of buf hold the pattern; returns 0, or
 * 1 after the timeout. */
static int watch(const volatile uint8_t *buf, size_t from, const char *who)
{
	double t0 = now_s();

	for (;;) {
		size_t i;

		for (i = from; i < PATTERN_N && buf[i] == pattern(i); i++)
			;
		if (i == PATTERN_N) {
			printf("%s: saw the %zu-byte WRITE\n", who, PATTERN_N - from);
			return 0;
		}
		if (now_s() - t0 > watch_s) {
			printf("%s: the WRITE never showed (first %zu bytes right)\n",
			       who, i - from);
			return 1;
		}
		usleep(1000);
	}
}

static int run_target(const char *kind)
{
	size_t len = 4 * 4096;
	int fd = -1, shmid = -1, regfirst = !strcmp(kind, "anon-regfirst");
	/* mixed: private page, two shared pages, private page; the WRITE
	 * starts 2 KiB into the first private page */
	int mixed = !strcmp(kind, "mixed");
	size_t at = mixed ? 2048 : 4096, seen = mixed ? 4096 - 2048 : 0;
	struct ibv_mr *mr = NULL;
	char p[512];
	struct dev d;
	uint8_t *buf;
	pid_t pid;

	me = "target";
	if (!strcmp(kind, "file")) {
		snprintf(p, sizeof(p), "%s/target.file", dir);
		fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)len))
			die("cannot create %s", p);
	} else if (!strcmp(kind, "memfd-huge")) {
		/* hugetlbfs: a peer must map it in whole huge pages */
		len = HUGE_BYTES;
		fd = memfd_create("shm_prog", MFD_CLOEXEC | MFD_HUGETLB);
		if (fd < 0 || ftruncate(fd, (off_t)len))
			die("memfd_create(MFD_HUGETLB) failed: %s", strerror(errno));
	} else if (!strncmp(kind, "memfd", 5) || mixed) {
		fd = memfd_create("shm_prog", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)len))
			die("memfd_create failed");
	} else if (!strcmp(kind, "sysv")) {
		shmid = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
		if (shmid < 0)
			die("shmget: %s", strerror(errno));
	} else if (strcmp(kind, "anon") && !regfirst) {
		die("unknown kind %s", kind);
	}
	if (shmid >= 0)
		buf = shmat(shmid, NULL, 0);
	else if (mixed) {
		buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			   -1, 0);
		if (buf == MAP_FAILED ||
		    mmap(buf + 4096, 2 * 4096, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
			die("mmap failed");
	} else
		buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
			   MAP_SHARED | (fd < 0 ? MAP_ANONYMOUS : 0), fd, 0);
	if (buf == MAP_FAILED)
		die("mmap failed");
	if (fd >= 0 && !strcmp(kind, "memfd-closed"))
		close(fd); /* only the mapping holds it now */
	if (regfirst) {
		/* registered, then forked: the child keeps sharing the pages */
		dev_open(&d);
		mr = reg(&d, buf, len);
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork failed");
	if (pid == 0) {
		const uint8_t *view = buf;

		if (!strcmp(kind, "file")) {
			/* a process of its own view: the file opened again */
			int f = open(p, O_RDWR);

			view = mmap(NULL, len, PROT_READ, MAP_SHARED, f, 0);
			if (view == MAP_FAILED)
				die("watcher cannot map %s", p);
		}
		/* the watcher sees what lands on shared pages only */
		_exit(watch(view + at, seen, "watcher"));
	}
	if (!regfirst) {
		dev_open(&d);
		mr = reg(&d, buf, len);
	}
	struct ibv_qp *qp = qp_new(&d, IBV_QPT_RC);
	char *msg = calloc(1, 64 + 40);
	struct ibv_mr *mmr = reg(&d, msg, 64);
	struct info i = { d.lid, qp->qp_num, 0, mr->rkey, (uintptr_t)buf + at };

	post_recv(qp, mmr, msg, 64, 1);
	publish("target", &i);
	i = lookup("writer");
	qp_up(qp, i.lid, i.qpn);
	publish("target-ready", &i);
	struct ibv_wc wc;

	if (!poll1(&d, &wc, now_s() + TIMEOUT_S) || strcmp(msg, "done"))
		die("no \"done\" from the writer");
	int st, own = watch(buf + at, 0, "target");

	if (waitpid(pid, &st, 0) != pid)
		die("waitpid failed");
	printf("target %s: watcher %s\n", kind,
	       WIFEXITED(st) && !WEXITSTATUS(st) ? "saw it" : "did not see it");
	ibv_dereg_mr(mr);
	if (shmid >= 0)
		shmctl(shmid, IPC_RMID, NULL);
	return own || !WIFEXITED(st) || WEXITSTATUS(st);
}

static int run_writer(void)
{
	struct dev d;
	uint8_t *src = malloc(PATTERN_N + 64);

	me = "writer";
	dev_open(&d);
	for (size_t k = 0; k < PATTERN_N; k++)
		src[k] = pattern(k);
	strcpy((char *)src + PATTERN_N, "done");
	/* registered, deregistered and registered again, as programs do: the
	 * pages softnic backed the first time are private memory still */
	struct ibv_mr *mr = reg(&d, src, PATTERN_N + 64);

	if (ibv_dereg_mr(mr))
		die("ibv_dereg_mr failed");
	mr = reg(&d, src, PATTERN_N + 64);
	struct ibv_qp *qp = qp_new(&d, IBV_QPT_RC);
	struct info i = { d.lid, qp->qp_num, 0, 0, 0 };

	publish("writer", &i);
	struct info t = lookup("target");

	qp_up(qp, t.lid, t.qpn);
	lookup("target-ready");
	struct ibv_sge sg = { (uintptr_t)src, PATTERN_N, mr->lkey };
	struct ibv_sge sg2 = { (uintptr_t)src + PATTERN_N, 5, mr->lkey };
	struct ibv_send_wr w2 = { .wr_id = 2,
				  .sg_list = &sg2,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr w1 = { .wr_id = 1,
				  .next = &w2,
				  .sg_list = &sg,
				  .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE },
			   *bad;
	struct ibv_wc wc;

	w1.wr.rdma.remote_addr = t.addr;
	w1.wr.rdma.rkey = t.rkey;
	if (ibv_post_send(qp, &w1, &bad))
		die("ibv_post_send failed");
	if (!poll1(&d, &wc, now_s() + TIMEOUT_S))
		die("no completion for the WRITE and SEND");
	printf("writer: wrote %d bytes\n", PATTERN_N);
	return 0;
}

/* Exit 0 when this process may reopen its own anonymous shared memory
 * through /proc/self/map_files (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE). */
static int can_reopen(void)
{
	char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
		       0);
	char p[128];
	int fd;

	if (m == MAP_FAILED)
		return 1;
	snprintf(p, sizeof(p), "/proc/self/map_files/%lx-%lx", (unsigned long)m,
		 (unsigned long)m + 4096);
	fd = open(p, O_RDWR);
	printf("%s\n", fd >= 0 ? "yes" : "no");
	return fd < 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "canreopen"))
		return can_reopen();
	if (argc < 3)
		goto usage;
	dir = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "master") && argc >= 5)
		return run_master(atoi(argv[3]), (unsigned)atoi(argv[4]),
				  argc > 5 && !strcmp(argv[5], "huge"));
	if (!strcmp(argv[1], "worker") && argc == 8)
		return run_worker(atoi(argv[3]), (unsigned)atoi(argv[4]),
				  (unsigned)atoi(argv[5]), (unsigned)atoi(argv[6]),
				  (unsigned)atoi(argv[7]));
	if (!strcmp(argv[1], "client") && argc == 6)
		return run_client((unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]),
				  (unsigned)atoi(argv[5]));
	if (!strcmp(argv[1], "target") && (argc == 4 || argc == 5)) {
		if (argc == 5)
			watch_s = atof(argv[4]);
		return run_target(argv[3]);
	}
	if (!strcmp(argv[1], "writer"))
		return run_writer();
usage:
	fprintf(stderr, "usage: shm_prog master|worker|client|target|writer DIR ...\n"
			"(see the comment at the top of tests/progs/shm_prog.c)\n");
	return 2;
}
