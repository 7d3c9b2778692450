/*
 * softnic_errors_test - softnic fails the way hardware does: the QP state
 * machine's errnos, queue overruns, local and remote protection errors,
 * RNR and transport retries, flushes, CQ overflow, SRQ limit and the async
 * events and counters that go with them; plus the latency model and NIC
 * clock that let tests know the true NIC time of each WR.
 * Two real processes per test wherever a peer is involved.
 */
#include <sys/mman.h>

#include "softnic/rbt_softnic.h"
#include "tests/softnic_test_util.h"

namespace
{

static ibv_async_event wait_async(ibv_context *ctx, int ms = 3000)
{
	struct pollfd p = { ctx->async_fd, POLLIN, 0 };
	SN_CHECK(::poll(&p, 1, ms) == 1);
	ibv_async_event ev;
	SN_CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
	ibv_ack_async_event(&ev);
	return ev;
}

TEST(SoftnicQpStateMachine, MasksTransitionsAndValues)
{
	SnNode n;
	n.open();
	n.cq = ibv_create_cq(n.ctx, 16, nullptr, nullptr, 0);
	ASSERT_TRUE(n.cq);
	ibv_qp_init_attr ia = {};
	ia.send_cq = ia.recv_cq = n.cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	/* beyond the device's limits */
	ia.cap.max_send_wr = 1 << 20;
	errno = 0;
	EXPECT_EQ(ibv_create_qp(n.pd, &ia), nullptr);
	EXPECT_EQ(errno, EINVAL);
	ia.cap.max_send_wr = 4;
	ibv_qp *qp = ibv_create_qp(n.pd, &ia);
	ASSERT_TRUE(qp);
	ibv_qp_attr a = {};
	/* RESET -> INIT without PORT: a required attribute missing */
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	EXPECT_EQ(ibv_modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS),
		  EINVAL);
	/* QKEY is not an RC attribute */
	EXPECT_EQ(ibv_modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY),
		  EINVAL);
	/* RESET -> RTR is not a transition */
	a.qp_state = IBV_QPS_RTR;
	EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
	/* a port that does not exist */
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 2;
	EXPECT_EQ(ibv_modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					IBV_QP_ACCESS_FLAGS),
		  EINVAL);
	a.port_num = 1;
	EXPECT_EQ(ibv_modify_qp(qp, &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					IBV_QP_ACCESS_FLAGS),
		  0);
	EXPECT_EQ(qp->state, IBV_QPS_INIT);
	/* posting a send before RTS */
	char b[8];
	ibv_sge s = { (uint64_t)(uintptr_t)b, 8, 0 };
	ibv_send_wr wr = {}, *bad = nullptr;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_INLINE;
	EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
	/* INIT -> RTR: RC needs MIN_RNR_TIMER and MAX_DEST_RD_ATOMIC too */
	a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.ah_attr.dlid = 1;
	a.ah_attr.port_num = 1;
	int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN;
	EXPECT_EQ(ibv_modify_qp(qp, &a, m), EINVAL);
	m |= IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC;
	/* a path MTU above the port's (enum values past 4096) */
	a.path_mtu = (ibv_mtu)6;
	EXPECT_EQ(ibv_modify_qp(qp, &a, m), EINVAL);
	a.path_mtu = IBV_MTU_1024;
	a.max_dest_rd_atomic = 17; /* above max_qp_rd_atom */
	EXPECT_EQ(ibv_modify_qp(qp, &a, m), EINVAL);
	a.max_dest_rd_atomic = 1;
	EXPECT_EQ(ibv_modify_qp(qp, &a, m), 0);
	ibv_qp_attr q;
	ibv_qp_init_attr qi;
	ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_PATH_MTU, &qi), 0);
	EXPECT_EQ(q.qp_state, IBV_QPS_RTR);
	EXPECT_EQ(q.path_mtu, IBV_MTU_1024);
	/* any state -> ERR -> RESET */
	a = {};
	a.qp_state = IBV_QPS_ERR;
	EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RESET;
	EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	EXPECT_EQ(ibv_destroy_qp(qp), 0);
	/* a CQ still in use cannot go */
	ibv_qp *qp2 = ibv_create_qp(n.pd, &ia);
	ASSERT_TRUE(qp2);
	EXPECT_EQ(ibv_destroy_cq(n.cq), EBUSY);
	EXPECT_EQ(ibv_destroy_qp(qp2), 0);
	EXPECT_EQ(ibv_destroy_cq(n.cq), 0);
	n.cq = nullptr;
	/* remote write needs local write */
	static char mem[4096];
	errno = 0;
	EXPECT_EQ(ibv_reg_mr(n.pd, mem, sizeof(mem), IBV_ACCESS_REMOTE_WRITE), nullptr);
	EXPECT_EQ(errno, EINVAL);
	n.close();
}

