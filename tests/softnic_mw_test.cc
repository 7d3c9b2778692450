/*
 * softnic_mw_test - memory windows on softnic between real processes: type 1
 * windows bound with ibv_bind_mw (the rkey's tag moves on every bind), type 2
 * windows bound by a BIND_MW WR to one QP and invalidated by LOCAL_INV or a
 * peer's SEND_WITH_INV (IBV_WC_WITH_INV, invalidated_rkey), and what a window
 * refuses: bytes outside it, rights it lacks, a stale or invalidated key, a
 * type 2 key used through another QP — each as for an MR with a bad rkey
 * (IBV_WC_REM_ACCESS_ERR, both QPs in ERR). Bind and invalidate errors
 * (IBV_WC_MW_BIND_ERR, IBV_WC_LOC_QP_OP_ERR) and ibv_dereg_mr's EBUSY too.
 * Runs on softnic's libibverbs.so.1 (re-exec, see softnic_test_util.h).
 */
#include "tests/interpose_util.h"
#include "tests/softnic_test_util.h"

namespace
{

const unsigned kRemote =
	IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

/* What the window's owner tells the requester. */
struct MwInfo {
	uint32_t key, mr_rkey;
	uint64_t addr;
};

/* An RC QP connected to itself: requester and responder in one process. */
ibv_qp *loop_qp(SnNode &n)
{
	ibv_qp *q = n.new_qp(IBV_QPT_RC, 16);
	n.connect(n.info(q), q);
	return q;
}

int post_bind(ibv_qp *q, ibv_mw *mw, uint32_t key, ibv_mr *mr, uint64_t addr,
	      uint64_t len, unsigned acc, uint64_t id)
{
	ibv_send_wr wr = {}, *bad;
	wr.wr_id = id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = acc;
	return ibv_post_send(q, &wr, &bad);
}

int bind1(ibv_qp *q, ibv_mw *mw, ibv_mr *mr, uint64_t addr, uint64_t len, unsigned acc,
	  uint64_t id)
{
	ibv_mw_bind b = {};
	b.wr_id = id;
	b.send_flags = IBV_SEND_SIGNALED;
	b.bind_info.mr = mr;
	b.bind_info.addr = addr;
	b.bind_info.length = len;
	b.bind_info.mw_access_flags = acc;
	return ibv_bind_mw(q, mw, &b);
}

/* LOCAL_INV, or SEND_WITH_INV of len bytes from the node's buffer. */
int post_inv(SnNode &n, ibv_qp *q, ibv_wr_opcode op, uint32_t key, uint64_t id,
	     uint32_t len = 0)
{
	ibv_sge s = { (uint64_t)(uintptr_t)n.buf, len, n.mr->lkey };
	ibv_send_wr wr = {}, *bad;
	wr.wr_id = id;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.invalidate_rkey = key;
	wr.sg_list = len ? &s : nullptr;
	wr.num_sge = len ? 1 : 0;
	return ibv_post_send(q, &wr, &bad);
}

/* RDMA READ/WRITE or FETCH_ADD (+5) of len bytes at the node's buffer + loff. */
int post_remote(SnNode &n, ibv_qp *q, ibv_wr_opcode op, uint64_t id, size_t loff,
		uint32_t len, uint32_t rkey, uint64_t raddr)
{
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD)
		return n.post_atomic(op, id, loff, raddr, rkey, 5, 0, q);
	return n.post_to(op, id, loff, len, raddr, rkey, IBV_SEND_SIGNALED, 0, q);
}

ibv_wc expect_wc(SnNode &n, uint64_t id, ibv_wc_status st, int opcode = -1)
{
	ibv_wc wc = n.wait1();
	if (wc.wr_id != id || wc.status != st ||
	    (opcode >= 0 && st == IBV_WC_SUCCESS && (int)wc.opcode != opcode)) {
		fprintf(stderr,
			"[pid %d] completion wr_id %llu status %s opcode %d; wanted "
			"wr_id %llu %s opcode %d\n",
			(int)getpid(), (unsigned long long)wc.wr_id,
			ibv_wc_status_str(wc.status), (int)wc.opcode,
			(unsigned long long)id, ibv_wc_status_str(st), opcode);
		_exit(1);
	}
	return wc;
}

