// model_test.cc - the model (model/rbt_model.h) on events built here: lifetimes (a
// handle created again is a new object), QPs by number, the join's rules (unsignaled
// WRs retired by the next signaled one, SRQ receives, completions without a QP
// number on a shared CQ, a completion before its post, outstanding WRs at the end),
// the clocks, the kept event copies, and the callbacks' order.
#include <gtest/gtest.h>

#include <infiniband/verbs.h>
#include <stddef.h>
#include <string.h>

#include <string>
#include <vector>

extern "C" {
#include "model/rbt_model.h"
}

namespace
{

struct Log {
	std::vector<std::string> ev;
	std::vector<rbt_model_wr> done;
	std::vector<rbt_model_comp> comps;
	std::vector<rbt_model_comp> done_comps; // wr_done's, in its order
	int abandoned = 0, unmatched = 0, res_new = 0;
};

void cb_res_new(void *arg, rbt_model_res *r)
{
	Log *l = (Log *)arg;
	l->res_new++;
	l->ev.push_back(std::string("new ") + rbt_model_kind_name(r->kind));
}

void cb_completion(void *arg, rbt_model_qp *, const rbt_model_comp *c,
		   const rbt_model_wr *)
{
	((Log *)arg)->ev.push_back("completion");
	((Log *)arg)->comps.push_back(*c);
}

void cb_done(void *arg, rbt_model_qp *, const rbt_model_wr *w, const rbt_model_comp *c,
	     uint32_t n, uint32_t)
{
	Log *l = (Log *)arg;
	if (!c) {
		l->abandoned += n;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		l->done.push_back(*w);
		l->done_comps.push_back(*c);
	}
	l->ev.push_back("done " + std::to_string(w->wr_id));
}

void cb_unmatched(void *arg, rbt_model_qp *, const rbt_model_comp *)
{
	((Log *)arg)->unmatched++;
}

const rbt_model_ops kOps = {
	.res_new = cb_res_new,
	.completion = cb_completion,
	.wr_done = cb_done,
	.unmatched = cb_unmatched,
};

struct M {
	Log log;
	rbt_model *m = nullptr;
	int t = -1;
	M(bool keep = false)
	{
		rbt_model_opts o{};
		o.ops = &kOps;
		o.arg = &log;
		o.keep_events = keep;
		EXPECT_EQ(0, rbt_model_create(&o, &m));
		rbt_header h{};
		h.clock_hz = 1000000000;
		h.start.ticks = 1000;
		h.start.mono_ns = 5000000;
		h.start.real_ns = 1700000000000000000ull;
		t = rbt_model_add_trace(m, &h, "t");
	}
	~M()
	{
		rbt_model_destroy(m);
	}
	void feed(rbt_event &ev, uint64_t ts)
	{
		ev.ts = ts;
		ev.stream = 7;
		ASSERT_EQ(0, rbt_model_feed(m, t, &ev));
	}
	void cq(uint64_t ts, uint64_t h)
	{
		rbt_event ev{};
		ev.type = RBT_EV_CQ_CREATE;
		ev.u.cq_create.cq = h;
		ev.u.cq_create.cqe = 16;
		feed(ev, ts);
	}
	void qp(uint64_t ts, uint64_t h, uint32_t qpn, uint64_t cq, uint64_t srq = 0)
	{
		rbt_event ev{};
		ev.type = RBT_EV_QP_CREATE;
		ev.u.qp_create.qp = h;
		ev.u.qp_create.qp_num = qpn;
		ev.u.qp_create.qp_type = IBV_QPT_RC;
		ev.u.qp_create.send_cq = cq;
		ev.u.qp_create.recv_cq = cq;
		ev.u.qp_create.srq = srq;
		ev.u.qp_create.max_send_wr = 8;
		feed(ev, ts);
	}
	void destroy_qp(uint64_t ts, uint64_t h)
	{
		rbt_event ev{};
		ev.type = RBT_EV_QP_DESTROY;
		ev.u.qp_destroy.qp = h;
		feed(ev, ts);
	}
	void send(uint64_t ts, uint64_t qp, uint32_t qpn, std::vector<uint64_t> ids,
		  std::vector<bool> sig)
	{
		std::vector<rbt_send_wr> w(ids.size());
		std::vector<rbt_sge> sg(ids.size());
		for (size_t i = 0; i < ids.size(); i++) {
			w[i] = rbt_send_wr{};
			w[i].wr_id = ids[i];
			w[i].opcode = IBV_WR_SEND;
			w[i].send_flags = sig[i] ? IBV_SEND_SIGNALED : 0;
			sg[i] = rbt_sge{ 0x1000, 64, 5 };
			w[i].n_sges = 1;
			w[i].sges = &sg[i];
		}
		rbt_event ev{};
		ev.type = RBT_EV_POST_SEND;
		ev.u.post_send.ts_exit = ts + 100;
		ev.u.post_send.qp = qp;
		ev.u.post_send.qp_num = qpn;
		ev.u.post_send.n_wrs = (uint32_t)w.size();
		ev.u.post_send.wrs = w.data();
		feed(ev, ts);
	}
	void srq_recv(uint64_t ts, uint64_t srq, uint64_t id)
	{
		rbt_recv_wr r{};
		r.wr_id = id;
		rbt_event ev{};
		ev.type = RBT_EV_POST_SRQ_RECV;
		ev.u.post_srq_recv.ts_exit = ts + 50;
		ev.u.post_srq_recv.srq = srq;
		ev.u.post_srq_recv.n_wrs = 1;
		ev.u.post_srq_recv.wrs = &r;
		feed(ev, ts);
	}
	void poll(uint64_t ts, uint64_t cq, uint64_t id, uint32_t qpn, bool recv = false,
		  uint64_t status = 0, uint64_t hw_ts = 0)
	{
		rbt_wc wc{};
		wc.hw_ts = hw_ts;
		wc.wr_id = id;
		wc.qp_num = qpn;
		wc.status = status;
		wc.opcode = recv ? IBV_WC_RECV : IBV_WC_SEND;
		rbt_event ev{};
		ev.type = RBT_EV_POLL_CQ;
		ev.u.poll_cq.ts_exit = ts + 20;
		ev.u.poll_cq.cq = cq;
		ev.u.poll_cq.asked = 1;
		ev.u.poll_cq.ret = 1;
		ev.u.poll_cq.n_wcs = 1;
		ev.u.poll_cq.wcs = &wc;
		feed(ev, ts);
	}
};

TEST(Model, HandleReusedAfterDestroyIsANewObject)
{
	M m;
	m.cq(1000, 0xc);
	m.qp(1100, 0xa, 10, 0xc);
	rbt_model_qp *first =
		(rbt_model_qp *)rbt_model_by_handle(m.m, m.t, RBT_MODEL_QP, 0xa);
	ASSERT_NE(nullptr, first);
	EXPECT_TRUE(first->res.created);
	m.destroy_qp(1200, 0xa);
	EXPECT_TRUE(first->res.destroyed);
	EXPECT_EQ(1200u, first->res.destroy_ts);
	m.qp(1300, 0xa, 11, 0xc);
	rbt_model_qp *second =
		(rbt_model_qp *)rbt_model_by_handle(m.m, m.t, RBT_MODEL_QP, 0xa);
	ASSERT_NE(nullptr, second);
	EXPECT_NE(first, second);
	EXPECT_NE(first->res.id, second->res.id);
	EXPECT_FALSE(second->res.destroyed);
	EXPECT_EQ(11u, second->qpn);
	EXPECT_EQ(first, rbt_model_qp_by_num(m.m, m.t, 10));
	EXPECT_EQ(second, rbt_model_qp_by_num(m.m, m.t, 11));
	// newest first
	EXPECT_EQ(&second->res, rbt_model_list(m.m, m.t, RBT_MODEL_QP));
	EXPECT_EQ(&first->res, second->res.next_of_kind);
	// a post on the reused handle joins on the new QP's number
	m.send(1400, 0xa, 11, { 1 }, { true });
	EXPECT_EQ(1u, second->sq.n);
	EXPECT_EQ(0u, first->sq.n);
}

TEST(Model, UnsignaledRetiredByTheNextSignaledOnce)
{
	M m;
	m.cq(1000, 0xc);
	m.qp(1100, 0xa, 10, 0xc);
	m.send(2000, 0xa, 10, { 1, 2, 3 }, { false, false, true });
	m.poll(3000, 0xc, 3, 10);
	ASSERT_EQ(3u, m.log.done.size());
	EXPECT_EQ(1u, m.log.done[0].wr_id);
	EXPECT_EQ(3u, m.log.done[2].wr_id);
	EXPECT_EQ(1u, m.log.comps.size());
	// the completion is seen before its WRs are handed over
	EXPECT_EQ("completion", m.log.ev[m.log.ev.size() - 4]);
	rbt_model_qp *qp = rbt_model_qp_by_num(m.m, m.t, 10);
	EXPECT_EQ(0u, qp->sq.n);
	EXPECT_EQ(1, qp->scq->peak);
	EXPECT_EQ(0, qp->scq->outstanding);
}

TEST(Model, SrqReceivesAndCompletionsWithoutQpNumber)
{
	M m;
	m.cq(1000, 0xc);
	rbt_event ev{};
	ev.type = RBT_EV_SRQ_CREATE;
	ev.u.srq_create.srq = 0x5;
	m.feed(ev, 1050);
	m.qp(1100, 0xa, 10, 0xc, 0x5);
	m.srq_recv(2000, 0x5, 77);
	m.poll(3000, 0xc, 77, 10, true);
	ASSERT_EQ(1u, m.log.done.size());
	EXPECT_TRUE(m.log.done[0].recv);
	// an extended poll without qp_num: the CQ's only QP
	m.send(4000, 0xa, 10, { 9 }, { true });
	m.poll(5000, 0xc, 9, 0);
	ASSERT_EQ(2u, m.log.done.size());
	EXPECT_EQ(9u, m.log.done[1].wr_id);
}

TEST(Model, CompletionBeforeItsPostWaitsForIt)
{
	M m;
	m.cq(1000, 0xc);
	m.qp(1100, 0xa, 10, 0xc);
	m.poll(3000, 0xc, 4, 10); // another thread's chunk came first
	EXPECT_TRUE(m.log.done.empty());
	m.send(2000, 0xa, 10, { 4 }, { true });
	ASSERT_EQ(1u, m.log.done.size());
	EXPECT_EQ(3020u, m.log.comps[0].poll_exit);
	// left at the end: one outstanding, one completion that never found its post
	m.send(4000, 0xa, 10, { 5 }, { true });
	m.poll(5000, 0xc, 99, 10);
	ASSERT_EQ(0, rbt_model_finish(m.m));
	EXPECT_EQ(1, m.log.abandoned);
	EXPECT_EQ(1, m.log.unmatched);
	struct rbt_model_stats st;
	rbt_model_stats(m.m, &st);
	EXPECT_EQ(1u, st.unmatched_completions);
	EXPECT_EQ(-EALREADY, rbt_model_finish(m.m));
}

TEST(Model, ErrorCompletionMovesTheQpToErr)
{
	M m;
	m.cq(1000, 0xc);
	m.qp(1100, 0xa, 10, 0xc);
	m.send(2000, 0xa, 10, { 1 }, { true });
	m.poll(3000, 0xc, 1, 10, false, IBV_WC_REM_ACCESS_ERR);
	rbt_model_qp *qp = rbt_model_qp_by_num(m.m, m.t, 10);
	EXPECT_EQ((uint32_t)IBV_QPS_ERR, qp->state);
	ASSERT_GE(qp->n_hist, 2u);
	EXPECT_TRUE(qp->hist[qp->n_hist - 1].implicit);
}

TEST(Model, Clocks)
{
	M m;
	const struct rbt_model_trace *t = rbt_model_trace(m.m, m.t);
	EXPECT_DOUBLE_EQ(500.0, rbt_model_ticks_ns(t, 1500));
	EXPECT_EQ(5000500u, rbt_model_mono_ns(t, 1500));
	EXPECT_EQ(0u, rbt_model_dur_ns(t, -5));
	double host;
	EXPECT_EQ(-ENOENT, rbt_model_nic_to_host(m.m, m.t, 0x1, 100, &host));
	for (int i = 0; i < 3; i++) { // a 250 MHz NIC clock
		rbt_event ev{};
		ev.type = RBT_EV_CLOCK_SAMPLE;
		ev.u.clock_sample.ctx = 0x1;
		ev.u.clock_sample.nic_ts = 1000 + 250 * (uint64_t)i;
		ev.u.clock_sample.nic_hz = 250000000;
		m.feed(ev, 10000 + 1000 * (uint64_t)i);
	}
	ASSERT_EQ(0, rbt_model_nic_to_host(m.m, m.t, 0x1, 1500, &host));
	EXPECT_NEAR(12000.0, host, 1e-6);
	struct rbt_model_clock_fit fit;
	ASSERT_EQ(0, rbt_model_clock_fit(m.m, m.t, &fit));
	EXPECT_EQ(3u, fit.samples);
	EXPECT_NEAR(4.0, fit.ns_per_nic_tick, 1e-9);
}

// A NIC clock sampled for 10 s, 3 ppm fast against the host's, each sample
// 20 ns off one way or the other (the reads' windows): the fit finds the rate,
// and its rms residual is those 20 ns - not lost to rounding beside the
// samples' 10 s of spread (it once came out as 0 for long runs).
TEST(Model, ClockFitOfNoisySamplesOverSeconds)
{
	M m;
	for (int i = 0; i < 200; i++) {
		uint64_t nic = 5000000000ull + 50000000ull * (uint64_t)i; // every 50 ms
		double host = 10000.0 + (double)(nic - 5000000000ull) * (1.0 + 3e-6) +
			      (i % 2 ? 20.0 : -20.0);
		rbt_event ev{};
		ev.type = RBT_EV_CLOCK_SAMPLE;
		ev.u.clock_sample.ctx = 0x1;
		ev.u.clock_sample.nic_ts = nic;
		ev.u.clock_sample.nic_hz = 1000000000;
		m.feed(ev, (uint64_t)host);
	}
	struct rbt_model_clock_fit fit;
	ASSERT_EQ(0, rbt_model_clock_fit(m.m, m.t, &fit));
	EXPECT_EQ(200u, fit.samples);
	EXPECT_NEAR(1.0 + 3e-6, fit.ns_per_nic_tick, 1e-9);
	EXPECT_NEAR(20.0, fit.rms_residual_ns, 1.0);
	EXPECT_GE(fit.max_residual_ns, 20.0);
	double host;
	ASSERT_EQ(0, rbt_model_nic_to_host(m.m, m.t, 0x1, 5000000000ull + 5000000000ull,
					   &host));
	EXPECT_NEAR(10000.0 + 5e9 * (1.0 + 3e-6), host, 5.0);
}

// A NIC clock 100 ppm slower than its nominal 1 GHz, sampled at a CQ's creation
// and 10 ms later (a short program: its close): the completions between the two
// are mapped once the second sample is read - by interpolation, within a tick of
// the truth - not with the nominal rate the one sample before them gave (900 ns
// off by the end, past their polls), and handed over in their order.
TEST(Model, NicTimesBetweenSamplesAreInterpolated)
{
	M m;
	const uint64_t nic0 = 1000000000000000ull;
	auto host_of = [](uint64_t d) { return 10000.0 + (double)d * (1.0 + 1e-4); };
	auto sample = [&](uint64_t d) {
		rbt_event ev{};
		ev.type = RBT_EV_CLOCK_SAMPLE;
		ev.u.clock_sample.ctx = 0x1;
		ev.u.clock_sample.nic_ts = nic0 + d;
		ev.u.clock_sample.nic_hz = 1000000000;
		m.feed(ev, (uint64_t)host_of(d));
	};
	rbt_event cq{};
	cq.type = RBT_EV_CQ_CREATE;
	cq.u.cq_create.ctx = 0x1;
	cq.u.cq_create.cq = 0xc1;
	cq.u.cq_create.cqe = 16;
	m.feed(cq, 9000);
	m.qp(9100, 0xa1, 0x11, 0xc1);
	sample(0);
	for (uint64_t i = 1; i <= 9; i++) {
		uint64_t d = i * 1000000; // every 1 ms of NIC time
		uint64_t h = (uint64_t)host_of(d);
		m.send(h - 2000, 0xa1, 0x11, { i }, { true });
		m.poll(h + 200, 0xc1, i, 0x11, false, 0, nic0 + d);
	}
	sample(10000000);
	ASSERT_EQ(9u, m.log.done_comps.size());
	for (uint64_t i = 1; i <= 9; i++) {
		const rbt_model_comp &c = m.log.done_comps[i - 1];
		EXPECT_EQ(i, m.log.done[i - 1].wr_id);
		ASSERT_TRUE(c.exact) << i;
		EXPECT_NEAR(host_of(i * 1000000), c.host, 1.0) << i;
	}
}

// Traces of one host share its TSC: they are placed on the timeline by their TSC
// starts, not by the real-time clock read beside each start (a recorder preempted
// between the two reads would put its trace that much late). Traces of another host
// (or of another boot: TSC and monotonic clock disagree) go by real time.
TEST(Model, TracesOfOneHostAlignOnTheirTsc)
{
	rbt_model_opts o{};
	o.ops = &kOps;
	rbt_model *m = nullptr;
	ASSERT_EQ(0, rbt_model_create(&o, &m));
	auto hdr = [](const char *host, uint64_t at_ns, uint64_t real_late_ns) {
		rbt_header h{};
		h.clock_source = RBT_CLOCK_TSC;
		h.clock_hz = 2000000000; // 2 ticks per ns
		h.host = host;
		h.start.ticks = 1000000 + 2 * at_ns;
		h.start.mono_ns = 7000000000ull + at_ns;
		h.start.real_ns = 1700000000000000000ull + at_ns + real_late_ns;
		return h;
	};
	rbt_header a = hdr("h1", 0, 0);
	rbt_header b = hdr("h1", 500000000, 20000000); // real time read 20 ms late
	rbt_header c = hdr("h2", 500000000, 20000000); // another host
	rbt_header d = hdr("h1", 500000000, 20000000);
	d.start.mono_ns += 3000000000ull; // another boot of h1
	int ta = rbt_model_add_trace(m, &a, "a"), tb = rbt_model_add_trace(m, &b, "b");
	int tc = rbt_model_add_trace(m, &c, "c"), td = rbt_model_add_trace(m, &d, "d");
	rbt_event ev{};
	ev.type = RBT_EV_CQ_CREATE;
	ev.ts = a.start.ticks;
	ASSERT_EQ(0, rbt_model_feed(m, ta, &ev));
	EXPECT_EQ(0, rbt_model_trace(m, ta)->align_ns);
	EXPECT_EQ(500000000, rbt_model_trace(m, tb)->align_ns);
	EXPECT_EQ(520000000, rbt_model_trace(m, tc)->align_ns);
	EXPECT_EQ(520000000, rbt_model_trace(m, td)->align_ns);
	rbt_model_destroy(m);
}

TEST(Model, KeepsCopiesOfResourceEvents)
{
	M m(true);
	m.cq(1000, 0xc);
	m.qp(1100, 0xa, 10, 0xc);
	uint8_t gid[16] = { 0xfe, 0x80 };
	rbt_event ev{};
	ev.type = RBT_EV_QP_MODIFY;
	ev.u.qp_modify.qp = 0xa;
	ev.u.qp_modify.attr_mask = IBV_QP_STATE;
	ev.u.qp_modify.qp_state = IBV_QPS_INIT;
	ev.u.qp_modify.ah_dgid.data = gid;
	ev.u.qp_modify.ah_dgid.len = 16;
	m.feed(ev, 1200);
	gid[0] = 0; // the model's copy is its own
	rbt_model_res *r = rbt_model_by_handle(m.m, m.t, RBT_MODEL_QP, 0xa);
	ASSERT_NE(nullptr, r->create);
	EXPECT_EQ(10u, r->create->u.qp_create.qp_num);
	ASSERT_EQ(1u, r->n_mods);
	EXPECT_EQ(0xfe, r->mods[0]->u.qp_modify.ah_dgid.data[0]);
	EXPECT_NE(gid, r->mods[0]->u.qp_modify.ah_dgid.data);
	m.destroy_qp(1300, 0xa);
	ASSERT_NE(nullptr, r->destroy);
	EXPECT_EQ(1300u, r->destroy->ts);
}

TEST(Model, EventCopyIsDeep)
{
	rbt_sge sg[2] = { { 1, 2, 3 }, { 4, 5, 6 } };
	rbt_send_wr w{};
	w.wr_id = 42;
	w.n_sges = 2;
	w.sges = sg;
	rbt_event ev{};
	ev.type = RBT_EV_POST_SEND;
	ev.u.post_send.n_wrs = 1;
	ev.u.post_send.wrs = &w;
	rbt_event *c = rbt_model_event_copy(&ev);
	ASSERT_NE(nullptr, c);
	sg[1].length = 0;
	w.wr_id = 0;
	EXPECT_EQ(42u, c->u.post_send.wrs[0].wr_id);
	EXPECT_EQ(5u, c->u.post_send.wrs[0].sges[1].length);
	EXPECT_NE(&w, c->u.post_send.wrs);
	free(c);
}

// A copy holds the head and its type's member of the union, not the whole
// union: a post's copy is its head, its WR and its sges, far below
// sizeof(rbt_event) plus them (the replayer keeps one per step).
TEST(Model, EventCopyIsCompact)
{
	rbt_sge sg = { 1, 2, 3 };
	rbt_send_wr w{};
	w.wr_id = 7;
	w.n_sges = 1;
	w.sges = &sg;
	rbt_event ev{};
	ev.type = RBT_EV_POST_SEND;
	ev.ts = 99;
	ev.u.post_send.qp_num = 12;
	ev.u.post_send.n_wrs = 1;
	ev.u.post_send.wrs = &w;
	size_t head = offsetof(rbt_event, u) + sizeof(ev.u.post_send);
	EXPECT_EQ(head, rbt_model_event_head_size(&ev));
	EXPECT_LT(rbt_model_event_size(&ev), sizeof(rbt_event));
	EXPECT_GE(rbt_model_event_size(&ev), head + sizeof(w) + sizeof(sg));
	std::vector<unsigned char> buf(rbt_model_event_size(&ev));
	rbt_event *c = rbt_model_event_copy_to(buf.data(), &ev);
	EXPECT_EQ(99u, c->ts);
	EXPECT_EQ(12u, c->u.post_send.qp_num);
	EXPECT_EQ(7u, c->u.post_send.wrs[0].wr_id);
	EXPECT_EQ(3u, c->u.post_send.wrs[0].sges[0].lkey);
	// every byte of the copy is inside the buffer it was given
	EXPECT_GE((const unsigned char *)c->u.post_send.wrs, buf.data() + head);
	EXPECT_LE((const unsigned char *)(c->u.post_send.wrs[0].sges + 1),
		  buf.data() + buf.size());
	// a type this build does not know is copied whole
	rbt_event odd{};
	odd.type = 0x7fff;
	EXPECT_EQ(sizeof(rbt_event), rbt_model_event_head_size(&odd));
}

} // namespace