/* One process, a QP connected to itself: queue overrun, bad lkey, flushes. */
TEST(SoftnicLoopback, OverrunLocalProtectionAndFlush)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int) {
			SnNode n;
			n.make(IBV_QPT_RC, 8192, 2);
			n.connect(n.info());
			n.post_recv(1, 0, 64);
			n.post_recv(2, 64, 64);
			/* RQ holds 2 */
			ibv_sge s = { (uint64_t)(uintptr_t)n.buf, 8, n.mr->lkey };
			ibv_recv_wr rw = {}, *rbad;
			rw.sg_list = &s;
			rw.num_sge = 1;
			SN_CHECK_EQ(ibv_post_recv(n.qp, &rw, &rbad), ENOMEM);
			/* SQ holds 2: two unsignaled sends fill it */
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 10, 1000, 8, nullptr, 0, 0), 0);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 11, 1000, 8, nullptr, 0, 0), 0);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 12, 1000, 8), ENOMEM);
			/* the two receives completed (loopback) */
			SN_CHECK_EQ(n.wait1().wr_id, 1);
			SN_CHECK_EQ(n.wait1().wr_id, 2);
			SN_CHECK(n.none_within(10));
		},
		[](int) {
			SnNode n;
			n.make(IBV_QPT_RC, 8192, 8);
			n.connect(n.info());
			n.post_recv(1, 0, 64);
			n.post_recv(2, 64, 64);
			/* a bad lkey: LOC_PROT_ERR, QP to ERR, receives flushed */
			ibv_sge s;
			ibv_send_wr wr = n.wr1(&s, IBV_WR_SEND, 77, 0, 8, 0), *bad;
			s.lkey += 0x100;
			SN_CHECK_EQ(ibv_post_send(n.qp, &wr, &bad),
				    0); /* unsignaled, still */
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 77);
			SN_CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_WR_FLUSH_ERR);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_WR_FLUSH_ERR);
			/* everything posted in ERR is flushed */
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 78, 0, 8, nullptr, 0, 0), 0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 78);
			SN_CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
			n.post_recv(3, 0, 8);
			wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 3);
			SN_CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
			/* a local buffer outside its MR: LOC_PROT_ERR as well */
			ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 4);
			n.connect(n.info(q2), q2);
			ibv_sge s2 = { (uint64_t)(uintptr_t)n.buf + 8000, 1000,
				       n.mr->lkey };
			wr.sg_list = &s2;
			SN_CHECK_EQ(ibv_post_send(q2, &wr, &bad), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_LOC_PROT_ERR);
		}));
}