/* A second buffer registered for windows only: the MR itself grants no
 * remote access, so whatever reaches it came through a window. */
struct WinMem {
	char *p = nullptr;
	ibv_mr *mr = nullptr;
	void make(SnNode &n, size_t len = 16384,
		  int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)
	{
		SN_CHECK(posix_memalign((void **)&p, 4096, len) == 0);
		memset(p, 0, len);
		mr = ibv_reg_mr(n.pd, p, len, acc);
		SN_CHECK(mr);
	}
	uint64_t at(size_t off) const
	{
		return (uint64_t)(uintptr_t)(p + off);
	}
};

TEST(SoftnicMw, DeviceAdvertisesWindowsAndAllocatesThem)
{
	SnNode n;
	n.open();
	ibv_device_attr da;
	ASSERT_EQ(ibv_query_device(n.ctx, &da), 0);
	EXPECT_TRUE(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	EXPECT_TRUE(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	EXPECT_GT(da.max_mw, 0);
	ibv_device_attr_ex dx;
	ASSERT_EQ(ibv_query_device_ex(n.ctx, nullptr, &dx), 0);
	EXPECT_TRUE(dx.device_cap_flags_ex & IBV_DEVICE_MEM_WINDOW);
	ibv_mw *m1 = ibv_alloc_mw(n.pd, IBV_MW_TYPE_1);
	ibv_mw *m2 = ibv_alloc_mw(n.pd, IBV_MW_TYPE_2);
	ASSERT_TRUE(m1 && m2);
	EXPECT_EQ(m1->type, IBV_MW_TYPE_1);
	EXPECT_EQ(m2->type, IBV_MW_TYPE_2);
	EXPECT_EQ(m1->pd, n.pd);
	EXPECT_NE(m1->rkey >> 8, m2->rkey >> 8);
	errno = 0;
	EXPECT_EQ(ibv_alloc_mw(n.pd, (ibv_mw_type)3), nullptr);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_dealloc_mw(m1), 0);
	EXPECT_EQ(ibv_dealloc_mw(m2), 0);
	n.close();
}

/* Type 1: the window grants exactly its range and rights, across processes;
 * a rebind moves the key's tag and the old key stops working. */
TEST(SoftnicMw, Type1WindowAcrossProcesses)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) { /* owner */
			     SnNode n;
			     n.make(IBV_QPT_RC);
			     ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 16);
			     WinMem w;
			     w.make(n);
			     memset(w.p + 1024 + 512, 'r', 64);
			     n.connect2(fd, q2);
			     ibv_mw *mw = ibv_alloc_mw(n.pd, IBV_MW_TYPE_1);
			     SN_CHECK(mw);
			     uint32_t k0 = mw->rkey;
			     SN_CHECK_EQ(
				     bind1(n.qp, mw, w.mr, w.at(1024), 2048, kRemote, 11),
				     0);
			     SN_CHECK_EQ(mw->rkey, ibv_inc_rkey(k0));
			     ibv_wc wc = expect_wc(n, 11, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			     SN_CHECK_EQ(wc.qp_num, n.qp->qp_num);
			     MwInfo mi = { mw->rkey, w.mr->rkey, w.at(1024) };
			     sn_xwrite(fd, &mi, sizeof(mi));
			     sn_sync(fd); /* requester's accesses done */
			     for (int i = 0; i < 64; i++)
				     SN_CHECK_EQ(w.p[1024 + i], (char)('A' + i % 26));
			     uint64_t v;
			     memcpy(&v, w.p + 1024 + 1024, 8);
			     SN_CHECK_EQ(v, 5); /* the FETCH_ADD landed */
			     /* deregistering the MR under a bound window fails */
			     SN_CHECK_EQ(ibv_dereg_mr(w.mr), EBUSY);
			     /* rebind: read-only, elsewhere; the tag moves again */
			     uint32_t k1 = mw->rkey;
			     memset(w.p + 8192, 'z', 64);
			     SN_CHECK_EQ(bind1(n.qp, mw, w.mr, w.at(8192), 1024,
					       IBV_ACCESS_REMOTE_READ, 12),
					 0);
			     SN_CHECK_EQ(mw->rkey, ibv_inc_rkey(k1));
			     expect_wc(n, 12, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			     mi = { mw->rkey, w.mr->rkey, w.at(8192) };
			     sn_xwrite(fd, &mi, sizeof(mi));
			     sn_sync(fd);
			     /* the refused accesses put our responder QPs in ERR */
			     SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			     SN_CHECK_EQ(n.state(q2), IBV_QPS_ERR);
			     /* unbinding (length 0) lets the MR go */
			     ibv_qp *lq = loop_qp(n);
			     SN_CHECK_EQ(bind1(lq, mw, nullptr, 0, 0, 0, 13), 0);
			     expect_wc(n, 13, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			     SN_CHECK_EQ(ibv_dereg_mr(w.mr), 0);
			     SN_CHECK_EQ(ibv_dealloc_mw(mw), 0);
		},
		[](int fd) { /* requester */
			     SnNode n;
			     n.make(IBV_QPT_RC);
			     ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 16);
			     n.connect2(fd, q2);
			     MwInfo mi;
			     sn_xread(fd, &mi, sizeof(mi));
			     for (int i = 0; i < 64; i++)
				     n.buf[i] = (char)('A' + i % 26);
			     SN_CHECK_EQ(post_remote(n, n.qp, IBV_WR_RDMA_WRITE, 1, 0, 64,
						     mi.key, mi.addr),
					 0);
			     expect_wc(n, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
			     SN_CHECK_EQ(post_remote(n, n.qp, IBV_WR_RDMA_READ, 2, 4096,
						     64, mi.key, mi.addr + 512),
					 0);
			     expect_wc(n, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
			     for (int i = 0; i < 64; i++)
				     SN_CHECK_EQ(n.buf[4096 + i], 'r');
			     SN_CHECK_EQ(post_remote(n, n.qp, IBV_WR_ATOMIC_FETCH_AND_ADD,
						     3, 8192, 8, mi.key, mi.addr + 1024),
					 0);
			     expect_wc(n, 3, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD);
			     sn_sync(fd);
			     MwInfo old = mi;
			     sn_xread(fd, &mi, sizeof(mi));
			     SN_CHECK(mi.key != old.key);
			     SN_CHECK_EQ(mi.key >> 8, old.key >> 8);
			     /* read-only now: reading works, writing is refused */
			     SN_CHECK_EQ(post_remote(n, n.qp, IBV_WR_RDMA_READ, 4, 4096,
						     64, mi.key, mi.addr),
					 0);
			     expect_wc(n, 4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
			     SN_CHECK_EQ(n.buf[4096 + 63], 'z');
			     SN_CHECK_EQ(post_remote(n, n.qp, IBV_WR_RDMA_WRITE, 5, 0, 8,
						     mi.key, mi.addr),
					 0);
			     expect_wc(n, 5, IBV_WC_REM_ACCESS_ERR);
			     SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			     /* the previous key no longer names the window */
			     SN_CHECK_EQ(post_remote(n, q2, IBV_WR_RDMA_READ, 6, 4096, 8,
						     old.key, old.addr),
					 0);
			     expect_wc(n, 6, IBV_WC_REM_ACCESS_ERR);
			     SN_CHECK_EQ(n.state(q2), IBV_QPS_ERR);
			     sn_sync(fd);
		}));
}

/* Beyond the window's bounds, and through the MR's own rkey (the MR has no
 * remote rights): both refused as a bad rkey is. */
TEST(SoftnicMw, OutsideTheWindowIsARemoteAccessError)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 16);
			WinMem w;
			w.make(n);
			n.connect2(fd, q2);
			ibv_mw *mw = ibv_alloc_mw(n.pd, IBV_MW_TYPE_1);
			SN_CHECK(mw);
			SN_CHECK_EQ(bind1(n.qp, mw, w.mr, w.at(4096), 4096, kRemote, 1),
				    0);
			expect_wc(n, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			MwInfo mi = { mw->rkey, w.mr->rkey, w.at(4096) };
			sn_xwrite(fd, &mi, sizeof(mi));
			sn_sync(fd);
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			SN_CHECK_EQ(n.state(q2), IBV_QPS_ERR);
			for (int i = 0; i < 16384; i++)
				SN_CHECK_EQ(w.p[i], 0); /* nothing landed */
		},
		[](int fd) {
			SnNode n;
			ibv_qp *q2 = n.pair2(fd);
			MwInfo mi;
			sn_xread(fd, &mi, sizeof(mi));
			memset(n.buf, 'x', 64);
			/* the last 8 bytes of the window and 8 beyond */
			SN_CHECK_EQ(post_remote(n, n.qp, IBV_WR_RDMA_WRITE, 1, 0, 16,
						mi.key, mi.addr + 4096 - 8),
				    0);
			expect_wc(n, 1, IBV_WC_REM_ACCESS_ERR);
			SN_CHECK_EQ(post_remote(n, q2, IBV_WR_RDMA_WRITE, 2, 0, 16,
						mi.mr_rkey, mi.addr),
				    0);
			expect_wc(n, 2, IBV_WC_REM_ACCESS_ERR);
			sn_sync(fd);
		}));
}

