/*
 * softnic_verbs_test - every opcode and QP type of softnic between two real
 * processes: the bytes that arrive in the peer's own registered memory and
 * the completions both ends see (opcode, byte_len, imm, status, qp numbers),
 * plus inline data, WR chains, selective signaling, SRQ, completion
 * channels, the ibv_wr_* API and extended CQs.
 * Runs on softnic's libibverbs.so.1 (re-exec, see softnic_test_util.h).
 */
#include <pthread.h>

#include <atomic>

#include "tests/softnic_test_util.h"

namespace
{

TEST(SoftnicDevice, AttributesProgramsCheck)
{
	SnNode n;
	n.open();
	ibv_device_attr da;
	ASSERT_EQ(ibv_query_device(n.ctx, &da), 0);
	EXPECT_GE(da.max_qp_rd_atom, 16);
	EXPECT_NE(da.atomic_cap, IBV_ATOMIC_NONE);
	EXPECT_NE(da.vendor_id, 0x02c9u); /* not Mellanox, not anyone */
	EXPECT_GT(da.max_qp_wr, 1000);
	EXPECT_TRUE(da.device_cap_flags & IBV_DEVICE_XRC);
	EXPECT_TRUE(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW); /* softnic_mw_test */
	ibv_port_attr pa;
	ASSERT_EQ(ibv_query_port(n.ctx, 1, &pa), 0);
	EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
	EXPECT_EQ(pa.phys_state, 5);
	EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);
	EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
	EXPECT_NE(pa.lid, 0);
	union ibv_gid g;
	ASSERT_EQ(ibv_query_gid(n.ctx, 1, 0, &g), 0);
	EXPECT_NE(g.global.interface_id, 0u);
	EXPECT_NE(ibv_query_gid(n.ctx, 1, 99, &g), 0);
	ibv_device_attr_ex dx;
	ASSERT_EQ(ibv_query_device_ex(n.ctx, nullptr, &dx), 0);
	EXPECT_NE(dx.completion_timestamp_mask, 0u);
	EXPECT_NE(dx.hca_core_clock, 0u);
	EXPECT_NE(n.ctx->async_fd, -1);
	/* a real blocking descriptor: nothing to read yet */
	struct pollfd p = { n.ctx->async_fd, POLLIN, 0 };
	EXPECT_EQ(::poll(&p, 1, 0), 0);
	n.close();
}

/* What rdma-core's pyverbs suite expects of a device without a feature:
 * EOPNOTSUPP for what it does not do, EINVAL for what is wrong, and
 * IBV_QP_INIT_ATTR_CREATE_FLAGS with no flag is no feature at all. */
TEST(SoftnicDevice, UnsupportedIsEopnotsuppWrongIsEinval)
{
	SnNode n;
	n.open();
	ibv_cq *cq = ibv_create_cq(n.ctx, 8, nullptr, nullptr, 0);
	ASSERT_TRUE(cq);
	ibv_qp_init_attr_ex ia = {};
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.pd = n.pd;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	ibv_qp *q = ibv_create_qp_ex(n.ctx, &ia);
	ASSERT_TRUE(q) << strerror(errno);
	ia.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	EXPECT_FALSE(ibv_create_qp_ex(n.ctx, &ia));
	EXPECT_EQ(errno, EOPNOTSUPP);
	ia.create_flags = 0;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE;
	errno = 0;
	EXPECT_FALSE(ibv_create_qp_ex(n.ctx, &ia));
	EXPECT_EQ(errno, EOPNOTSUPP);
	ia.comp_mask = IBV_QP_INIT_ATTR_PD;
	ia.qp_type = IBV_QPT_RAW_PACKET;
	errno = 0;
	EXPECT_FALSE(ibv_create_qp_ex(n.ctx, &ia));
	EXPECT_EQ(errno, EOPNOTSUPP);
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_sge = 1000;
	errno = 0;
	EXPECT_FALSE(ibv_create_qp_ex(n.ctx, &ia));
	EXPECT_EQ(errno, EINVAL);
	/* ATOMIC_WRITE through ibv_post_send: a real opcode softnic lacks */
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	ASSERT_EQ(ibv_modify_qp(q, &a,
				IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					IBV_QP_ACCESS_FLAGS),
		  0);
	ibv_port_attr pa;
	ASSERT_EQ(ibv_query_port(n.ctx, 1, &pa), 0);
	SnInfo self = {};
	self.qpn = q->qp_num;
	self.lid = pa.lid;
	self.psn = 0x1234;
	n.qp = q;
	n.type = IBV_QPT_RC;
	n.connect(self, q); /* to itself: RTS is all this needs */
	ibv_send_wr wr = {}, *bad = nullptr;
	wr.opcode = IBV_WR_ATOMIC_WRITE;
	EXPECT_EQ(ibv_post_send(q, &wr, &bad), EOPNOTSUPP);
	EXPECT_EQ(bad, &wr);
	/* a completion vector the device does not have */
	ibv_cq_init_attr_ex ca = {};
	ca.cqe = 8;
	ca.comp_vector = (uint32_t)n.ctx->num_comp_vectors;
	errno = 0;
	EXPECT_FALSE(ibv_create_cq_ex(n.ctx, &ca));
	EXPECT_EQ(errno, EINVAL);
	/* a GID table buffer too small for the table */
	ibv_gid_entry ent[8];
	EXPECT_EQ(ibv_query_gid_table(n.ctx, ent, 0, 0), -EINVAL);
	EXPECT_GE(ibv_query_gid_table(n.ctx, ent, 8, 0), 1);
	ASSERT_EQ(ibv_destroy_qp(q), 0);
	n.qp = nullptr;
	ASSERT_EQ(ibv_destroy_cq(cq), 0);
	n.close();
}

TEST(SoftnicRC, SendAndSendImmLandInPostedReceives)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			n.post_recv(1, 0, 100);
			n.post_recv(2, 100, 4096);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.wr_id, 1);
			SN_CHECK_EQ(wc.opcode, IBV_WC_RECV);
			SN_CHECK_EQ(wc.byte_len, 37);
			SN_CHECK_EQ(wc.qp_num, n.qp->qp_num);
			SN_CHECK_EQ(wc.src_qp, r.qpn);
			SN_CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM));
			for (int i = 0; i < 37; i++)
				SN_CHECK_EQ((unsigned char)n.buf[i],
					    (unsigned char)(i * 7 + 1));
			wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 2);
			SN_CHECK_EQ(wc.byte_len, 4000);
			SN_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
			SN_CHECK_EQ(ntohl(wc.imm_data), 0xabcdef);
			SN_CHECK_EQ((unsigned char)n.buf[100 + 3999], 0x5a);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			for (int i = 0; i < 37; i++)
				n.buf[i] = (char)(i * 7 + 1);
			memset(n.buf + 1000, 0x5a, 4000);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 11, 0, 37), 0);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.wr_id, 11);
			SN_CHECK_EQ(wc.opcode, IBV_WC_SEND);
			SN_CHECK_EQ(wc.qp_num, n.qp->qp_num);
			SN_CHECK_EQ(n.post(IBV_WR_SEND_WITH_IMM, 12, 1000, 4000, nullptr,
					   0, IBV_SEND_SIGNALED, 0xabcdef),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.wr_id, 12);
			sn_sync(fd);
		}));
}

