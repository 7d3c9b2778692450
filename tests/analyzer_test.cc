// analyzer_test.cc - the analyzer (rbt_analyzer.h) on synthetic traces whose every
// timestamp is chosen here, so the truth of each phase is known exactly: attribution
// with and without NIC timestamps, unsignaled WRs, receives, reordering across
// threads, each diagnosis, healthy traffic without findings, and the file path
// through the real writer and reader.
#include <gtest/gtest.h>

#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

extern "C" {
#include "analyzer/rbt_analyzer.h"
#include "trace_format/rbt_format.h"
}

namespace
{

// Builds events of one trace (clock_hz = 1e9: a tick is a nanosecond) and hands them
// to the analyzer or a writer.
struct Trace {
	rbt_analyzer *an = nullptr;
	int idx = -1;
	rbt_writer *w = nullptr;
	uint32_t tid = 100;
	uint32_t chunk_stream = 0;

	void put(rbt_event &ev, uint64_t ts)
	{
		ev.ts = ts;
		if (!ev.stream)
			ev.stream = tid;
		if (an) {
			ASSERT_EQ(0, rbt_analyzer_feed(an, idx, &ev));
		}
		if (w) {
			if (ev.stream != chunk_stream) {
				ASSERT_EQ(0, rbt_writer_begin_chunk(w, ev.stream));
				chunk_stream = ev.stream;
			}
			ASSERT_EQ(0, rbt_writer_append(w, &ev));
		}
	}
	void cq(uint64_t ts, uint64_t cq, uint64_t cqe, uint64_t ctx = 0xc0)
	{
		rbt_event ev{};
		ev.type = RBT_EV_CQ_CREATE;
		ev.u.cq_create.ts_exit = ts + 10;
		ev.u.cq_create.ctx = ctx;
		ev.u.cq_create.cq = cq;
		ev.u.cq_create.cqe = cqe;
		ev.u.cq_create.cqe_asked = cqe;
		put(ev, ts);
	}
	void qp(uint64_t ts, uint64_t qp, uint32_t qpn, uint64_t scq, uint64_t rcq,
		uint64_t max_send = 128, uint64_t max_recv = 128, uint64_t max_inline = 0,
		uint64_t sig_all = 0)
	{
		rbt_event ev{};
		ev.type = RBT_EV_QP_CREATE;
		auto &p = ev.u.qp_create;
		p.ts_exit = ts + 10;
		p.ctx = 0xc0;
		p.pd = 0xd0;
		p.qp = qp;
		p.qp_num = qpn;
		p.qp_type = IBV_QPT_RC;
		p.send_cq = scq;
		p.recv_cq = rcq;
		p.max_send_wr = max_send;
		p.max_recv_wr = max_recv;
		p.max_inline_data = max_inline;
		p.sq_sig_all = sig_all;
		put(ev, ts);
	}
	void modify(uint64_t ts, uint64_t qp, int state, uint64_t dest = 0,
		    uint64_t mtu = 5, uint64_t psn = 0, uint64_t retry = 7,
		    uint64_t rnr_retry = 7)
	{
		rbt_event ev{};
		ev.type = RBT_EV_QP_MODIFY;
		auto &p = ev.u.qp_modify;
		p.ts_exit = ts + 10;
		p.qp = qp;
		p.qp_state = state;
		p.attr_mask = IBV_QP_STATE;
		if (state == IBV_QPS_RTR) {
			p.attr_mask |= IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MIN_RNR_TIMER | IBV_QP_AV;
			p.dest_qp_num = dest;
			p.path_mtu = mtu;
			p.rq_psn = psn;
			p.min_rnr_timer = 12;
		}
		if (state == IBV_QPS_RTS) {
			p.attr_mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				       IBV_QP_RNR_RETRY;
			p.sq_psn = psn;
			p.timeout = 14;
			p.retry_cnt = retry;
			p.rnr_retry = rnr_retry;
		}
		put(ev, ts);
	}
	// RESET -> INIT -> RTR -> RTS, 100 ns apart
	void connect(uint64_t ts, uint64_t qp, uint64_t dest, uint64_t mtu = 5,
		     uint64_t rq_psn = 0, uint64_t sq_psn = 0, uint64_t rnr_retry = 7)
	{
		modify(ts, qp, IBV_QPS_INIT);
		modify(ts + 100, qp, IBV_QPS_RTR, dest, mtu, rq_psn);
		modify(ts + 200, qp, IBV_QPS_RTS, dest, mtu, sq_psn, 7, rnr_retry);
	}
	void post(uint64_t ts, uint64_t exit, uint64_t qp, uint32_t qpn,
		  std::vector<rbt_send_wr> wrs, std::vector<rbt_sge> &sges,
		  int64_t ret = 0, uint32_t stream = 0)
	{
		rbt_event ev{};
		ev.type = RBT_EV_POST_SEND;
		ev.stream = stream;
		auto &p = ev.u.post_send;
		p.ts_exit = exit;
		p.ret = ret;
		p.qp = qp;
		p.qp_num = qpn;
		for (auto &w : wrs)
			if (!w.n_sges) {
				w.n_sges = 1;
				w.sges = &sges[0];
			}
		p.n_wrs = (uint32_t)wrs.size();
		p.wrs = wrs.data();
		put(ev, ts);
	}
	void recv(uint64_t ts, uint64_t exit, uint64_t qp, uint32_t qpn,
		  std::vector<uint64_t> ids)
	{
		std::vector<rbt_recv_wr> wrs(ids.size());
		for (size_t i = 0; i < ids.size(); i++)
			wrs[i].wr_id = ids[i];
		rbt_event ev{};
		ev.type = RBT_EV_POST_RECV;
		auto &p = ev.u.post_recv;
		p.ts_exit = exit;
		p.qp = qp;
		p.qp_num = qpn;
		p.n_wrs = (uint32_t)wrs.size();
		p.wrs = wrs.data();
		put(ev, ts);
	}
	void poll(uint64_t ts, uint64_t exit, uint64_t cq, std::vector<rbt_wc> wcs,
		  uint64_t count = 1, uint32_t stream = 0, uint64_t asked = 16)
	{
		rbt_event ev{};
		ev.type = RBT_EV_POLL_CQ;
		ev.stream = stream;
		auto &p = ev.u.poll_cq;
		p.ts_exit = exit;
		p.ret = (int64_t)wcs.size();
		p.cq = cq;
		p.asked = asked;
		p.count = count;
		p.n_wcs = (uint32_t)wcs.size();
		p.wcs = wcs.data();
		put(ev, ts);
	}
	void clock(uint64_t ts, uint64_t nic, uint64_t nic_hz)
	{
		rbt_event ev{};
		ev.type = RBT_EV_CLOCK_SAMPLE;
		ev.u.clock_sample.ctx = 0xc0;
		ev.u.clock_sample.nic_ts = nic;
		ev.u.clock_sample.nic_hz = nic_hz;
		put(ev, ts);
	}
	void mr(uint64_t ts, uint64_t mr, uint64_t addr, uint64_t len, uint64_t lkey)
	{
		rbt_event ev{};
		ev.type = RBT_EV_MR_REG;
		auto &p = ev.u.mr_reg;
		p.ts_exit = ts + 5000;
		p.pd = 0xd0;
		p.mr = mr;
		p.addr = addr;
		p.length = len;
		p.lkey = lkey;
		p.rkey = lkey + 1;
		p.access = 7;
		put(ev, ts);
	}
	void dereg(uint64_t ts, uint64_t mr)
	{
		rbt_event ev{};
		ev.type = RBT_EV_MR_DEREG;
		ev.u.mr_dereg.ts_exit = ts + 1000;
		ev.u.mr_dereg.mr = mr;
		put(ev, ts);
	}
	void destroy_qp(uint64_t ts, uint64_t qp)
	{
		rbt_event ev{};
		ev.type = RBT_EV_QP_DESTROY;
		ev.u.qp_destroy.ts_exit = ts + 100;
		ev.u.qp_destroy.qp = qp;
		put(ev, ts);
	}
};

rbt_header header(uint32_t pid, uint64_t real_ns = 1700000000000000000ull)
{
	rbt_header h{};
	h.pid = pid;
	h.clock_source = RBT_CLOCK_MONO;
	h.clock_hz = 1000000000ull;
	h.start.ticks = 0;
	h.start.mono_ns = 0;
	h.start.real_ns = real_ns;
	h.host = "testhost";
	h.cmdline = "synthetic";
	h.tool = "analyzer_test";
	return h;
}

rbt_send_wr swr(uint64_t id, int op = IBV_WR_SEND, unsigned flags = IBV_SEND_SIGNALED)
{
	rbt_send_wr w{};
	w.wr_id = id;
	w.opcode = op;
	w.send_flags = flags;
	return w;
}

rbt_wc wc(uint64_t id, uint32_t qpn, int status = IBV_WC_SUCCESS, int op = IBV_WC_SEND,
	  uint64_t hw_ts = 0, uint64_t len = 64)
{
	rbt_wc c{};
	c.wr_id = id;
	c.qp_num = qpn;
	c.status = status;
	c.opcode = op;
	c.hw_ts = hw_ts;
	c.byte_len = len;
	return c;
}

struct Fixture {
	rbt_analyzer *an = nullptr;
	std::vector<Trace> t;
	std::vector<rbt_sge> sges;
	explicit Fixture(int n = 1, FILE *perfetto = nullptr,
			 const rbt_analyzer_filter *filter = nullptr, bool series = false,
			 bool perfetto_json = true)
	{
		rbt_analyzer_opts o{};
		o.perfetto = perfetto;
		o.filter = filter;
		o.series = series;
		o.perfetto_json = perfetto_json;
		EXPECT_EQ(0, rbt_analyzer_create(&o, &an));
		for (int i = 0; i < n; i++) {
			rbt_header h = header(1000 + i);
			Trace tr;
			tr.an = an;
			tr.idx = rbt_analyzer_add_trace(an, &h, i ? "server" : "client");
			tr.tid = 100 + i;
			t.push_back(tr);
		}
		rbt_sge s{};
		s.addr = 0x10000;
		s.length = 64;
		s.lkey = 0x42;
		sges.push_back(s);
	}
	~Fixture()
	{
		rbt_analyzer_destroy(an);
	}
	void finish()
	{
		ASSERT_EQ(0, rbt_analyzer_finish(an));
	}
	const rbt_finding *find(const char *code, int *n = nullptr)
	{
		const rbt_finding *f;
		int nf = rbt_analyzer_findings(an, &f);
		const rbt_finding *first = nullptr;
		int c = 0;
		for (int i = 0; i < nf; i++)
			if (!strcmp(f[i].code, code)) {
				if (!first)
					first = &f[i];
				c++;
			}
		if (n)
			*n = c;
		return first;
	}
	int serious()
	{
		const rbt_finding *f;
		int nf = rbt_analyzer_findings(an, &f), c = 0;
		for (int i = 0; i < nf; i++)
			if (f[i].severity >= RBT_SEV_WARNING) {
				c++;
				fprintf(stderr, "unexpected finding: %s: %s\n%s",
					f[i].code, f[i].title, f[i].evidence);
			}
		return c;
	}
	rbt_phase_summary phase(rbt_phase p, int trace = -1, int opcode = -1)
	{
		rbt_phase_summary s{};
		rbt_analyzer_phase(an, trace, 0, opcode, p, &s);
		return s;
	}
};

constexpr uint64_t CQ = 0xcc00, QP = 0xaa00, QPN = 0x11, PEER = 0x22;

// One QP posting SENDs with known phases: post 200 ns, NIC 5 us, poll 3 us. The NIC
// clock runs at 500 MHz with an offset; samples every 100 us.
void known_phases(Fixture &fx, bool nic, int n = 200, uint64_t empty_every = 500)
{
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
	auto nic_of = [](uint64_t host) { return (host - 1000) / 2 + 7777777; };
	uint64_t t = 10000;
	uint64_t next_sample = 0;
	for (int i = 0; i < n; i++) {
		if (nic && t >= next_sample) {
			c.clock(t, nic_of(t), 500000000);
			next_sample = t + 100000;
		}
		uint64_t post_exit = t + 200, comp = post_exit + 5000,
			 poll_exit = comp + 3000;
		c.post(t, post_exit, QP, QPN, { swr(i) }, fx.sges);
		// empty polls until the completion: the last one starts within empty_every
		// of it
		uint64_t e0 = post_exit + 100;
		uint64_t last = comp - 1 - (comp - e0) % empty_every;
		uint64_t cnt = (last - e0) / empty_every + 1;
		c.poll(e0, last + 50, CQ, {}, cnt);
		c.poll(poll_exit - 100, poll_exit, CQ,
		       { wc(i, QPN, 0, IBV_WC_SEND, nic ? nic_of(comp) : 0) });
		t = poll_exit + 1000;
	}
}

TEST(Analyzer, PhasesWithNicTimestamps)
{
	Fixture fx;
	known_phases(fx, true);
	fx.finish();
	struct rbt_analyzer_counts cnt;
	rbt_analyzer_counts(fx.an, &cnt);
	EXPECT_EQ(200u, cnt.wrs_completed);
	EXPECT_EQ(200u, cnt.wrs_nic_exact);
	EXPECT_EQ(0u, cnt.unmatched_completions);
	EXPECT_EQ(0u, cnt.nic_outside_bound);
	auto post = fx.phase(RBT_PHASE_POST), nicp = fx.phase(RBT_PHASE_NIC),
	     poll = fx.phase(RBT_PHASE_POLL), e2e = fx.phase(RBT_PHASE_E2E);
	EXPECT_NEAR(200, post.p50, 200 * 0.02);
	EXPECT_NEAR(5000, nicp.p50, 5000 * 0.02);
	EXPECT_NEAR(5000, nicp.p99, 5000 * 0.02);
	EXPECT_NEAR(3000, poll.p50, 3000 * 0.02);
	EXPECT_NEAR(8200, e2e.p50, 8200 * 0.02);
	rbt_clock_fit fit;
	ASSERT_EQ(0, rbt_analyzer_clock_fit(fx.an, 0, &fit));
	EXPECT_GT(fit.samples, 10u);
	EXPECT_NEAR(2.0, fit.ns_per_nic_tick, 1e-6);
	EXPECT_LT(fit.max_residual_ns, 2.0); // integer division in nic_of: < 1 tick
	EXPECT_EQ(0, fx.serious());
}

// Zooming in: WR i of known_phases is posted at 10000 + 9200 i ns and polled 8200 ns
// later. A WR belongs to the window [from, to) by its post: one posted before it and
// completed inside is not counted, one posted inside and completed after is, whole.
TEST(Filter, WindowCountsWrsByTheirPost)
{
	auto run = [](const rbt_analyzer_filter &f, struct rbt_analyzer_counts *cnt,
		      rbt_phase_summary *e2e) {
		Fixture fx(1, nullptr, &f);
		known_phases(fx, true);
		fx.finish();
		rbt_analyzer_counts(fx.an, cnt);
		*e2e = fx.phase(RBT_PHASE_E2E);
	};
	struct rbt_analyzer_counts a, b, c;
	rbt_phase_summary ea, eb, ec;
	rbt_analyzer_filter f{};
	f.has_to = 1;
	f.to_ns = 10000 + 9200 * 50 + 5000; // inside WR 50's NIC phase
	run(f, &a, &ea);
	EXPECT_EQ(51u, a.wrs_completed); // WRs 0..50, 50 completing after the window
	EXPECT_NEAR(8200, ea.max, 8200 * 0.02);
	f = {};
	f.has_from = f.has_to = 1;
	f.from_ns = 10000 + 9200 * 50 + 5000;
	f.to_ns = 10000 + 9200 * 150; // WR 150's post: outside, half-open
	run(f, &b, &eb);
	EXPECT_EQ(99u, b.wrs_completed); // 51..149: not 50, posted before
	EXPECT_EQ(99u, eb.count);
	EXPECT_NEAR(8200, eb.p50, 8200 * 0.02);
	f.has_to = 0;
	run(f, &c, &ec);
	EXPECT_EQ(149u, c.wrs_completed);
	EXPECT_EQ(200u, a.wrs_completed + c.wrs_completed);
	EXPECT_EQ(0u, c.outstanding_at_end);
	// another QP, another process, another thread: nothing
	for (int k = 0; k < 3; k++) {
		f = {};
		if (k == 0)
			f.qps[f.n_qps++] = QPN + 1;
		else if (k == 1)
			f.has_pid = 1, f.pid = 999;
		else
			f.has_tid = 1, f.tid = 7;
		run(f, &a, &ea);
		EXPECT_EQ(0u, a.wrs_completed) << k;
	}
	f = {};
	f.qps[f.n_qps++] = QPN;
	f.has_pid = 1;
	f.pid = 1000;
	f.has_tid = 1;
	f.tid = 100;
	run(f, &a, &ea);
	EXPECT_EQ(200u, a.wrs_completed);
	f.n_qps = RBT_ANALYZER_FILTER_QPS + 1;
	rbt_analyzer_opts o{};
	o.filter = &f;
	rbt_analyzer *an = nullptr;
	EXPECT_EQ(-EINVAL, rbt_analyzer_create(&o, &an));
}

// Findings: kept when about a selected QP and proved inside the window.
TEST(Filter, FindingsInsideTheWindow)
{
	for (int inside = 0; inside < 2; inside++) {
		rbt_analyzer_filter f{};
		f.has_from = 1;
		f.from_ns = inside ? 4000 : 6000;
		Fixture fx(1, nullptr, &f);
		Trace &c = fx.t[0];
		c.cq(1000, CQ, 256);
		c.qp(2000, QP, QPN, CQ, CQ);
		c.modify(3000, QP, IBV_QPS_INIT);
		c.post(5000, 5200, QP, QPN, { swr(1) }, fx.sges); // in INIT
		fx.finish();
		EXPECT_EQ(inside != 0, fx.find("post_not_rts") != nullptr) << inside;
	}
}

TEST(Analyzer, BoundsWithoutNicTimestampsContainTruth)
{
	Fixture fx;
	known_phases(fx, false, 200, 700);
	fx.finish();
	struct rbt_analyzer_counts cnt;
	rbt_analyzer_counts(fx.an, &cnt);
	EXPECT_EQ(200u, cnt.wrs_bounded);
	EXPECT_EQ(0u, cnt.wrs_nic_exact);
	// no made-up point: the exact phases are absent
	rbt_phase_summary s;
	EXPECT_EQ(-ENOENT, rbt_analyzer_phase(fx.an, -1, 0, -1, RBT_PHASE_NIC, &s));
	auto lo = fx.phase(RBT_PHASE_NIC_LO), hi = fx.phase(RBT_PHASE_NIC_HI),
	     poll_hi = fx.phase(RBT_PHASE_POLL_HI);
	// every WR's bound contains 5000, so every order statistic does
	EXPECT_LE(lo.max, 5000 * 1.02);
	EXPECT_GE(hi.p50, 5000);
	EXPECT_GE(poll_hi.p50, 3000 * 0.98);
	// and the bound is as tight as the polling: empty polls 700 ns apart, folded
	// into one event (the last one's start is estimated within two periods)
	EXPECT_GE(lo.p50, 5000 - 2 * 700);
	EXPECT_LE(poll_hi.p50, (3000 + 2 * 700) * 1.02);
}

TEST(Analyzer, UnsignaledCompleteWithNextSignaled)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
	uint64_t t = 10000;
	for (int i = 0; i < 50; i++) {
		// a chain of 4: only the last is signaled
		c.post(t, t + 400, QP, QPN,
		       { swr(4 * i, IBV_WR_RDMA_WRITE, 0),
			 swr(4 * i + 1, IBV_WR_RDMA_WRITE, 0),
			 swr(4 * i + 2, IBV_WR_RDMA_WRITE, 0),
			 swr(4 * i + 3, IBV_WR_RDMA_WRITE) },
		       fx.sges);
		c.poll(t + 3000, t + 3100, CQ,
		       { wc(4 * i + 3, QPN, 0, IBV_WC_RDMA_WRITE) });
		t += 5000;
	}
	fx.finish();
	struct rbt_analyzer_counts cnt;
	rbt_analyzer_counts(fx.an, &cnt);
	EXPECT_EQ(200u, cnt.wrs_completed);
	EXPECT_EQ(0u, cnt.outstanding_at_end);
	auto post = fx.phase(RBT_PHASE_POST, -1, IBV_WR_RDMA_WRITE);
	EXPECT_EQ(200u, post.count);
	EXPECT_NEAR(100, post.p50, 2); // 400 ns shared by 4 WRs
	auto e2e = fx.phase(RBT_PHASE_E2E);
	EXPECT_NEAR(100 + 2700, e2e.p50, 2800 * 0.02);
}