/* Type 2: bound by a WR to one QP; only requests arriving on that QP may use
 * it; a peer's SEND_WITH_INV invalidates it and the receive says so. */
TEST(SoftnicMw, Type2WindowBelongsToItsQpAndSendWithInvalidateEndsIt)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 16);
			WinMem w;
			w.make(n);
			n.connect2(fd, q2);
			ibv_mw *mw = ibv_alloc_mw(n.pd, IBV_MW_TYPE_2);
			SN_CHECK(mw);
			uint32_t key = ibv_inc_rkey(mw->rkey);
			SN_CHECK_EQ(post_bind(n.qp, mw, key, w.mr, w.at(0), 4096,
					      IBV_ACCESS_REMOTE_WRITE, 21),
				    0);
			expect_wc(n, 21, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			n.post_recv(22, 0, 256);
			MwInfo mi = { key, w.mr->rkey, w.at(0) };
			sn_xwrite(fd, &mi, sizeof(mi));
			ibv_wc wc = expect_wc(n, 22, IBV_WC_SUCCESS, IBV_WC_RECV);
			SN_CHECK(wc.wc_flags & IBV_WC_WITH_INV);
			SN_CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM));
			SN_CHECK_EQ(wc.invalidated_rkey, key);
			SN_CHECK_EQ(wc.byte_len, 32);
			SN_CHECK_EQ(n.buf[31], 'i');
			sn_sync(fd);
			SN_CHECK_EQ(memcmp(w.p + 100, "through-qp1", 11), 0);
			SN_CHECK_EQ(w.p[200], 0); /* the other QP's write did not land */
			SN_CHECK_EQ(w.p[300], 0); /* nor the one after invalidation */
			SN_CHECK_EQ(n.state(q2), IBV_QPS_ERR);
			/* invalidated: the MR can go, the window can bind again */
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR);
			ibv_qp *lq = loop_qp(n);
			SN_CHECK_EQ(post_bind(lq, mw, ibv_inc_rkey(key), w.mr, w.at(0),
					      64, IBV_ACCESS_REMOTE_READ, 23),
				    0);
			expect_wc(n, 23, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
		},
		[](int fd) {
			SnNode n;
			ibv_qp *q2 = n.pair2(fd);
			MwInfo mi;
			sn_xread(fd, &mi, sizeof(mi));
			memcpy(n.buf, "through-qp1", 11);
			/* through the other QP of the same peer and PD: refused */
			SN_CHECK_EQ(post_remote(n, q2, IBV_WR_RDMA_WRITE, 1, 0, 11,
						mi.key, mi.addr + 200),
				    0);
			expect_wc(n, 1, IBV_WC_REM_ACCESS_ERR);
			SN_CHECK_EQ(post_remote(n, n.qp, IBV_WR_RDMA_WRITE, 2, 0, 11,
						mi.key, mi.addr + 100),
				    0);
			expect_wc(n, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
			memset(n.buf, 'i', 32);
			SN_CHECK_EQ(
				post_inv(n, n.qp, IBV_WR_SEND_WITH_INV, mi.key, 3, 32),
				0);
			expect_wc(n, 3, IBV_WC_SUCCESS, IBV_WC_SEND);
			SN_CHECK_EQ(post_remote(n, n.qp, IBV_WR_RDMA_WRITE, 4, 0, 11,
						mi.key, mi.addr + 300),
				    0);
			expect_wc(n, 4, IBV_WC_REM_ACCESS_ERR);
			sn_sync(fd);
		}));
}

