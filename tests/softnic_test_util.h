/*
 * softnic_test_util.h - harness for the softnic GoogleTest suites: runs the
 * test binary on softnic's libibverbs.so.1 (re-exec with LD_LIBRARY_PATH),
 * forks the two ends of a test as real processes joined by a socketpair,
 * and wraps the verbs set-up both ends share.
 *
 * Checks inside a forked end print one line and _exit(1): gtest assertions
 * do not cross fork. Every end runs under alarm() so that a hang fails.
 */
#ifndef SOFTNIC_TEST_UTIL_H
#define SOFTNIC_TEST_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <functional>
#include <string>

#include <gtest/gtest.h>

#define SN_CHECK(c)                                                                 \
	do {                                                                        \
		if (!(c)) {                                                         \
			fprintf(stderr,                                             \
				"[pid %d] %s:%d: check failed: %s (errno %d %s)\n", \
				(int)getpid(), __FILE__, __LINE__, #c, errno,       \
				strerror(errno));                                   \
			_exit(1);                                                   \
		}                                                                   \
	} while (0)

#define SN_CHECK_EQ(a, b)                                                           \
	do {                                                                        \
		long long _a = (long long)(a), _b = (long long)(b);                 \
		if (_a != _b) {                                                     \
			fprintf(stderr,                                             \
				"[pid %d] %s:%d: %s == %s failed: %lld vs %lld\n",  \
				(int)getpid(), __FILE__, __LINE__, #a, #b, _a, _b); \
			_exit(1);                                                   \
		}                                                                   \
	} while (0)

static inline uint64_t sn_test_now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Re-exec ourselves on softnic unless already done; private fabric dir. */
static inline void sn_test_setup_env(int argc, char **argv)
{
	(void)argc;
	if (getenv("SN_TEST_REEXEC"))
		return;
	char dir[PATH_MAX];
	const char *cands[] = { "softnic", "../softnic", "bazel-bin/softnic" };
	const char *src = getenv("TEST_SRCDIR");
	const char *ws = getenv("TEST_WORKSPACE");
	bool found = false;
	if (src && ws) {
		snprintf(dir, sizeof(dir), "%s/%s/softnic", src, ws);
		std::string so = std::string(dir) + "/libibverbs.so.1";
		found = access(so.c_str(), R_OK) == 0;
	}
	for (const char *c : cands) {
		if (found)
			break;
		if (!realpath(c, dir))
			continue;
		std::string so = std::string(dir) + "/libibverbs.so.1";
		found = access(so.c_str(), R_OK) == 0;
	}
	if (!found) {
		fprintf(stderr, "softnic libibverbs.so.1 not found\n");
		exit(2);
	}
	/* RBTRACE_SOFTNIC_MODE=provider: the system's libibverbs with softnic's
	 * provider and preload (the test target's mode); else the drop-in */
	const char *mode = getenv("RBTRACE_SOFTNIC_MODE");
	if (mode && !strcmp(mode, "provider")) {
		std::string pre = std::string(dir) + "/provider/libsoftnic-preload.so";
		const char *old = getenv("LD_PRELOAD");
		if (old && *old)
			pre = std::string(old) + ":" + pre;
		setenv("LD_PRELOAD", pre.c_str(), 1);
		setenv("RDMAV_DRIVERS",
		       (std::string(dir) + "/provider/libsoftnic").c_str(), 1);
		unsetenv("LD_LIBRARY_PATH");
	} else {
		setenv("LD_LIBRARY_PATH", dir, 1);
	}
	setenv("SN_TEST_REEXEC", "1", 1);
	/* unique even across PID namespaces (bazel sandboxes share /dev/shm) */
	char fab[] = "/dev/shm/softnic-test-XXXXXX";
	if (!mkdtemp(fab)) {
		perror("mkdtemp");
		exit(2);
	}
	setenv("SOFTNIC_FABRIC", fab, 1);
	execv("/proc/self/exe", argv);
	perror("execv");
	exit(2);
}

static inline void sn_test_cleanup_fabric()
{
	const char *f = getenv("SOFTNIC_FABRIC");
	if (f && !strncmp(f, "/dev/shm/softnic-test-", 22)) {
		std::string cmd = std::string("rm -rf ") + f;
		if (system(cmd.c_str()) != 0)
			fprintf(stderr, "cleanup of %s failed\n", f);
	}
}

/* main() of a softnic test binary: a private fabric, the tests, its removal. */
#define SN_TEST_MAIN()                                  \
	int main(int argc, char **argv)                 \
	{                                               \
		sn_test_setup_env(argc, argv);          \
		::testing::InitGoogleTest(&argc, argv); \
		int r = RUN_ALL_TESTS();                \
		sn_test_cleanup_fabric();               \
		return r;                               \
	}

/* Runs a and b in two child processes joined by a socketpair; returns the
 * two exit statuses (0 = the end's checks all passed). */
struct SnEnds {
	int a, b;
};

static inline int sn_wait_child(pid_t p)
{
	int st = 0;
	if (waitpid(p, &st, 0) < 0)
		return -1;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

static inline SnEnds sn_run2(std::function<void(int)> a, std::function<void(int)> b,
			     int timeout_s = 30)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return { -1, -1 };
	fflush(stdout);
	fflush(stderr);
	pid_t pa = fork();
	if (pa == 0) {
		close(sv[1]);
		alarm(timeout_s);
		a(sv[0]);
		_exit(0);
	}
	pid_t pb = fork();
	if (pb == 0) {
		close(sv[0]);
		alarm(timeout_s);
		b(sv[1]);
		_exit(0);
	}
	close(sv[0]);
	close(sv[1]);
	SnEnds r;
	r.a = sn_wait_child(pa);
	r.b = sn_wait_child(pb);
	return r;
}

static inline void sn_xwrite(int fd, const void *p, size_t n)
{
	SN_CHECK(write(fd, p, n) == (ssize_t)n);
}

static inline void sn_xread(int fd, void *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)p + got, n - got);
		SN_CHECK(r > 0);
		got += (size_t)r;
	}
}

