// interpose_test.cc - librbtrace.so on a fake device (tests/progs/interpose_
// fakeverbs.c): every WR and completion the program reports is in the trace,
// errno and return values pass through, threads lose nothing, fork gives one
// trace per process, kill -9 leaves a readable trace, an unwritable output only
// costs one warning, and a program that never calls a verb is untouched.
#include <gtest/gtest.h>
#include <algorithm>
#include <set>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tests/interpose_util.h"

using namespace rbt_test;

namespace
{

std::string env_prefix(const std::string &out)
{
	return asan_env() + "LD_PRELOAD=" + shim_preload() +
	       " LD_LIBRARY_PATH=" + runfile("tests/progs/fakeverbs") +
	       " RBTRACE_OUTPUT=" + out + " ";
}

// For `rbtrace record`, which adds the shim after whatever LD_PRELOAD holds.
std::string asan_preload()
{
	std::string a = asan_runtime_for(runfile("interpose/librbtrace.so"));
	return a.empty() ? std::string() : asan_env() + "LD_PRELOAD=" + a + " ";
}

std::string prog()
{
	return runfile("tests/interpose_prog");
}

std::string strip_pid(std::string s)
{
	size_t p;
	while ((p = s.find("pid=")) != std::string::npos) {
		size_t e = s.find(' ', p);
		s.erase(p, e - p);
	}
	return s;
}

TEST(Interpose, BasicCountsMatchTheProgram)
{
	std::string d = tmpdir("basic");
	run_result plain =
		run(asan_env() + "LD_LIBRARY_PATH=" + runfile("tests/progs/fakeverbs") +
		    " " + prog() + " basic 1000");
	run_result r = run(env_prefix(d + "/") + prog() + " basic 1000");
	ASSERT_EQ(r.status, 0) << r.err;
	// The program behaves the same traced: same output, same errno checks.
	EXPECT_EQ(strip_pid(r.out), strip_pid(plain.out));
	EXPECT_EQ(r.err, "");
	EXPECT_EQ(field(r.out, "errno_ok"), 1);
	long long posted = field(r.out, "posted"), done = field(r.out, "completions");
	ASSERT_EQ(posted, 1008);

	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 1u);
	struct stat st;
	ASSERT_EQ(stat(t[0].c_str(), &st), 0);
	EXPECT_EQ(st.st_mode & 0777, 0600u);
	summary s = summarize(t[0]);
	ASSERT_EQ(s.open_err, 0);
	EXPECT_TRUE(s.finished);
	EXPECT_FALSE(s.damaged);
	EXPECT_EQ(s.lost, 0u);
	EXPECT_EQ((long long)s.send_wrs, posted);
	EXPECT_EQ(s.by_type[RBT_EV_POST_SEND], 1001u); // 1000 single + 1 chain of 8
	EXPECT_EQ((long long)s.wc_ok, done);
	EXPECT_EQ(s.by_type[RBT_EV_QP_CREATE], 1u);
	EXPECT_EQ(s.by_type[RBT_EV_QP_MODIFY], 4u);
	EXPECT_EQ(s.by_type[RBT_EV_MR_REG], 2u);
	EXPECT_EQ(s.failed_calls, 2u); // reg_mr(len 0) and modify_qp(mask 0)
	EXPECT_EQ(s.by_type[RBT_EV_DEVICE_OPEN], 1u);
	EXPECT_GE(s.by_type[RBT_EV_DEVICE_ATTR], 1u);
	EXPECT_GE(s.stacks, 5u);
	EXPECT_GE(s.by_type[RBT_EV_MODULE_MAP], 2u);
}

TEST(Interpose, FailedCallsKeepResultAndErrno)
{
	std::string d = tmpdir("errs");
	run_result r = run(env_prefix(d + "/") + prog() + " basic 10");
	ASSERT_EQ(r.status, 0) << r.err;
	EXPECT_EQ(field(r.out, "errno_ok"), 1);
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 1u);
	struct rbt_reader *rd;
	ASSERT_EQ(rbt_reader_open(t[0].c_str(), &rd), 0);
	const struct rbt_event *ev;
	int bad_mr = 0, bad_modify = 0;
	while (rbt_reader_next(rd, &ev) > 0) {
		if (ev->type == RBT_EV_MR_REG && ev->u.mr_reg.ret == -EINVAL &&
		    ev->u.mr_reg.err == EINVAL && ev->u.mr_reg.length == 0)
			bad_mr++;
		if (ev->type == RBT_EV_QP_MODIFY && ev->u.qp_modify.ret == EINVAL &&
		    ev->u.qp_modify.attr_mask == 0)
			bad_modify++;
	}
	rbt_reader_close(rd);
	EXPECT_EQ(bad_mr, 1);
	EXPECT_EQ(bad_modify, 1);
}

