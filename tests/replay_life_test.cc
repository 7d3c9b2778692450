// replay_life_test.cc - lifetimes, final QP states and memory windows, end to
// end over softnic: programs of our own recorded by the real recorder and
// replayed by the real `rbtrace replay`.
// - churn_prog (MRs registered and deregistered mid-run, a QP pair torn down
//   and reconnected, an ibv_rereg_mr): the recorder queries each QP's state at
//   its destroy (the responder moved to ERR records ERR) and at exit; the
//   replay matches every completion, issues the MR steps at their recorded
//   offsets and compares each QP's end with the device's recorded state.
// - a synthetic trace whose recorded final state no replay can reach: the
//   report names the mismatch and the run fails.
// - mw_prog (windows of type 1 and 2, bind, SEND_WITH_INV, LOCAL_INV):
//   recorded and replayed with every completion matched.
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace
{

using rbt_test::sh;
using rbt_test::softnic_env;
using rbt_test::test_tmp;

const std::string kRbtrace = "cli/rbtrace";

// The lines of text that contain every one of the words.
int CountLines(const std::string &text, std::initializer_list<const char *> words)
{
	std::istringstream in(text);
	std::string line;
	int n = 0;

	while (std::getline(in, line)) {
		bool all = true;
		for (const char *w : words)
			all = all && line.find(w) != std::string::npos;
		n += all;
	}
	return n;
}

// How many times needle occurs in text.
int CountOf(const std::string &text, const std::string &needle)
{
	int n = 0;

	for (size_t p = text.find(needle); p != std::string::npos;
	     p = text.find(needle, p + 1))
		n++;
	return n;
}

// The number after "key": in a JSON text (the first occurrence), -1 if none.
long long JsonNum(const std::string &json, const std::string &key)
{
	size_t p = json.find("\"" + key + "\":");
	if (p == std::string::npos)
		return -1;
	return atoll(json.c_str() + p + key.size() + 3);
}

class ReplayLife : public ::testing::Test
{
      protected:
	void SetUp() override
	{
		char cwd[4096];
		ASSERT_NE(nullptr, getcwd(cwd, sizeof(cwd)));
		std::string fab = test_tmp() + "/fabric";
		mkdir(fab.c_str(), 0700);
		env_ = softnic_env();
		rec_ = softnic_env(std::string(cwd) + "/interpose/librbtrace.so") +
		       "RBTRACE_OUTPUT=";
	}
	std::string env_, rec_;
};

// The recorder's own query at each destroy (the responder moved to ERR: ERR;
// its peer: RTS) and at exit for the pair still alive (why=1).
TEST_F(ReplayLife, FinalStateIsRecordedAtDestroyAndAtExit)
{
	std::string t = test_tmp() + "/churn-final.rbt", out;
	ASSERT_EQ(0, sh(rec_ + t + " tests/churn_prog --iters 2 --gap-us 500", &out))
		<< out;
	ASSERT_EQ(0, sh(kRbtrace + " dump " + t, &out)) << out;
	EXPECT_EQ(1, CountLines(out, { "qp_final_state", "qp_state=ERR" })) << out;
	EXPECT_EQ(1, CountLines(out, { "qp_final_state", "qp_state=RTS" }) -
			     CountLines(out, { "qp_final_state", "why=1" }))
		<< out;
	EXPECT_EQ(2, CountLines(out, { "qp_final_state", "qp_state=RTS", "why=1" }))
		<< out;
	EXPECT_EQ(2, CountLines(out, { "] qp_destroy", "ret=0" })) << out;
	// the destroy's query comes right before it (stack frames aside)
	std::istringstream in(out);
	std::string line, next;
	while (std::getline(in, line) &&
	       (line.find("qp_final_state") == std::string::npos ||
		line.find("qp_state=ERR") == std::string::npos))
		;
	while (std::getline(in, next) && (next.empty() || next[0] == ' '))
		;
	EXPECT_NE(std::string::npos, next.find("] qp_destroy")) << out;
}

// MR churn, a reconnect and a rereg replay with every completion matched in
// recorded and asap timing; in recorded timing the MR and QP steps run at their
// recorded offsets (lateness bounded generously: the machine is shared), and
// the QP destroyed in ERR is compared with the device's recorded ERR.
TEST_F(ReplayLife, ChurnReplaysAtRecordedTimesWithEveryCompletion)
{
	std::string t = test_tmp() + "/churn.rbt", out;
	ASSERT_EQ(0, sh(rec_ + t + " tests/churn_prog --iters 4", &out)) << out;
	for (const char *m : { "recorded", "asap" }) {
		EXPECT_EQ(0,
			  sh(env_ + kRbtrace + " replay --json --timing=" + m + " " + t,
			     &out))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos,
			  out.find("\"completions\":{\"expected\":16,\"matched\":16,"))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos, out.find("\"divergences\":[]"))
			<< m << ": " << out;
		// 4 iterations x 2 MRs: the first two registered before the
		// start, all eight deregistered during the run, one rereg
		EXPECT_EQ(6, JsonNum(out, "mr_reg")) << out;
		EXPECT_EQ(8, JsonNum(out, "mr_dereg")) << out;
		EXPECT_EQ(1, JsonNum(out, "mr_rereg")) << out;
		// the second pair created, the first destroyed, mid-run
		EXPECT_EQ(2, JsonNum(out, "qp_create")) << out;
		EXPECT_EQ(2, JsonNum(out, "qp_destroy")) << out;
		if (!strcmp(m, "recorded")) {
			size_t r = out.find("\"resource_steps\"");
			ASSERT_NE(std::string::npos, r) << out;
			std::string rs = out.substr(r);
			EXPECT_EQ(19, JsonNum(rs, "count")) << out;
			long long max = JsonNum(rs.substr(rs.find("lateness_ns")), "max");
			EXPECT_GE(max, 0) << out;
			EXPECT_LT(max, 500000000ll) << out; // 0.5 s on a loaded machine
		}
		EXPECT_NE(std::string::npos,
			  out.find("\"recorded\":\"ERR\",\"replayed\":\"ERR\","
				   "\"recorded_from\":\"destroy\""))
			<< m << ": " << out;
	}
	EXPECT_EQ(0, sh(env_ + kRbtrace + " replay " + t, &out)) << out;
	EXPECT_NE(std::string::npos, out.find("resource steps: 19 during the run"))
		<< out;
	EXPECT_NE(std::string::npos, out.find("lateness of resource steps vs schedule"))
		<< out;
	EXPECT_NE(std::string::npos,
		  out.find("state ERR (recorded ERR), the device's at its destroy"))
		<< out;
	EXPECT_EQ(2,
		  CountLines(out, { "state RTS (recorded RTS), the device's at exit" }))
		<< out;
	EXPECT_NE(std::string::npos, out.find("no divergence")) << out;
}