static inline void sn_sync(int fd)
{
	char c = 's';
	sn_xwrite(fd, &c, 1);
	sn_xread(fd, &c, 1);
}

struct SnInfo {
	uint32_t qpn, rkey, psn;
	uint16_t lid;
	uint64_t addr;
	union ibv_gid gid;
};

/* A connected-type QP (RC, XRC) to INIT on port 1 with the given remote access. */
static inline void sn_to_init(ibv_qp *q, unsigned access)
{
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = access;
	SN_CHECK_EQ(ibv_modify_qp(q, &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS),
		    0);
}

struct SnNode {
	ibv_context *ctx = nullptr;
	ibv_pd *pd = nullptr;
	ibv_cq *cq = nullptr;
	ibv_qp *qp = nullptr;
	ibv_mr *mr = nullptr;
	ibv_comp_channel *ch = nullptr;
	ibv_srq *srq = nullptr;
	char *buf = nullptr;
	size_t len = 0;
	ibv_qp_type type = IBV_QPT_RC;

	void open()
	{
		int n = 0;
		ibv_device **l = ibv_get_device_list(&n);
		SN_CHECK(l && n == 1);
		SN_CHECK(!strcmp(ibv_get_device_name(l[0]), "softnic0"));
		ctx = ibv_open_device(l[0]);
		SN_CHECK(ctx);
		ibv_free_device_list(l);
		pd = ibv_alloc_pd(ctx);
		SN_CHECK(pd);
	}

	void make(ibv_qp_type t, size_t buflen = 65536, int depth = 64, bool chan = false,
		  uint32_t max_inline = 64, bool use_srq = false, int cqe = 256)
	{
		if (!ctx)
			open();
		type = t;
		len = buflen;
		SN_CHECK(posix_memalign((void **)&buf, 4096, len) == 0);
		memset(buf, 0, len);
		mr = ibv_reg_mr(pd, buf, len,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ |
					IBV_ACCESS_REMOTE_ATOMIC);
		SN_CHECK(mr);
		if (chan) {
			ch = ibv_create_comp_channel(ctx);
			SN_CHECK(ch);
		}
		cq = ibv_create_cq(ctx, cqe, nullptr, ch, 0);
		SN_CHECK(cq);
		if (use_srq) {
			ibv_srq_init_attr sa = {};
			sa.attr.max_wr = (uint32_t)depth;
			sa.attr.max_sge = 1;
			srq = ibv_create_srq(pd, &sa);
			SN_CHECK(srq);
		}
		qp = new_qp(t, depth, max_inline);
	}

