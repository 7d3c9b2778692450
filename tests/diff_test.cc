// diff_test.cc - `rbtrace diff` (rbt_analyzer_diff, the analyzer's, on the model)
// on the replayer's fixture traces: a trace agrees with itself, the other end of the
// exchange diverges (text and JSON, exit codes), an unreadable trace fails, and the
// phases diff shows are the ones `rbtrace report` computes for the same trace.
#include <gtest/gtest.h>

#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <string>

extern "C" {
#include "analyzer/rbt_analyzer.h"
}

namespace
{

std::string Tmp()
{
	const char *t = getenv("TEST_TMPDIR");
	return t ? t : "/tmp";
}

// `rbtrace ARGS` (the real binary, a data dependency): its exit code, and its
// stdout and stderr together in *out.
int Rbtrace(const std::string &args, std::string *out)
{
	std::string file = Tmp() + "/rbtrace.out";
	int st = system(("cli/rbtrace " + args + " >" + file + " 2>&1").c_str());
	std::ifstream f(file);
	std::stringstream ss;
	ss << f.rdbuf();
	*out = ss.str();
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

std::string Synth(const std::string &name, const std::string &args)
{
	std::string dir = Tmp() + "/" + name;
	mkdir(dir.c_str(), 0700);
	EXPECT_EQ(0, system(("tests/replay_synth " + dir + " " + args + " >/dev/null")
				    .c_str()));
	return dir;
}

std::string Diff(const std::string &a, const std::string &b, bool json, int *ret)
{
	char *buf = nullptr, *lbuf = nullptr;
	size_t len = 0, llen = 0;
	FILE *f = open_memstream(&buf, &len), *log = open_memstream(&lbuf, &llen);
	rbt_analyzer_diff_opts o{};
	o.json = json;
	o.out = f;
	o.log = log;
	*ret = rbt_analyzer_diff(a.c_str(), b.c_str(), &o);
	fclose(f);
	fclose(log);
	std::string s(buf, len);
	free(buf);
	free(lbuf);
	return s;
}

TEST(Diff, SameTraceAgreesOtherEndDiverges)
{
	std::string d = Synth("diff", "--iters 50");
	std::string out;
	EXPECT_EQ(0, Rbtrace("diff " + d + "/a.rbt " + d + "/a.rbt", &out)) << out;
	EXPECT_NE(std::string::npos, out.find("same: 0 divergence")) << out;
	// The other end posts the same SENDs but no READ/WRITE: counts diverge.
	EXPECT_EQ(1, Rbtrace("diff " + d + "/a.rbt " + d + "/b.rbt", &out)) << out;
	EXPECT_NE(std::string::npos, out.find("! ")) << out;
	EXPECT_NE(std::string::npos, out.find("!  post RDMA_READ")) << out;
	EXPECT_NE(std::string::npos, out.find("   post SEND")) << out;
	EXPECT_EQ(1, Rbtrace("diff --json " + d + "/a.rbt " + d + "/b.rbt", &out));
	EXPECT_NE(std::string::npos, out.find("\"diverges\":true")) << out;
	EXPECT_EQ(1, Rbtrace("diff " + d + "/a.rbt " + Tmp() + "/nope.rbt", &out));
	int ret;
	Diff(d + "/a.rbt", d + "/b.rbt", false, &ret);
	EXPECT_EQ(5, ret); // WRITE and READ posted and done, and the success count
	Diff(d + "/a.rbt", Tmp() + "/nope.rbt", false, &ret);
	EXPECT_EQ(-ENOENT, ret);
}

// Not poll exit minus post: the report's phases, the report's numbers.
TEST(Diff, ShowsTheReportsPhases)
{
	std::string d = Synth("diffph", "--iters 40");
	std::string a = d + "/a.rbt";
	rbt_analyzer *an;
	ASSERT_EQ(0, rbt_analyzer_create(nullptr, &an));
	char err[256];
	const char *p = a.c_str();
	ASSERT_EQ(0, rbt_analyzer_run_files(an, &p, 1, err, sizeof(err)));
	ASSERT_EQ(0, rbt_analyzer_finish(an));
	rbt_phase_summary e2e, post, hi, wait;
	ASSERT_EQ(0, rbt_analyzer_phase(an, 0, 0, IBV_WR_SEND, RBT_PHASE_E2E, &e2e));
	ASSERT_EQ(0, rbt_analyzer_phase(an, 0, 0, IBV_WR_SEND, RBT_PHASE_POST, &post));
	ASSERT_EQ(0, rbt_analyzer_phase(an, 0, 0, IBV_WR_SEND, RBT_PHASE_NIC_HI, &hi));
	ASSERT_EQ(0, rbt_analyzer_phase(an, 0, 0, 128, RBT_PHASE_RECV_WAIT, &wait));
	rbt_analyzer_destroy(an);
	int ret;
	std::string j = Diff(a, a, true, &ret);
	EXPECT_EQ(0, ret) << j;
	char want[256];
	snprintf(want, sizeof(want),
		 "\"op\":\"SEND\",\"a\":{\"n\":%llu,\"bytes\":2560,\"errors\":0,"
		 "\"phases\":{\"post\":{\"count\":%llu,\"p50_ns\":%.1f,",
		 (unsigned long long)e2e.count, (unsigned long long)post.count, post.p50);
	EXPECT_NE(std::string::npos, j.find(want)) << want << "\n" << j;
	snprintf(want, sizeof(want),
		 "\"e2e\":{\"count\":%llu,\"p50_ns\":%.1f,\"p99_ns\":%.1f}",
		 (unsigned long long)e2e.count, e2e.p50, e2e.p99);
	EXPECT_NE(std::string::npos, j.find(want)) << want << "\n" << j;
	snprintf(want, sizeof(want), "\"nic_hi\":{\"count\":%llu,\"p50_ns\":%.1f,",
		 (unsigned long long)hi.count, hi.p50);
	EXPECT_NE(std::string::npos, j.find(want)) << want << "\n" << j;
	snprintf(want, sizeof(want), "\"recv_wait\":{\"count\":%llu,\"p50_ns\":%.1f,",
		 (unsigned long long)wait.count, wait.p50);
	EXPECT_NE(std::string::npos, j.find(want)) << want << "\n" << j;
	std::string t = Diff(a, a, false, &ret);
	snprintf(want, sizeof(want), "e2e p50 %.0f p99 %.0f", e2e.p50, e2e.p99);
	EXPECT_NE(std::string::npos, t.find(want)) << want << "\n" << t;
}

} // namespace