// perftest: one wr_id for every WR, every 100th signaled.
TEST(Analyzer, UnsignaledWithTheSameWrId)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
	uint64_t t = 10000;
	for (int i = 0; i < 1000; i++) {
		bool sig = i % 100 == 99;
		c.post(t, t + 100, QP, QPN,
		       { swr(0, IBV_WR_SEND,
			     sig ? IBV_SEND_SIGNALED | IBV_SEND_INLINE
				 : IBV_SEND_INLINE) },
		       fx.sges);
		if (sig)
			c.poll(t + 1000, t + 1100, CQ, { wc(0, QPN) });
		t += 2000;
	}
	fx.finish();
	struct rbt_analyzer_counts cnt;
	rbt_analyzer_counts(fx.an, &cnt);
	EXPECT_EQ(1000u, cnt.wrs_completed);
	EXPECT_EQ(0u, cnt.outstanding_at_end);
}

TEST(Analyzer, ReceiveWaitReportedApart)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
	uint64_t t = 10000;
	for (int i = 0; i < 100; i++) {
		c.recv(t, t + 100, QP, QPN, { 1000u + i });
		// the peer sends 50 us later; the completion is polled 1 us after
		c.poll(t + 50100, t + 51100, CQ,
		       { wc(1000 + i, QPN, 0, IBV_WC_RECV, 0, 512) }, 1, 0, 1);
		t += 60000;
	}
	fx.finish();
	auto wait = fx.phase(RBT_PHASE_RECV_WAIT, -1, 128);
	EXPECT_EQ(100u, wait.count);
	EXPECT_NEAR(51000, wait.p50, 51000 * 0.02);
	// receives are not send latency
	rbt_phase_summary s;
	EXPECT_EQ(-ENOENT, rbt_analyzer_phase(fx.an, -1, 0, -1, RBT_PHASE_E2E, &s));
}

