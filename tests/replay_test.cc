// replay_test.cc - the replayer end to end: hand-written traces of both ends of an
// RC exchange (tests/progs/replay_synth.c) replayed over softnic by the real
// `rbtrace replay`, in one process, in two processes over TCP, and against
// `rbtrace replay --responder`; recorded failures (RNR retry exceeded, remote
// access error) replayed to the same error completion and QP state; the replay
// recorded with -o and compared with `rbtrace diff`; and every refusal (unpaired
// QP, damaged trace, missing device) made before any verb is issued.
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <cstring>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace
{

using rbt_test::sanitizer_first;
using rbt_test::sh;
using rbt_test::slurp;
using rbt_test::softnic_env;
using rbt_test::test_tmp;

bool Exists(const std::string &p)
{
	struct stat st;
	return stat(p.c_str(), &st) == 0;
}

const std::string kRbtrace = "cli/rbtrace";
const std::string kSynth = "tests/replay_synth";

std::string Synth(const std::string &name, const std::string &args)
{
	std::string dir = test_tmp() + "/" + name;
	mkdir(dir.c_str(), 0700);
	std::string out;
	EXPECT_EQ(0, sh(kSynth + " " + dir + " " + args, &out)) << out;
	return dir;
}

// A TCP port nobody listens on now: the kernel's choice for port 0. (Tests of
// other runs share the network namespace: fixed or pid-derived ports collide.)
int Port()
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {};
	socklen_t len = sizeof(a);
	int port = 0;

	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port ? port : 20000 + getpid() % 20000;
}

// Runs `rbtrace replay --listen` on srv in the background and `--connect` on cli;
// returns both outputs and exit codes.
void TwoProcesses(const std::string &env, const std::string &srv_args,
		  const std::string &cli_args, const std::string &log, int *rc_srv,
		  std::string *out_srv, int *rc_cli, std::string *out_cli)
{
	int port = Port();
	FILE *bg = popen((env + kRbtrace + " replay --listen " + std::to_string(port) +
			  " " + srv_args + " > " + log + " 2>&1")
				 .c_str(),
			 "r");
	ASSERT_NE(nullptr, bg);
	*rc_cli = sh(env + kRbtrace + " replay --connect 127.0.0.1:" +
			     std::to_string(port) + " " + cli_args,
		     out_cli);
	int st = pclose(bg);
	*rc_srv = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	*out_srv = slurp(log);
}

TEST(ReplayRefuse, UnpairedQpIsRefusedBeforeAnyVerb)
{
	std::string d = Synth("unpaired", "");
	std::string out;
	// No softnic in the environment: a refusal must come before the device is
	// even looked for.
	EXPECT_EQ(1, sh(kRbtrace + " replay " + d + "/a.rbt", &out));
	EXPECT_NE(std::string::npos, out.find("QP 100 was connected to QP 200")) << out;
	EXPECT_EQ(std::string::npos, out.find("no RDMA device")) << out;
}

TEST(ReplayRefuse, DamagedTraceIsRefusedUnlessAllowed)
{
	std::string d = Synth("damaged", "--iters 2000");
	std::string a = d + "/a.rbt";
	struct stat st;
	ASSERT_EQ(0, stat(a.c_str(), &st));
	ASSERT_EQ(0, truncate(a.c_str(), st.st_size - 40));
	std::string out;
	EXPECT_EQ(1, sh(kRbtrace + " replay " + a + " " + d + "/b.rbt", &out));
	EXPECT_NE(std::string::npos, out.find("damaged")) << out;
	EXPECT_NE(std::string::npos, out.find("--allow-damaged")) << out;
	// Allowed: it goes on past loading (and here stops at the missing device).
	EXPECT_EQ(1, sh("LD_LIBRARY_PATH=/nonexistent " + kRbtrace +
				" replay --allow-damaged " + a + " " + d + "/b.rbt",
			&out));
	EXPECT_NE(std::string::npos, out.find("intact part")) << out;
}

TEST(ReplayRefuse, BadCommandLines)
{
	std::string out;
	EXPECT_EQ(2, sh(kRbtrace + " replay", &out));
	EXPECT_EQ(2, sh(kRbtrace + " replay --timing=fast x.rbt", &out));
	EXPECT_NE(std::string::npos, out.find("--timing=fast")) << out;
	EXPECT_EQ(2, sh(kRbtrace + " replay --timing=scale:-1 x.rbt", &out));
	EXPECT_EQ(2, sh(kRbtrace + " replay --responder x.rbt", &out));
	EXPECT_EQ(1, sh(kRbtrace + " replay " + test_tmp() + "/missing.rbt", &out));
	EXPECT_NE(std::string::npos, out.find("missing.rbt")) << out;
	EXPECT_EQ(0, sh(kRbtrace + " replay --help", &out));
	EXPECT_NE(std::string::npos, out.find("--responder")) << out;
}