TEST(SoftnicRemote, AccessErrorsMoveBothQpsToErr)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 8);
			ibv_qp *q3 = n.new_qp(IBV_QPT_RC, 8);
			/* an MR without remote read */
			static char ro[4096] __attribute__((aligned(4096)));
			ibv_mr *wr_only = ibv_reg_mr(n.pd, ro, sizeof(ro),
						     IBV_ACCESS_LOCAL_WRITE |
							     IBV_ACCESS_REMOTE_WRITE);
			SN_CHECK(wr_only);
			n.post_recv(1, 0, 64);
			SnInfo r1 = n.exchange(fd), r2 = n.exchange(fd, q2),
			       r3 = n.exchange(fd, q3);
			uint64_t k[2] = { wr_only->rkey, (uint64_t)(uintptr_t)ro };
			sn_xwrite(fd, k, sizeof(k));
			n.connect(r1);
			n.connect(r2, q2);
			n.connect(r3, q3);
			sn_sync(fd);
			sn_sync(fd);
			/* the responder's QP went to ERR with an access error event, and
			 * its posted receive was flushed */
			ibv_async_event ev = wait_async(n.ctx);
			SN_CHECK_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
			SN_CHECK(ev.element.qp == n.qp);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 1);
			SN_CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
			SN_CHECK_EQ(n.state(q2), IBV_QPS_ERR);
			SN_CHECK_EQ(n.state(q3), IBV_QPS_ERR);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 8);
			ibv_qp *q3 = n.new_qp(IBV_QPT_RC, 8);
			SnInfo r1 = n.exchange(fd), r2 = n.exchange(fd, q2),
			       r3 = n.exchange(fd, q3);
			uint64_t wk[2];
			sn_xread(fd, wk, sizeof(wk));
			n.connect(r1);
			n.connect(r2, q2);
			n.connect(r3, q3);
			sn_sync(fd);
			/* bad rkey */
			SnInfo bad = r1;
			bad.rkey ^= 0x5500;
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 1, 0, 64, &bad, 0), 0);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			/* out of bounds with a good rkey */
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 2, 0, 64, &r2, 65536 - 32,
					   IBV_SEND_SIGNALED, 0, q2),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
			SN_CHECK_EQ(n.state(q2), IBV_QPS_ERR);
			/* READ of an MR without remote read */
			SnInfo r3b = r3;
			r3b.rkey = (uint32_t)wk[0];
			r3b.addr = wk[1];
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_READ, 3, 0, 64, &r3b, 0,
					   IBV_SEND_SIGNALED, 0, q3),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
			sn_sync(fd);
			sn_sync(fd);
		}));
}

TEST(SoftnicRemote, ReceiveTooSmallIsLocalLengthErrorThere)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			n.post_recv(1, 0, 16);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 1);
			SN_CHECK_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.pair(fd);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 100), 0);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			sn_sync(fd);
		}));
}

/* A UD receive's SGEs are checked for the bytes written into them, as on RC
 * (and as hardware and rxe do): a 4096-byte receive posted 128 bytes before
 * the end of its MR takes a 64-byte datagram (40 + 64 bytes land in the MR),
 * and fails with LOC_PROT_ERR only when the datagram reaches past the MR. */
TEST(SoftnicUD, ReceiveBoundsAreTheBytesWritten)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_UD);
			size_t off = n.len - 128;
			n.post_recv(1, off, 4096);
			n.post_recv(2, off, 4096);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 1);
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.byte_len, 40 + 64);
			SN_CHECK_EQ((unsigned char)n.buf[off + 40], 0xab);
			SN_CHECK_EQ((unsigned char)n.buf[off + 40 + 63], 0xab);
			wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 2);
			SN_CHECK_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_UD);
			memset(n.buf, 0xab, 200);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			ibv_ah *ah = n.ah_to(r.lid);
			sn_sync(fd);
			for (uint32_t len : { 64u, 200u }) {
				SN_CHECK_EQ(
					n.post_ud(IBV_WR_SEND, len, 0, len, ah, r.qpn),
					0);
				/* unreliable: the sender never learns of the receiver's error */
				SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			}
			sn_sync(fd);
			ibv_destroy_ah(ah);
		}));
}