TEST(Analyzer, CompletionBeforePostAcrossThreads)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
	// the poller thread's chunk comes first in the file
	for (int i = 0; i < 10; i++)
		c.poll(20000 + i * 1000, 20100 + i * 1000, CQ, { wc(i, QPN) }, 1, 200);
	for (int i = 0; i < 10; i++)
		c.post(10000 + i * 1000, 10200 + i * 1000, QP, QPN, { swr(i) }, fx.sges,
		       0, 100);
	fx.finish();
	struct rbt_analyzer_counts cnt;
	rbt_analyzer_counts(fx.an, &cnt);
	EXPECT_EQ(10u, cnt.wrs_completed);
	EXPECT_EQ(0u, cnt.unmatched_completions);
	EXPECT_EQ(0u, cnt.outstanding_at_end);
	EXPECT_NEAR(10100 - 200, fx.phase(RBT_PHASE_E2E).p50, 10100 * 0.02);
}

TEST(Analyzer, JoinsOnQpAndWrIdNotWrIdAlone)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.qp(2100, QP + 1, QPN + 1, CQ, CQ);
	c.connect(3000, QP, PEER);
	c.connect(3000, QP + 1, PEER + 1);
	// same wr_id on two QPs; QP 2's completion comes first
	c.post(10000, 10100, QP, QPN, { swr(7) }, fx.sges);
	c.post(11000, 11100, QP + 1, QPN + 1, { swr(7) }, fx.sges);
	c.poll(15000, 15100, CQ, { wc(7, QPN + 1) });
	c.poll(30000, 30100, CQ, { wc(7, QPN) });
	fx.finish();
	rbt_phase_summary s{};
	ASSERT_EQ(0, rbt_analyzer_phase(fx.an, 0, QPN, -1, RBT_PHASE_E2E, &s));
	EXPECT_NEAR(20100, s.p50, 20100 * 0.02);
	ASSERT_EQ(0, rbt_analyzer_phase(fx.an, 0, QPN + 1, -1, RBT_PHASE_E2E, &s));
	EXPECT_NEAR(4100, s.p50, 4100 * 0.02);
}