TEST(Interpose, FourThreadsOfHundredThousandLoseNothing)
{
	std::string d = tmpdir("threads");
	run_result r = run(env_prefix(d + "/") + prog() + " threads 4 100000", 300);
	ASSERT_EQ(r.status, 0) << r.err;
	ASSERT_EQ(field(r.out, "posted"), 400000);
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 1u);
	summary s = summarize(t[0]);
	EXPECT_TRUE(s.finished);
	EXPECT_EQ(s.lost, 0u);
	EXPECT_EQ(s.send_wrs, 400000u);
	EXPECT_EQ((long long)s.wc_ok, field(r.out, "completions"));
	EXPECT_EQ(s.wc_ok, 400000u);
	EXPECT_EQ(s.post_streams.size(), 4u);
	EXPECT_EQ(s.by_type[RBT_EV_QP_CREATE], 4u);
}

// With a tiny ring and no waiting, records are dropped - and every one of them
// is accounted for in LOSS events: posts recorded + posts lost covers all posts.
TEST(Interpose, DroppedRecordsAreCountedExactly)
{
	std::string d = tmpdir("loss");
	run_result r = run("RBTRACE_BUFFER_KB=64 RBTRACE_BLOCK_MS=0 " +
				   env_prefix(d + "/") + prog() + " threads 4 100000",
			   300);
	ASSERT_EQ(r.status, 0) << r.err;
	ASSERT_EQ(field(r.out, "posted"), 400000);
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 1u);
	summary s = summarize(t[0]);
	EXPECT_TRUE(s.finished);
	EXPECT_GT(s.lost, 0u);
	uint64_t polls = s.by_type[RBT_EV_POLL_CQ];
	// Every record is a post (1 WR each here) or a poll: recorded + lost is at
	// least every post, and nothing beyond posts + polls was invented.
	EXPECT_GE(s.by_type[RBT_EV_POST_SEND] + s.lost, 400000u);
	EXPECT_LE(s.send_wrs, 400000u);
	EXPECT_LE(s.wc_ok, 400000u);
	(void)polls;
}

// Chains of 1 to 700 WRs (longer than one record's 256) with 0 to 3 sges each, in
// a 64 KiB ring that wraps hundreds of times: every WR is in the trace once, in
// order, with its sges; a refused chain keeps the WRs up to the bad one.
TEST(Interpose, ChainsKeepEveryWrInOrderAcrossTheRingsEnd)
{
	std::string d = tmpdir("chains");
	const long n = 300, len = 701;
	run_result r = run("RBTRACE_BUFFER_KB=64 RBTRACE_BLOCK_MS=5000 " +
				   env_prefix(d + "/c.rbt") + prog() + " chains 300 701",
			   300);
	ASSERT_EQ(r.status, 0) << r.err;
	ASSERT_EQ(field(r.out, "posted"), n * len);
	ASSERT_EQ(field(r.out, "refused"), EINVAL);
	ASSERT_EQ(field(r.out, "bad"), 5);
	struct rbt_reader *rd = nullptr;
	ASSERT_EQ(rbt_reader_open((d + "/c.rbt").c_str(), &rd), 0);
	const struct rbt_event *ev;
	uint64_t next_id = 0, posts = 0, bad_sges = 0, lost = 0;
	int err;
	while ((err = rbt_reader_next(rd, &ev)) > 0) {
		if (ev->type == RBT_EV_LOSS)
			lost += ev->u.loss.events;
		if (ev->type != RBT_EV_POST_SEND)
			continue;
		const struct rbt_ev_post_send *p = &ev->u.post_send;
		posts++;
		for (uint32_t i = 0; i < p->n_wrs; i++, next_id++) {
			ASSERT_EQ(p->wrs[i].wr_id, next_id);
			uint64_t want = next_id < (uint64_t)(n * len) ? next_id % len % 4
					: next_id - n * len == 5      ? 17
								      : 1;
			bad_sges += p->wrs[i].n_sges != want;
		}
		if (next_id > (uint64_t)(n * len)) {
			EXPECT_EQ(p->ret, EINVAL);
			EXPECT_EQ(p->bad_wr, 5u);
		}
	}
	rbt_reader_close(rd);
	EXPECT_EQ(err, 0);
	EXPECT_EQ(lost, 0u);
	EXPECT_EQ(bad_sges, 0u);
	// 701 WRs: records of 256, 256 and 189; the refused chain: its first 6 WRs.
	EXPECT_EQ(next_id, (uint64_t)(n * len + 6));
	EXPECT_EQ(posts, (uint64_t)(n * 3 + 1));
}