	/* An RC QP with the ibv_wr_* API for send_ops (IBV_QP_EX_WITH_*), in INIT
	 * with the given remote access: *qx is its ibv_qp_ex. */
	ibv_qp *new_qpx(uint64_t send_ops, unsigned access, ibv_qp_ex **qx)
	{
		ibv_qp_init_attr_ex ia = {};
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = 8;
		ia.cap.max_recv_wr = 8;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.cap.max_inline_data = 16;
		ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.pd = pd;
		ia.send_ops_flags = send_ops;
		ibv_qp *q = ibv_create_qp_ex(ctx, &ia);
		SN_CHECK(q);
		*qx = ibv_qp_to_qp_ex(q);
		SN_CHECK(*qx);
		sn_to_init(q, access);
		return q;
	}

	ibv_qp *new_qp(ibv_qp_type t, int depth, uint32_t max_inline = 64)
	{
		ibv_qp_init_attr ia = {};
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.srq = srq;
		ia.qp_type = t;
		ia.cap.max_send_wr = (uint32_t)depth;
		ia.cap.max_recv_wr = (uint32_t)depth;
		ia.cap.max_send_sge = 4;
		ia.cap.max_recv_sge = 4;
		ia.cap.max_inline_data = max_inline;
		ibv_qp *q = ibv_create_qp(pd, &ia);
		SN_CHECK(q);
		ibv_qp_attr a = {};
		a.qp_state = IBV_QPS_INIT;
		a.pkey_index = 0;
		a.port_num = 1;
		int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (t == IBV_QPT_UD) {
			a.qkey = 0x11111111;
			mask |= IBV_QP_QKEY;
		} else {
			a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
					    IBV_ACCESS_REMOTE_READ |
					    IBV_ACCESS_REMOTE_ATOMIC;
			mask |= IBV_QP_ACCESS_FLAGS;
		}
		SN_CHECK_EQ(ibv_modify_qp(q, &a, mask), 0);
		return q;
	}

	SnInfo info(ibv_qp *q = nullptr)
	{
		SnInfo i = {};
		ibv_port_attr pa;
		SN_CHECK(ibv_query_port(ctx, 1, &pa) == 0);
		i.qpn = (q ? q : qp)->qp_num;
		i.lid = pa.lid;
		i.rkey = mr->rkey;
		i.addr = (uint64_t)(uintptr_t)buf;
		i.psn = 0x1234;
		SN_CHECK(ibv_query_gid(ctx, 1, 0, &i.gid) == 0);
		return i;
	}

	SnInfo exchange(int fd, ibv_qp *q = nullptr)
	{
		SnInfo mine = info(q), theirs;
		sn_xwrite(fd, &mine, sizeof(mine));
		sn_xread(fd, &theirs, sizeof(theirs));
		return theirs;
	}

	/* INIT -> RTR towards r: a responder that can receive but not yet send. */
	void to_rtr(const SnInfo &r, ibv_qp *q = nullptr, uint8_t min_rnr = 1)
	{
		q = q ? q : qp;
		ibv_qp_attr a = {};
		a.qp_state = IBV_QPS_RTR;
		int mask = IBV_QP_STATE;
		if (type != IBV_QPT_UD) {
			a.path_mtu = IBV_MTU_4096;
			a.dest_qp_num = r.qpn;
			a.rq_psn = r.psn;
			a.ah_attr.dlid = r.lid;
			a.ah_attr.port_num = 1;
			mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				IBV_QP_RQ_PSN;
			if (type == IBV_QPT_RC) {
				a.max_dest_rd_atomic = 16;
				a.min_rnr_timer = min_rnr;
				mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
			}
		}
		SN_CHECK_EQ(ibv_modify_qp(q, &a, mask), 0);
	}

	void connect(const SnInfo &r, ibv_qp *q = nullptr, uint8_t rnr_retry = 7,
		     uint8_t timeout = 14, uint8_t retry_cnt = 7, uint8_t min_rnr = 1)
	{
		to_rtr(r, q, min_rnr);
		to_rts(q, rnr_retry, timeout, retry_cnt);
	}