// ---- diagnoses ----

TEST(Diagnose, QpErrorWithSetup)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, 0x999);
	c.post(10000, 10100, QP, QPN, { swr(1), swr(2) }, fx.sges);
	c.poll(900000, 900100, CQ,
	       { wc(1, QPN, IBV_WC_RETRY_EXC_ERR), wc(2, QPN, IBV_WC_WR_FLUSH_ERR) });
	fx.finish();
	const rbt_finding *f = fx.find("qp_error");
	ASSERT_TRUE(f);
	EXPECT_EQ(RBT_SEV_ERROR, f->severity);
	EXPECT_EQ(QPN, f->qp_num);
	EXPECT_NEAR(900000, f->time_ns, 1);
	EXPECT_NE(nullptr, strstr(f->title, "RETRY_EXC_ERR"));
	EXPECT_NE(nullptr, strstr(f->evidence, "dest_qp_num=0x999"));
	EXPECT_NE(nullptr, strstr(f->evidence, "retry_cnt=7"));
	EXPECT_NE(nullptr,
		  strstr(f->evidence, "1 further WRs completed with WR_FLUSH_ERR"));
	EXPECT_NE(nullptr, strstr(f->advice, "dest QP"));
}

TEST(Diagnose, RnrWithPeerEvidence)
{
	Fixture fx(2);
	Trace &c = fx.t[0], &s = fx.t[1];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER, 5, 0, 0, /*rnr_retry=*/0);
	s.cq(1000, CQ + 1, 256);
	s.qp(2000, QP + 1, PEER, CQ + 1, CQ + 1);
	s.connect(3000, QP + 1, QPN);
	// the server posts one receive, it is consumed, the next is posted late
	s.recv(5000, 5100, QP + 1, PEER, { 1 });
	c.post(10000, 10100, QP, QPN, { swr(1) }, fx.sges);
	s.poll(12000, 12100, CQ + 1, { wc(1, PEER, 0, IBV_WC_RECV) });
	c.poll(13000, 13100, CQ, { wc(1, QPN) });
	c.post(20000, 20100, QP, QPN, { swr(2) }, fx.sges);
	c.poll(60000, 60100, CQ, { wc(2, QPN, IBV_WC_RNR_RETRY_EXC_ERR) });
	s.recv(500000, 500100, QP + 1, PEER, { 2 });
	fx.finish();
	const rbt_finding *f = fx.find("rnr_retry_exceeded");
	ASSERT_TRUE(f);
	EXPECT_EQ(RBT_SEV_ERROR, f->severity);
	EXPECT_NE(nullptr, strstr(f->evidence, "rnr_retry=0"));
	EXPECT_NE(nullptr, strstr(f->evidence, "min_rnr_timer=12"));
	EXPECT_NE(nullptr, strstr(f->evidence, "receive queue ran empty 1 times"));
	EXPECT_NE(nullptr, strstr(f->advice, "rnr_retry=7"));
}

TEST(Diagnose, CqTooSmall)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 4);
	c.qp(2000, QP, QPN, CQ, CQ, 16, 0);
	c.connect(3000, QP, PEER);
	std::vector<rbt_send_wr> wrs;
	for (int i = 0; i < 10; i++)
		wrs.push_back(swr(i));
	c.post(10000, 10500, QP, QPN, wrs, fx.sges);
	std::vector<rbt_wc> wcs;
	for (int i = 0; i < 10; i++)
		wcs.push_back(wc(i, QPN));
	c.poll(50000, 50100, CQ, wcs);
	fx.finish();
	const rbt_finding *f = fx.find("cq_too_small");
	ASSERT_TRUE(f);
	EXPECT_NE(nullptr, strstr(f->title, "10 completions outstanding, depth 4"));
}

TEST(Diagnose, AllSignaledAndOneWrPerDoorbellOnBusyQp)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 4096);
	c.qp(2000, QP, QPN, CQ, CQ, 1024, 16);
	c.connect(3000, QP, PEER);
	uint64_t t = 10000;
	for (int i = 0; i < 2000; i += 2) {
		c.post(t, t + 100, QP, QPN, { swr(i, IBV_WR_RDMA_WRITE) }, fx.sges);
		c.post(t + 200, t + 300, QP, QPN, { swr(i + 1, IBV_WR_RDMA_WRITE) },
		       fx.sges);
		c.poll(t + 2000, t + 2100, CQ,
		       { wc(i, QPN, 0, IBV_WC_RDMA_WRITE),
			 wc(i + 1, QPN, 0, IBV_WC_RDMA_WRITE) });
		t += 3000;
	}
	fx.finish();
	const rbt_finding *f = fx.find("all_signaled");
	ASSERT_TRUE(f);
	EXPECT_EQ(RBT_SEV_WARNING, f->severity);
	EXPECT_NE(nullptr, strstr(f->evidence, "2000 of 2000 send WRs signaled"));
	const rbt_finding *g = fx.find("one_wr_per_doorbell");
	ASSERT_TRUE(g);
	EXPECT_EQ(RBT_SEV_INFO, g->severity);
}

TEST(Diagnose, SmallMessagesNotInlined)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ, 128, 128, /*max_inline=*/64);
	c.connect(3000, QP, PEER);
	uint64_t t = 10000;
	for (int i = 0; i < 150; i++) {
		c.post(t, t + 100, QP, QPN, { swr(i) }, fx.sges); // 64 bytes, no INLINE
		c.poll(t + 1000, t + 1100, CQ, { wc(i, QPN) });
		t += 2000;
	}
	fx.finish();
	const rbt_finding *f = fx.find("not_inlined");
	ASSERT_TRUE(f);
	EXPECT_NE(nullptr, strstr(f->evidence, "150 of 150"));
	EXPECT_NE(nullptr, strstr(f->evidence, "max_inline_data=64"));
}

TEST(Diagnose, UnalignedBuffers)
{
	Fixture fx;
	fx.sges[0].addr = 0x10008;
	fx.sges[0].length = 4096;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
	uint64_t t = 10000;
	for (int i = 0; i < 20; i++) {
		c.post(t, t + 100, QP, QPN, { swr(i) }, fx.sges);
		c.poll(t + 1000, t + 1100, CQ, { wc(i, QPN) });
		t += 2000;
	}
	fx.finish();
	const rbt_finding *f = fx.find("unaligned_buffer");
	ASSERT_TRUE(f);
	EXPECT_NE(nullptr, strstr(f->evidence, "20 of 20"));
}