TEST(SoftnicRC, WriteReadAndAtomicsActOnPeerMemory)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			uint64_t *ctr = (uint64_t *)(n.buf + 8192);
			*ctr = 100;
			memset(n.buf + 16384, 0x77, 512);
			n.post_recv(5, 4096, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			/* the peer writes; we see bytes appear without any CQE */
			sn_sync(fd);
			for (int i = 0; i < 3000; i++)
				SN_CHECK_EQ((unsigned char)n.buf[i],
					    (unsigned char)(i % 251));
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
			SN_CHECK_EQ(wc.wr_id, 5);
			SN_CHECK_EQ(wc.byte_len, 16);
			SN_CHECK_EQ(ntohl(wc.imm_data), 42);
			SN_CHECK_EQ((unsigned char)n.buf[6000 + 15], 0x33);
			sn_sync(fd);
			/* atomics done */
			SN_CHECK_EQ(*ctr, 1000 - 105);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			for (int i = 0; i < 3000; i++)
				n.buf[i] = (char)(i % 251);
			memset(n.buf + 3000, 0x33, 16);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 1, 0, 3000, &r, 0), 0);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE_WITH_IMM, 2, 3000, 16, &r,
					   6000, IBV_SEND_SIGNALED, 42),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			sn_sync(fd);
			/* READ 512 bytes of 0x77 from the peer */
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_READ, 3, 20000, 512, &r, 16384),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
			SN_CHECK_EQ(wc.byte_len, 512);
			for (int i = 0; i < 512; i++)
				SN_CHECK_EQ((unsigned char)n.buf[20000 + i], 0x77);
			/* FETCH_ADD +5: returns 100 */
			SN_CHECK_EQ(n.post_atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 4, 30000,
						  r.addr + 8192, r.rkey, 5),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.opcode, IBV_WC_FETCH_ADD);
			SN_CHECK_EQ(*(uint64_t *)(n.buf + 30000), 100);
			/* CMP_SWP: 105 -> 1000 succeeds, returns 105 */
			SN_CHECK_EQ(n.post_atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 5, 30000,
						  r.addr + 8192, r.rkey, 105, 1000),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.opcode, IBV_WC_COMP_SWAP);
			SN_CHECK_EQ(*(uint64_t *)(n.buf + 30000), 105);
			/* CMP_SWP with a wrong compare: no swap, returns 1000 */
			SN_CHECK_EQ(n.post_atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 6, 30000,
						  r.addr + 8192, r.rkey, 1, 7),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(*(uint64_t *)(n.buf + 30000), 1000);
			/* and down by 105: the peer checks 895 */
			SN_CHECK_EQ(n.post_atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 7, 30000,
						  r.addr + 8192, r.rkey, (uint64_t)-105),
				    0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			sn_sync(fd);
			sn_sync(fd);
		}));
}

TEST(SoftnicRC, InlineChainsAndSelectiveSignaling)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			for (int i = 0; i < 3; i++)
				n.post_recv(100 + i, 1024 * i, 1024);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			for (int i = 0; i < 3; i++) {
				ibv_wc wc = n.wait1();
				SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
				SN_CHECK_EQ(wc.wr_id, 100 + i); /* in order */
				SN_CHECK_EQ(wc.byte_len, 10 + i);
				SN_CHECK_EQ(n.buf[1024 * i], 'a' + i);
			}
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 64, false, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			ibv_qp_attr qa;
			ibv_qp_init_attr qi;
			SN_CHECK_EQ(ibv_query_qp(n.qp, &qa, IBV_QP_CAP, &qi), 0);
			SN_CHECK_EQ(qa.cap.max_inline_data, 64);
			sn_sync(fd);
			/* inline from a stack buffer that is not registered at all */
			char msg[3][16];
			ibv_sge s[3];
			ibv_send_wr wr[3] = {}, *bad;
			for (int i = 0; i < 3; i++) {
				memset(msg[i], 'a' + i, sizeof(msg[i]));
				s[i] = { (uint64_t)(uintptr_t)msg[i], (uint32_t)(10 + i),
					 0 };
				wr[i].wr_id = 200 + i;
				wr[i].sg_list = &s[i];
				wr[i].num_sge = 1;
				wr[i].opcode = IBV_WR_SEND;
				wr[i].send_flags = IBV_SEND_INLINE |
						   (i == 2 ? IBV_SEND_SIGNALED : 0);
				wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
			}
			SN_CHECK_EQ(ibv_post_send(n.qp, wr, &bad), 0);
			memset(msg, 0, sizeof(msg)); /* inline: ours again right away */
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 202); /* only the signaled one */
			SN_CHECK(n.none_within(20));
			/* too much inline: EINVAL and bad_wr names it */
			char big[200] = {};
			ibv_sge bs = { (uint64_t)(uintptr_t)big, sizeof(big), 0 };
			ibv_send_wr bw = {};
			bw.sg_list = &bs;
			bw.num_sge = 1;
			bw.opcode = IBV_WR_SEND;
			bw.send_flags = IBV_SEND_INLINE;
			SN_CHECK_EQ(ibv_post_send(n.qp, &bw, &bad), EINVAL);
			SN_CHECK(bad == &bw);
			sn_sync(fd);
		}));
}

TEST(SoftnicUC, SendAndWrite)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_UC);
			n.post_recv(1, 0, 256);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.opcode, IBV_WC_RECV);
			SN_CHECK_EQ(wc.byte_len, 200);
			SN_CHECK_EQ((unsigned char)n.buf[199], 0x11);
			sn_sync(fd);
			SN_CHECK_EQ((unsigned char)n.buf[5000 + 99], 0x22);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_UC);
			memset(n.buf, 0x11, 200);
			memset(n.buf + 1000, 0x22, 100);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 200), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 2, 1000, 100, &r, 5000), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			/* READ is not a UC operation */
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_READ, 3, 0, 8, &r, 0), EINVAL);
			sn_sync(fd);
		}));
}