/* Bind and invalidate failures, on QPs looped back to themselves. */
TEST(SoftnicMw, BindAndInvalidateErrors)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int) {
			SnNode n;
			n.make(IBV_QPT_RC);
			WinMem w, nobind;
			w.make(n);
			nobind.make(n, 4096, IBV_ACCESS_LOCAL_WRITE);
			ibv_mw *m1 = ibv_alloc_mw(n.pd, IBV_MW_TYPE_1);
			ibv_mw *m2 = ibv_alloc_mw(n.pd, IBV_MW_TYPE_2);
			SN_CHECK(m1 && m2);

			/* an MR without IBV_ACCESS_MW_BIND */
			ibv_qp *q = loop_qp(n);
			SN_CHECK_EQ(bind1(q, m1, nobind.mr, nobind.at(0), 64, kRemote, 1),
				    0);
			expect_wc(n, 1, IBV_WC_MW_BIND_ERR);
			SN_CHECK_EQ(n.state(q), IBV_QPS_ERR);

			/* a window larger than its MR */
			q = loop_qp(n);
			SN_CHECK_EQ(bind1(q, m1, w.mr, w.at(16384 - 64), 128, kRemote, 2),
				    0);
			expect_wc(n, 2, IBV_WC_MW_BIND_ERR);

			/* a writable window on an MR without local write */
			WinMem ro;
			ro.make(n, 4096, IBV_ACCESS_MW_BIND);
			q = loop_qp(n);
			SN_CHECK_EQ(bind1(q, m1, ro.mr, ro.at(0), 64,
					  IBV_ACCESS_REMOTE_WRITE, 3),
				    0);
			expect_wc(n, 3, IBV_WC_MW_BIND_ERR);

			/* type 2: a key of another window's index */
			q = loop_qp(n);
			SN_CHECK_EQ(post_bind(q, m2, ibv_inc_rkey(m1->rkey), w.mr,
					      w.at(0), 64, kRemote, 4),
				    0);
			expect_wc(n, 4, IBV_WC_MW_BIND_ERR);

			/* type 2: bound, then bound again without invalidation */
			q = loop_qp(n);
			uint32_t k2 = ibv_inc_rkey(m2->rkey);
			SN_CHECK_EQ(post_bind(q, m2, k2, w.mr, w.at(0), 64, kRemote, 5),
				    0);
			expect_wc(n, 5, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			SN_CHECK_EQ(post_bind(q, m2, ibv_inc_rkey(k2), w.mr, w.at(0), 64,
					      kRemote, 6),
				    0);
			expect_wc(n, 6, IBV_WC_MW_BIND_ERR);
			SN_CHECK_EQ(ibv_dereg_mr(w.mr), EBUSY);

			/* LOCAL_INV: once fine, twice an error; type 1 never */
			q = loop_qp(n);
			SN_CHECK_EQ(post_inv(n, q, IBV_WR_LOCAL_INV, k2, 7), 0);
			expect_wc(n, 7, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
			SN_CHECK_EQ(post_inv(n, q, IBV_WR_LOCAL_INV, k2, 8), 0);
			expect_wc(n, 8, IBV_WC_LOC_QP_OP_ERR);
			q = loop_qp(n);
			SN_CHECK_EQ(bind1(q, m1, w.mr, w.at(0), 64, kRemote, 9), 0);
			expect_wc(n, 9, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			SN_CHECK_EQ(post_inv(n, q, IBV_WR_LOCAL_INV, m1->rkey, 10), 0);
			expect_wc(n, 10, IBV_WC_LOC_QP_OP_ERR);

			/* SEND_WITH_INV of a key that names no bound window: the
			 * receive and the request both fail */
			q = loop_qp(n);
			n.post_recv(11, 0, 64, q);
			SN_CHECK_EQ(post_inv(n, q, IBV_WR_SEND_WITH_INV, k2, 12, 16), 0);
			ibv_wc a = n.wait1(), b = n.wait1();
			if (a.wr_id != 11)
				std::swap(a, b);
			SN_CHECK_EQ(a.wr_id, 11);
			SN_CHECK_EQ(a.status, IBV_WC_REM_INV_REQ_ERR);
			SN_CHECK_EQ(b.wr_id, 12);
			SN_CHECK_EQ(b.status, IBV_WC_REM_INV_REQ_ERR);

			/* no binding on a UD QP */
			ibv_qp *ud = n.new_qp(IBV_QPT_UD, 4);
			ibv_qp_attr at = {};
			at.qp_state = IBV_QPS_RTR;
			SN_CHECK_EQ(ibv_modify_qp(ud, &at, IBV_QP_STATE), 0);
			at.qp_state = IBV_QPS_RTS;
			at.sq_psn = 1;
			SN_CHECK_EQ(ibv_modify_qp(ud, &at, IBV_QP_STATE | IBV_QP_SQ_PSN),
				    0);
			SN_CHECK_EQ(bind1(ud, m1, w.mr, w.at(0), 64, kRemote, 13),
				    EINVAL);

			/* m1 is still bound: unbinding frees the MR */
			SN_CHECK_EQ(ibv_dereg_mr(w.mr), EBUSY);
			q = loop_qp(n);
			SN_CHECK_EQ(bind1(q, m1, nullptr, 0, 0, 0, 14), 0);
			expect_wc(n, 14, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			SN_CHECK_EQ(ibv_dereg_mr(w.mr), 0);
			SN_CHECK_EQ(ibv_dealloc_mw(m1), 0);
			SN_CHECK_EQ(ibv_dealloc_mw(m2), 0);
		},
		[](int) {}));
}

/* The ibv_wr_* API: wr_bind_mw, a remote read through the window on a
 * looped-back QP, wr_local_inv, and the read refused afterwards. */
TEST(SoftnicMw, WrApiBindsAndInvalidates)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int) {
			SnNode n;
			n.make(IBV_QPT_RC);
			WinMem w;
			w.make(n);
			memcpy(w.p + 64, "window!", 8);
			ibv_qp_ex *qx;
			ibv_qp *q = n.new_qpx(IBV_QP_EX_WITH_BIND_MW |
						      IBV_QP_EX_WITH_LOCAL_INV |
						      IBV_QP_EX_WITH_RDMA_READ,
					      IBV_ACCESS_REMOTE_READ, &qx);
			n.connect(n.info(q), q);
			ibv_mw *mw = ibv_alloc_mw(n.pd, IBV_MW_TYPE_2);
			SN_CHECK(mw);
			uint32_t key = ibv_inc_rkey(mw->rkey);
			ibv_mw_bind_info bi = {};
			bi.mr = w.mr;
			bi.addr = w.at(0);
			bi.length = 4096;
			bi.mw_access_flags = IBV_ACCESS_REMOTE_READ;
			ibv_wr_start(qx);
			qx->wr_id = 31;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_bind_mw(qx, mw, key, &bi);
			qx->wr_id = 32;
			ibv_wr_rdma_read(qx, key, w.at(64));
			ibv_wr_set_sge(qx, n.mr->lkey, (uint64_t)(uintptr_t)n.buf, 8);
			qx->wr_id = 33;
			ibv_wr_local_inv(qx, key);
			SN_CHECK_EQ(ibv_wr_complete(qx), 0);
			expect_wc(n, 31, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
			expect_wc(n, 32, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
			SN_CHECK(!strcmp(n.buf, "window!"));
			expect_wc(n, 33, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
			ibv_wr_start(qx);
			qx->wr_id = 34;
			ibv_wr_rdma_read(qx, key, w.at(64));
			ibv_wr_set_sge(qx, n.mr->lkey, (uint64_t)(uintptr_t)n.buf, 8);
			SN_CHECK_EQ(ibv_wr_complete(qx), 0);
			expect_wc(n, 34, IBV_WC_REM_ACCESS_ERR);
		},
		[](int) {}));
}