// The MR tests' start: a CQ, the MR of lkey 0x42, QP connected to PEER.
static void mr_test_start(Trace &c)
{
	c.cq(1000, CQ, 256);
	c.mr(1500, 0xe0, 0x10000, 65536, 0x42);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
}

TEST(Diagnose, MrOnDataPathAndDeregBeforeQp)
{
	Fixture fx;
	Trace &c = fx.t[0];
	mr_test_start(c);
	uint64_t t = 10000;
	for (int i = 0; i < 20; i++) {
		if (i == 10)
			c.mr(t - 6000, 0xe1 + i, 0x900000, 4096,
			     0x100 + i); // on the data path
		c.post(t, t + 100, QP, QPN, { swr(i) }, fx.sges);
		c.poll(t + 1000, t + 1100, CQ, { wc(i, QPN) });
		t += 20000;
	}
	c.dereg(t, 0xe0); // the QP still exists
	c.destroy_qp(t + 5000, QP);
	fx.finish();
	const rbt_finding *f = fx.find("mr_on_datapath");
	ASSERT_TRUE(f);
	EXPECT_NE(nullptr, strstr(f->title, "1 MR registrations"));
	const rbt_finding *g = fx.find("mr_dereg_before_qp");
	ASSERT_TRUE(g);
	EXPECT_EQ(QPN, g->qp_num);
	EXPECT_NE(nullptr, strstr(g->evidence, "lkey=0x42"));
}

TEST(Diagnose, MrRegisteredUpFrontIsNotDataPath)
{
	Fixture fx;
	Trace &c = fx.t[0];
	mr_test_start(c);
	c.post(10000, 10100, QP, QPN, { swr(1) }, fx.sges);
	c.poll(11000, 11100, CQ, { wc(1, QPN) });
	c.destroy_qp(20000, QP);
	c.dereg(21000, 0xe0); // after the last post and after the QP: fine
	fx.finish();
	EXPECT_FALSE(fx.find("mr_on_datapath"));
	EXPECT_FALSE(fx.find("mr_dereg_before_qp"));
}

// perftest -R: a handshake over a first QP (a few posts), then the data buffer is
// registered and the QP that uses it is created and connected: setup, not the
// data path. A registration between two posts of the traffic still is.
TEST(Diagnose, MrRegisteredBeforeItsQpAfterAHandshakeIsNotDataPath)
{
	const uint64_t QP2 = 0xa2;
	const uint32_t QPN2 = 0x33;
	for (bool mid_traffic : { false, true }) {
		Fixture fx;
		Trace &c = fx.t[0];
		mr_test_start(c);
		uint64_t t = 10000;
		for (int i = 0; i < 4; i++, t += 20000) { // the handshake
			c.post(t, t + 100, QP, QPN, { swr(i) }, fx.sges);
			c.poll(t + 1000, t + 1100, CQ, { wc(i, QPN) });
		}
		c.mr(t, 0xe1, 0x900000, 1 << 20, 0x77);
		t += 10000;
		c.qp(t, QP2, QPN2, CQ, CQ);
		c.connect(t + 1000, QP2, PEER + 1);
		t += 10000;
		for (int i = 0; i < 20; i++, t += 20000) {
			if (mid_traffic && i == 10)
				c.mr(t - 10000, 0xe2, 0xa00000, 4096, 0x88);
			c.post(t, t + 100, QP2, QPN2, { swr(100 + i) }, fx.sges);
			c.poll(t + 1000, t + 1100, CQ, { wc(100 + i, QPN2) });
		}
		c.destroy_qp(t, QP2);
		c.destroy_qp(t + 100, QP);
		fx.finish();
		const rbt_finding *f = fx.find("mr_on_datapath");
		if (!mid_traffic) {
			EXPECT_FALSE(f) << f->evidence;
			continue;
		}
		ASSERT_TRUE(f);
		EXPECT_NE(nullptr, strstr(f->title, "1 MR registrations")) << f->title;
		// the setup registration's 5 us are not counted: only the one in traffic
		EXPECT_NE(nullptr, strstr(f->evidence, "0.005 ms spent")) << f->evidence;
	}
}

TEST(Diagnose, PostOnQpNotInRts)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.modify(3000, QP, IBV_QPS_INIT);
	c.post(4000, 4100, QP, QPN, { swr(1) }, fx.sges, -EINVAL);
	fx.finish();
	const rbt_finding *f = fx.find("post_not_rts");
	ASSERT_TRUE(f);
	EXPECT_NE(nullptr, strstr(f->evidence, "in state INIT"));
	EXPECT_NEAR(4000, f->time_ns, 1);
}

TEST(Diagnose, ModifyToRtsOnAnotherThreadSeenLateIsNoFinding)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.modify(3000, QP, IBV_QPS_INIT);
	c.modify(3100, QP, IBV_QPS_RTR, PEER);
	// the post's chunk precedes the chunk with the modify to RTS (at 3200)
	c.post(4000, 4100, QP, QPN, { swr(1) }, fx.sges, 0, 300);
	c.modify(3200, QP, IBV_QPS_RTS, PEER);
	c.poll(5000, 5100, CQ, { wc(1, QPN) });
	fx.finish();
	EXPECT_FALSE(fx.find("post_not_rts"));
}

// rdma_cm: an active id in one trace, its passive peer in the other; the active
// side keeps posting after DISCONNECTED; a second active id is refused with
// REJECTED 8. The connection section pairs the two ids by their QP numbers.
static void cm_call(Trace &t, uint64_t ts, uint64_t fn, uint64_t id, uint64_t qp = 0,
		    uint64_t qpn = 0, const char *dst = "")
{
	rbt_event ev{};
	ev.type = RBT_EV_CM_CALL;
	ev.u.cm_call.ts_exit = ts + 10;
	ev.u.cm_call.fn = fn;
	ev.u.cm_call.id = id;
	ev.u.cm_call.qp = qp;
	ev.u.cm_call.qp_num = qpn;
	ev.u.cm_call.dst = dst;
	t.put(ev, ts);
}
static void cm_ev(Trace &t, uint64_t ts, uint64_t id, uint64_t type, int64_t status,
		  uint64_t peer_qpn, uint64_t evh, uint64_t listen = 0)
{
	rbt_event ev{};
	ev.type = RBT_EV_CM_EVENT;
	ev.u.cm_event.ts_exit = ts + 100;
	ev.u.cm_event.id = id;
	ev.u.cm_event.listen_id = listen;
	ev.u.cm_event.ev = evh;
	ev.u.cm_event.event = type;
	ev.u.cm_event.status = status;
	ev.u.cm_event.conn_qp_num = peer_qpn;
	t.put(ev, ts);
	rbt_event ack{};
	ack.type = RBT_EV_CM_ACK;
	ack.u.cm_ack.ev = evh;
	ack.u.cm_ack.id = id;
	ack.u.cm_ack.event = type;
	t.put(ack, ts + 150);
}