TEST(Interpose, ForkGivesOneCompleteTracePerProcess)
{
	std::string d = tmpdir("fork");
	run_result r = run(env_prefix(d + "/") + prog() + " fork 200");
	ASSERT_EQ(r.status, 0) << r.err;
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 2u) << r.out;
	long long child_pid = field(r.out.substr(r.out.find("child")), "pid");
	int seen_child = 0, seen_parent = 0;
	for (const std::string &p : t) {
		summary s = summarize(p);
		EXPECT_TRUE(s.finished) << p;
		EXPECT_EQ(s.lost, 0u);
		if ((long long)s.pid == child_pid) {
			seen_child++;
			EXPECT_EQ(s.send_wrs, 208u) << p; // only what the child posted
			EXPECT_EQ(s.wc_ok, 208u);
		} else {
			seen_parent++;
			EXPECT_EQ(s.send_wrs, 416u) << p; // before and after the fork
			EXPECT_EQ(s.wc_ok, 416u);
		}
	}
	EXPECT_EQ(seen_child, 1);
	EXPECT_EQ(seen_parent, 1);
}

TEST(Interpose, KillNineLeavesAReadableTrace)
{
	std::string d = tmpdir("kill");
	// The program prints "ready" after 5000 sends; 0.4 s later (4 flush
	// intervals of 100 ms) it is killed: those sends must be in the file.
	std::string cmd =
		env_prefix(d + "/out.rbt") + prog() + " spin 5000 > " + d +
		"/o & pid=$!; for i in $(seq 100); do grep -q ready " + d +
		"/o && break; sleep 0.1; done; sleep 0.4; kill -9 $pid; wait $pid";
	run_result r = run(cmd);
	EXPECT_EQ(r.status, 128 + SIGKILL) << r.err; // what wait reports
	summary s = summarize(d + "/out.rbt");
	ASSERT_EQ(s.open_err, 0);
	EXPECT_FALSE(s.finished);
	EXPECT_GE(s.send_wrs, 5000u);
	EXPECT_GE(s.wc_ok, 4000u);
	EXPECT_EQ(s.by_type[RBT_EV_QP_CREATE], 1u);
}

// SIGTERM: the trace is flushed and finished, then the program dies of SIGTERM
// as it would have without the recorder.
TEST(Interpose, SigtermFinishesTheTraceAndKeepsTheSignal)
{
	std::string d = tmpdir("term");
	std::string cmd = env_prefix(d + "/out.rbt") + prog() + " spin 2000 > " + d +
			  "/o & pid=$!; for i in $(seq 100); do grep -q ready " + d +
			  "/o && break; sleep 0.1; done; kill -TERM $pid; wait $pid";
	run_result r = run(cmd);
	EXPECT_EQ(r.status, 128 + SIGTERM) << r.err;
	summary s = summarize(d + "/out.rbt");
	ASSERT_EQ(s.open_err, 0);
	EXPECT_TRUE(s.finished);
	EXPECT_FALSE(s.damaged);
	EXPECT_GE(s.send_wrs, 2000u);
}

// Empty polls of two CQs polled in turn fold per CQ: every empty poll is counted
// in a handful of events.
TEST(Interpose, EmptyPollsOfTwoCqsInTurnFold)
{
	std::string d = tmpdir("twocq");
	run_result r = run(env_prefix(d + "/") + prog() + " twocq 100000");
	ASSERT_EQ(r.status, 0) << r.err;
	ASSERT_EQ(field(r.out, "empty"), 200000);
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 1u);
	summary s = summarize(t[0]);
	EXPECT_EQ(s.empty_polls, 200000u);
	EXPECT_LE(s.by_type[RBT_EV_POLL_CQ], 200u);
}

