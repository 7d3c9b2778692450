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
#include "tests/progs/meet.h"
#include "tests/progs/prog_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <infiniband/verbs.h>
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
#define HUGE_BYTES (2u << 20)
#define PATTERN_N  8192

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint32_t len,
		      uint64_t id)
{
	if (prog_post_recv(qp, id, buf, len, mr->lkey))
		prog_fail("ibv_post_recv failed");
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
	struct meet_dev d;
	char name[64];
	void *buf;

	prog_role = "master";
	if (id < 0)
		prog_fail("shmget(%d, %zu%s): %s", key, len, huge ? ", SHM_HUGETLB" : "",
			  strerror(errno));
	buf = shmat(id, NULL, 0);
	if (buf == (void *)-1)
		prog_fail("shmat: %s", strerror(errno));
	memset(buf, 0, len);
	meet_dev_open(&d, 1024);
	struct ibv_mr *mr = meet_reg(&d, buf, len);

	for (unsigned c = 0; c < nclients; c++) {
		struct ibv_qp *qp = meet_qp_new(&d, IBV_QPT_UC, 256, QKEY);
		struct meet_info i = { d.lid, qp->qp_num, nclients, mr->rkey,
				       (uintptr_t)buf };

		snprintf(name, sizeof(name), "master-%u", c);
		meet_publish(name, &i);
		snprintf(name, sizeof(name), "client-%u", c);
		i = meet_lookup(name);
		meet_qp_up(qp, i.lid, i.qpn);
		snprintf(name, sizeof(name), "master-%u-ready", c);
		meet_publish(name, &i);
	}
	printf("master: registered %zu-byte SysV segment %d%s, %u clients connected\n",
	       len, id, huge ? " (hugepages)" : "", nclients);
	fflush(stdout);
	/* the MR must outlive the clients' writes: the test says when */
	double t0 = meet_now_s();
	char p[512];

	snprintf(p, sizeof(p), "%s/all-done", meet_dir);
	while (access(p, F_OK)) {
		if (meet_now_s() - t0 > MEET_TIMEOUT_S)
			prog_fail("nobody wrote %s", p);
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
	struct meet_dev d;
	char name[64];
	char *rr;

	prog_role = "worker";
	if (nclients > 64 || w >= nworkers || nworkers > 16)
		prog_fail("at most 64 clients and 16 workers");
	if (id < 0)
		prog_fail("shmget(%d): %s", key, strerror(errno));
	rr = shmat(id, NULL, 0); /* never registered here: the master did */
	if (rr == (void *)-1)
		prog_fail("shmat: %s", strerror(errno));
	meet_dev_open(&d, 1024);
	out = calloc(256, sizeof(*out));
	struct ibv_mr *mr = meet_reg(&d, out, 256 * sizeof(*out));
	struct ibv_qp *qp = meet_qp_new(&d, IBV_QPT_UD, 256, QKEY);

	meet_qp_up(qp, 0, 0);
	for (unsigned c = 0; c < nclients; c++) {
		struct ibv_ah_attr aa = { .port_num = 1 };

		snprintf(name, sizeof(name), "client-%u", c);
		struct meet_info i = meet_lookup(name);

		aa.dlid = (uint16_t)i.lid;
		ah[c] = ibv_create_ah(d.pd, &aa);
		if (!ah[c])
			prog_fail("ibv_create_ah failed");
		qpn[c] = i.qpn2;
		for (unsigned r = w; r < nreq; r += nworkers)
			expect++;
		next[c] = w; /* the next request number this worker gets from c */
	}
	double t0 = meet_now_s();
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
			if (meet_ud_send(qp, served, o, sizeof(*o), mr->lkey, ah[c],
					 qpn[c], QKEY))
				prog_fail("ibv_post_send of a response failed");
			outstanding++;
			served++;
			next[c] += nworkers;
		}
		struct ibv_wc wc;

		while (outstanding && ibv_poll_cq(d.cq, 1, &wc) == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				prog_fail("response send: %s",
					  ibv_wc_status_str(wc.status));
			outstanding--;
		}
		if (served == before)
			sched_yield();
		if (meet_now_s() - t0 > MEET_TIMEOUT_S)
			prog_fail("worker %u: served %u of %u requests; the master's "
				  "segment "
				  "never showed the others",
				  w, served, expect);
	}
	while (outstanding) {
		struct ibv_wc wc;

		if (!meet_poll(&d, &wc, meet_now_s() + 5))
			prog_fail("response completions missing");
		outstanding--;
	}
	printf("worker %u: served %u requests\n", w, served);
	return 0;
}