TEST(SoftnicUD, SendWithGrhSpaceAndAddressHandle)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_UD);
			n.post_recv(9, 0, 40 + 1000);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.opcode, IBV_WC_RECV);
			SN_CHECK_EQ(wc.byte_len, 40 + 500);
			SN_CHECK_EQ(wc.src_qp, r.qpn);
			SN_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
			SN_CHECK_EQ(ntohl(wc.imm_data), 7);
			SN_CHECK_EQ((unsigned char)n.buf[40], 0xcd);
			SN_CHECK_EQ((unsigned char)n.buf[40 + 499], 0xcd);
			SN_CHECK_EQ((unsigned char)n.buf[40 + 500], 0);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_UD);
			memset(n.buf, 0xcd, 500);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			ibv_ah *ah = n.ah_to(r.lid);
			sn_sync(fd);
			SN_CHECK_EQ(n.post_ud(IBV_WR_SEND_WITH_IMM, 1, 0, 500, ah, r.qpn,
					      0x11111111, 7),
				    0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			/* a wrong qkey is dropped silently: still a good completion */
			SN_CHECK_EQ(n.post_ud(IBV_WR_SEND_WITH_IMM, 1, 0, 500, ah, r.qpn,
					      0x1, 7),
				    0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
			ibv_destroy_ah(ah);
		}));
}

/* Multicast: a datagram to a group (QPN 0xffffff, the MGID in the GRH)
 * reaches every UD QP attached to it in the fabric (two in the peer's
 * process), not the sender's own although attached, and a detached QP no
 * longer; attach checks as the kernel does (UD, multicast GID and LID). */
TEST(SoftnicUD, MulticastReachesEveryAttachedQp)
{
	static union ibv_gid mgid;
	memset(&mgid, 0, sizeof(mgid));
	mgid.raw[0] = 0xff;
	mgid.raw[1] = 0x12;
	mgid.raw[15] = 0x42;
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_UD);
			ibv_qp *q2 = n.new_qp(IBV_QPT_UD, 64);
			union ibv_gid uni = {};
			uni.raw[0] = 0xfe;
			SN_CHECK_EQ(ibv_attach_mcast(n.qp, &uni, 0xc001), EINVAL);
			SN_CHECK_EQ(ibv_attach_mcast(n.qp, &mgid, 0x0001), EINVAL);
			SN_CHECK_EQ(ibv_attach_mcast(n.qp, &mgid, 0xc001), 0);
			SN_CHECK_EQ(ibv_attach_mcast(q2, &mgid, 0xc001), 0);
			SN_CHECK_EQ(ibv_detach_mcast(q2, &uni, 0xc001), EINVAL);
			for (int i = 0; i < 4; i++) {
				n.post_recv((uint64_t)i, (size_t)i * 256, 256);
				n.post_recv((uint64_t)(10 + i), 4096 + (size_t)i * 256,
					    256, q2);
			}
			SnInfo r = n.exchange(fd);
			n.connect(r);
			n.connect(r, q2);
			sn_sync(fd); /* the first datagram */
			ibv_wc a = n.wait1(), b = n.wait1();
			SN_CHECK_EQ(a.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(b.status, IBV_WC_SUCCESS);
			SN_CHECK(a.qp_num != b.qp_num);
			SN_CHECK(a.qp_num == n.qp->qp_num || a.qp_num == q2->qp_num);
			SN_CHECK(b.qp_num == n.qp->qp_num || b.qp_num == q2->qp_num);
			SN_CHECK_EQ(a.byte_len, 40 + 32);
			SN_CHECK(a.wc_flags & IBV_WC_GRH);
			SN_CHECK_EQ(a.src_qp, r.qpn);
			/* where receive wr_id landed: QP 1's at 256 * id, QP 2's from 4096 */
			size_t at = a.wr_id >= 10 ? 4096 + (a.wr_id - 10) * 256
						  : a.wr_id * 256;
			SN_CHECK(!memcmp(n.buf + at + 24, mgid.raw,
					 16)); /* the GRH's dgid */
			SN_CHECK_EQ((unsigned char)n.buf[at + 40], 0x5c);
			SN_CHECK_EQ(ibv_detach_mcast(q2, &mgid, 0xc001), 0);
			sn_sync(fd); /* the second */
			ibv_wc c = n.wait1();
			SN_CHECK_EQ(c.qp_num, n.qp->qp_num);
			SN_CHECK(n.none_within(100));
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_UD);
			SN_CHECK_EQ(ibv_attach_mcast(n.qp, &mgid, 0xc001), 0);
			n.post_recv(1, 0, 256);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			ibv_ah_attr aa = {};
			aa.is_global = 1;
			aa.grh.dgid = mgid;
			aa.grh.hop_limit = 1;
			aa.dlid = 0xc001;
			aa.port_num = 1;
			ibv_ah *ah = ibv_create_ah(n.pd, &aa);
			SN_CHECK(ah);
			memset(n.buf + 1024, 0x5c, 32);
			for (int round = 0; round < 2; round++) {
				sn_sync(fd);
				SN_CHECK_EQ(
					n.post_ud(IBV_WR_SEND, 5, 1024, 32, ah, 0xffffff),
					0);
				ibv_wc wc = n.wait1();
				SN_CHECK_EQ(wc.wr_id,
					    5); /* the send, not a receive of our own */
				SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			}
			SN_CHECK(n.none_within(50));
			sn_sync(fd);
		}));
}

TEST(SoftnicSRQ, TwoQpsShareOneSrq)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 16, false, 64, true);
			ibv_qp *q2 = n.new_qp(IBV_QPT_RC, 16);
			for (int i = 0; i < 4; i++)
				n.post_recv(50 + i, 256 * i, 256);
			n.connect2(fd, q2);
			sn_sync(fd);
			uint32_t seen = 0;
			for (int i = 0; i < 2; i++) {
				ibv_wc wc = n.wait1();
				SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
				SN_CHECK(wc.qp_num == n.qp->qp_num ||
					 wc.qp_num == q2->qp_num);
				seen |= wc.qp_num == n.qp->qp_num ? 1 : 2;
				SN_CHECK_EQ(wc.byte_len, 16);
			}
			SN_CHECK_EQ(seen, 3);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			ibv_qp *q2 = n.pair2(fd);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 16), 0);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 2, 0, 16, nullptr, 0,
					   IBV_SEND_SIGNALED, 0, q2),
				    0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
		}));
}