	/* RTR -> RTS, SQ PSN 0x1234 (an RC QP: its timers and retries). */
	void to_rts(ibv_qp *q = nullptr, uint8_t rnr_retry = 7, uint8_t timeout = 14,
		    uint8_t retry_cnt = 7, uint8_t rd_atomic = 16)
	{
		q = q ? q : qp;
		ibv_qp_attr a = {};
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0x1234;
		int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (type == IBV_QPT_RC) {
			a.timeout = timeout;
			a.retry_cnt = retry_cnt;
			a.rnr_retry = rnr_retry;
			a.max_rd_atomic = rd_atomic;
			mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				IBV_QP_MAX_QP_RD_ATOMIC;
		}
		SN_CHECK_EQ(ibv_modify_qp(q, &a, mask), 0);
	}

	/* make(t), then the QP connected to the one at the other end of fd (which
	 * calls pair too): the peer's info. */
	SnInfo pair(int fd, ibv_qp_type t = IBV_QPT_RC)
	{
		make(t);
		SnInfo r = exchange(fd);
		connect(r);
		return r;
	}

	/* Both QPs connected to the two of the other end of fd (which calls connect2
	 * too, with its QPs in the same order). */
	void connect2(int fd, ibv_qp *q2)
	{
		SnInfo a = exchange(fd), b = exchange(fd, q2);
		connect(a);
		connect(b, q2);
	}

	/* make(IBV_QPT_RC) and a second RC QP of depth 16, both connected
	 * (connect2): the second QP. */
	ibv_qp *pair2(int fd)
	{
		make(IBV_QPT_RC);
		ibv_qp *q2 = new_qp(IBV_QPT_RC, 16);
		connect2(fd, q2);
		return q2;
	}

	void post_recv(uint64_t id, size_t off, uint32_t l, ibv_qp *q = nullptr)
	{
		ibv_sge s = { (uint64_t)(uintptr_t)(buf + off), l, mr->lkey };
		ibv_recv_wr wr = {}, *bad;
		wr.wr_id = id;
		wr.sg_list = &s;
		wr.num_sge = 1;
		if (srq)
			SN_CHECK_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
		else
			SN_CHECK_EQ(ibv_post_recv(q ? q : qp, &wr, &bad), 0);
	}

	/* A send WR of one SGE, l bytes at buf + off (*s, which must outlive it),
	 * with id, op, flags and imm; the rest zero for the caller to fill. */
	ibv_send_wr wr1(ibv_sge *s, ibv_wr_opcode op, uint64_t id, size_t off, uint32_t l,
			unsigned flags = IBV_SEND_SIGNALED, uint32_t imm = 0)
	{
		*s = { (uint64_t)(uintptr_t)(buf + off), l, mr->lkey };
		ibv_send_wr wr = {};
		wr.wr_id = id;
		wr.sg_list = s;
		wr.num_sge = 1;
		wr.opcode = op;
		wr.send_flags = flags;
		wr.imm_data = htonl(imm);
		return wr;
	}

	/* op (a SEND, or an RDMA op to (raddr, rkey)) on q (default: qp). */
	int post_to(ibv_wr_opcode op, uint64_t id, size_t off, uint32_t l, uint64_t raddr,
		    uint32_t rkey, unsigned flags = IBV_SEND_SIGNALED, uint32_t imm = 0,
		    ibv_qp *q = nullptr)
	{
		ibv_sge s;
		ibv_send_wr wr = wr1(&s, op, id, off, l, flags, imm), *bad;
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
		return ibv_post_send(q ? q : qp, &wr, &bad);
	}

	/* post_to r's buffer + roff (none: a SEND). */
	int post(ibv_wr_opcode op, uint64_t id, size_t off, uint32_t l,
		 const SnInfo *r = nullptr, uint64_t roff = 0,
		 unsigned flags = IBV_SEND_SIGNALED, uint32_t imm = 0,
		 ibv_qp *q = nullptr)
	{
		return post_to(op, id, off, l, r ? r->addr + roff : 0, r ? r->rkey : 0,
			       flags, imm, q);
	}