static int run_client(unsigned c, unsigned nworkers, unsigned nreq)
{
	unsigned answered = 0, correct = 0, posted = 0;
	unsigned char *done = calloc(nreq + 1, 1);
	struct meet_dev d;

	prog_role = "client";
	meet_dev_open(&d, 1024);
	struct req *reqs = calloc(WIN, sizeof(struct req));
	char *rbuf = calloc(64, 64 + 40);
	struct ibv_mr *rmr = meet_reg(&d, reqs, WIN * sizeof(struct req));
	struct ibv_mr *inmr = meet_reg(&d, rbuf, 64 * (64 + 40));
	struct ibv_qp *uc = meet_qp_new(&d, IBV_QPT_UC, 256, QKEY),
		      *ud = meet_qp_new(&d, IBV_QPT_UD, 256, QKEY);
	struct meet_info i = { d.lid, uc->qp_num, ud->qp_num, 0, 0 };

	meet_qp_up(ud, 0, 0);
	for (unsigned k = 0; k < 64; k++)
		post_recv(ud, inmr, rbuf + k * (64 + 40), 64 + 40, 1000000 + k);
	struct meet_info m = meet_client(uc, c, &i, "master");

	double t0 = meet_now_s();

	while (answered < nreq) {
		/* request r reuses slot r % WIN once r - WIN was answered */
		while (posted < nreq && (posted < WIN || done[posted - WIN])) {
			unsigned r = posted, w = r % nworkers;
			struct req *q = &reqs[r % WIN];
			q->value = req_value(c, r);
			q->client = c;
			q->seq = r + 1;
			/* the master says how many clients share its region */
			if (prog_post_send(uc, r, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, q,
					   sizeof(*q), rmr->lkey,
					   m.addr + slot_off(w, c, r % WIN, m.qpn2),
					   m.rkey))
				prog_fail("ibv_post_send of request %u failed", r);
			posted++;
		}
		struct ibv_wc wc;

		if (!meet_poll(&d, &wc, t0 + MEET_TIMEOUT_S))
			prog_fail("client %u: %u of %u requests answered, then nothing",
				  c, answered, nreq);
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

static double watch_s = MEET_TIMEOUT_S; /* how long a watcher waits */

/* Waits until bytes [from, PATTERN_N) of buf hold the pattern; returns 0, or
 * 1 after the timeout. */
static int watch(const volatile uint8_t *buf, size_t from, const char *who)
{
	double t0 = meet_now_s();

	for (;;) {
		size_t i;

		for (i = from; i < PATTERN_N && buf[i] == pattern(i); i++)
			;
		if (i == PATTERN_N) {
			printf("%s: saw the %zu-byte WRITE\n", who, PATTERN_N - from);
			return 0;
		}
		if (meet_now_s() - t0 > watch_s) {
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
	struct meet_dev d;
	uint8_t *buf;
	pid_t pid;

	prog_role = "target";
	if (!strcmp(kind, "file")) {
		snprintf(p, sizeof(p), "%s/target.file", meet_dir);
		fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)len))
			prog_fail("cannot create %s", p);
	} else if (!strcmp(kind, "memfd-huge")) {
		/* hugetlbfs: a peer must map it in whole huge pages */
		len = HUGE_BYTES;
		fd = memfd_create("shm_prog", MFD_CLOEXEC | MFD_HUGETLB);
		if (fd < 0 || ftruncate(fd, (off_t)len))
			prog_fail("memfd_create(MFD_HUGETLB) failed: %s",
				  strerror(errno));
	} else if (!strncmp(kind, "memfd", 5) || mixed) {
		fd = memfd_create("shm_prog", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)len))
			prog_fail("memfd_create failed");
	} else if (!strcmp(kind, "sysv")) {
		shmid = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
		if (shmid < 0)
			prog_fail("shmget: %s", strerror(errno));
	} else if (strcmp(kind, "anon") && !regfirst) {
		prog_fail("unknown kind %s", kind);
	}
	if (shmid >= 0)
		buf = shmat(shmid, NULL, 0);
	else if (mixed) {
		buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			   -1, 0);
		if (buf == MAP_FAILED ||
		    mmap(buf + 4096, 2 * 4096, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
			prog_fail("mmap failed");
	} else
		buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
			   MAP_SHARED | (fd < 0 ? MAP_ANONYMOUS : 0), fd, 0);
	if (buf == MAP_FAILED)
		prog_fail("mmap failed");
	if (fd >= 0 && !strcmp(kind, "memfd-closed"))
		close(fd); /* only the mapping holds it now */
	if (regfirst) {
		/* registered, then forked: the child keeps sharing the pages */
		meet_dev_open(&d, 1024);
		mr = meet_reg(&d, buf, len);
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		prog_fail("fork failed");
	if (pid == 0) {
		const uint8_t *view = buf;

		if (!strcmp(kind, "file")) {
			/* a process of its own view: the file opened again */
			int f = open(p, O_RDWR);

			view = mmap(NULL, len, PROT_READ, MAP_SHARED, f, 0);
			if (view == MAP_FAILED)
				prog_fail("watcher cannot map %s", p);
		}
		/* the watcher sees what lands on shared pages only */
		_exit(watch(view + at, seen, "watcher"));
	}
	if (!regfirst) {
		meet_dev_open(&d, 1024);
		mr = meet_reg(&d, buf, len);
	}
	struct ibv_qp *qp = meet_qp_new(&d, IBV_QPT_RC, 256, QKEY);
	char *msg = calloc(1, 64 + 40);
	struct ibv_mr *mmr = meet_reg(&d, msg, 64);
	struct meet_info i = { d.lid, qp->qp_num, 0, mr->rkey, (uintptr_t)buf + at };

	post_recv(qp, mmr, msg, 64, 1);
	meet_publish("target", &i);
	i = meet_lookup("writer");
	meet_qp_up(qp, i.lid, i.qpn);
	meet_publish("target-ready", &i);
	struct ibv_wc wc;

	if (!meet_poll(&d, &wc, meet_now_s() + MEET_TIMEOUT_S) || strcmp(msg, "done"))
		prog_fail("no \"done\" from the writer");
	int st, own = watch(buf + at, 0, "target");

	if (waitpid(pid, &st, 0) != pid)
		prog_fail("waitpid failed");
	printf("target %s: watcher %s\n", kind,
	       WIFEXITED(st) && !WEXITSTATUS(st) ? "saw it" : "did not see it");
	ibv_dereg_mr(mr);
	if (shmid >= 0)
		shmctl(shmid, IPC_RMID, NULL);
	return own || !WIFEXITED(st) || WEXITSTATUS(st);
}