// Six reconnects and eight MR pairs, no rereg, replayed in windows of 16 steps
// (RBTRACE_REPLAY_WINDOW): the trace streams (no "replaying it from memory"),
// the QP creates and destroys are steps of their windows - run when recorded,
// as many as from memory (each reconnect: two of each) - and every completion
// and end state matches, in recorded and asap timing.
TEST_F(ReplayLife, QpChurnStreamsWithItsStepsInTheirWindows)
{
	std::string t = test_tmp() + "/churn-str.rbt", out;
	ASSERT_EQ(0, sh(rec_ + t +
				" tests/churn_prog --iters 8 --reconnects 6 --no-rereg 1 "
				"--gap-us 300",
			&out))
		<< out;
	const std::string replay = env_ + " RBTRACE_REPLAY_WINDOW=16 " + kRbtrace +
				   " replay --json " + t + " --timing=";

	for (const char *m : { "recorded", "asap" }) {
		// streamed: no fallback note, many windows
		ASSERT_EQ(0, sh(replay + m, &out)) << m << ": " << out;
		EXPECT_EQ(std::string::npos, out.find("from memory")) << m << ": " << out;
		EXPECT_GE(JsonNum(out, "windows"), 5) << m << ": " << out;
		EXPECT_NE(std::string::npos,
			  out.find("\"completions\":{\"expected\":36,\"matched\":36,"))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos, out.find("\"divergences\":[]"))
			<< m << ": " << out;
		EXPECT_EQ(12, JsonNum(out, "qp_create")) << m << ": " << out;
		EXPECT_EQ(12, JsonNum(out, "qp_destroy")) << m << ": " << out;
		EXPECT_EQ(14, JsonNum(out, "mr_reg")) << m << ": " << out;
		EXPECT_EQ(16, JsonNum(out, "mr_dereg")) << m << ": " << out;
		// each reconnect's responder, destroyed in ERR
		EXPECT_EQ(6, CountOf(out, "\"recorded\":\"ERR\",\"replayed\":\"ERR\","
					  "\"recorded_from\":\"destroy\""))
			<< m << ": " << out;
	}
}