class ReplaySoftnic : public ::testing::Test
{
      protected:
	void SetUp() override
	{
		ASSERT_TRUE(Exists("softnic/libibverbs.so.1"))
			<< "softnic's libibverbs.so.1 is a data dependency of this test";
		env_ = softnic_env();
	}
	// `rbtrace replay OPTS` of both ends of the replay_synth pair in d, on softnic.
	int ReplayPair(const std::string &d, std::string *out,
		       const std::string &opts = "")
	{
		return sh(env_ + kRbtrace + " replay " + opts + d + "/a.rbt " + d +
				  "/b.rbt",
			  out);
	}
	// The pair replay_synth writes with args replayed (OPTS): exit code want,
	// every one of the texts in its output.
	void ExpectReplay(const std::string &name, const std::string &args, int want,
			  std::initializer_list<const char *> texts,
			  const std::string &opts = "")
	{
		std::string out;
		EXPECT_EQ(want, ReplayPair(Synth(name, args), &out, opts)) << out;
		for (const char *t : texts)
			EXPECT_NE(std::string::npos, out.find(t)) << t << "\n" << out;
	}
	std::string env_;
};

TEST_F(ReplaySoftnic, DeviceLimitsAreRefusedBeforeTraffic)
{
	std::string d = Synth("limits", "--send-wr 1000000");
	std::string out;
	EXPECT_EQ(1, ReplayPair(d, &out));
	EXPECT_NE(std::string::npos, out.find("QP 100 needs 1000000 send")) << out;
	EXPECT_NE(std::string::npos, out.find("the device allows")) << out;
	EXPECT_EQ(std::string::npos, out.find("completions matched")) << out;
}

TEST_F(ReplaySoftnic, BothEndsInOneProcessMatchEveryCompletion)
{
	std::string d = Synth("pp1", "--iters 200");
	std::string out;
	int rc = sh(env_ + kRbtrace + " replay --timing=asap -o " + d + "/r.rbt " + d +
			    "/a.rbt " + d + "/b.rbt",
		    &out);
	EXPECT_EQ(0, rc) << out;
	// 200 pings and pongs: per end 200 send + 200 recv, + WRITE and READ.
	EXPECT_NE(std::string::npos, out.find("completions matched: 802 of 802")) << out;
	EXPECT_NE(std::string::npos, out.find("no divergence")) << out;
	// The replay recorded itself; each end compares equal to its original.
	EXPECT_EQ(0, sh(kRbtrace + " diff " + d + "/a.rbt " + d + "/r.0.rbt", &out))
		<< out;
	EXPECT_EQ(0, sh(kRbtrace + " diff " + d + "/b.rbt " + d + "/r.1.rbt", &out))
		<< out;
}

TEST_F(ReplaySoftnic, RecordedTimingReportsLateness)
{
	std::string d = Synth("stream", "--scenario stream --iters 400 --interval-us 50");
	std::string out;
	EXPECT_EQ(0,
		  sh(env_ + kRbtrace + " replay --json " + d + "/a.rbt " + d + "/b.rbt",
		     &out))
		<< out;
	EXPECT_NE(std::string::npos, out.find("\"timing\":\"recorded\"")) << out;
	EXPECT_NE(std::string::npos, out.find("\"lateness_ns\":{\"count\":")) << out;
	EXPECT_NE(std::string::npos, out.find("\"divergences\":[]")) << out;
	for (const char *t : { "deps", "scale:0.5" }) {
		EXPECT_EQ(0, sh(env_ + kRbtrace + " replay --timing=" + t + " " + d +
					"/a.rbt " + d + "/b.rbt",
				&out))
			<< t << ": " << out;
		EXPECT_NE(std::string::npos, out.find("no divergence")) << out;
	}
}

// The server's polls begin 2 us before the client's SEND they get and return
// 6 us after it. Streamed in windows of 12 steps, a window that ended between
// a poll's start and its send's would hold the poll but not the send (the poll
// then waits in vain, the send comes a window late): windows take a wait by
// its return, so every completion matches in asap and recorded timing.
TEST_F(ReplaySoftnic, StreamedPollBegunBeforeItsSendStaysInItsWindow)
{
	std::string d =
		Synth("waiting", "--scenario waiting --iters 400 --interval-us 20");
	// the reader's thread decoding ahead (default) and the next window read
	// while one runs (forced: by default only with a CPU to spare), the
	// run's thread decoding each window itself, and each window read in the
	// pause before it: the same windows every way
	for (const char *t : { "asap", "recorded", "asap-read-ahead-0",
			       "asap-feed-ahead-0", "recorded-feed-ahead-0" }) {
		std::string out, timing = t, knob = "RBTRACE_REPLAY_FEED_AHEAD=1 ";

		if (timing.find("read-ahead-0") != std::string::npos)
			knob = "RBTRACE_REPLAY_READ_AHEAD=0 ";
		if (timing.find("feed-ahead-0") != std::string::npos)
			knob = "RBTRACE_REPLAY_FEED_AHEAD=0 ";
		timing = timing.substr(0, timing.find('-'));
		EXPECT_EQ(0, sh(env_ + " RBTRACE_REPLAY_WINDOW=12 " + knob + kRbtrace +
					" replay --poll-timeout 300 --timing=" + timing +
					" " + d + "/a.rbt " + d + "/b.rbt",
				&out))
			<< t << ": " << out;
		EXPECT_EQ(std::string::npos, out.find("replaying it from memory"))
			<< t << ": " << out;
		EXPECT_NE(std::string::npos,
			  out.find("completions matched: 800 of 800\n"))
			<< t << ": " << out;
		EXPECT_NE(std::string::npos, out.find("no divergence"))
			<< t << ": " << out;
	}
}