// ibv_wr_* sessions are recorded even though the provider reinstalls its wr_*
// pointers on every move to RTS (once after create, once halfway).
TEST(Interpose, WrApiStaysWrappedAcrossProviderRewrites)
{
	std::string d = tmpdir("wrapi");
	run_result r = run(env_prefix(d + "/") + prog() + " wrapi 1000");
	ASSERT_EQ(r.status, 0) << r.err;
	ASSERT_EQ(field(r.out, "posted"), 1000) << r.out;
	ASSERT_EQ(field(r.out, "completions"), 1000) << r.out;
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 1u);
	summary s = summarize(t[0]);
	EXPECT_TRUE(s.finished);
	EXPECT_EQ(s.api1_posts, 1000u);
	EXPECT_EQ(s.send_wrs, 1000u);
	EXPECT_EQ(s.wc_ok, 1000u);
}

// The payloads of the send WRs of `interpose_prog payload`, in post order; the
// last WR (a compare-and-swap) in *atomic.
std::vector<std::string> recorded_payloads(const std::string &path,
					   struct rbt_send_wr *atomic = nullptr)
{
	std::vector<std::string> out;
	struct rbt_reader *r = nullptr;
	if (rbt_reader_open(path.c_str(), &r) < 0)
		return out;
	const struct rbt_event *ev;
	while (rbt_reader_next(r, &ev) > 0) {
		if (ev->type != RBT_EV_POST_SEND)
			continue;
		for (uint32_t i = 0; i < ev->u.post_send.n_wrs; i++) {
			const struct rbt_blob &b = ev->u.post_send.wrs[i].payload;
			out.emplace_back((const char *)b.data, b.len);
			if (atomic && ev->u.post_send.wrs[i].opcode ==
					      5 /* IBV_WR_ATOMIC_CMP_AND_SWP */) {
				*atomic = ev->u.post_send.wrs[i];
				atomic->sges = nullptr;
			}
		}
	}
	rbt_reader_close(r);
	return out;
}

std::string pattern(size_t from, size_t n) // the program's buf[i] = i * 7 + 1
{
	std::string s;
	for (size_t i = from; i < from + n; i++)
		s += (char)(uint8_t)(i * 7 + 1);
	return s;
}

std::string cycle(char first, int period, size_t n)
{
	std::string s;
	for (size_t i = 0; i < n; i++)
		s += (char)(first + (int)(i % period));
	return s;
}

// RBTRACE_PAYLOAD keeps the first N bytes of every send's data, through both
// post APIs; inline data set through ibv_wr_set_inline_data* is kept as it was
// when set (the program overwrites its buffers before ibv_wr_complete). A read
// or an atomic carries none, and without the setting nothing is kept. The
// atomic's operands come through the record's extension.
TEST(Interpose, PayloadCaptureCoversClassicAndWrApiSends)
{
	std::string d = tmpdir("payload");
	run_result r = run("RBTRACE_PAYLOAD=45 " + env_prefix(d + "/on.rbt") + prog() +
			   " payload");
	ASSERT_EQ(r.status, 0) << r.err;
	ASSERT_EQ(field(r.out, "posted"), 7) << r.out;
	struct rbt_send_wr at = {};
	std::vector<std::string> p = recorded_payloads(d + "/on.rbt", &at);
	ASSERT_EQ(p.size(), 7u);
	EXPECT_EQ(at.wr_id, 7u);
	EXPECT_EQ(at.remote_addr, 0x3000u);
	EXPECT_EQ(at.rkey, 9u);
	EXPECT_EQ(at.compare_add, 0x1111u);
	EXPECT_EQ(at.swap, 0x2222u);
	EXPECT_EQ(p[6], "");
	EXPECT_EQ(p[0], pattern(0, 45));			  // classic, sge
	EXPECT_EQ(p[1], cycle('A', 26, 40));			  // classic, inline
	EXPECT_EQ(p[2], pattern(100, 45));			  // wr_set_sge
	EXPECT_EQ(p[3], cycle('a', 26, 45));			  // wr_set_inline_data
	EXPECT_EQ(p[4], cycle('0', 10, 20) + cycle('K', 10, 25)); // inline list
	EXPECT_EQ(p[5], "");					  // RDMA read

	r = run(env_prefix(d + "/off.rbt") + prog() + " payload");
	ASSERT_EQ(r.status, 0) << r.err;
	p = recorded_payloads(d + "/off.rbt");
	ASSERT_EQ(p.size(), 7u);
	for (const std::string &s : p)
		EXPECT_EQ(s, "");
}