TEST(SoftnicRemote, RnrRetriesThenRetryExceededOrSuccess)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 8);
			n.connect2(fd, q2);
			sn_sync(fd);
			sn_sync(fd); /* the first sender gave up */
			usleep(30000);
			n.post_recv(9, 0, 64,
				    q2); /* late, but rnr_retry 7 waits forever */
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 9);
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.qp_num, q2->qp_num);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 8);
			SnInfo r1 = n.exchange(fd), r2 = n.exchange(fd, q2);
			n.connect(r1, nullptr, /*rnr_retry*/ 2, 14, 7, 1);
			n.connect(r2, q2, 7, 14, 7, 1);
			sn_sync(fd);
			uint64_t t0 = sn_test_now_ns();
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 8), 0);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			/* 2 retries of the responder's min_rnr_timer (10 us each): quick */
			SN_CHECK(sn_test_now_ns() - t0 < 1000000000ull);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 2, 0, 8, nullptr, 0,
					   IBV_SEND_SIGNALED, 0, q2),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 2);
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			/* the counters saw the RNR NAKs and retries */
			char *text = nullptr;
			size_t tl = 0;
			FILE *f = open_memstream(&text, &tl);
			char dir[256];
			rbt_softnic_fabric_dir(dir, sizeof(dir));
			SN_CHECK_EQ(rbt_softnic_print_counters(f, dir), 0);
			fclose(f);
			const char *rnr = strstr(text, "rnr_nak_received ");
			SN_CHECK(rnr && atoi(rnr + 17) >= 2);
			const char *ret = strstr(text, "\n  retries ");
			SN_CHECK(ret && atoi(ret + 11) >= 2);
			free(text);
			sn_sync(fd);
		}));
}

TEST(SoftnicRemote, PeerGoneIsTransportRetryExceeded)
{
	SnEnds r = sn_run2(
		[](int fd) {
			SnNode n;
			n.pair(fd);
			sn_sync(fd);
			kill(getpid(), SIGKILL); /* no clean-up at all */
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			SnInfo r = n.exchange(fd);
			/* timeout 10 = 4 ms, 2 retries */
			n.connect(r, nullptr, 7, 10, 2);
			sn_sync(fd);
			char c;
			SN_CHECK(read(fd, &c, 1) == 0); /* the peer is dead */
			usleep(20000);
			uint64_t t0 = sn_test_now_ns();
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 1, 0, 64, &r, 0), 0);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 2, 0, 64), 0);
			ibv_wc wc = n.wait1(3000);
			SN_CHECK_EQ(wc.wr_id, 1);
			SN_CHECK_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
			uint64_t el = sn_test_now_ns() - t0;
			SN_CHECK(
				el >=
				8000000ull); /* (retry_cnt + 1) x 4 ms, at least mostly */
			wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 2);
			SN_CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
		});
	EXPECT_EQ(r.a, 128 + SIGKILL); /* it was killed, as planned */
	EXPECT_EQ(r.b, 0);
}

TEST(SoftnicRemote, MismatchedPsnRcRetriesOutUcResyncs)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode rc, uc;
			rc.make(IBV_QPT_RC);
			uc.make(IBV_QPT_UC);
			rc.post_recv(1, 0, 64);
			uc.post_recv(10, 0, 64);
			uc.post_recv(11, 64, 64);
			SnInfo r1 = rc.exchange(fd), r2 = uc.exchange(fd);
			r1.psn += 5; /* expect a PSN the requester will never send */
			r2.psn += 3;
			rc.connect(r1);
			uc.connect(r2);
			sn_sync(fd);
			/* UC: the first message is lost, the second lands */
			ibv_wc wc = uc.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.wr_id, 10);
			SN_CHECK_EQ(wc.byte_len, 20);
			SN_CHECK(uc.none_within(20));
			sn_sync(fd);
			SN_CHECK(rc.none_within(10)); /* RC: nothing ever arrived */
		},
		[](int fd) {
			SnNode rc, uc;
			rc.make(IBV_QPT_RC);
			uc.make(IBV_QPT_UC);
			SnInfo r1 = rc.exchange(fd), r2 = uc.exchange(fd);
			rc.connect(r1, nullptr, 7, /*timeout*/ 8, /*retry*/ 1);
			uc.connect(r2);
			sn_sync(fd);
			SN_CHECK_EQ(uc.post(IBV_WR_SEND, 1, 0, 10), 0);
			SN_CHECK_EQ(uc.wait1().status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(uc.post(IBV_WR_SEND, 2, 0, 20), 0);
			SN_CHECK_EQ(uc.wait1().status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(rc.post(IBV_WR_SEND, 3, 0, 8), 0);
			ibv_wc wc = rc.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
			SN_CHECK_EQ(rc.state(), IBV_QPS_ERR);
			sn_sync(fd);
		}));
}