TEST(Diagnose, CmConnectionsFindingsAndPairing)
{
	Fixture fx(2);
	Trace &c = fx.t[0], &s = fx.t[1];
	c.cq(1000, CQ, 256);
	c.qp(1100, QP, QPN, CQ, CQ);
	cm_call(c, 1000, RBT_CM_CREATE_ID, 0xa1);
	cm_call(c, 1200, RBT_CM_RESOLVE_ADDR, 0xa1, 0, 0, "10.0.0.2:7471");
	cm_ev(c, 1300, 0xa1, 0 /* ADDR_RESOLVED */, 0, 0, 0xe1);
	cm_call(c, 1600, RBT_CM_RESOLVE_ROUTE, 0xa1);
	cm_ev(c, 1700, 0xa1, 2 /* ROUTE_RESOLVED */, 0, 0, 0xe1);
	cm_call(c, 2000, RBT_CM_CONNECT, 0xa1, QP, QPN);
	cm_ev(c, 2500, 0xa1, 9 /* ESTABLISHED */, 0, 77, 0xe1);
	cm_ev(c, 5000, 0xa1, 10 /* DISCONNECTED */, 0, 0, 0xe1);
	c.modify(3000, QP, IBV_QPS_RTS);
	c.post(6000, 6100, QP, QPN, { swr(1) }, fx.sges);
	cm_call(c, 7000, RBT_CM_CREATE_ID, 0xa2);
	cm_call(c, 7100, RBT_CM_CONNECT, 0xa2);
	cm_ev(c, 7200, 0xa2, 8 /* REJECTED */, 8, 0, 0xe2);
	cm_call(s, 1000, RBT_CM_LISTEN, 0xb0);
	cm_ev(s, 2100, 0xb1, 4 /* CONNECT_REQUEST */, 0, QPN, 0xe3, 0xb0);
	cm_call(s, 2300, RBT_CM_ACCEPT, 0xb1, 0x77, 77);
	fx.finish();
	const rbt_finding *f = fx.find("cm_qp_after_disconnect");
	ASSERT_TRUE(f);
	EXPECT_EQ(QPN, f->qp_num);
	f = fx.find("cm_no_listener");
	ASSERT_TRUE(f);
	EXPECT_NE(nullptr, strstr(f->evidence, "REJECTED status 8"));
	EXPECT_EQ(nullptr, fx.find("cm_rejected"));
	char *buf = nullptr;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	ASSERT_EQ(0, rbt_analyzer_write_text(fx.an, m));
	fclose(m);
	std::string text(buf, len);
	free(buf);
	EXPECT_NE(std::string::npos, text.find("== connections (rdma_cm): 4 ids"))
		<< text;
	EXPECT_NE(std::string::npos, text.find("connect -> ESTABLISHED 0.6 us")) << text;
	EXPECT_NE(std::string::npos, text.find("address resolution 0.2 us")) << text;
	EXPECT_NE(std::string::npos, text.find("CONNECT_REQUEST -> accept 0.1 us"))
		<< text;
	EXPECT_NE(std::string::npos, text.find("peer: trace 1 id 0xb1")) << text;
	EXPECT_NE(std::string::npos, text.find("peer: trace 0 id 0xa1")) << text;
}

TEST(Diagnose, MtuPsnAndDestQpnAcrossTraces)
{
	Fixture fx(2);
	Trace &c = fx.t[0], &s = fx.t[1];
	c.cq(1000, CQ, 256);
	s.cq(1000, CQ + 1, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	s.qp(2000, QP + 1, PEER, CQ + 1, CQ + 1);
	c.connect(3000, QP, PEER, /*mtu=*/5, /*rq_psn=*/100, /*sq_psn=*/200);
	s.connect(3000, QP + 1, QPN, /*mtu=*/3, /*rq_psn=*/201, /*sq_psn=*/100);
	// a third QP naming a QP number nobody has
	c.qp(4000, QP + 2, 0x33, CQ, CQ);
	c.connect(5000, QP + 2, 0x777);
	fx.finish();
	const rbt_finding *m = fx.find("mtu_mismatch");
	ASSERT_TRUE(m);
	EXPECT_NE(nullptr, strstr(m->evidence, "path_mtu=5"));
	EXPECT_NE(nullptr, strstr(m->evidence, "path_mtu=3"));
	int n = 0;
	const rbt_finding *p = fx.find("psn_mismatch", &n);
	ASSERT_TRUE(p);
	EXPECT_EQ(1, n); // client 200 vs server expects 201; server 100 == client 100
	EXPECT_NE(nullptr, strstr(p->evidence, "sq_psn=200"));
	EXPECT_NE(nullptr, strstr(p->evidence, "rq_psn=201"));
	const rbt_finding *d = fx.find("dest_qpn_unmatched");
	ASSERT_TRUE(d);
	EXPECT_EQ(0x33u, d->qp_num);
}

TEST(Diagnose, CqOverrunAsyncEvent)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	rbt_event ev{};
	ev.type = RBT_EV_ASYNC_EVENT;
	ev.u.async_event.ts_exit = 5100;
	ev.u.async_event.event_type = IBV_EVENT_CQ_ERR;
	ev.u.async_event.element = CQ;
	c.put(ev, 5000);
	fx.finish();
	const rbt_finding *f = fx.find("cq_overrun");
	ASSERT_TRUE(f);
	EXPECT_NEAR(5000, f->time_ns, 1);
}

// The recorder may take its first clock sample of a device only after completions
// with NIC timestamps were polled: they wait for it instead of becoming bounds.
TEST(Analyzer, NicTimestampsBeforeTheFirstClockSample)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
	auto nic_of = [](uint64_t host) { return host + 5000000; };
	uint64_t t = 10000;
	for (int i = 0; i < 50; i++) {
		c.post(t, t + 100, QP, QPN, { swr(i) }, fx.sges);
		c.poll(t + 4000, t + 4100, CQ,
		       { wc(i, QPN, 0, IBV_WC_SEND, nic_of(t + 100 + 3000)) });
		t += 5000;
	}
	c.clock(t, nic_of(t), 1000000000);
	fx.finish();
	struct rbt_analyzer_counts cnt;
	rbt_analyzer_counts(fx.an, &cnt);
	EXPECT_EQ(50u, cnt.wrs_nic_exact);
	EXPECT_NEAR(3000, fx.phase(RBT_PHASE_NIC).p50, 3000 * 0.02);
	EXPECT_NEAR(1000, fx.phase(RBT_PHASE_POLL).p50, 1000 * 0.02);
}

// Extended polls (start_poll/next_poll) where the application never read the QP
// number: the QPs of the CQ are searched for the wr_id.
TEST(Analyzer, CompletionsWithoutQpNumber)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.qp(2100, QP + 1, QPN + 1, CQ, CQ);
	c.connect(3000, QP, PEER);
	c.connect(3000, QP + 1, PEER + 1);
	c.post(10000, 10100, QP, QPN, { swr(5) }, fx.sges);
	c.post(11000, 11100, QP + 1, QPN + 1, { swr(6) }, fx.sges);
	c.poll(15000, 15100, CQ, { wc(6, 0), wc(5, 0) });
	fx.finish();
	struct rbt_analyzer_counts cnt;
	rbt_analyzer_counts(fx.an, &cnt);
	EXPECT_EQ(2u, cnt.wrs_completed);
	EXPECT_EQ(0u, cnt.unmatched_completions);
	rbt_phase_summary s{};
	ASSERT_EQ(0, rbt_analyzer_phase(fx.an, 0, QPN + 1, -1, RBT_PHASE_E2E, &s));
	EXPECT_NEAR(4100, s.p50, 4100 * 0.02);
}

TEST(Diagnose, LocalProtectionErrorNamesTheLkey)
{
	Fixture fx;
	Trace &c = fx.t[0];
	c.cq(1000, CQ, 256);
	c.mr(1500, 0xe0, 0x10000, 4096, 0x77);
	c.qp(2000, QP, QPN, CQ, CQ);
	c.connect(3000, QP, PEER);
	c.post(10000, 10100, QP, QPN, { swr(1) }, fx.sges); // lkey 0x42: not registered
	c.poll(12000, 12100, CQ, { wc(1, QPN, IBV_WC_LOC_PROT_ERR) });
	fx.finish();
	const rbt_finding *f = fx.find("qp_error");
	ASSERT_TRUE(f);
	EXPECT_NE(nullptr, strstr(f->evidence, "lkey 0x42 matches no registered MR"));
}