TEST_F(ReplaySoftnic, TwoProcessesOverTcp)
{
	std::string d = Synth("pp2", "--iters 100");
	std::string out, out2;
	int rc, rc2;
	TwoProcesses(env_, d + "/b.rbt", d + "/a.rbt", d + "/srv.log", &rc2, &out2, &rc,
		     &out);
	EXPECT_EQ(0, rc) << out;
	EXPECT_EQ(0, rc2) << out2;
	EXPECT_NE(std::string::npos, out.find("completions matched: 202 of 202")) << out;
	EXPECT_NE(std::string::npos, out2.find("completions matched: 200 of 200"))
		<< out2;
}

// Two replayers start their timelines 2 ms after their barrier, so the first SEND
// reaches a peer QP that has only just been connected: it must arrive every time
// (this once failed about 1 run in 20 on a loaded machine). Many short runs.
TEST_F(ReplaySoftnic, TwoProcessesFirstSendRightAfterTheBarrier)
{
	std::string d = Synth("first", "--iters 5");
	int fails = 0, runs = 0;
	std::string first_failure;
	for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
	     runs < 25 && std::chrono::steady_clock::now() < end; runs++) {
		int port = Port();
		std::string out;
		FILE *bg = popen((env_ + kRbtrace + " replay --listen " +
				  std::to_string(port) + " " + d + "/b.rbt > " + d +
				  "/srv.log 2>&1")
					 .c_str(),
				 "r");
		ASSERT_NE(nullptr, bg);
		int rc = sh(env_ + kRbtrace + " replay --connect 127.0.0.1:" +
				    std::to_string(port) + " " + d + "/a.rbt",
			    &out);
		int st = pclose(bg);
		if (rc || !WIFEXITED(st) || WEXITSTATUS(st) ||
		    out.find("no divergence") == std::string::npos) {
			if (!fails++)
				first_failure = out;
		}
	}
	EXPECT_GE(runs, 5);
	EXPECT_EQ(0, fails) << fails << " of " << runs << " runs failed; first:\n"
			    << first_failure;
}

TEST_F(ReplaySoftnic, OneEndAgainstResponder)
{
	std::string d = Synth("resp", "--iters 100");
	std::string out;
	int port = Port();
	std::string srv = env_ + kRbtrace + " replay --responder --listen " +
			  std::to_string(port) + " > " + d + "/resp.log 2>&1";
	FILE *bg = popen(srv.c_str(), "r");
	ASSERT_NE(nullptr, bg);
	int rc = sh(env_ + kRbtrace + " replay --connect 127.0.0.1:" +
			    std::to_string(port) + " " + d + "/a.rbt",
		    &out);
	int st = pclose(bg);
	EXPECT_EQ(0, rc) << out;
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_NE(std::string::npos, out.find("completions matched: 202 of 202")) << out;
}

TEST_F(ReplaySoftnic, RnrRetryExceededReplaysToSameErrorAndState)
{
	ExpectReplay("rnr", "--scenario rnr", 0,
		     { "completions matched: 1 of 1", "state ERR (recorded ERR)" });
}

TEST_F(ReplaySoftnic, RemoteAccessErrorReplaysToSameErrorAndState)
{
	std::string d = Synth("rkey", "--scenario rkey");
	std::string out;
	EXPECT_EQ(0, ReplayPair(d, &out)) << out;
	EXPECT_NE(std::string::npos, out.find("completions matched: 2 of 2")) << out;
	EXPECT_NE(std::string::npos, out.find("invalid rkey")) << out;
	EXPECT_EQ(std::string::npos, out.find("divergences")) << out;
}

TEST_F(ReplaySoftnic, ADivergenceIsReportedAndFailsTheRun)
{
	// The rnr client replayed against a server that DOES post its receive: the
	// recorded RNR error does not happen, and the report says so.
	std::string rnr = Synth("div_rnr", "--scenario rnr");
	std::string pp = Synth("div_pp", "--iters 1");
	std::string out;
	EXPECT_EQ(1, sh(env_ + kRbtrace + " replay --poll-timeout 300 " + rnr +
				"/a.rbt " + pp + "/b.rbt",
			&out))
		<< out;
	EXPECT_NE(std::string::npos, out.find("divergences")) << out;
	// A wrong status is named as such (not hidden by whole-run matching).
	EXPECT_NE(std::string::npos,
		  out.find("QP 100 send completion #0: recorded status RNR retry counter "
			   "exceeded"))
		<< out;
}

// A CQ shared by a QP's two queues, a program that never polled its SEND's
// completion: the replay's one poll takes that SEND completion (queued 1 ms
// before the answer), not the recorded receive. Completions are matched per QP
// and queue over the whole run, and the replayer keeps polling for the receive
// it owes, so the replay is faithful; the extra successful SEND completion is
// reported as never polled by the program. (Per poll step this diverged.)
TEST_F(ReplaySoftnic, CompletionTheProgramNeverPolledIsNotADivergence)
{
	ExpectReplay("unpolled", "--scenario unpolled", 0,
		     { "completions matched: 3 of 3", "no divergence" },
		     "--poll-timeout 2000 ");
}