TEST(SoftnicRemote, MissingDestQpnOrWrongLidIsRetryExceeded)
{
	SN_EXPECT_ENDS(sn_run2([](int) {},
			       [](int) {
				       SnNode n;
				       n.make(IBV_QPT_RC);
				       SnInfo r = n.info();
				       r.qpn = 0xfffff0; /* nobody */
				       n.connect(r, nullptr, 7, 8, 2);
				       SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 8), 0);
				       ibv_wc wc = n.wait1();
				       SN_CHECK_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
				       /* a LID no port has: the same, on a QP that exists */
				       ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 4);
				       SnInfo self = n.info(q2);
				       self.lid = 77;
				       n.connect(self, q2, 7, 8, 2);
				       n.post_recv(5, 0, 64, q2);
				       SN_CHECK_EQ(n.post(IBV_WR_SEND, 2, 0, 8, nullptr,
							  0, IBV_SEND_SIGNALED, 0, q2),
						   0);
				       wc = n.wait1();
				       SN_CHECK_EQ(wc.wr_id, 2);
				       SN_CHECK_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
			       }));
}

TEST(SoftnicRemote, CqOverflowRaisesCqErrAndErrsTheQp)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 16, false, 64, false, /*cqe*/ 3);
			SN_CHECK_EQ(n.cq->cqe, 3);
			for (int i = 0; i < 8; i++)
				n.post_recv(i, 64 * i, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			/* the CQ's error, and the QP whose completion did not fit */
			ibv_async_event ev = wait_async(n.ctx);
			SN_CHECK_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
			SN_CHECK(ev.element.cq == n.cq);
			ev = wait_async(n.ctx);
			SN_CHECK_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
			SN_CHECK(ev.element.qp == n.qp);
			sn_sync(fd);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			SnInfo r = n.exchange(fd);
			n.connect(r, nullptr, 7, 8, 1);
			sn_sync(fd);
			for (int i = 0; i < 4; i++)
				SN_CHECK_EQ(n.post(IBV_WR_SEND, i, 0, 8, nullptr, 0, 0),
					    0);
			sn_sync(fd);
		}));
}

TEST(SoftnicEvents, CommEstablishedAndSqDrained)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			n.post_recv(1, 0, 64);
			SnInfo r = n.exchange(fd);
			/* RTR only: a responder that has not gone to RTS yet */
			n.to_rtr(r);
			sn_sync(fd);
			ibv_async_event ev = wait_async(n.ctx);
			SN_CHECK_EQ(ev.event_type, IBV_EVENT_COMM_EST);
			SN_CHECK(ev.element.qp == n.qp);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			n.to_rts(nullptr, 7, 14, 7, 1);
			ibv_qp_attr a = {};
			a.qp_state = IBV_QPS_SQD;
			a.en_sqd_async_notify = 1;
			SN_CHECK_EQ(
				ibv_modify_qp(n.qp, &a,
					      IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY),
				0);
			ev = wait_async(n.ctx);
			SN_CHECK_EQ(ev.event_type, IBV_EVENT_SQ_DRAINED);
			sn_sync(fd);
		},
		sn_send_one));
}

TEST(SoftnicSRQ, LimitReachedEvent)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 8, false, 64, true);
			for (int i = 0; i < 6; i++)
				n.post_recv(i, 64 * i, 64);
			ibv_srq_attr sa = {};
			sa.srq_limit = 4;
			SN_CHECK_EQ(ibv_modify_srq(n.srq, &sa, IBV_SRQ_LIMIT), 0);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_async_event ev = wait_async(n.ctx);
			SN_CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
			SN_CHECK(ev.element.srq == n.srq);
			ibv_srq_attr q;
			SN_CHECK_EQ(ibv_query_srq(n.srq, &q), 0);
			SN_CHECK_EQ(q.srq_limit, 0); /* disarmed */
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.pair(fd);
			sn_sync(fd);
			for (int i = 0; i < 3; i++) {
				SN_CHECK_EQ(n.post(IBV_WR_SEND, i, 0, 8), 0);
				SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			}
			sn_sync(fd);
		}));
}