/* mw_prog under `rbtrace record --softnic`: the trace holds both windows'
 * allocations and deallocations, every BIND_MW / LOCAL_INV / SEND_WITH_INV WR
 * with its key, and the completions that report them. */
TEST(SoftnicMwRecord, TraceHoldsWindowEventsAndWrs)
{
	using namespace rbt_test;
	std::string d = tmpdir("mwrec");
	ASSERT_FALSE(d.empty());
	std::string asan = asan_runtime_for(runfile("interpose/librbtrace.so"));
	run_result r = run((asan.empty() ? "" : asan_env() + "LD_PRELOAD=" + asan + " ") +
				   "RBTRACE_LIB=" + runfile("interpose/librbtrace.so") +
				   " RBTRACE_SOFTNIC_DIR=" + runfile("softnic") + " " +
				   runfile("cli/rbtrace") + " record --softnic -o " + d +
				   "/mw.rbt -- " + runfile("tests/mw_prog"),
			   60);
	ASSERT_EQ(r.status, 0) << r.out << r.err;
	uint32_t k1 = (uint32_t)field(r.out, "type1_key");
	uint32_t k2 = (uint32_t)field(r.out, "type2_key");
	uint32_t k3 = (uint32_t)field(r.out, "type2_key2");

	struct rbt_reader *rd = nullptr;
	ASSERT_EQ(rbt_reader_open((d + "/mw.rbt").c_str(), &rd), 0);
	const struct rbt_event *ev;
	int err;
	std::map<uint64_t, uint64_t> alloc_type; /* mw handle -> type */
	int deallocs = 0, inv_recvs = 0;
	std::map<uint64_t, rbt_send_wr> wrs; /* wr_id -> WR */
	std::map<uint64_t, uint32_t> wc_op;  /* wr_id -> completion opcode */
	while ((err = rbt_reader_next(rd, &ev)) > 0) {
		switch (ev->type) {
		case RBT_EV_MW_ALLOC:
			EXPECT_EQ(ev->u.mw_alloc.ret, 0);
			EXPECT_NE(ev->u.mw_alloc.rkey, 0u);
			alloc_type[ev->u.mw_alloc.mw] = ev->u.mw_alloc.mw_type;
			break;
		case RBT_EV_MW_DEALLOC:
			EXPECT_EQ(ev->u.mw_dealloc.ret, 0);
			EXPECT_TRUE(alloc_type.count(ev->u.mw_dealloc.mw));
			deallocs++;
			break;
		case RBT_EV_POST_SEND:
			EXPECT_EQ(ev->u.post_send.ret, 0);
			for (uint32_t i = 0; i < ev->u.post_send.n_wrs; i++)
				wrs[ev->u.post_send.wrs[i].wr_id] =
					ev->u.post_send.wrs[i];
			break;
		case RBT_EV_POLL_CQ:
			for (uint32_t i = 0; i < ev->u.poll_cq.n_wcs; i++) {
				const struct rbt_wc *w = &ev->u.poll_cq.wcs[i];
				EXPECT_EQ(w->status, 0u) << w->wr_id;
				wc_op[w->wr_id] = (uint32_t)w->opcode;
				/* the rkey a WITH_INV receive invalidated, as is */
				if (w->wr_id == 201 && (w->wc_flags & IBV_WC_WITH_INV) &&
				    w->imm_data == k2)
					inv_recvs++;
			}
			break;
		default:
			break;
		}
	}
	EXPECT_EQ(err, 0);
	rbt_reader_close(rd);

	std::set<uint64_t> types;
	for (auto &kv : alloc_type)
		types.insert(kv.second);
	EXPECT_EQ(alloc_type.size(), 2u);
	EXPECT_EQ(types, (std::set<uint64_t>{ IBV_MW_TYPE_1, IBV_MW_TYPE_2 }));
	EXPECT_EQ(deallocs, 2);
	/* ibv_bind_mw (type 1): a BIND_MW WR with the window's new key */
	ASSERT_TRUE(wrs.count(101));
	EXPECT_EQ(wrs[101].opcode, (uint64_t)IBV_WR_BIND_MW);
	EXPECT_EQ(wrs[101].rkey, k1);
	EXPECT_EQ(wrs[101].compare_add, 4096u); /* the bound range and rights */
	EXPECT_NE(wrs[101].remote_addr, 0u);
	EXPECT_EQ(wrs[101].swap,
		  (uint64_t)(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
	ASSERT_TRUE(wrs.count(102) && wrs.count(103));
	EXPECT_EQ(wrs[102].rkey, k1);
	EXPECT_EQ(wrs[103].opcode, (uint64_t)IBV_WR_RDMA_READ);
	/* the BIND_MW WR (type 2): key, range and rights as posted */
	ASSERT_TRUE(wrs.count(104));
	EXPECT_EQ(wrs[104].opcode, (uint64_t)IBV_WR_BIND_MW);
	EXPECT_EQ(wrs[104].rkey, k2);
	EXPECT_EQ(wrs[104].compare_add, 2048u);
	EXPECT_EQ(wrs[104].swap, (uint64_t)IBV_ACCESS_REMOTE_WRITE);
	ASSERT_TRUE(wrs.count(105));
	EXPECT_EQ(wrs[105].opcode, (uint64_t)IBV_WR_SEND_WITH_INV);
	EXPECT_EQ(wrs[105].imm_data, k2);
	/* ibv_wr_bind_mw and ibv_wr_local_inv */
	ASSERT_TRUE(wrs.count(106) && wrs.count(107));
	EXPECT_EQ(wrs[106].opcode, (uint64_t)IBV_WR_BIND_MW);
	EXPECT_EQ(wrs[106].rkey, k3);
	EXPECT_EQ(wrs[106].compare_add, 512u);
	EXPECT_EQ(wrs[107].opcode, (uint64_t)IBV_WR_LOCAL_INV);
	EXPECT_EQ(wrs[107].imm_data, k3);
	/* completions */
	EXPECT_EQ(wc_op[101], (uint32_t)IBV_WC_BIND_MW);
	EXPECT_EQ(wc_op[104], (uint32_t)IBV_WC_BIND_MW);
	EXPECT_EQ(wc_op[106], (uint32_t)IBV_WC_BIND_MW);
	EXPECT_EQ(wc_op[107], (uint32_t)IBV_WC_LOCAL_INV);
	EXPECT_EQ(wc_op[105], (uint32_t)IBV_WC_SEND);
	EXPECT_EQ(inv_recvs, 1);

	/* The replayer rebuilds the windows (replay_life_test has the details):
	 * every completion comes back as recorded. */
	r = run("RBTRACE_SOFTNIC_DIR=" + runfile("softnic") + " " +
			runfile("cli/rbtrace") + " replay --softnic " + d + "/mw.rbt",
		60);
	EXPECT_EQ(r.status, 0) << r.out << r.err;
	EXPECT_NE(r.out.find("completions matched: 9 of 9"), std::string::npos) << r.out;
}

} // namespace

SN_TEST_MAIN()