// The same, but the answer never comes: the recorded receive is missing, and
// that stays a divergence after the replayer polled for it until the timeout.
TEST_F(ReplaySoftnic, MissingCompletionOnASharedCqStillDiverges)
{
	ExpectReplay("unpolled_lost", "--scenario unpolled-lost", 1,
		     { "QP 100 recv: recorded 1 completions, replay 0",
		       "completions matched: 1 of 2" },
		     "--poll-timeout 300 ");
}

// ---- traces recorded by librbtrace from real verbs programs over softnic ----

// "completions matched: N of M" with N == M > 0.
bool AllMatched(const std::string &out)
{
	size_t p = out.find("completions matched: ");
	unsigned long n = 0, m = 0;
	if (p == std::string::npos ||
	    sscanf(out.c_str() + p, "completions matched: %lu of %lu", &n, &m) != 2)
		return false;
	return n == m && m > 0;
}

// ---- failing well: a bounded end after a divergence, signals, --max-time ----

double SecondsSince(std::chrono::steady_clock::time_point t)
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
		.count();
}

// The client polls 20000 times for answers the server never sends. The first
// poll waits --poll-timeout (5 s by default) and diverges; before, every later
// one still waited 10 ms (over 200 s in all). Now the side's fruitless waits
// after the divergence stop at 2 s in all, the report comes, and the 20000
// identical poll timeouts are one line with their count.
TEST_F(ReplaySoftnic, ADivergenceAtTheFirstPollEndsWithinSecondsWithAReport)
{
	std::string d = Synth("deaf", "--scenario deaf --iters 20000 --interval-us 20");
	std::string out;
	auto t0 = std::chrono::steady_clock::now();
	EXPECT_EQ(1, ReplayPair(d, &out)) << out;
	double took = SecondsSince(t0);
	EXPECT_LT(took, 15.0) << out;
	// the poll timeout, and in recorded timing the recorded poll's own wait
	size_t at = out.find("step 4: expected 1 completions, got 0 (waited 50");
	EXPECT_NE(std::string::npos, at) << out;
	EXPECT_NE(std::string::npos, out.find(" ms) (x ", at)) << out;
	EXPECT_NE(std::string::npos, out.find("stopped: " + d + "/a.rbt ran ")) << out;
	EXPECT_NE(std::string::npos,
		  out.find("after a divergence its waits found nothing for 2000 ms"))
		<< out;
	EXPECT_NE(std::string::npos, out.find("completions matched: 0 of ")) << out;
	EXPECT_NE(std::string::npos, out.find("20000 in all)")) << out;
	// counted, not listed: a handful of lines, not thousands
	EXPECT_LT(std::count(out.begin(), out.end(), '\n'), 40) << out;
}

// Starts `rbtrace replay ARGS` as our child (stdout and stderr to log).
pid_t StartReplay(const std::string &env, const std::string &args, const std::string &log)
{
	std::string cmd =
		"exec env " + env + kRbtrace + " replay " + args + " >" + log + " 2>&1";
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd.c_str(), (char *)NULL);
		_exit(127);
	}
	return pid;
}