// A recorded end no replay reaches (the trace says the device found the QP in
// ERR at exit; nothing in it moves the QP there): reported, and the run fails.
TEST_F(ReplayLife, AFinalStateThatDiffersIsReported)
{
	std::string d = test_tmp() + "/final-differs", out;
	mkdir(d.c_str(), 0700);
	ASSERT_EQ(0, sh("tests/replay_synth " + d + " --iters 5 --final-state 6", &out))
		<< out;
	EXPECT_EQ(1,
		  sh(env_ + kRbtrace + " replay " + d + "/a.rbt " + d + "/b.rbt", &out))
		<< out;
	EXPECT_NE(std::string::npos, out.find("completions matched: 22 of 22")) << out;
	EXPECT_NE(
		std::string::npos,
		out.find("QP 200 ends in state RTS, recorded ERR, the device's at exit"))
		<< out;
	// without the recorder's query the same trace replays clean
	ASSERT_EQ(0, sh("tests/replay_synth " + d + " --iters 5", &out)) << out;
	EXPECT_EQ(0,
		  sh(env_ + kRbtrace + " replay " + d + "/a.rbt " + d + "/b.rbt", &out))
		<< out;
}

// Memory windows: alloc (types 1 and 2), ibv_bind_mw, a BIND_MW WR, RDMA
// through a window's key, SEND_WITH_INV, ibv_wr_bind_mw + LOCAL_INV: every
// completion matched in recorded and asap timing.
TEST_F(ReplayLife, MemoryWindowProgramReplays)
{
	std::string t = test_tmp() + "/mw.rbt", out;
	ASSERT_EQ(0, sh(rec_ + t + " tests/mw_prog", &out)) << out;
	for (const char *m : { "recorded", "asap" }) {
		EXPECT_EQ(0,
			  sh(env_ + kRbtrace + " replay --timing=" + m + " " + t, &out))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos, out.find("completions matched: 9 of 9"))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos, out.find("no divergence"))
			<< m << ": " << out;
	}
	// the replay, recorded: the windows were allocated and bound again
	std::string o = test_tmp() + "/mw-replay.rbt";
	ASSERT_EQ(0, sh(env_ + kRbtrace + " replay -o " + o + " " + t, &out)) << out;
	ASSERT_EQ(0, sh(kRbtrace + " dump " + o, &out)) << out;
	EXPECT_EQ(2, CountLines(out, { "] mw_alloc" })) << out;
	EXPECT_EQ(4, CountLines(out, { "opcode=BIND_MW" }) -
			     CountLines(out, { "] poll_cq", "opcode=BIND_MW" }))
		<< out;
}

// Two recordings of mw_prog replayed together: the second side's windows get
// keys its recording never had (the first side's took those), so every bind,
// RDMA access through a window and invalidation goes through the translation.
TEST_F(ReplayLife, MemoryWindowKeysAreTranslated)
{
	std::string a = test_tmp() + "/mw-a.rbt", b = test_tmp() + "/mw-b.rbt", out;
	ASSERT_EQ(0, sh(rec_ + a + " tests/mw_prog", &out)) << out;
	ASSERT_EQ(0, sh(rec_ + b + " tests/mw_prog", &out)) << out;
	std::string o = test_tmp() + "/mw-ab";
	EXPECT_EQ(0, sh(env_ + kRbtrace + " replay --timing=asap -o " + o + ".rbt " + a +
				" " + b,
			&out))
		<< out;
	EXPECT_NE(std::string::npos, out.find("completions matched: 18 of 18")) << out;
	EXPECT_NE(std::string::npos, out.find("no divergence")) << out;
	// the windows' keys at alloc: recorded vs replayed, for the second side
	auto keys = [&](const std::string &t) {
		std::string d, k;
		sh(kRbtrace + " dump " + t, &d);
		std::istringstream in(d);
		std::string line;
		while (std::getline(in, line))
			if (line.find("] mw_alloc") != std::string::npos) {
				size_t p = line.find(" rkey=");
				k += line.substr(p, line.find(' ', p + 1) - p);
			}
		return k;
	};
	std::string rec = keys(b), rep = keys(o + ".1.rbt");
	EXPECT_FALSE(rec.empty());
	EXPECT_FALSE(rep.empty());
	EXPECT_NE(rec, rep)
		<< "the replay gave side 1 its recorded keys: nothing to translate";
}

} // namespace