TEST(SoftnicChannel, BlockingCompletionEvent)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 64, true);
			n.post_recv(1, 0, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			sn_sync(fd);
			/* the fd becomes readable only when the peer's SEND lands */
			n.cq_event();
			ibv_wc wc;
			SN_CHECK_EQ(ibv_poll_cq(n.cq, 1, &wc), 1);
			SN_CHECK_EQ(wc.byte_len, 8);
			struct pollfd p = { n.ch->fd, POLLIN, 0 };
			/* not re-armed: no second event */
			SN_CHECK_EQ(::poll(&p, 1, 20), 0);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.pair(fd);
			sn_sync(fd);
			usleep(20000); /* the peer is blocked in poll() by now */
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 8), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
		}));
}

/* CQ moderation (ibv_modify_cq): with count 4 and period 4 ms, one
 * completion's event waits for the period; four in a burst raise one event
 * (the period's timer then finds the CQ disarmed and stays quiet); count 0
 * turns it off. Bad attributes: EINVAL. */
TEST(SoftnicChannel, CqModerationHoldsTheEvent)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 64, true);
			ibv_modify_cq_attr ma = {};
			SN_CHECK_EQ(ibv_modify_cq(n.cq, &ma), EINVAL);
			ma.attr_mask = IBV_CQ_ATTR_MODERATE;
			ma.moderate.cq_count = 4;
			ma.moderate.cq_period = 5000; /* beyond max_cq_period */
			SN_CHECK_EQ(ibv_modify_cq(n.cq, &ma), EINVAL);
			ibv_device_attr_ex dx = {};
			SN_CHECK_EQ(ibv_query_device_ex(n.ctx, nullptr, &dx), 0);
			SN_CHECK_EQ(dx.cq_mod_caps.max_cq_period, 4095);
			ma.moderate.cq_period = 4000;
			SN_CHECK_EQ(ibv_modify_cq(n.cq, &ma), 0);
			for (int i = 0; i < 16; i++)
				n.post_recv((uint64_t)i, 0, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			struct pollfd p = { n.ch->fd, POLLIN, 0 };
			ibv_cq *ecq;
			void *ectx;
			ibv_wc wc;
			auto event = [&] {
				SN_CHECK_EQ(::poll(&p, 1, 5000), 1);
				SN_CHECK_EQ(ibv_get_cq_event(n.ch, &ecq, &ectx), 0);
				SN_CHECK(ecq == n.cq);
				ibv_ack_cq_events(ecq, 1);
			};
			/* one completion: the event comes with the period */
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			sn_sync(fd);
			event();
			/* the peer's clock (the same host's) just before it posted:
			 * a held event comes 4 ms after the completion, later still
			 * after the post; a load delay only adds to it */
			uint64_t t1 = sn_test_now_ns(), t0;
			sn_xread(fd, &t0, sizeof(t0));
			SN_CHECK(t1 - t0 >= 3900000);
			SN_CHECK_EQ(ibv_poll_cq(n.cq, 1, &wc), 1);
			/* four: one event, and none later */
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			sn_sync(fd);
			event();
			for (int got = 0; got < 4;)
				got += ibv_poll_cq(n.cq, 1, &wc);
			SN_CHECK_EQ(::poll(&p, 1, 30), 0);
			/* off: as before */
			ma.moderate.cq_count = 0;
			ma.moderate.cq_period = 0;
			SN_CHECK_EQ(ibv_modify_cq(n.cq, &ma), 0);
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			sn_sync(fd);
			event();
			SN_CHECK_EQ(ibv_poll_cq(n.cq, 1, &wc), 1);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.pair(fd);
			sn_sync(fd);
			uint64_t t0 = sn_test_now_ns();
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 8), 0);
			sn_xwrite(fd, &t0, sizeof(t0));
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
			for (int i = 0; i < 4; i++)
				SN_CHECK_EQ(n.post(IBV_WR_SEND, 2, 0, 8), 0);
			for (int i = 0; i < 4; i++)
				SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 3, 0, 8), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
		}));
}

/* A CQ destroyed with its event unread leaves nothing in the channel:
 * rdma-core's ibv_get_cq_event (provider mode) would return the dead CQ. */
TEST(SoftnicChannel, DestroyedCqLeavesNoEvent)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 64, true);
			n.post_recv(1, 0, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			SN_CHECK_EQ(ibv_req_notify_cq(n.cq, 0), 0);
			sn_sync(fd);
			struct pollfd p = { n.ch->fd, POLLIN, 0 };
			SN_CHECK_EQ(::poll(&p, 1, 5000), 1); /* the event is there */
			SN_CHECK_EQ(ibv_destroy_qp(n.qp), 0);
			n.qp = nullptr;
			SN_CHECK_EQ(ibv_destroy_cq(n.cq), 0);
			n.cq = nullptr;
			p.revents = 0;
			SN_CHECK_EQ(::poll(&p, 1, 0), 0);
			sn_sync(fd);
			n.close();
		},
		sn_send_one));
}

TEST(SoftnicQpEx, WrApiSendAndWrite)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			n.post_recv(1, 0, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.byte_len, 32);
			SN_CHECK_EQ(n.buf[31], 'q');
			sn_sync(fd);
			SN_CHECK_EQ(n.buf[8000 + 9], 'w');
		},
		[](int fd) {
			SnNode n;
			n.open();
			n.type = IBV_QPT_RC;
			n.len = 65536;
			SN_CHECK(posix_memalign((void **)&n.buf, 4096, n.len) == 0);
			memset(n.buf, 'q', 32);
			memset(n.buf + 100, 'w', 10);
			n.mr = ibv_reg_mr(n.pd, n.buf, n.len,
					  IBV_ACCESS_LOCAL_WRITE |
						  IBV_ACCESS_REMOTE_WRITE);
			n.cq = ibv_create_cq(n.ctx, 64, nullptr, nullptr, 0);
			ibv_qp_ex *qx;
			n.qp = n.new_qpx(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
					 IBV_ACCESS_REMOTE_WRITE, &qx);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_wr_start(qx);
			qx->wr_id = 7;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_send(qx);
			ibv_wr_set_sge(qx, n.mr->lkey, (uint64_t)(uintptr_t)n.buf, 32);
			SN_CHECK_EQ(ibv_wr_complete(qx), 0);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 7);
			SN_CHECK_EQ(wc.opcode, IBV_WC_SEND);
			ibv_wr_start(qx);
			qx->wr_id = 8;
			ibv_wr_rdma_write(qx, r.rkey, r.addr + 8000);
			ibv_wr_set_inline_data(qx, n.buf + 100, 10);
			SN_CHECK_EQ(ibv_wr_complete(qx), 0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 8);
			SN_CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
			sn_sync(fd);
		}));
}