// Waits for it: its exit code (200 + the signal that killed it) and its usage.
int Reap(pid_t pid, struct rusage *ru)
{
	int st = 0;
	if (pid < 0 || wait4(pid, &st, 0, ru) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 200 + WTERMSIG(st);
}

// Starts `rbtrace replay ARGS` (stdout and stderr to *log), sends it sig after
// after_s seconds; returns its exit code and how long it ran after the signal.
int ReplayAndSignal(const std::string &env, const std::string &args, int sig,
		    double after_s, const std::string &log, double *after_sig)
{
	struct rusage ru;
	pid_t pid = StartReplay(env, args, log);

	if (pid < 0)
		return -1;
	usleep((useconds_t)(after_s * 1e6));
	kill(pid, sig);
	auto t = std::chrono::steady_clock::now();
	int rc = Reap(pid, &ru);
	*after_sig = SecondsSince(t);
	return rc;
}

// ---- any length: a streamed replay's memory does not grow with the trace ----

// The replayer's peak resident memory (KB) replaying both ends of a SEND stream
// of `posts` posts with --timing=asap; window: RBTRACE_REPLAY_WINDOW (0: from
// memory, as before streaming). *out: its report.
long ReplayPeakKb(const std::string &env, const std::string &name, long posts,
		  const char *window, std::string *out)
{
	std::string d = Synth(name, "--scenario stream --interval-us 1 --iters " +
					    std::to_string(posts / 2));
	std::string log = test_tmp() + "/" + name + ".out";
	struct rusage ru = {};
	int rc = Reap(StartReplay(env + " RBTRACE_REPLAY_WINDOW=" + window + " ",
				  "--timing=asap " + d + "/a.rbt " + d + "/b.rbt", log),
		      &ru);
	*out = slurp(log);
	EXPECT_EQ(0, rc) << *out;
	return ru.ru_maxrss;
}

// 1 M posts streamed (windows of 16384 steps) against 100 k from memory, which
// held about 1.8 kB per post: the streamed replay of ten times the posts stays
// under the in-memory one, under 160 MB, and matches every completion.
TEST_F(ReplaySoftnic, AMillionPostsReplayStreamedInBoundedMemory)
{
	std::string out_mem, out_str;
	long mem = ReplayPeakKb(env_, "inmem", 100000, "0", &out_mem);
	long str = ReplayPeakKb(env_, "streamed", 1000000, "16384", &out_str);

	EXPECT_NE(std::string::npos,
		  out_str.find("completions matched: 1000000 of 1000000\n"))
		<< out_str;
	EXPECT_NE(std::string::npos, out_str.find("no divergence")) << out_str;
	EXPECT_NE(std::string::npos,
		  out_mem.find("completions matched: 100000 of 100000\n"))
		<< out_mem;
	if (!sanitizer_first("cli/rbtrace").empty())
		GTEST_SKIP() << "sanitized: memory is the sanitizer's (streamed " << str
			     << " KB, in memory " << mem << " KB)";
	EXPECT_LT(str, mem) << "streamed 1 M posts: " << str
			    << " KB, in memory 100 k posts: " << mem << " KB";
	EXPECT_LT(str, 160 * 1024) << out_str;
}

// Longer than a window (16384 steps) but far below what the machine holds: by
// default from memory, without the pauses between windows; streamed when
// RBTRACE_REPLAY_MEMORY_STEPS says fewer fit (or RBTRACE_REPLAY_WINDOW is
// set); a value that is not a number is named and the default kept.
TEST_F(ReplaySoftnic, TracesThatFitInMemoryAreNotStreamed)
{
	std::string d = Synth("fit", "--scenario stream --interval-us 1 --iters 12000");
	const struct {
		const char *env, *name;
		bool streamed;
	} runs[] = {
		{ "", "default", false },
		{ "RBTRACE_REPLAY_MEMORY_STEPS=5000 ", "limit", true },
		{ "RBTRACE_REPLAY_WINDOW=16384 ", "window", true },
		{ "RBTRACE_REPLAY_MEMORY_STEPS=lots ", "bad", false },
	};
	for (const auto &r : runs) {
		std::string log = test_tmp() + "/fit_" + r.name + ".out";
		int rc =
			Reap(StartReplay("-u RBTRACE_REPLAY_WINDOW " + env_ + " " + r.env,
					 "--json --timing=asap " + d + "/a.rbt " + d +
						 "/b.rbt",
					 log),
			     nullptr);
		std::string out = slurp(log);
		ASSERT_EQ(0, rc) << r.name << ": " << out;
		EXPECT_NE(std::string::npos, out.find("\"matched\":24000"))
			<< r.name << out;
		size_t w = out.find("\"windows\":");
		ASSERT_NE(std::string::npos, w) << r.name << out;
		EXPECT_EQ(r.streamed, out.compare(w, 12, "\"windows\":0,") != 0)
			<< r.name << ": " << out.substr(w, 20);
		EXPECT_EQ(
			std::string(r.name) == "bad",
			out.find("ignoring RBTRACE_REPLAY_MEMORY_STEPS=lots (expected a "
				 "number of steps)") != std::string::npos)
			<< r.name << out;
	}
}

// A 10 s stream (recorded timing) interrupted after 2 s: the report of what ran,
// every completion up to there matched, exit code 128 + the signal.
TEST_F(ReplaySoftnic, SigintAndSigtermPrintTheReportOfWhatRan)
{
	std::string d = Synth("sig", "--scenario stream --iters 20000 --interval-us 500");
	const struct {
		int sig;
		const char *name;
	} sigs[] = { { SIGINT, "SIGINT" }, { SIGTERM, "SIGTERM" } };
	for (const auto &sg : sigs) {
		std::string log = test_tmp() + "/sig_" + sg.name + ".out";
		double after = 0;
		/* past load and setup, even sanitized on a loaded machine */
		double when = sanitizer_first("cli/rbtrace").empty() ? 2.0 : 5.0;
		int rc = ReplayAndSignal(env_, d + "/a.rbt " + d + "/b.rbt", sg.sig, when,
					 log, &after);
		std::string out = slurp(log);
		EXPECT_EQ(128 + sg.sig, rc) << out;
		EXPECT_LT(after, 3.0) << out;
		EXPECT_NE(std::string::npos,
			  out.find(std::string("steps (") + sg.name + ")"))
			<< out;
		EXPECT_TRUE(AllMatched(out)) << out;
		EXPECT_NE(std::string::npos, out.find("40000 in all)")) << out;
		EXPECT_NE(std::string::npos, out.find("no divergence")) << out;
	}
}

TEST_F(ReplaySoftnic, MaxTimeEndsTheRunWithWhatRanMatched)
{
	std::string d =
		Synth("maxt", "--scenario stream --iters 20000 --interval-us 500");
	std::string out;
	auto t0 = std::chrono::steady_clock::now();
	EXPECT_EQ(0, sh(env_ + kRbtrace + " replay --max-time 1 " + d + "/a.rbt " + d +
				"/b.rbt",
			&out))
		<< out;
	EXPECT_LT(SecondsSince(t0), 6.0) << out;
	EXPECT_NE(std::string::npos, out.find("steps (--max-time 1.000 s)")) << out;
	EXPECT_TRUE(AllMatched(out)) << out;
	EXPECT_NE(std::string::npos, out.find("40000 in all)")) << out;
	EXPECT_EQ(2, sh(kRbtrace + " replay --max-time -3 " + d + "/a.rbt", &out)) << out;
	EXPECT_NE(std::string::npos, out.find("--max-time -3: expected seconds")) << out;
}

class ReplayRecorded : public ReplaySoftnic
{
      protected:
	void SetUp() override
	{
		ReplaySoftnic::SetUp();
		char cwd[4096];
		ASSERT_NE(nullptr, getcwd(cwd, sizeof(cwd)));
		ASSERT_TRUE(Exists("interpose/librbtrace.so"));
		rec_ = softnic_env(std::string(cwd) + "/interpose/librbtrace.so") +
		       "RBTRACE_OUTPUT=";
	}
	// Both ends of cmd recorded: the server (d/srv.rbt, its output in
	// d/srv.log) in the background, the client (cmd + " localhost", d/cli.rbt)
	// retried every nap_us until the server listens; the client's exit code.
	int RecordPair(const std::string &d, const std::string &cmd, std::string *out,
		       useconds_t nap_us = 100000)
	{
		FILE *srv =
			popen((rec_ + d + "/srv.rbt " + cmd + " > " + d + "/srv.log 2>&1")
				      .c_str(),
			      "r");
		if (!srv)
			return -1;
		int rc = 1;
		for (int i = 0; i < 50 && rc; i++) {
			usleep(nap_us);
			rc = sh(rec_ + d + "/cli.rbt " + cmd + " localhost", out);
		}
		pclose(srv);
		return rc;
	}
	std::string rec_; // + trace path + " " + command
};

TEST_F(ReplayRecorded, PingpongBothEndsInTwoProcessesAndDiff)
{
	if (!Exists("/usr/bin/ibv_rc_pingpong"))
		GTEST_SKIP() << "ibverbs-utils is not installed";
	std::string d = test_tmp() + "/rec_pp";
	mkdir(d.c_str(), 0700);
	std::string out, sout;
	int port = Port();
	std::string ps = " -p " + std::to_string(port) + " -n 200";
	int rc = RecordPair(d, "ibv_rc_pingpong" + ps, &out);
	ASSERT_EQ(0, rc) << out;

	int rs;
	TwoProcesses(env_, "-o " + d + "/srv.rep " + d + "/srv.rbt",
		     "-o " + d + "/cli.rep " + d + "/cli.rbt", d + "/rsrv.log", &rs,
		     &sout, &rc, &out);
	EXPECT_EQ(0, rc) << out;
	EXPECT_EQ(0, rs) << sout;
	EXPECT_TRUE(AllMatched(out)) << out;
	EXPECT_TRUE(AllMatched(sout)) << sout;
	EXPECT_NE(std::string::npos, out.find("send 200/200, recv 200/200")) << out;
	EXPECT_EQ(0, sh(kRbtrace + " diff " + d + "/cli.rbt " + d + "/cli.rep", &out))
		<< out;
	EXPECT_EQ(0, sh(kRbtrace + " diff " + d + "/srv.rbt " + d + "/srv.rep", &out))
		<< out;
}

// Replays d/cli.rbt alone against `rbtrace replay --responder` (its log in
// d/resp.log); returns the replay's exit code and output.
int VsResponder(const std::string &env, const std::string &d, std::string *out)
{
	int port = Port();
	FILE *bg = popen((env + kRbtrace + " replay --responder --listen " +
			  std::to_string(port) + " > " + d + "/resp.log 2>&1")
				 .c_str(),
			 "r");
	if (!bg)
		return -1;
	int rc = sh(env + kRbtrace + " replay --connect 127.0.0.1:" +
			    std::to_string(port) + " " + d + "/cli.rbt",
		    out);
	pclose(bg);
	return rc;
}

// Completion channels (-e), extended CQs polled in sessions that post in between
// (-t), UD (address handles) and an SRQ shared by 16 QPs: both ends in one process;
// the RC client's end alone against the responder too (-t reads no QP number in
// its completions: the responder learns what to send from the model's join).
TEST_F(ReplayRecorded, PingpongVariantsInOneProcess)
{
	const char *progs[][2] = { { "ibv_rc_pingpong", "-e" },
				   { "ibv_rc_pingpong", "-t" },
				   { "ibv_ud_pingpong", "" },
				   { "ibv_srq_pingpong", "" } };
	for (auto &pr : progs) {
		std::string bin = std::string("/usr/bin/") + pr[0];
		if (!Exists(bin))
			continue;
		std::string d = test_tmp() + "/var_" + pr[0] + pr[1];
		mkdir(d.c_str(), 0700);
		std::string out, ps = std::string(" ") + pr[1] + " -p " +
				      std::to_string(Port()) + " -n 100";
		int rc = RecordPair(d, bin + ps, &out);
		ASSERT_EQ(0, rc) << bin << pr[1] << ": " << out;
		EXPECT_EQ(0, sh(env_ + kRbtrace + " replay --poll-timeout 2000 " + d +
					"/cli.rbt " + d + "/srv.rbt",
				&out))
			<< bin << pr[1] << ": " << out;
		EXPECT_TRUE(AllMatched(out)) << bin << pr[1] << ": " << out;
		if (strcmp(pr[0], "ibv_rc_pingpong"))
			continue;
		EXPECT_EQ(0, VsResponder(env_, d, &out))
			<< bin << pr[1] << " vs responder: " << out;
		EXPECT_TRUE(AllMatched(out)) << bin << pr[1] << " vs responder: " << out;
	}
}

// perftest over softnic, recorded; replayed by two replayer processes (diff of
// original and replay agree), and the client's end alone against a responder.
TEST_F(ReplayRecorded, PerftestTwoProcessesDiffAndResponder)
{
	for (const char *tool : { "ib_send_lat", "ib_write_bw", "ib_read_lat" }) {
		std::string bin = std::string("/usr/bin/") + tool;
		if (!Exists(bin))
			continue;
		std::string d = test_tmp() + "/pt_" + tool;
		mkdir(d.c_str(), 0700);
		std::string out, sout, ps = " -p " + std::to_string(Port()) + " -n 200";
		int rs = 1, rc = RecordPair(d, bin + ps, &out, 200000);
		ASSERT_EQ(0, rc) << tool << ": " << out;

		TwoProcesses(env_, "-o " + d + "/srv.rep " + d + "/srv.rbt",
			     "-o " + d + "/cli.rep " + d + "/cli.rbt", d + "/rsrv.log",
			     &rs, &sout, &rc, &out);
		EXPECT_EQ(0, rc) << tool << ": " << out;
		EXPECT_EQ(0, rs) << tool << ": " << sout;
		EXPECT_TRUE(AllMatched(out)) << tool << ": " << out;
		EXPECT_EQ(0, sh(kRbtrace + " diff " + d + "/cli.rbt " + d + "/cli.rep",
				&out))
			<< tool << ": " << out;
		EXPECT_EQ(0, sh(kRbtrace + " diff " + d + "/srv.rbt " + d + "/srv.rep",
				&out))
			<< tool << ": " << out;

		rc = VsResponder(env_, d, &out);
		EXPECT_EQ(0, rc) << tool << " vs responder: " << out;
		EXPECT_TRUE(AllMatched(out)) << tool << " vs responder: " << out;
	}
}

TEST_F(ReplayRecorded, RecordedFailuresReplayToSameErrorAndState)
{
	for (const char *f : { "rnr", "rkey" }) {
		std::string t = test_tmp() + "/fail-" + f + ".rbt", out;
		ASSERT_EQ(0, sh(rec_ + t + " tests/replay_pacer --fail " + f, &out))
			<< out;
		EXPECT_EQ(0, sh(env_ + kRbtrace + " replay " + t, &out))
			<< f << ": " << out;
		EXPECT_TRUE(AllMatched(out)) << out;
		EXPECT_NE(std::string::npos,
			  out.find("send 1/1, recv 0/0 completions "
				   "(replayed/recorded), state ERR (recorded "
				   "ERR)"))
			<< out;
		EXPECT_NE(std::string::npos, out.find("no divergence")) << out;
	}
}

TEST_F(ReplayRecorded, PacerInEveryTimingMode)
{
	std::string t = test_tmp() + "/pacer.rbt", out;
	ASSERT_EQ(0,
		  sh(rec_ + t + " tests/replay_pacer --iters 500 --interval-us 50", &out))
		<< out;
	for (const char *m : { "recorded", "asap", "deps", "scale:0.5" }) {
		EXPECT_EQ(0,
			  sh(env_ + kRbtrace + " replay --json --timing=" + m + " " + t,
			     &out))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos,
			  out.find("\"completions\":{\"expected\":1000,"
				   "\"matched\":1000,\"recorded\":1000}"))
			<< m << ": " << out;
	}
}