/* The latency model: each completion's NIC timestamp minus the NIC time of
 * its post is the configured latency (plus size over bandwidth), within the
 * jitter, and the completion is not visible before. */
static void latency_case(const char *lat, const char *kib, const char *jit,
			 uint32_t bytes, uint64_t expect_ns, uint64_t jitter_ns)
{
	auto setenvs = [=]() {
		setenv("SOFTNIC_LATENCY_NS", lat, 1);
		setenv("SOFTNIC_NS_PER_KIB", kib, 1);
		setenv("SOFTNIC_JITTER_NS", jit, 1);
	};
	SN_EXPECT_ENDS(sn_run2(
		[=](int fd) {
			setenvs();
			SnNode n;
			n.make(IBV_QPT_RC, 1 << 20, 64, true);
			for (int i = 0; i < 8; i++)
				n.post_recv(i, (size_t)i * bytes, bytes);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			/* the canonical event loop: the event comes when the completion
			 * is visible, so the poll after it finds it */
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			int got = 0;
			while (got < 8) {
				ibv_cq *ecq;
				void *ectx;
				SN_CHECK_EQ(ibv_get_cq_event(n.ch, &ecq, &ectx), 0);
				ibv_ack_cq_events(ecq, 1);
				SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
				ibv_wc wc;
				int k = 0;
				while (ibv_poll_cq(n.cq, 1, &wc) == 1) {
					SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
					SN_CHECK_EQ(wc.byte_len, bytes);
					got++;
					k++;
				}
				(void)k; /* 0 is legal: an event for a CQE polled already */
			}
			sn_sync(fd);
		},
		[=](int fd) {
			setenvs();
			SnNode n;
			n.open();
			n.type = IBV_QPT_RC;
			n.len = 1 << 20;
			SN_CHECK(posix_memalign((void **)&n.buf, 4096, n.len) == 0);
			n.mr = ibv_reg_mr(n.pd, n.buf, n.len, IBV_ACCESS_LOCAL_WRITE);
			ibv_cq_init_attr_ex ca = {};
			ca.cqe = 16;
			ca.wc_flags = IBV_WC_STANDARD_FLAGS |
				      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
			ibv_cq_ex *cx = ibv_create_cq_ex(n.ctx, &ca);
			SN_CHECK(cx);
			n.cq = ibv_cq_ex_to_cq(cx);
			n.qp = n.new_qp(IBV_QPT_RC, 16);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			for (int i = 0; i < 8; i++) {
				ibv_values_ex v = {};
				v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
				SN_CHECK_EQ(ibv_query_rt_values_ex(n.ctx, &v), 0);
				uint64_t t0 = (uint64_t)v.raw_clock.tv_nsec;
				uint64_t h0 = sn_test_now_ns();
				SN_CHECK_EQ(n.post(IBV_WR_SEND, i, 0, bytes), 0);
				/* the post happened between t0 and t1, however long a
				 * loaded host kept us off the CPU around it */
				SN_CHECK_EQ(ibv_query_rt_values_ex(n.ctx, &v), 0);
				uint64_t t1 = (uint64_t)v.raw_clock.tv_nsec;
				ibv_poll_cq_attr pa = {};
				int ret;
				while ((ret = ibv_start_poll(cx, &pa)) == ENOENT)
					;
				uint64_t h1 = sn_test_now_ns();
				SN_CHECK_EQ(ret, 0);
				SN_CHECK_EQ(cx->status, IBV_WC_SUCCESS);
				uint64_t ts = ibv_wc_read_completion_ts(cx);
				ibv_end_poll(cx);
				/* never visible early */
				SN_CHECK(h1 - h0 >= expect_ns);
				/* the NIC phase is the model's: at least it after t0, at
				 * most it and the jitter after t1, give or take the
				 * clock's few ppm */
				int64_t lo = (int64_t)(ts - t0), hi = (int64_t)(ts - t1);
				if (lo < (int64_t)expect_ns ||
				    hi > (int64_t)(expect_ns + jitter_ns + 20000)) {
					fprintf(stderr,
						"nic phase %lld..%lld ns, expected %llu "
						"(+%llu)\n",
						(long long)hi, (long long)lo,
						(unsigned long long)expect_ns,
						(unsigned long long)jitter_ns);
					_exit(1);
				}
			}
			sn_sync(fd);
		}));
}