TEST(SoftnicCqEx, CompletionTimestampsFromTheNicClock)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			for (int i = 0; i < 4; i++)
				n.post_recv(i, 64 * i, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.open();
			n.type = IBV_QPT_RC;
			n.len = 4096;
			SN_CHECK(posix_memalign((void **)&n.buf, 4096, n.len) == 0);
			n.mr = ibv_reg_mr(n.pd, n.buf, n.len, IBV_ACCESS_LOCAL_WRITE);
			ibv_cq_init_attr_ex ca = {};
			ca.cqe = 16;
			ca.wc_flags = IBV_WC_STANDARD_FLAGS |
				      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
				      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
			ibv_cq_ex *cx = ibv_create_cq_ex(n.ctx, &ca);
			SN_CHECK(cx);
			n.cq = ibv_cq_ex_to_cq(cx);
			n.qp = n.new_qp(IBV_QPT_RC, 16);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			ibv_values_ex v = {};
			v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
			SN_CHECK_EQ(ibv_query_rt_values_ex(n.ctx, &v), 0);
			uint64_t t0 = (uint64_t)v.raw_clock.tv_nsec;
			uint64_t host0 = sn_test_now_ns();
			uint64_t prev = 0;
			for (int i = 0; i < 4; i++) {
				SN_CHECK_EQ(n.post(IBV_WR_SEND, 100 + i, 0, 16), 0);
				ibv_poll_cq_attr pa = {};
				int ret;
				while ((ret = ibv_start_poll(cx, &pa)) == ENOENT)
					;
				SN_CHECK_EQ(ret, 0);
				SN_CHECK_EQ(cx->status, IBV_WC_SUCCESS);
				SN_CHECK_EQ(cx->wr_id, 100 + i);
				SN_CHECK_EQ(ibv_wc_read_opcode(cx), IBV_WC_SEND);
				uint64_t ts = ibv_wc_read_completion_ts(cx);
				SN_CHECK(ts >= t0);
				SN_CHECK(ts > prev);
				prev = ts;
				uint64_t wall = ibv_wc_read_completion_wallclock_ns(cx);
				SN_CHECK(wall > 1600000000ull * 1000000000ull);
				ibv_end_poll(cx);
			}
			/* NIC ticks are ns: the whole loop took about as long on both clocks,
			 * and the NIC clock is not the host clock */
			uint64_t host_el = sn_test_now_ns() - host0;
			SN_CHECK(prev - t0 <= host_el + 1000000);
			SN_CHECK(t0 > host0 + 1000000000ull ||
				 t0 < host0 - 1000000000ull);
			sn_sync(fd);
		}));
}

static void xrc_modify(ibv_qp *q, bool tgt, uint32_t dest, uint16_t lid)
{
	sn_to_init(q, IBV_ACCESS_REMOTE_WRITE);
	ibv_qp_attr a = {};
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = dest;
	a.path_mtu = IBV_MTU_1024;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = lid;
	a.ah_attr.port_num = 1;
	int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN;
	if (tgt)
		m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	SN_CHECK_EQ(ibv_modify_qp(q, &a, m), 0);
	a = {};
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 8;
	a.retry_cnt = 1;
	a.rnr_retry = 1;
	m = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
	if (!tgt)
		m |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	SN_CHECK_EQ(ibv_modify_qp(q, &a, m), 0);
}

/* XRC: an initiator QP sends through the peer's target QP into the XRC SRQ
 * it names; an SRQ number of no domain of that target is an error. */
TEST(SoftnicXRC, SendThroughTargetIntoNamedSrq)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			ibv_xrcd_init_attr xa = {};
			xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
			xa.fd = -1;
			xa.oflags = O_CREAT;
			ibv_xrcd *x = ibv_open_xrcd(n.ctx, &xa);
			SN_CHECK(x);
			ibv_cq *xcq = ibv_create_cq(n.ctx, 8, nullptr, nullptr, 0);
			ibv_srq_init_attr_ex sa = {};
			sa.attr.max_wr = 4;
			sa.attr.max_sge = 1;
			sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
				       IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
			sa.srq_type = IBV_SRQT_XRC;
			sa.xrcd = x;
			sa.cq = xcq;
			sa.pd = n.pd;
			ibv_srq *srq = ibv_create_srq_ex(n.ctx, &sa);
			SN_CHECK(srq);
			uint32_t srqn = 0;
			SN_CHECK_EQ(ibv_get_srq_num(srq, &srqn), 0);
			ibv_sge s = { (uint64_t)(uintptr_t)n.buf, 256, n.mr->lkey };
			ibv_recv_wr rw = {}, *rbad;
			rw.wr_id = 42;
			rw.sg_list = &s;
			rw.num_sge = 1;
			SN_CHECK_EQ(ibv_post_srq_recv(srq, &rw, &rbad), 0);
			ibv_qp_init_attr_ex ia = {};
			ia.qp_type = IBV_QPT_XRC_RECV;
			ia.comp_mask = IBV_QP_INIT_ATTR_XRCD;
			ia.xrcd = x;
			ibv_qp *tgt = ibv_create_qp_ex(n.ctx, &ia);
			SN_CHECK(tgt);
			uint32_t mine[2] = { tgt->qp_num, srqn }, ini;
			sn_xwrite(fd, mine, sizeof(mine));
			sn_xread(fd, &ini, sizeof(ini));
			xrc_modify(tgt, true, ini, 1);
			sn_sync(fd);
			ibv_wc wc;
			uint64_t end = sn_test_now_ns() + 5000000000ull;
			while (ibv_poll_cq(xcq, 1, &wc) == 0)
				SN_CHECK(sn_test_now_ns() < end);
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.wr_id, 42);
			SN_CHECK_EQ(wc.qp_num, tgt->qp_num);
			SN_CHECK_EQ(wc.byte_len, 100);
			SN_CHECK_EQ(n.buf[99], 'x');
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			memset(n.buf, 'x', 100);
			ibv_qp_init_attr_ex ia = {};
			ia.qp_type = IBV_QPT_XRC_SEND;
			ia.send_cq = n.cq;
			ia.cap.max_send_wr = 4;
			ia.cap.max_send_sge = 1;
			ia.comp_mask = IBV_QP_INIT_ATTR_PD;
			ia.pd = n.pd;
			ibv_qp *ini = ibv_create_qp_ex(n.ctx, &ia);
			SN_CHECK(ini);
			uint32_t theirs[2];
			sn_xread(fd, theirs, sizeof(theirs));
			sn_xwrite(fd, &ini->qp_num, sizeof(uint32_t));
			xrc_modify(ini, false, theirs[0], 1);
			sn_sync(fd);
			ibv_sge s;
			ibv_send_wr wr = n.wr1(&s, IBV_WR_SEND, 7, 0, 100), *bad;
			wr.qp_type.xrc.remote_srqn = theirs[1];
			SN_CHECK_EQ(ibv_post_send(ini, &wr, &bad), 0);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 7);
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			wr.wr_id = 8;
			wr.qp_type.xrc.remote_srqn = theirs[1] + 1000; /* no such SRQ */
			SN_CHECK_EQ(ibv_post_send(ini, &wr, &bad), 0);
			wc = n.wait1();
			SN_CHECK_EQ(wc.wr_id, 8);
			SN_CHECK_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
			sn_sync(fd);
		}));
}