// 8 threads of one process, one QP each (QP t connected to QP t^1), ping-pong
// per pair, then a relay through program memory (thread t writes after thread
// t-1 is done), kept by --thread-order=recorded. Each recorded thread is
// replayed by a thread of its own in its own order; every completion, per QP
// and so per thread, in order, matches in every timing mode and both thread
// orders. (The main thread's setup chunk is written after the workers'
// chunks: the loader orders events by time.)
TEST_F(ReplayRecorded, EightThreadsOnEightQpsReplayPerThread)
{
	std::string t = test_tmp() + "/threads.rbt", out;
	ASSERT_EQ(0, sh(rec_ + t + " tests/replay_threads --threads 8 --iters 200", &out))
		<< out;
	for (std::string m : { "recorded", "asap", "deps", "asap --thread-order=recorded",
			       "recorded --thread-order=recorded" }) {
		EXPECT_EQ(0,
			  sh(env_ + kRbtrace + " replay --json --timing=" + m + " " + t,
			     &out))
			<< m << ": " << out;
		EXPECT_NE(
			std::string::npos,
			out.find("\"completions\":{\"expected\":3208,\"matched\":3208,"))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos, out.find("\"threads\":8,"))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos, out.find("\"divergences\":[]"))
			<< m << ": " << out;
	}
	EXPECT_EQ(0, sh(env_ + kRbtrace + " replay " + t, &out)) << out;
	EXPECT_NE(std::string::npos,
		  out.find("8 recorded threads, each replayed by its own"))
		<< out;
	// More lanes than CPUs: the report says so (and the lanes yield at every
	// empty turn); with 8 CPUs or more, nothing is said.
	cpu_set_t cpus;
	ASSERT_EQ(0, sched_getaffinity(0, sizeof(cpus), &cpus));
	int ncpu = CPU_COUNT(&cpus);
	std::string crowd = "threads: 8 lanes on " + std::to_string(ncpu) + " CPUs:";
	if (ncpu < 8)
		EXPECT_NE(std::string::npos, out.find(crowd)) << out;
	else
		EXPECT_EQ(std::string::npos, out.find("lanes on ")) << out;
}