static int run_writer(void)
{
	struct meet_dev d;
	uint8_t *src = malloc(PATTERN_N + 64);

	prog_role = "writer";
	meet_dev_open(&d, 1024);
	for (size_t k = 0; k < PATTERN_N; k++)
		src[k] = pattern(k);
	strcpy((char *)src + PATTERN_N, "done");
	/* registered, deregistered and registered again, as programs do: the
	 * pages softnic backed the first time are private memory still */
	struct ibv_mr *mr = meet_reg(&d, src, PATTERN_N + 64);

	if (ibv_dereg_mr(mr))
		prog_fail("ibv_dereg_mr failed");
	mr = meet_reg(&d, src, PATTERN_N + 64);
	struct ibv_qp *qp = meet_qp_new(&d, IBV_QPT_RC, 256, QKEY);
	struct meet_info i = { d.lid, qp->qp_num, 0, 0, 0 };

	meet_publish("writer", &i);
	struct meet_info t = meet_lookup("target");

	meet_qp_up(qp, t.lid, t.qpn);
	meet_lookup("target-ready");
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
		prog_fail("ibv_post_send failed");
	if (!meet_poll(&d, &wc, meet_now_s() + MEET_TIMEOUT_S))
		prog_fail("no completion for the WRITE and SEND");
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
	meet_dir = argv[2];
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