TEST(SoftnicLatencyModel, Fixed20us)
{
	latency_case("20000", "0", "0", 64, 20000, 0);
}

TEST(SoftnicLatencyModel, Fixed100usPlus1usPerKiB)
{
	latency_case("100000", "1000", "0", 64 * 1024, 100000 + 64000, 0);
}

TEST(SoftnicLatencyModel, JitterStaysWithinItsBound)
{
	latency_case("20000", "0", "30000", 64, 20000, 30000);
}

/* An arm that finds a completion already landed (and not polled) raises the
 * event: a program that arms only after its peer's completion arrived must
 * not wait forever (rdma-core's ibv_get_cq_event in provider mode has no
 * safety net; the channel's fd itself must become readable). */
static void arm_after_landed(const char *lat)
{
	SN_EXPECT_ENDS(sn_run2(
		[=](int fd) {
			if (lat)
				setenv("SOFTNIC_LATENCY_NS", lat, 1);
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 8, true);
			n.post_recv(7, 0, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			sn_sync(fd);  /* the peer's send completed */
			usleep(5000); /* and ours is visible, whatever the model */
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			n.cq_event();
			ibv_wc wc;
			SN_CHECK_EQ(ibv_poll_cq(n.cq, 1, &wc), 1);
			SN_CHECK_EQ(wc.wr_id, 7u);
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			/* consumed: the next arm owes nothing */
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			struct pollfd p = { n.ch->fd, POLLIN, 0 };
			SN_CHECK_EQ(::poll(&p, 1, 50), 0);
			sn_sync(fd);
		},
		[=](int fd) {
			if (lat)
				setenv("SOFTNIC_LATENCY_NS", lat, 1);
			sn_send_one(fd);
			sn_sync(fd);
		}));
}

TEST(SoftnicLatencyModel, ArmAfterTheCompletionLandedStillWakes)
{
	arm_after_landed("20000");
}

TEST(SoftnicChannel, ArmAfterTheCompletionLandedStillWakes)
{
	arm_after_landed(nullptr);
}

/* The latency model holds a completion's event in the producer's process
 * until the completion is visible. A producer that exits right after posting
 * must not take the event with it: the waiter blocked in ibv_get_cq_event
 * still wakes (the exit delivers what it held, at its time, or at the exit
 * when that is more than a second away), finds the completion once it is
 * visible. Bounds: the model's
 * 300 ms is only a lower bound on when the completion shows; the waits allow
 * 20 s. */
TEST(SoftnicLatencyModel, ProducerExitingBeforeTheEventStillWakes)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			setenv("SOFTNIC_LATENCY_NS", "300000000", 1);
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 8, true);
			n.post_recv(1, 0, 64);
			n.post_recv(2, 64, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			sn_sync(fd);
			/* the peer posts and exits: wait for its exit (EOF) */
			char c;
			SN_CHECK(read(fd, &c, 1) == 0);
			uint64_t end = sn_test_now_ns() + 20000000000ull;
			ibv_wc wc;
			int got = 0;
			struct pollfd p = { n.ch->fd, POLLIN, 0 };
			while (!got) {
				SN_CHECK_EQ(::poll(&p, 1, 20000), 1);
				n.cq_event();
				SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
				got = ibv_poll_cq(n.cq, 1, &wc);
				SN_CHECK(got >= 0 && sn_test_now_ns() < end);
			}
			SN_CHECK_EQ(wc.wr_id, 1u);
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		},
		[](int fd) {
			setenv("SOFTNIC_LATENCY_NS", "300000000", 1);
			SnNode n;
			n.pair(fd);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 8), 0);
			exit(0); /* at once: the completion is 300 ms away */
		}));
}

} // namespace

SN_TEST_MAIN()