// Threads that share nothing (8 threads on 8 QPs, each its own CQ, no relay):
// by default a post waits only for other threads' polls on its own CQs, so
// the replayed threads never wait for each other (a few waits for the setup
// at most); --thread-order=recorded keeps the recorded interleaving of every
// poll, and the threads wait for each other thousands of times.
TEST_F(ReplayRecorded, IndependentThreadsDoNotWaitForEachOther)
{
	std::string t = test_tmp() + "/indep.rbt", out;
	ASSERT_EQ(0, sh(rec_ + t +
				" tests/replay_threads --threads 8 --iters 2000 "
				"--interval-us 0 --relay 0 --yield 1",
			&out))
		<< out;
	// the replay's cross-thread waits with these options; -1: it failed
	auto waits = [&](const std::string &opts) -> long {
		const char *key = "\"cross_thread_waits\":", *w;

		if (sh(env_ + kRbtrace + " replay --json --timing=asap " + opts + t,
		       &out) ||
		    out.find("\"matched\":32000,") == std::string::npos ||
		    !(w = strstr(out.c_str(), key)))
			return -1;
		return atol(w + strlen(key));
	};
	long shared = waits(""), recorded = waits("--thread-order=recorded ");

	EXPECT_GE(shared, 0) << out;
	EXPECT_LE(shared, 16) << out;
	EXPECT_GT(recorded, 100) << out;
}