// A context whose verbs_context size the shim does not know: extended ops are
// left alone (one warning, one NOTE), the classic data path is still recorded.
TEST(Interpose, UnknownContextLayoutIsRefusedWithOneWarning)
{
	std::string d = tmpdir("layout");
	run_result r =
		run("FAKEVERBS_SZ=16 " + env_prefix(d + "/") + prog() + " basic 100");
	ASSERT_EQ(r.status, 0) << r.err;
	EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
	EXPECT_NE(r.err.find("not recognised"), std::string::npos) << r.err;
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 1u);
	summary s = summarize(t[0]);
	EXPECT_EQ(s.notes, 1u);
	EXPECT_EQ(s.send_wrs, 108u);
	EXPECT_EQ(s.wc_ok, 108u);
}

// A fatal signal: what was recorded is flushed and the trace finished, then the
// program dies of the same signal.
TEST(Interpose, CrashFlushesThenDiesOfTheSameSignal)
{
	std::string d = tmpdir("crash");
	run_result r = run(env_prefix(d + "/out.rbt") + prog() + " crash 500");
	EXPECT_EQ(r.status, 128 + SIGSEGV) << r.err;
	summary s = summarize(d + "/out.rbt");
	ASSERT_EQ(s.open_err, 0);
	EXPECT_TRUE(s.finished);
	EXPECT_EQ(s.send_wrs, 508u);
	EXPECT_EQ(s.wc_ok, 508u);
}

// A full disk: the program runs on, with one warning.
TEST(Interpose, FullDiskCostsOneWarning)
{
	struct stat st;
	if (stat("/dev/full", &st) != 0)
		GTEST_SKIP() << "no /dev/full here";
	run_result plain =
		run(asan_env() + "LD_LIBRARY_PATH=" + runfile("tests/progs/fakeverbs") +
		    " " + prog() + " basic 20000");
	run_result r = run(env_prefix("/dev/full") + prog() + " basic 20000");
	EXPECT_EQ(r.status, plain.status);
	EXPECT_EQ(strip_pid(r.out), strip_pid(plain.out));
	EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
	EXPECT_NE(r.err.find("/dev/full"), std::string::npos) << r.err;
}

// SIGSEGV sent by another process (not a fault): flushed, finished, and the
// process still dies of it.
TEST(Interpose, SentSigsegvStillKills)
{
	std::string d = tmpdir("segv");
	std::string cmd = env_prefix(d + "/out.rbt") + prog() + " spin 1000 > " + d +
			  "/o & pid=$!; for i in $(seq 100); do grep -q ready " + d +
			  "/o && break; sleep 0.1; done; kill -SEGV $pid; wait $pid";
	run_result r = run(cmd);
	EXPECT_EQ(r.status, 128 + SIGSEGV) << r.err;
	summary s = summarize(d + "/out.rbt");
	EXPECT_TRUE(s.finished);
	EXPECT_GE(s.send_wrs, 1000u);
}

// exec: the trace of the image before exec is finished, the new image writes
// its own file (same pid: a distinct name), nothing overwritten.
TEST(Interpose, ExecFinishesTheTraceAndTheNewImageWritesItsOwn)
{
	std::string d = tmpdir("exec");
	run_result r = run(env_prefix(d + "/") + prog() + " exec 300");
	ASSERT_EQ(r.status, 0) << r.err;
	ASSERT_NE(r.out.find("before-exec"), std::string::npos);
	ASSERT_NE(r.out.find("basic"), std::string::npos);
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 2u) << r.out;
	for (const std::string &p : t) {
		summary s = summarize(p);
		EXPECT_TRUE(s.finished) << p;
		EXPECT_EQ(s.send_wrs, 308u) << p;
		EXPECT_EQ(s.wc_ok, 308u) << p;
	}
}

TEST(Interpose, UnwritableOutputCostsOneWarning)
{
	run_result plain =
		run(asan_env() + "LD_LIBRARY_PATH=" + runfile("tests/progs/fakeverbs") +
		    " " + prog() + " basic 100");
	run_result r =
		run(env_prefix("/nonexistent/rbtrace-dir/") + prog() + " basic 100");
	EXPECT_EQ(r.status, plain.status);
	EXPECT_EQ(strip_pid(r.out), strip_pid(plain.out));
	// Exactly one line on stderr, from the recorder.
	EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
	EXPECT_NE(r.err.find("rbtrace"), std::string::npos);
}

