// interpose_softnic_test.cc - `rbtrace record --softnic` on both ends of real verbs
// programs (rdma-core's ibv_*_pingpong, perftest's ib_*), checking through the
// reader API that every WR and completion the programs made is in the traces,
// cross-checked against what the programs print about themselves; and that the
// report of each pair finds no stall.
#include <gtest/gtest.h>
#include <random>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/interpose_util.h"

using namespace rbt_test;

namespace
{

int next_port()
{
	// Below the kernel's ephemeral range (32768 and up by default): a port
	// there can be held by any other test's outgoing connection. Not from the
	// pid alone: sandboxed runs of this test in parallel (--runs_per_test) each
	// have their own pid namespace, hence the same pid.
	static int base = 20000 + (int)((getpid() * 7 + std::random_device{}()) % 12000);
	if (base >= 32700)
		base = 20000;
	return base++;
}

struct pair_result {
	run_result both;
	std::string server_out, client_out;
	summary s, c;
};

// Records server and client; the client starts once the server listens.
pair_result record_pair(const std::string &tag, const std::string &server,
			const std::string &client, const std::string &env = "")
{
	std::string d = tmpdir(tag);
	std::string asan = asan_runtime_for(runfile("interpose/librbtrace.so"));
	std::string rec = env +
			  (asan.empty() ? "" : " " + asan_env() + "LD_PRELOAD=" + asan) +
			  " SOFTNIC_FABRIC=" + d +
			  "/fab RBTRACE_LIB=" + runfile("interpose/librbtrace.so") +
			  " RBTRACE_SOFTNIC_DIR=" + runfile("softnic") + " " +
			  runfile("cli/rbtrace") + " record --softnic ";
	pair_result r;
	// Someone else may hold the port between our pick and the server's bind
	// ("Couldn't listen"): take another one, a few times.
	for (int attempt = 0; attempt < 4; attempt++) {
		int port = next_port();
		char hexport[16];
		snprintf(hexport, sizeof(hexport), ":%04X", port);
		std::string p = " -p " + std::to_string(port) + " ";
		std::string cmd =
			"rm -rf " + d + "/fab; " + rec + "-o " + d + "/s.rbt -- " +
			server + p + " >" + d +
			"/s.out 2>&1 & spid=$!; for i in $(seq 200); do grep -qiE \"" +
			std::string(hexport) +
			" [0-9A-F]+:0000 0A\" /proc/net/tcp /proc/net/tcp6 && break; "
			"kill -0 $spid 2>/dev/null || break; sleep 0.05; done; " +
			rec + "-o " + d + "/c.rbt -- " + client + p + " localhost >" + d +
			"/c.out 2>&1; c=$?; wait $spid; s=$?; echo $c $s";
		r.both = run(cmd, 120);
		r.server_out = slurp(d + "/s.out");
		r.client_out = slurp(d + "/c.out");
		if (r.server_out.find("Couldn't listen") == std::string::npos)
			break;
	}
	r.s = summarize(d + "/s.rbt");
	r.c = summarize(d + "/c.rbt");
	// A healthy pair: the report finds no stall (issue 16's finding must not fire
	// on the ping-pongs and perftest programs).
	run_result rep = run(runfile("cli/rbtrace") + " report --format=json -o " + d +
				     "/r.json " + d + "/c.rbt " + d + "/s.rbt",
			     120);
	EXPECT_EQ(rep.status, 0) << tag << ": " << rep.err;
	std::string json = slurp(d + "/r.json");
	EXPECT_NE(json.find("\"findings\""), std::string::npos) << tag;
	EXPECT_EQ(json.find("\"wr_stalled\""), std::string::npos) << tag << ": " << json;
	EXPECT_EQ(json.find("\"polling_stopped\""), std::string::npos)
		<< tag << ": " << json;
	return r;
}

void expect_clean(const summary &s, const std::string &who)
{
	EXPECT_EQ(s.open_err, 0) << who;
	EXPECT_TRUE(s.finished) << who;
	EXPECT_FALSE(s.damaged) << who;
	EXPECT_EQ(s.lost, 0u) << who;
	EXPECT_EQ(s.wc_bad, 0u) << who;
	EXPECT_EQ(s.post_send_failed, 0u) << who;
	EXPECT_EQ(s.by_type.count(RBT_EV_DEVICE_OPEN) ? s.by_type.at(RBT_EV_DEVICE_OPEN)
						      : 0,
		  1u)
		<< who;
	EXPECT_GE(s.by_type.count(RBT_EV_QP_MODIFY) ? s.by_type.at(RBT_EV_QP_MODIFY) : 0,
		  2u)
		<< who;
}

// ibv_rc_pingpong -n 1000: each side sends 1000 WRs and gets 1000 successful send
// and 1000 successful receive completions; the program says "1000 iters".
// quirks: SOFTNIC_QUIRKS for softnic (the counts must not change).
void rc_pingpong(const std::string &tag, const std::string &opt,
		 const std::string &env = "", const std::string &quirks = "")
{
	pair_result r = record_pair(
		tag, "ibv_rc_pingpong -n 1000 " + opt, "ibv_rc_pingpong -n 1000 " + opt,
		env + (quirks.empty() ? "" : " SOFTNIC_QUIRKS=" + quirks));
	ASSERT_EQ(r.both.out, "0 0\n") << r.server_out << r.client_out << r.both.err;
	for (const std::string *o : { &r.server_out, &r.client_out })
		ASSERT_NE(o->find("1000 iters in"), std::string::npos) << *o;
	for (summary *s : { &r.s, &r.c }) {
		expect_clean(*s, tag);
		EXPECT_EQ(s->send_wrs, 1000u) << tag;
		EXPECT_EQ(s->wc_send_ok, 1000u) << tag;
		EXPECT_EQ(s->wc_recv_ok, 1000u) << tag;
		EXPECT_GE(s->recv_wrs, 1000u) << tag;
		EXPECT_EQ(s->by_type[RBT_EV_QP_CREATE], 1u) << tag;
		EXPECT_EQ(s->by_type[RBT_EV_MR_REG], 1u) << tag;
	}
	if (opt == "-N") {
		EXPECT_EQ(r.c.api1_posts, 1000u);
		EXPECT_EQ(r.s.api1_posts, 1000u);
	}
	if (opt == "-t" || !env.empty()) {
		// NIC clock samples of the timestamped CQ's context: at its creation,
		// from the writer thread, and at ibv_close_device (so at least two
		// even for a run shorter than the sampling period).
		for (summary *s : { &r.s, &r.c }) {
			EXPECT_EQ(s->ts_cq_ctxs.size(), 1u) << tag;
			EXPECT_GE(s->nic_samples_on_ts_ctx, 2u) << tag;
			EXPECT_EQ(s->nic_samples_elsewhere, 0u) << tag;
		}
	} else {
		// No timestamped CQ: the NIC clock is never read.
		EXPECT_EQ(r.c.clock_samples_nic, 0u) << tag;
		EXPECT_EQ(r.s.clock_samples_nic, 0u) << tag;
	}
	if (opt == "-t") {
		EXPECT_GT(r.c.api1_polls, 0u);
		EXPECT_EQ(r.c.wc_with_hw_ts, 2000u);
		EXPECT_EQ(r.s.wc_with_hw_ts, 2000u);
	}
	if (opt == "-e") {
		EXPECT_GE(r.c.by_type[RBT_EV_GET_CQ_EVENT], 1u);
		EXPECT_GE(r.c.by_type[RBT_EV_REQ_NOTIFY], 1u);
		EXPECT_EQ(r.c.by_type[RBT_EV_CHANNEL_CREATE], 1u);
	}
	if (!env.empty()) { // RBTRACE_NIC_TS=1 on a plain ibv_create_cq program
		EXPECT_EQ(r.c.recorder_ts_cqs, 1u);
		EXPECT_EQ(r.c.wc_with_hw_ts, 2000u);
		EXPECT_EQ(r.s.wc_with_hw_ts, 2000u);
		EXPECT_GE(r.c.clock_samples_nic, 1u);
	}
}

TEST(InterposeSoftnic, RcPingpongDefault)
{
	rc_pingpong("rc", "");
}

TEST(InterposeSoftnic, RcPingpongEvents)
{
	rc_pingpong("rc_e", "-e");
}

TEST(InterposeSoftnic, RcPingpongNewPostApi)
{
	rc_pingpong("rc_n", "-N");
}

// mlx5 rewrites a QP's ibv_wr_* pointers on every move to RTS (and RESET),
// over the recorder's: the recorder wraps them again (shim_qpx.c's recheck
// after ibv_modify_qp and at wr_start), or -N's 1000 WRs go unrecorded.
TEST(InterposeSoftnic, RcPingpongNewPostApiMlx5Quirks)
{
	rc_pingpong("rc_n_mlx5", "-N", "", "mlx5");
}

// mlx5's completion timestamps and raw clock tick at 156.25 MHz, not in ns:
// the recorder's clock samples (query_rt_values) still pair with them.
TEST(InterposeSoftnic, RcPingpongCompletionTimestampsMlx5Quirks)
{
	rc_pingpong("rc_t_mlx5", "-t", "", "mlx5");
}

TEST(InterposeSoftnic, RcPingpongCompletionTimestamps)
{
	rc_pingpong("rc_t", "-t");
}

TEST(InterposeSoftnic, RcPingpongRecorderAddsNicTimestamps)
{
	rc_pingpong("rc_nicts", "", "RBTRACE_NIC_TS=1");
}

// ibv_srq_pingpong keeps going until both its counts reach -n, so it may send a
// few more than 1000; what one side received never exceeds what the other sent.
TEST(InterposeSoftnic, SrqPingpong)
{
	pair_result r = record_pair("srq", "ibv_srq_pingpong -n 1000",
				    "ibv_srq_pingpong -n 1000");
	ASSERT_EQ(r.both.out, "0 0\n") << r.server_out << r.client_out;
	ASSERT_NE(r.client_out.find("1000 iters in"), std::string::npos);
	for (summary *s : { &r.s, &r.c }) {
		expect_clean(*s, "srq");
		EXPECT_EQ(s->by_type[RBT_EV_SRQ_CREATE], 1u);
		EXPECT_EQ(s->by_type[RBT_EV_QP_CREATE], 16u);
		EXPECT_GE(s->send_wrs, 1000u);
		EXPECT_GE(s->wc_send_ok, 1000u);
		EXPECT_LE(s->wc_send_ok, s->send_wrs);
		EXPECT_GE(s->wc_recv_ok, 1000u);
		EXPECT_GE(s->srq_recv_wrs, s->wc_recv_ok);
		EXPECT_EQ(s->recv_wrs, 0u);
	}
	EXPECT_LE(r.s.wc_recv_ok, r.c.send_wrs);
	EXPECT_LE(r.c.wc_recv_ok, r.s.send_wrs);
}

// ibv_xsrq_pingpong (one client): XRC domain, an XRC SRQ on each side, one
// XRC_SEND and one XRC_RECV QP; -n 100 sends exactly 100 messages each way.
TEST(InterposeSoftnic, XsrqPingpong)
{
	pair_result r = record_pair("xsrq", "ibv_xsrq_pingpong -n 100",
				    "ibv_xsrq_pingpong -n 100");
	ASSERT_EQ(r.both.out, "0 0\n") << r.server_out << r.client_out;
	ASSERT_NE(r.client_out.find("success"), std::string::npos) << r.client_out;
	for (summary *s : { &r.s, &r.c }) {
		expect_clean(*s, "xsrq");
		EXPECT_EQ(s->by_type[RBT_EV_XRCD_OPEN], 1u);
		EXPECT_EQ(s->by_type[RBT_EV_SRQ_CREATE], 1u);
		EXPECT_EQ(s->by_type[RBT_EV_QP_CREATE], 2u);
		EXPECT_EQ(s->send_wrs, 100u);
		EXPECT_GE(s->signaled_send_wrs, 1u); /* it signals some sends only */
		EXPECT_EQ(s->wc_send_ok, s->signaled_send_wrs);
		EXPECT_EQ(s->wc_recv_ok, 100u);
		EXPECT_EQ(s->srq_recv_wrs, 101u);
		EXPECT_EQ(s->recv_wrs, 0u);
	}
}

// perftest prints "#bytes #iterations ..." and then one row: the iteration count
// is the row's second number.
long long perftest_iters(const std::string &out)
{
	size_t p = out.find("#iterations");
	if (p == std::string::npos)
		return -1;
	p = out.find('\n', p);
	long long bytes = 0, iters = -1;
	if (p == std::string::npos ||
	    sscanf(out.c_str() + p + 1, "%lld %lld", &bytes, &iters) != 2)
		return -1;
	return iters;
}

// The same perftest command (-n 1000) on both ends, recorded into *r: both ran,
// the client did its 1000 iterations, posting 1000 WRs of opcode, and both
// traces are clean.
void record_perftest(const std::string &tag, const std::string &cmd, int opcode,
		     pair_result *r)
{
	*r = record_pair(tag, cmd, cmd);
	ASSERT_EQ(r->both.out, "0 0\n") << r->server_out << r->client_out;
	ASSERT_EQ(perftest_iters(r->client_out), 1000) << r->client_out;
	expect_clean(r->c, tag + " client");
	expect_clean(r->s, tag + " server");
	EXPECT_EQ(r->c.send_wrs, 1000u) << tag;
	EXPECT_EQ(r->c.send_wrs_by_opcode[opcode], 1000u) << tag;
}

TEST(InterposeSoftnic, IbSendLat)
{
	pair_result r;
	ASSERT_NO_FATAL_FAILURE(record_perftest("send_lat", "ib_send_lat -n 1000",
						2 /* IBV_WR_SEND */, &r));
	for (summary *s : { &r.s, &r.c }) {
		EXPECT_EQ(s->send_wrs, 1000u);
		EXPECT_EQ(s->send_wrs_by_opcode[2 /* IBV_WR_SEND */], 1000u);
		EXPECT_EQ(s->wc_recv_ok, 1000u);
		EXPECT_EQ(s->wc_send_ok, s->signaled_send_wrs);
	}
}

TEST(InterposeSoftnic, IbWriteBw)
{
	pair_result r;
	ASSERT_NO_FATAL_FAILURE(record_perftest("write_bw", "ib_write_bw -n 1000",
						0 /* IBV_WR_RDMA_WRITE */, &r));
	EXPECT_GT(r.c.signaled_send_wrs, 0u);
	EXPECT_EQ(r.c.wc_rdma_ok, r.c.signaled_send_wrs);
	// The passive side only sets up: its MR and QP are there, no data path.
	EXPECT_EQ(r.s.send_wrs, 0u);
	EXPECT_EQ(r.s.by_type[RBT_EV_QP_CREATE], 1u);
	EXPECT_GE(r.s.by_type[RBT_EV_MR_REG], 1u);
}

TEST(InterposeSoftnic, IbReadLat)
{
	pair_result r;
	ASSERT_NO_FATAL_FAILURE(record_perftest("read_lat", "ib_read_lat -n 1000",
						4 /* IBV_WR_RDMA_READ */, &r));
	EXPECT_EQ(r.c.wc_rdma_ok, 1000u);
	EXPECT_EQ(r.s.send_wrs, 0u);
}

// A program that opens a device, creates a CQ with completion timestamps, waits
// 25 ms and closes it, 12 times, while the writer thread samples the NIC clock of
// each context: every context gets a sample at its CQ's creation and one at its
// close, and no sample of a context is taken between its close and the next open
// (the writer never reads a closed context's clock; under --config=asan a read of
// the freed context would also be reported).
TEST(InterposeSoftnic, NicClockSamplesStopAtClose)
{
	std::string d = tmpdir("tsclose");
	std::string asan = asan_runtime_for(runfile("interpose/librbtrace.so"));
	run_result r =
		run((asan.empty() ? "" : asan_env() + "LD_PRELOAD=" + asan + " ") +
		    "SOFTNIC_FABRIC=" + d +
		    "/fab RBTRACE_LIB=" + runfile("interpose/librbtrace.so") +
		    " RBTRACE_SOFTNIC_DIR=" + runfile("softnic") + " " +
		    runfile("cli/rbtrace") + " record --softnic -o " + d + "/t.rbt -- " +
		    runfile("tests/interpose_prog") + " tsclose 12");
	ASSERT_EQ(r.status, 0) << r.out << r.err;
	ASSERT_NE(r.out.find("tsclose cycles=12"), std::string::npos) << r.out;
	summary s = summarize(d + "/t.rbt");
	EXPECT_TRUE(s.finished);
	EXPECT_FALSE(s.damaged);
	EXPECT_EQ(s.by_type[RBT_EV_DEVICE_OPEN], 12u);
	EXPECT_EQ(s.by_type[RBT_EV_DEVICE_CLOSE], 12u);
	EXPECT_EQ(s.nic_samples_elsewhere, 0u);
	// creation + close of each, and the writer's periodic ones in between
	EXPECT_GE(s.nic_samples_on_ts_ctx, 2u * 12 + 4);

	// Per context (addresses may be reused): open/close intervals vs samples.
	struct rbt_reader *rd = nullptr;
	ASSERT_EQ(rbt_reader_open((d + "/t.rbt").c_str(), &rd), 0);
	std::vector<std::pair<uint64_t, uint64_t>> samples; // (ts, ctx)
	std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> closed;
	std::map<uint64_t, std::vector<uint64_t>> opens;
	const struct rbt_event *ev;
	uint64_t ms = rbt_reader_header(rd)->clock_hz / 1000;
	while (rbt_reader_next(rd, &ev) > 0) {
		if (ev->type == RBT_EV_CLOCK_SAMPLE && ev->u.clock_sample.ctx)
			samples.push_back({ ev->ts, ev->u.clock_sample.ctx });
		else if (ev->type == RBT_EV_DEVICE_OPEN)
			opens[ev->u.device_open.ctx].push_back(ev->ts);
		else if (ev->type == RBT_EV_DEVICE_CLOSE)
			closed[ev->u.device_close.ctx].push_back(
				{ ev->ts, ev->u.device_close.ts_exit });
	}
	rbt_reader_close(rd);
	size_t checked = 0;
	for (auto &cs : closed) {
		for (auto &c : cs.second) {
			// the context is gone from the close call's entry until the next
			// open that returned the same address (if any)
			uint64_t until = UINT64_MAX;
			for (uint64_t o : opens[cs.first])
				if (o > c.first && o < until)
					until = o;
			bool last_before = false;
			for (auto &smp : samples) {
				if (smp.second != cs.first)
					continue;
				EXPECT_FALSE(smp.first >= c.first && smp.first < until)
					<< "sample of a closed context";
				// the one ibv_close_device takes, right before closing
				if (smp.first < c.first && c.first - smp.first < ms)
					last_before = true;
			}
			EXPECT_TRUE(last_before);
			checked++;
		}
	}
	EXPECT_EQ(checked, 12u);
}

} // namespace