// Four threads on four QPs (SENDs only, 3000 ping-pongs a pair) replayed in
// windows of 2048 steps: the trace streams (no "replaying it from memory"),
// each recorded thread by a thread of its own in every window, and every
// completion matches, as from memory.
TEST_F(ReplayRecorded, FourThreadsReplayStreamedPerThread)
{
	std::string t = test_tmp() + "/threads_str.rbt", out;
	ASSERT_EQ(0, sh(rec_ + t + " tests/replay_threads --threads 4 --iters 3000 " +
				"--interval-us 2 --relay 0",
			&out))
		<< out;
	for (const char *m : { "asap", "recorded" }) {
		unsigned long got = 0, all = 1;
		const char *at;

		EXPECT_EQ(0, sh(env_ + " RBTRACE_REPLAY_WINDOW=2048 " + kRbtrace +
					" replay --timing=" + m + " " + t,
				&out))
			<< m << ": " << out;
		EXPECT_EQ(std::string::npos, out.find("replaying it from memory"))
			<< m << ": " << out;
		EXPECT_NE(std::string::npos,
			  out.find("4 recorded threads, each replayed by its own"))
			<< m << ": " << out;
		at = strstr(out.c_str(), "completions matched: ");
		ASSERT_NE(nullptr, at) << m << ": " << out;
		ASSERT_EQ(2, sscanf(at, "completions matched: %lu of %lu", &got, &all));
		EXPECT_EQ(all, got) << m << ": " << out;
		EXPECT_GE(got, 24000ul) << m << ": " << out;
		EXPECT_NE(std::string::npos, out.find("no divergence"))
			<< m << ": " << out;
		if (strcmp(m, "recorded"))
			continue;
		// the per-thread lateness lines, from each thread's sample over
		// the windows: one per thread, each of that thread's posts
		unsigned long threads = 0, posts = 0;
		for (const char *p = strstr(out.c_str(), "  thread "); p;
		     p = strstr(p + 1, "  thread ")) {
			unsigned long id, n;
			double a, b, c;

			if (sscanf(p,
				   "  thread %lu: lateness p50 %lf us, p99 %lf us, max "
				   "%lf us (%lu posts)",
				   &id, &a, &b, &c, &n) == 5) {
				threads++;
				posts += n;
				EXPECT_GT(n, 0ul) << out;
				EXPECT_LE(a, c) << out;
			}
		}
		EXPECT_EQ(4ul, threads) << out;
		EXPECT_GE(posts, 24000ul) << out;
	}
}

} // namespace