/* Two threads polling one CQ: every completion is handed out exactly once. */
TEST(SoftnicCQ, ConcurrentPollersSeeEachCompletionOnce)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			const int N = 2000;
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 4096, false, 64, false, 4096);
			for (int i = 0; i < N; i++)
				n.post_recv((uint64_t)i, 0, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			static std::atomic<int> total;
			static unsigned char seen[2000];
			total = 0;
			memset(seen, 0, sizeof(seen));
			auto poller = [](void *arg) -> void * {
				ibv_cq *cq = (ibv_cq *)arg;
				ibv_wc wc[8];
				while (total.load() < 2000) {
					int k = ibv_poll_cq(cq, 8, wc);
					for (int j = 0; j < k; j++) {
						if (wc[j].status != IBV_WC_SUCCESS ||
						    wc[j].wr_id >= 2000)
							_exit(5);
						seen[wc[j].wr_id]++;
					}
					total += k;
				}
				return nullptr;
			};
			pthread_t t1, t2;
			pthread_create(&t1, nullptr, poller, n.cq);
			pthread_create(&t2, nullptr, poller, n.cq);
			sn_sync(fd);
			pthread_join(t1, nullptr);
			pthread_join(t2, nullptr);
			SN_CHECK_EQ(total.load(), N);
			for (int i = 0; i < N; i++)
				SN_CHECK_EQ(seen[i], 1);
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 4096, false, 64, false, 4096);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd);
			for (int i = 0; i < 2000; i++)
				SN_CHECK_EQ(
					n.post(IBV_WR_SEND, (uint64_t)i, 0, 8, nullptr, 0,
					       (i % 64) == 63 ? IBV_SEND_SIGNALED : 0),
					0);
			sn_sync(fd);
		}));
}

/* ibv_resize_cq under a producer in another process: a CQ of 3 grows to
 * hold 12 waiting completions (they keep their order), refuses to shrink
 * below what waits, shrinks once polled; then the receiver resizes back and
 * forth while the sender streams, and every completion arrives once, in
 * order, with its length. */
TEST(SoftnicCQ, ResizeGrowsAndShrinksUnderARemoteProducer)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			const int N = 2000;
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 4096, false, 64, false, 3);
			SN_CHECK_EQ(n.cq->cqe, 3);
			for (int i = 0; i < N + 12; i++)
				n.post_recv((uint64_t)i, 0, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			sn_sync(fd); /* the peer sends 2 */
			sn_sync(fd);
			SN_CHECK_EQ(ibv_resize_cq(n.cq, 15), 0);
			SN_CHECK(n.cq->cqe >= 15);
			sn_sync(fd); /* the peer sends 10 more: past the old size */
			sn_sync(fd);
			SN_CHECK_EQ(ibv_resize_cq(n.cq, 1), EINVAL);
			for (int i = 0; i < 12; i++) {
				ibv_wc wc = n.wait1();
				SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
				SN_CHECK_EQ(wc.wr_id, i);
				SN_CHECK_EQ(wc.byte_len, i + 1);
			}
			SN_CHECK_EQ(ibv_resize_cq(n.cq, 1), 0);
			SN_CHECK(n.cq->cqe >= 1 && n.cq->cqe < 15);
			SN_CHECK_EQ(ibv_resize_cq(n.cq, 0), EINVAL);
			SN_CHECK_EQ(ibv_resize_cq(n.cq, 2047), 0);
			sn_sync(fd); /* the stream */
			int got = 0, flip = 0;
			uint64_t end = sn_test_now_ns() + 20000000000ull;
			while (got < N) {
				ibv_wc wc[16];
				/* often, not on every poll: producers wait out a
				 * resize, and back-to-back ones would starve them */
				if (!(++flip % 32)) {
					int rs = ibv_resize_cq(
						n.cq, (flip / 32) & 1 ? 4095 : 2047);
					SN_CHECK(rs == 0 || rs == EINVAL);
				}
				int k = ibv_poll_cq(n.cq, 16, wc);
				SN_CHECK(k >= 0);
				for (int j = 0; j < k; j++, got++) {
					SN_CHECK_EQ(wc[j].status, IBV_WC_SUCCESS);
					SN_CHECK_EQ(wc[j].wr_id, 12 + got);
					SN_CHECK_EQ(wc[j].byte_len, got % 64 + 1);
				}
				SN_CHECK(sn_test_now_ns() < end);
			}
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC, 65536, 4096, false, 64, false, 4096);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			auto send = [&n](int i, uint32_t len, bool sig) {
				SN_CHECK_EQ(n.post(IBV_WR_SEND, (uint64_t)i, 0, len,
						   nullptr, 0,
						   sig ? IBV_SEND_SIGNALED : 0),
					    0);
				if (sig)
					SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			};
			sn_sync(fd);
			for (int i = 0; i < 2; i++)
				send(i, (uint32_t)i + 1, true);
			sn_sync(fd);
			sn_sync(fd);
			for (int i = 2; i < 12; i++)
				send(i, (uint32_t)i + 1, true);
			sn_sync(fd);
			sn_sync(fd);
			for (int i = 0; i < 2000; i++)
				send(i, (uint32_t)(i % 64) + 1, (i % 64) == 63);
			sn_sync(fd);
		}));
}

/* ibv_rereg_mr: a new range keeps the MR's keys and takes the peer's
 * WRITEs from then on (the old buffer no longer changes); taking remote
 * write away makes the next WRITE a remote access error; bad flags EINVAL. */