// A healthy ping-pong between two traced processes: no warnings, and the round trip
// splits into its known parts.
void pingpong(Fixture &fx, int iters)
{
	Trace &c = fx.t[0], &s = fx.t[1];
	c.cq(1000, CQ, 256);
	s.cq(1000, CQ + 1, 256);
	c.qp(2000, QP, QPN, CQ, CQ, 16, 16, 64);
	s.qp(2000, QP + 1, PEER, CQ + 1, CQ + 1, 16, 16, 64);
	c.connect(3000, QP, PEER);
	s.connect(3000, QP + 1, QPN);
	c.recv(4000, 4100, QP, QPN, { 1000 });
	s.recv(4000, 4100, QP + 1, PEER, { 2000 });
	uint64_t t = 10000;
	for (int i = 0; i < iters; i++) {
		// client: post (300 ns), 2 us to the server's NIC; server polls 500 ns later,
		// thinks 1 us, posts (300 ns); 2 us back; client polls 500 ns later.
		c.post(t, t + 300, QP, QPN,
		       { swr(i, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE) },
		       fx.sges);
		uint64_t s_poll = t + 300 + 2000 + 500;
		s.poll(s_poll - 100, s_poll, CQ + 1,
		       { wc(2000 + i, PEER, 0, IBV_WC_RECV) }, 1, 0, 1);
		s.recv(s_poll + 50, s_poll + 100, QP + 1, PEER, { 2000u + i + 1 });
		uint64_t s_post = s_poll + 1000;
		s.post(s_post, s_post + 300, QP + 1, PEER,
		       { swr(i, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE) },
		       fx.sges);
		s.poll(s_post + 1000, s_post + 1100, CQ + 1, { wc(i, PEER) }, 1, 0, 1);
		uint64_t c_poll = s_post + 300 + 2000 + 500;
		c.poll(c_poll - 100, c_poll, CQ,
		       { wc(i, QPN), wc(1000 + i, QPN, 0, IBV_WC_RECV) }, 1, 0, 2);
		c.recv(c_poll + 50, c_poll + 100, QP, QPN, { 1000u + i + 1 });
		t = c_poll + 1000;
	}
}

TEST(Analyzer, HealthyPingPongHasNoFindingsAndSplitsRoundTrips)
{
	Fixture fx(2);
	pingpong(fx, 2000);
	fx.finish();
	EXPECT_EQ(0, fx.serious());
	rbt_roundtrip_summary rt;
	ASSERT_EQ(0, rbt_analyzer_roundtrip(fx.an, 0, QPN, &rt));
	EXPECT_GT(rt.count, 1990u);
	// rtt = 300 + 2000 + 500 + 1000 + 300 + 2000 + 500 = 6600
	EXPECT_NEAR(6600, rt.rtt_p50, 6600 * 0.02);
	EXPECT_NEAR(300, rt.local_post_p50, 300 * 0.02);
	EXPECT_NEAR(1300, rt.remote_app_p50, 1300 * 0.02); // think 1000 + post 300
	EXPECT_NEAR(5000, rt.nic_wire_p50, 5000 * 0.02);
}

TEST(Analyzer, MemoryIsFlatInTraceLength)
{
	uint64_t peak[2];
	for (int k = 0; k < 2; k++) {
		Fixture fx;
		known_phases(fx, true, k ? 20000 : 2000);
		fx.finish();
		struct rbt_analyzer_counts cnt;
		rbt_analyzer_counts(fx.an, &cnt);
		peak[k] = cnt.peak_tracked_wrs;
	}
	EXPECT_EQ(peak[0], peak[1]);
	EXPECT_EQ(1u, peak[1]);
}

std::string slurp(FILE *f);

// Garbage in (what a damaged trace could decode to): no crash, no hang, outputs intact.
TEST(Analyzer, RandomEventsNeverCrash)
{
	FILE *pf = tmpfile();
	Fixture fx(2, pf);
	uint64_t x = 88172645463325252ull;
	auto rnd = [&x]() {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		return x;
	};
	auto small = [&rnd]() { return rnd() % 4 == 0 ? rnd() : rnd() % 8; };
	std::vector<rbt_send_wr> swrs(4);
	std::vector<rbt_recv_wr> rwrs(4);
	std::vector<rbt_wc> wcs(4);
	std::vector<rbt_sge> sges(2);
	for (int i = 0; i < 200000; i++) {
		rbt_event ev{};
		const uint32_t types[] = {
			RBT_EV_POST_SEND,    RBT_EV_POST_RECV,	   RBT_EV_POLL_CQ,
			RBT_EV_QP_CREATE,    RBT_EV_QP_MODIFY,	   RBT_EV_CQ_CREATE,
			RBT_EV_MR_REG,	     RBT_EV_MR_DEREG,	   RBT_EV_QP_DESTROY,
			RBT_EV_CLOCK_SAMPLE, RBT_EV_ASYNC_EVENT,   RBT_EV_THREAD,
			RBT_EV_SRQ_CREATE,   RBT_EV_POST_SRQ_RECV, 63
		};
		ev.type = types[rnd() % (sizeof(types) / sizeof(types[0]))];
		ev.stream = (uint32_t)(rnd() % 3);
		uint64_t *f = (uint64_t *)&ev.u;
		for (size_t k = 0; k < sizeof(ev.u) / 8; k++)
			f[k] = small();
		for (auto &s : sges) {
			s.addr = rnd();
			s.length = small();
			s.lkey = small();
		}
		for (auto &w : swrs) {
			w = rbt_send_wr{};
			w.wr_id = small();
			w.opcode = small();
			w.send_flags = small();
			w.remote_addr = rnd();
			w.n_sges = (uint32_t)(rnd() % 3);
			w.sges = sges.data();
		}
		for (auto &w : rwrs) {
			w = rbt_recv_wr{};
			w.wr_id = small();
		}
		for (auto &c : wcs) {
			c = rbt_wc{};
			c.wr_id = small();
			c.qp_num = small();
			c.status = small();
			c.opcode = rnd() % 2 ? 128 : small();
			c.hw_ts = rnd() % 2 ? rnd() : 0;
		}
		switch (ev.type) {
		case RBT_EV_POST_SEND:
			ev.u.post_send.n_wrs = (uint32_t)(rnd() % 5);
			ev.u.post_send.wrs = swrs.data();
			break;
		case RBT_EV_POST_RECV:
			ev.u.post_recv.n_wrs = (uint32_t)(rnd() % 5);
			ev.u.post_recv.wrs = rwrs.data();
			break;
		case RBT_EV_POST_SRQ_RECV:
			ev.u.post_srq_recv.n_wrs = (uint32_t)(rnd() % 5);
			ev.u.post_srq_recv.wrs = rwrs.data();
			break;
		case RBT_EV_POLL_CQ:
			ev.u.poll_cq.n_wcs = (uint32_t)(rnd() % 5);
			ev.u.poll_cq.wcs = wcs.data();
			break;
		case RBT_EV_THREAD:
			ev.u.thread.name = "t";
			break;
		case RBT_EV_QP_CREATE:
		case RBT_EV_QP_MODIFY:
		case RBT_EV_CQ_CREATE:
		case RBT_EV_MR_REG:
			break;
		default:
			break;
		}
		ev.ts = rnd() % 2 ? rnd() : (uint64_t)i * 1000;
		ASSERT_EQ(0, rbt_analyzer_feed(fx.an, (int)(rnd() % 2), &ev));
	}
	fx.finish();
	FILE *o = tmpfile();
	EXPECT_EQ(0, rbt_analyzer_write_text(fx.an, o));
	EXPECT_EQ(0, rbt_analyzer_write_json(fx.an, o));
	EXPECT_EQ(0, rbt_analyzer_write_html(fx.an, o));
	fclose(o);
	std::string p = slurp(pf);
	fclose(pf);
	EXPECT_NE(std::string::npos, p.rfind("]}"));
}