TEST(Interpose, WriterCpuPinsTheWriterThread)
{
	std::string d = tmpdir("writercpu");
	int cpu = (int)sysconf(_SC_NPROCESSORS_ONLN) - 1;
	run_result r = run("RBTRACE_DEBUG=1 RBTRACE_WRITER_CPU=" + std::to_string(cpu) +
			   " " + env_prefix(d + "/") + prog() + " basic 20000");
	ASSERT_EQ(r.status, 0) << r.err;
	EXPECT_NE(r.err.find("writer thread on CPU " + std::to_string(cpu)),
		  std::string::npos)
		<< r.err;
	EXPECT_NE(r.err.find("last on CPU " + std::to_string(cpu)), std::string::npos)
		<< r.err;
	// Out of range, or a CPU this machine does not have: one warning each, and
	// the program runs traced as ever.
	for (const char *bad_cpu : { "4000", "1000" }) {
		std::string b = tmpdir("writercpu_bad");
		run_result bad = run(std::string("RBTRACE_WRITER_CPU=") + bad_cpu + " " +
				     env_prefix(b + "/") + prog() + " basic 100");
		EXPECT_EQ(bad.status, 0) << bad.err;
		EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
		EXPECT_NE(bad.err.find("RBTRACE_WRITER_CPU"), std::string::npos)
			<< bad.err;
		EXPECT_EQ(list_traces(b).size(), 1u);
	}
}

TEST(Interpose, InertWithoutVerbs)
{
	std::string d = tmpdir("inert");
	run_result r = run(env_prefix(d + "/") + prog() + " none");
	EXPECT_EQ(r.status, 0);
	EXPECT_EQ(r.out, "no verbs\n");
	EXPECT_EQ(r.err, "");
	EXPECT_TRUE(list_traces(d).empty());
	// Not even loaded by something that is not a verbs program at all.
	run_result e = run(env_prefix(d + "/") + "echo hi");
	EXPECT_EQ(e.out, "hi\n");
	EXPECT_TRUE(list_traces(d).empty());
}

TEST(Interpose, RecordCommandReportsEachTrace)
{
	std::string d = tmpdir("rec");
	run_result r = run(asan_preload() +
			   "RBTRACE_SOFTNIC_DIR=" + runfile("tests/progs/fakeverbs") +
			   " RBTRACE_LIB=" + runfile("interpose/librbtrace.so") + " " +
			   runfile("cli/rbtrace") + " record --softnic -o " + d +
			   "/x.rbt -- " + prog() + " fork 50");
	ASSERT_EQ(r.status, 0) << r.err;
	// Parent writes x.rbt, the forked child x-<pid>.rbt; both listed.
	EXPECT_NE(r.err.find(d + "/x.rbt: "), std::string::npos) << r.err;
	EXPECT_NE(r.err.find(d + "/x-"), std::string::npos) << r.err;
	EXPECT_NE(r.err.find(" 0 lost"), std::string::npos) << r.err;
	EXPECT_EQ(list_traces(d).size(), 2u);
	// The exit code is the program's.
	run_result bad = run(asan_preload() + runfile("cli/rbtrace") + " record -o " + d +
			     "/y.rbt -- sh -c \"exit 7\"");
	EXPECT_EQ(bad.status, 7) << bad.err;
	run_result none = run(runfile("cli/rbtrace") + " record");
	EXPECT_EQ(none.status, 2);
}

// -o FILE with two verbs programs run one after the other by a shell (siblings,
// neither the other's parent): the first takes the name, the second writes
// beside it, and the trace a previous run left there is replaced.
TEST(Interpose, RecordFileOutputKeepsSiblingsApart)
{
	std::string d = tmpdir("sib");
	std::string cmd = asan_preload() +
			  "RBTRACE_SOFTNIC_DIR=" + runfile("tests/progs/fakeverbs") +
			  " RBTRACE_LIB=" + runfile("interpose/librbtrace.so") + " " +
			  runfile("cli/rbtrace") + " record --softnic -o " + d +
			  "/x.rbt -- sh -c \"" + prog() + " basic 10; " + prog() +
			  " basic 20\"";
	ASSERT_EQ(run("echo stale > " + d + "/x.rbt").status, 0);
	run_result r = run(cmd);
	ASSERT_EQ(r.status, 0) << r.err;
	std::vector<std::string> t = list_traces(d);
	ASSERT_EQ(t.size(), 2u) << r.err;
	// basic N makes N sends plus a chain of 8 (see interpose_prog.c)
	std::set<uint64_t> sends;
	for (const std::string &p : t) {
		summary s = summarize(p);
		EXPECT_EQ(s.open_err, 0) << p;
		EXPECT_TRUE(s.finished) << p;
		sends.insert(s.send_wrs);
	}
	EXPECT_EQ(sends, (std::set<uint64_t>{ 18, 28 }));
	EXPECT_EQ(summarize(d + "/x.rbt").send_wrs, 18u) << r.err;
}

} // namespace