TEST(SoftnicMR, ReregMovesTheRangeAndChangesAccess)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.pair(fd);
			uint32_t lkey = n.mr->lkey, rkey = n.mr->rkey;
			sn_sync(fd); /* WRITE 1 */
			sn_sync(fd);
			SN_CHECK_EQ((unsigned char)n.buf[0], 0x11);
			errno = 0;
			SN_CHECK(ibv_rereg_mr(n.mr, 0, nullptr, nullptr, 0, 0) != 0);
			SN_CHECK_EQ(errno, EINVAL);
			SN_CHECK(ibv_rereg_mr(n.mr, IBV_REREG_MR_CHANGE_PD, n.pd, nullptr,
					      0, IBV_ACCESS_LOCAL_WRITE) != 0);
			char *b2;
			SN_CHECK(posix_memalign((void **)&b2, 4096, 8192) == 0);
			memset(b2, 0, 8192);
			SN_CHECK_EQ(ibv_rereg_mr(n.mr, IBV_REREG_MR_CHANGE_TRANSLATION,
						 nullptr, b2, 8192, 0),
				    0);
			SN_CHECK_EQ(n.mr->lkey, lkey);
			SN_CHECK_EQ(n.mr->rkey, rkey);
			SN_CHECK(n.mr->addr == b2);
			SN_CHECK_EQ(n.mr->length, 8192);
			uint64_t a2 = (uint64_t)(uintptr_t)b2;
			sn_xwrite(fd, &a2, sizeof(a2));
			sn_sync(fd); /* WRITE 2 into the new range */
			SN_CHECK_EQ((unsigned char)b2[100], 0x22);
			SN_CHECK_EQ((unsigned char)n.buf[100], 0);
			SN_CHECK_EQ(ibv_rereg_mr(n.mr, IBV_REREG_MR_CHANGE_ACCESS,
						 nullptr, nullptr, 0,
						 IBV_ACCESS_LOCAL_WRITE),
				    0);
			sn_sync(fd); /* WRITE 3: refused */
			sn_sync(fd);
			SN_CHECK_EQ((unsigned char)b2[200], 0);
		},
		[](int fd) {
			SnNode n;
			SnInfo r = n.pair(fd);
			sn_sync(fd);
			memset(n.buf, 0x11, 64);
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 1, 0, 8, &r, 0), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
			sn_xread(fd, &r.addr, sizeof(r.addr));
			memset(n.buf, 0x22, 64);
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 2, 0, 8, &r, 100), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
			sn_sync(fd);
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 3, 0, 8, &r, 200), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_REM_ACCESS_ERR);
			sn_sync(fd);
		}));
}

/* Parent domains: an MR and an ibv_wr_* QP made on one act as on its
 * protection domain (the peer's WRITE lands, the QP's SEND arrives), the
 * QP's builder buffer comes from the domain's allocator (softnic's resource
 * type, freed through it at destroy); a CQ may name only a parent domain;
 * a thread domain or a parent of a parent is EINVAL. */
static int pd_allocs, pd_frees;
static uint64_t pd_type;
static void *pd_alloc(ibv_pd *, void *ctx, size_t size, size_t align, uint64_t type)
{
	void *p = nullptr;
	pd_allocs++;
	pd_type = type;
	SN_CHECK(ctx == (void *)&pd_allocs);
	SN_CHECK(posix_memalign(&p, align, size) == 0);
	memset(p, 0xee, size); /* softnic must not rely on zeroed memory */
	return p;
}
static void pd_free(ibv_pd *, void *, void *ptr, uint64_t)
{
	pd_frees++;
	free(ptr);
}

TEST(SoftnicPD, ParentDomainWithAllocators)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.open();
			ibv_parent_domain_init_attr pa = {};
			pa.pd = n.pd;
			pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
				       IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
			pa.alloc = pd_alloc;
			pa.free = pd_free;
			pa.pd_context = &pd_allocs;
			ibv_pd *par = ibv_alloc_parent_domain(n.ctx, &pa);
			SN_CHECK(par);
			ibv_parent_domain_init_attr bad = pa;
			bad.pd = par;
			SN_CHECK(!ibv_alloc_parent_domain(n.ctx, &bad) &&
				 errno == EINVAL);
			bad = pa;
			bad.td = (ibv_td *)&bad;
			SN_CHECK(!ibv_alloc_parent_domain(n.ctx, &bad) &&
				 errno == EINVAL);
			ibv_cq_init_attr_ex ca = {};
			ca.cqe = 16;
			ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
			ca.parent_domain = n.pd;
			SN_CHECK(!ibv_create_cq_ex(n.ctx, &ca) && errno == EINVAL);
			ca.parent_domain = par;
			ibv_cq_ex *cx = ibv_create_cq_ex(n.ctx, &ca);
			SN_CHECK(cx);
			ibv_pd *prot = n.pd;
			n.pd = par;
			n.make(IBV_QPT_RC);
			ibv_qp_ex *qx;
			ibv_qp *q = n.new_qpx(IBV_QP_EX_WITH_SEND,
					      IBV_ACCESS_REMOTE_WRITE, &qx);
			SnInfo r = n.exchange(fd, q);
			n.connect(r, q);
			ibv_wr_start(qx);
			qx->wr_id = 7;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_send(qx);
			ibv_wr_set_sge(qx, n.mr->lkey, (uint64_t)(uintptr_t)n.buf, 16);
			SN_CHECK_EQ(ibv_wr_complete(qx), 0);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.wr_id, 7);
			SN_CHECK_EQ(pd_allocs, 1);
			SN_CHECK_EQ(pd_type, (0x534eull << 32) + 1);
			sn_sync(fd); /* the peer WRITEs into our MR */
			SN_CHECK_EQ((unsigned char)n.buf[300], 0x77);
			SN_CHECK_EQ(ibv_destroy_qp(q), 0);
			SN_CHECK_EQ(pd_frees, 1);
			SN_CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cx)), 0);
			(void)prot;
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			n.post_recv(1, 0, 64);
			SnInfo r = n.exchange(fd);
			n.connect(r);
			ibv_wc wc = n.wait1();
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.byte_len, 16);
			memset(n.buf + 1000, 0x77, 8);
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 2, 1000, 8, &r, 300), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			sn_sync(fd);
			sn_sync(fd);
		}));
}

/* MRs that share pages with other data and with each other, and a
 * deregistered rkey: the peer's WRITEs land exactly where they should. */