// ---- outputs ----

std::string slurp(FILE *f)
{
	std::string s;
	rewind(f);
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		s.append(buf, n);
	return s;
}

size_t count(const std::string &s, const char *needle)
{
	size_t n = 0;
	for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1))
		n++;
	return n;
}

// The protobuf timeline: a Trace whose every field is packet 1 (length-delimited),
// the lengths adding up to the file exactly; every WR slice's name is interned once
// per sequence (tests/perfetto_decode.py checks the rest on real files).
static uint64_t get_varint(const std::string &s, size_t *i)
{
	uint64_t v = 0;
	for (int shift = 0; *i < s.size() && shift < 64; shift += 7) {
		uint8_t c = (uint8_t)s[(*i)++];
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return v;
	}
	ADD_FAILURE() << "varint cut at " << *i;
	return 0;
}

static size_t walk_trace(const std::string &p)
{
	size_t i = 0, n = 0;
	while (i < p.size()) {
		if (get_varint(p, &i) != (1u << 3 | 2)) {
			ADD_FAILURE() << "not a packet at " << i;
			return n;
		}
		uint64_t len = get_varint(p, &i);
		if (len > p.size() - i) {
			ADD_FAILURE() << "packet cut at " << i;
			return n;
		}
		i += len;
		n++;
	}
	return n;
}

TEST(Output, PerfettoProtobuf)
{
	FILE *pf = tmpfile();
	Fixture fx(2, pf, nullptr, false, false);
	pingpong(fx, 50);
	fx.finish();
	std::string p = slurp(pf);
	fclose(pf);
	// 200 WR slices and their post calls, begin and end each
	EXPECT_GT(walk_trace(p), 800u);
	EXPECT_NE(std::string::npos, p.find("SEND 64 B"));
	EXPECT_NE(std::string::npos, p.find("ibv_post_send"));
	// interned once per sequence, not per event
	EXPECT_GE(4u, count(p, "ibv_post_send"));
}

TEST(Output, TextJsonHtmlPerfetto)
{
	FILE *pf = tmpfile();
	Fixture fx(2, pf);
	pingpong(fx, 50);
	fx.finish();
	std::string p = slurp(pf);
	fclose(pf);
	EXPECT_EQ(0u, p.find("{\"displayTimeUnit\""));
	EXPECT_NE(std::string::npos, p.rfind("]}"));
	// 50 iterations x (2 sends + 2 receives) WR slices, one flow pair per send WR
	EXPECT_EQ(200u, count(p, "\"cat\":\"wr\",\"name\":\"SEND") +
				count(p, "\"cat\":\"wr\",\"name\":\"RECV"));
	EXPECT_EQ(100u, count(p, "\"ph\":\"s\""));
	EXPECT_EQ(100u, count(p, "\"ph\":\"f\""));

	FILE *f = tmpfile();
	ASSERT_EQ(0, rbt_analyzer_write_text(fx.an, f));
	std::string text = slurp(f);
	fclose(f);
	EXPECT_NE(std::string::npos, text.find("round trips: 49"));
	EXPECT_NE(std::string::npos, text.find("no problems found"));

	f = tmpfile();
	ASSERT_EQ(0, rbt_analyzer_write_json(fx.an, f));
	std::string js = slurp(f);
	fclose(f);
	EXPECT_EQ(0u, js.find("{\"rbtrace_report\":1"));
	EXPECT_NE(std::string::npos, js.find("\"findings\":[]"));

	f = tmpfile();
	ASSERT_EQ(0, rbt_analyzer_write_html(fx.an, f));
	std::string html = slurp(f);
	fclose(f);
	EXPECT_NE(std::string::npos, html.find("createElement('canvas')"));
	EXPECT_EQ(std::string::npos, html.find("http://"));
	EXPECT_EQ(std::string::npos, html.find("https://"));
}

// The HTML page's series over time: one row per QP, the WRs of each bin adding up to
// the WRs the QP completed, one value per bin.
TEST(Output, HtmlSeriesOverTime)
{
	Fixture fx(2, nullptr, nullptr, true);
	pingpong(fx, 50);
	fx.finish();
	FILE *f = tmpfile();
	ASSERT_EQ(0, rbt_analyzer_write_html(fx.an, f));
	std::string html = slurp(f);
	fclose(f);
	EXPECT_EQ(1u, count(html, "<div class=\"qprow\" id=\"qp-0-"));
	EXPECT_EQ(1u, count(html, "<div class=\"qprow\" id=\"qp-1-"));
	size_t b = html.find("\"bins\":");
	ASSERT_NE(std::string::npos, b);
	long bins = strtol(html.c_str() + b + 7, nullptr, 10);
	EXPECT_GT(bins, 0);
	EXPECT_LE(bins, 128);
	for (const char *key : { "\"posted\":[", "\"done\":[", "\"recvs\":[" }) {
		size_t n = 0;
		for (size_t p = html.find(key); p != std::string::npos;
		     p = html.find(key, p + 1), n++) {
			const char *c = html.c_str() + p + strlen(key);
			long sum = 0, vals = 0;
			while (*c && *c != ']') {
				char *e;
				sum += strtol(c, &e, 10);
				vals++;
				c = *e == ',' ? e + 1 : e;
			}
			EXPECT_EQ(50, sum) << key;
			EXPECT_EQ(bins, vals) << key;
		}
		EXPECT_EQ(2u, n) << key;
	}
	EXPECT_EQ(std::string::npos, html.find("http://"));
}

// Through the real writer and reader: two threads' chunks, a file per process.
TEST(Files, ReportFromWrittenTraces)
{
	char dir[] = "/tmp/analyzer_test.XXXXXX";
	ASSERT_TRUE(mkdtemp(dir));
	std::string paths[2] = { std::string(dir) + "/client.rbt",
				 std::string(dir) + "/server.rbt" };
	{
		Fixture fx(2); // builds events; here they go to files instead
		for (int i = 0; i < 2; i++) {
			rbt_header h = header(1000 + i);
			rbt_writer_opts o{};
			o.chunk_bytes = 4096; // many chunks
			ASSERT_EQ(0,
				  rbt_writer_open(paths[i].c_str(), &h, &o, &fx.t[i].w));
			fx.t[i].an = nullptr;
		}
		pingpong(fx, 500);
		for (int i = 0; i < 2; i++)
			ASSERT_EQ(0, rbt_writer_close(fx.t[i].w, nullptr));
	}
	rbt_analyzer *an;
	ASSERT_EQ(0, rbt_analyzer_create(nullptr, &an));
	const char *ps[2] = { paths[0].c_str(), paths[1].c_str() };
	char err[256] = "";
	ASSERT_EQ(0, rbt_analyzer_run_files(an, ps, 2, err, sizeof(err))) << err;
	ASSERT_EQ(0, rbt_analyzer_finish(an));
	struct rbt_analyzer_counts cnt;
	rbt_analyzer_counts(an, &cnt);
	EXPECT_EQ(1000u, cnt.wrs_completed);
	EXPECT_EQ(1000u, cnt.recvs_completed);
	EXPECT_EQ(0u, cnt.unmatched_completions);
	rbt_roundtrip_summary rt;
	ASSERT_EQ(0, rbt_analyzer_roundtrip(an, 0, QPN, &rt));
	EXPECT_NEAR(6600, rt.rtt_p50, 6600 * 0.02);
	const rbt_finding *f;
	EXPECT_EQ(0, rbt_analyzer_findings(an, &f));
	rbt_analyzer_destroy(an);
	unlink(ps[0]);
	unlink(ps[1]);
	rmdir(dir);
}

} // namespace