	/* An address handle to lid through port 1. */
	ibv_ah *ah_to(uint16_t lid)
	{
		ibv_ah_attr aa = {};
		aa.dlid = lid;
		aa.port_num = 1;
		ibv_ah *ah = ibv_create_ah(pd, &aa);
		SN_CHECK(ah);
		return ah;
	}

	/* A signaled op (SEND, SEND_WITH_IMM) on qp to a UD peer. */
	int post_ud(ibv_wr_opcode op, uint64_t id, size_t off, uint32_t l, ibv_ah *ah,
		    uint32_t qpn, uint32_t qkey = 0x11111111, uint32_t imm = 0)
	{
		ibv_sge s;
		ibv_send_wr wr = wr1(&s, op, id, off, l, IBV_SEND_SIGNALED, imm), *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = qpn;
		wr.wr.ud.remote_qkey = qkey;
		return ibv_post_send(qp, &wr, &bad);
	}

	/* A signaled atomic op into 8 bytes at buf + off, on q (default: qp). */
	int post_atomic(ibv_wr_opcode op, uint64_t id, size_t off, uint64_t raddr,
			uint32_t rkey, uint64_t compare_add, uint64_t swap = 0,
			ibv_qp *q = nullptr)
	{
		ibv_sge s;
		ibv_send_wr wr = wr1(&s, op, id, off, 8), *bad;
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = compare_add;
		wr.wr.atomic.swap = swap;
		return ibv_post_send(q ? q : qp, &wr, &bad);
	}

	/* The channel's fd becomes readable within timeout_ms with an event
	 * for our CQ; it is taken and acknowledged. */
	void cq_event(int timeout_ms = 5000)
	{
		struct pollfd p = { ch->fd, POLLIN, 0 };
		SN_CHECK_EQ(::poll(&p, 1, timeout_ms), 1);
		ibv_cq *ecq;
		void *ectx;
		SN_CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), 0);
		SN_CHECK(ecq == cq);
		ibv_ack_cq_events(ecq, 1);
	}

	ibv_wc wait1(int timeout_ms = 5000)
	{
		ibv_wc wc;
		uint64_t end = sn_test_now_ns() + (uint64_t)timeout_ms * 1000000ull;
		for (;;) {
			int n = ibv_poll_cq(cq, 1, &wc);
			SN_CHECK(n >= 0);
			if (n == 1)
				return wc;
			if (sn_test_now_ns() > end) {
				fprintf(stderr, "[pid %d] no completion within %d ms\n",
					(int)getpid(), timeout_ms);
				_exit(3);
			}
			usleep(10);
		}
	}

	bool none_within(int ms)
	{
		ibv_wc wc;
		uint64_t end = sn_test_now_ns() + (uint64_t)ms * 1000000ull;
		while (sn_test_now_ns() < end) {
			if (ibv_poll_cq(cq, 1, &wc) != 0)
				return false;
			usleep(100);
		}
		return true;
	}

	/* for tests in the gtest process itself (forked ends just _exit) */
	void close()
	{
		if (qp)
			ibv_destroy_qp(qp);
		if (srq)
			ibv_destroy_srq(srq);
		if (cq)
			ibv_destroy_cq(cq);
		if (ch)
			ibv_destroy_comp_channel(ch);
		if (mr)
			ibv_dereg_mr(mr);
		if (pd)
			ibv_dealloc_pd(pd);
		if (ctx)
			ibv_close_device(ctx);
		free(buf);
		*this = SnNode();
	}

	ibv_qp_state state(ibv_qp *q = nullptr)
	{
		ibv_qp_attr a;
		ibv_qp_init_attr ia;
		SN_CHECK_EQ(ibv_query_qp(q ? q : qp, &a, IBV_QP_STATE, &ia), 0);
		return a.qp_state;
	}
};

/* The plain other end of a test: an RC pair over fd, then one 8-byte SEND
 * that must complete. */
static inline void sn_send_one(int fd)
{
	SnNode n;
	n.pair(fd);
	sn_sync(fd);
	SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 8), 0);
	SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
	sn_sync(fd);
}

#define SN_EXPECT_ENDS(r)           \
	do {                        \
		SnEnds _r = (r);    \
		EXPECT_EQ(_r.a, 0); \
		EXPECT_EQ(_r.b, 0); \
	} while (0)

#endif