TEST(SoftnicMR, SharedPagesOverlapsAndDeregistration)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			/* two small heap buffers, likely on one page, plus an overlap */
			char *a = (char *)malloc(100), *b = (char *)malloc(100);
			char *big = (char *)malloc(20000);
			memset(a, 'a', 100);
			memset(b, 'b', 100);
			memset(big, 'g', 20000);
			int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
			ibv_mr *ma = ibv_reg_mr(n.pd, a, 100, acc);
			ibv_mr *mb = ibv_reg_mr(n.pd, b, 100, acc);
			ibv_mr *m1 = ibv_reg_mr(n.pd, big, 12000, acc);
			ibv_mr *m2 = ibv_reg_mr(n.pd, big + 8000, 12000, acc);
			SN_CHECK(ma && mb && m1 && m2);
			/* registration kept the contents */
			SN_CHECK_EQ(a[99], 'a');
			SN_CHECK_EQ(big[19999], 'g');
			uint64_t k[8] = { ma->rkey, (uint64_t)(uintptr_t)a,
					  mb->rkey, (uint64_t)(uintptr_t)b,
					  m1->rkey, (uint64_t)(uintptr_t)big,
					  m2->rkey, (uint64_t)(uintptr_t)big + 8000 };
			SnInfo r = n.exchange(fd);
			sn_xwrite(fd, k, sizeof(k));
			n.connect(r);
			sn_sync(fd);
			sn_sync(fd); /* the peer wrote */
			SN_CHECK_EQ(a[0], 'A');
			SN_CHECK_EQ(a[50], 'a');
			SN_CHECK_EQ(b[0], 'B');
			SN_CHECK_EQ(big[11000], '1'); /* through m1, in the overlap */
			SN_CHECK_EQ(big[19000], '2'); /* through m2 */
			SN_CHECK_EQ(big[7999], 'g');
			/* deregister one of the overlapping MRs: the other still works,
			 * the old rkey no longer does */
			SN_CHECK_EQ(ibv_dereg_mr(m1), 0);
			sn_sync(fd);
			sn_sync(fd);
			SN_CHECK_EQ(big[9000], '3');
			SN_CHECK_EQ(big[100], 'g');
			SN_CHECK_EQ(n.state(), IBV_QPS_ERR); /* the access error */
			sn_sync(fd);
		},
		[](int fd) {
			SnNode n;
			n.make(IBV_QPT_RC);
			uint64_t k[8];
			SnInfo r = n.exchange(fd);
			sn_xread(fd, k, sizeof(k));
			n.connect(r);
			sn_sync(fd);
			auto wr = [&](uint64_t rkey, uint64_t addr, char c,
				      uint32_t len) {
				memset(n.buf, c, len);
				ibv_sge s = { (uint64_t)(uintptr_t)n.buf, len,
					      n.mr->lkey };
				ibv_send_wr w = {}, *bad;
				w.sg_list = &s;
				w.num_sge = 1;
				w.opcode = IBV_WR_RDMA_WRITE;
				w.send_flags = IBV_SEND_SIGNALED;
				w.wr.rdma.remote_addr = addr;
				w.wr.rdma.rkey = (uint32_t)rkey;
				SN_CHECK_EQ(ibv_post_send(n.qp, &w, &bad), 0);
				return n.wait1().status;
			};
			SN_CHECK_EQ(wr(k[0], k[1], 'A', 10), IBV_WC_SUCCESS);
			SN_CHECK_EQ(wr(k[2], k[3], 'B', 10), IBV_WC_SUCCESS);
			SN_CHECK_EQ(wr(k[4], k[5] + 10000, '1', 1500), IBV_WC_SUCCESS);
			SN_CHECK_EQ(wr(k[6], k[7] + 11000, '2', 100), IBV_WC_SUCCESS);
			/* beyond a's 100 bytes: refused */
			sn_sync(fd);
			sn_sync(fd);
			SN_CHECK_EQ(wr(k[6], k[5] + 9000, '3', 10), IBV_WC_SUCCESS);
			SN_CHECK_EQ(wr(k[4], k[5] + 100, 'x', 10), IBV_WC_REM_ACCESS_ERR);
			sn_sync(fd);
			sn_sync(fd);
		}));
}

/* fork() gives the child its own copy of registered pages, as copy-on-write
 * memory does; the parent's registration keeps working. */
TEST(SoftnicMR, ForkChildGetsPrivateCopies)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int) {
			SnNode n;
			n.make(IBV_QPT_RC, 8192);
			n.connect(n.info());
			strcpy(n.buf, "parent");
			int up[2], down[2];
			SN_CHECK(pipe(up) == 0 && pipe(down) == 0);
			pid_t c = fork();
			if (c == 0) {
				char x;
				close(up[0]);
				close(down[1]);
				alarm(10);
				strcpy(n.buf, "child!");
				if (write(up[1], "x", 1) != 1)
					_exit(2);
				if (read(down[0], &x, 1) < 0)
					_exit(3);
				_exit(strcmp(n.buf, "child!") ? 4 : 0);
			}
			close(up[1]);
			close(down[0]);
			char x;
			SN_CHECK(read(up[0], &x, 1) == 1);
			SN_CHECK(!strcmp(n.buf, "parent"));
			/* loopback WRITE in the parent still lands in the parent */
			SnInfo self = n.info();
			SN_CHECK_EQ(n.post(IBV_WR_RDMA_WRITE, 1, 0, 7, &self, 4096), 0);
			SN_CHECK_EQ(n.wait1().status, IBV_WC_SUCCESS);
			SN_CHECK(!strcmp(n.buf + 4096, "parent"));
			SN_CHECK(write(down[1], "y", 1) == 1);
			SN_CHECK_EQ(sn_wait_child(c), 0);
		},
		[](int) {}));
}

/* Deregistering gives the pages back to private memory: a fork() after it
 * leaves parent and child each its own copy, as for memory never registered
 * (left shared, heap pages around a freed buffer were written by both). */
TEST(SoftnicMR, ForkAfterDeregSharesNothing)
{
	SN_EXPECT_ENDS(sn_run2(
		[](int) {
			SnNode n;
			n.make(IBV_QPT_RC, 8192);
			char *b = static_cast<char *>(aligned_alloc(4096, 8192));
			SN_CHECK(b);
			strcpy(b, "before");
			ibv_mr *mr =
				ibv_reg_mr(n.pd, b + 100, 1000, IBV_ACCESS_LOCAL_WRITE);
			SN_CHECK(mr);
			strcpy(b, "parent");
			SN_CHECK_EQ(ibv_dereg_mr(mr), 0);
			SN_CHECK(!strcmp(b, "parent")); /* the process's bytes kept */
			pid_t c = fork();
			if (c == 0) {
				strcpy(b, "child!");
				_exit(0);
			}
			SN_CHECK_EQ(sn_wait_child(c), 0);
			SN_CHECK(!strcmp(b, "parent"));
			free(b);
		},
		[](int) {}));
}

} // namespace

SN_TEST_MAIN()
