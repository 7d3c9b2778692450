// cli_test.cc - runs the real `rbtrace` binary on traces written by the real
// writer (tests/make_trace) and on every kind of bad input; asserts on what it
// prints and on its exit code.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace
{

struct Result {
	int code;
	std::string out, err;
	std::vector<std::string> out_lines() const
	{
		std::vector<std::string> v;
		std::istringstream s(out);
		for (std::string l; std::getline(s, l);)
			v.push_back(l);
		return v;
	}
};

std::string tmpdir()
{
	const char *d = getenv("TEST_TMPDIR");
	return d ? d : "/tmp";
}

std::string slurp(const std::string &path)
{
	std::ifstream f(path, std::ios::binary);
	std::stringstream s;
	s << f.rdbuf();
	return s.str();
}

void spit(const std::string &path, const std::string &data)
{
	std::ofstream f(path, std::ios::binary | std::ios::trunc);
	f << data;
}

// Runs argv (no shell), capturing stdout and stderr into files.
Result run(std::vector<std::string> argv)
{
	std::string o = tmpdir() + "/cli.out", e = tmpdir() + "/cli.err";
	pid_t pid = fork();
	if (pid == 0) {
		if (!freopen(o.c_str(), "w", stdout) || !freopen(e.c_str(), "w", stderr))
			_exit(127);
		std::vector<char *> a;
		for (auto &s : argv)
			a.push_back(&s[0]);
		a.push_back(nullptr);
		execv(a[0], a.data());
		_exit(127);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	Result r;
	r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r.out = slurp(o);
	r.err = slurp(e);
	return r;
}

const std::string rbtrace = "cli/rbtrace";

Result rb(std::vector<std::string> args)
{
	args.insert(args.begin(), rbtrace);
	return run(args);
}

int count(const std::string &s, const std::string &what)
{
	int n = 0;
	for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1))
		n++;
	return n;
}

bool one_line(const std::string &s)
{
	return !s.empty() && s.back() == '\n' && count(s, "\n") == 1;
}

// Braces and brackets balance outside strings, and it is one object.
bool json_object(const std::string &l)
{
	if (l.empty() || l.front() != '{' || l.back() != '}')
		return false;
	int depth = 0;
	bool str = false;
	for (size_t i = 0; i < l.size(); i++) {
		char c = l[i];
		if (str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				str = false;
			continue;
		}
		if (c == '"')
			str = true;
		else if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']')
			depth--;
		if (depth == 0 && i + 1 != l.size())
			return false;
	}
	return depth == 0 && !str;
}

class Cli : public ::testing::Test
{
      protected:
	static std::string good;
	static void SetUpTestSuite()
	{
		good = tmpdir() + "/good.rbt";
		// Small chunks: several per stream, so damage can hit the middle.
		Result r = run({ "tests/make_trace", good, "--iters", "200",
				 "--chunk-bytes", "2048" });
		ASSERT_EQ(0, r.code) << r.err;
	}
};
std::string Cli::good;

} // namespace

TEST_F(Cli, HelpListsCommandsAndExamples)
{
	Result r = rb({ "--help" });
	EXPECT_EQ(0, r.code);
	EXPECT_NE(std::string::npos, r.out.find("\n  info "));
	EXPECT_NE(std::string::npos, r.out.find("\n  dump "));
	for (const char *cmd : { "info", "dump" }) {
		Result h = rb({ "help", cmd });
		EXPECT_EQ(0, h.code) << cmd;
		EXPECT_NE(std::string::npos, h.out.find("example")) << cmd;
		EXPECT_NE(std::string::npos, h.out.find(std::string("rbtrace ") + cmd));
		Result h2 = rb({ cmd, "--help" });
		EXPECT_EQ(h.out, h2.out);
	}
	r = rb({});
	EXPECT_EQ(2, r.code);
	r = rb({ "frobnicate" });
	EXPECT_EQ(2, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("frobnicate"));
	r = rb({ "dump", good, "--colour" });
	EXPECT_EQ(2, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("--colour"));
	r = rb({ "dump", good, "--type=post_send,frob" });
	EXPECT_EQ(2, r.code);
	EXPECT_NE(std::string::npos, r.err.find("'frob'")) << r.err;
	r = rb({ "dump", good, "--qp=seventeen" });
	EXPECT_EQ(2, r.code);
	EXPECT_NE(std::string::npos, r.err.find("seventeen")) << r.err;
}

TEST_F(Cli, InfoOnAGoodTrace)
{
	Result r = rb({ "info", good });
	ASSERT_EQ(0, r.code) << r.err;
	EXPECT_EQ("", r.err);
	EXPECT_NE(std::string::npos, r.out.find("tool:      make_trace"));
	EXPECT_NE(std::string::npos,
		  r.out.find("clock:     CLOCK_MONOTONIC, 1000.000000 MHz"));
	EXPECT_NE(std::string::npos, r.out.find("streams:   2 (4242 4243)"));
	EXPECT_NE(std::string::npos, r.out.find("  post_send        200\n"));
	EXPECT_NE(std::string::npos, r.out.find("  poll_cq          400\n"));
	EXPECT_NE(std::string::npos, r.out.find("lost:      12 events"));
	EXPECT_NE(std::string::npos, r.out.find("finished:  yes"));
	EXPECT_NE(std::string::npos, r.out.find(" 0 damaged"));
}

TEST_F(Cli, DumpTextJsonAndFilters)
{
	Result r = rb({ "dump", good });
	ASSERT_EQ(0, r.code) << r.err;
	EXPECT_EQ("", r.err);
	EXPECT_EQ(200, count(r.out, "] post_send "));
	EXPECT_EQ(400, count(r.out, "] poll_cq "));
	// A post line: time, thread, type, each WR's fields, ret and duration.
	EXPECT_NE(std::string::npos,
		  r.out.find("[4242] post_send ts_exit=+0.090us ret=0 qp=0x560000001800 "
			     "qp_num=17 wrs=[{wr_id=2 opcode=SEND send_flags=SIGNALED "
			     "sges=[{addr="));
	// The stack of qp_create, symbolised from this build's make_trace binary.
	EXPECT_NE(std::string::npos, r.out.find("stack ref=qp_create frames=3"));
	EXPECT_NE(std::string::npos, r.out.find("libc.so.6+0x")) << r.out;
	EXPECT_NE(std::string::npos, r.out.find("getpid+0x2)")) << r.out;
	EXPECT_NE(std::string::npos, r.out.find("(make_trace_create_qp+0x8)")) << r.out;
	EXPECT_NE(std::string::npos, r.out.find("(main+0x10)"));

	r = rb({ "dump", "--json", good });
	ASSERT_EQ(0, r.code) << r.err;
	auto lines = r.out_lines();
	EXPECT_GT(lines.size(), 800u);
	int posts = 0, polls = 0;
	for (const auto &l : lines) {
		ASSERT_TRUE(json_object(l)) << l;
		ASSERT_EQ(0u, l.find("{\"type\":\"")) << l;
		if (l.find("{\"type\":\"post_send\"") == 0) {
			posts++;
			EXPECT_NE(std::string::npos, l.find(",\"wrs\":[{\"wr_id\":2,"))
				<< l;
		}
		if (l.find("{\"type\":\"poll_cq\"") == 0) {
			polls++;
			EXPECT_NE(std::string::npos, l.find(",\"wcs\":[")) << l;
		}
	}
	EXPECT_EQ(200, posts);
	EXPECT_EQ(400, polls);
	EXPECT_NE(std::string::npos, r.out.find("\"function\":\"make_trace_create_qp\""));

	r = rb({ "dump", good, "--type=post_send,qp_create" });
	ASSERT_EQ(0, r.code);
	lines = r.out_lines();
	// 200 posts, qp_create and its stack (3 frame lines + the stack line).
	EXPECT_EQ(200u + 1 + 4, lines.size());
	EXPECT_EQ(0, count(r.out, "poll_cq"));

	r = rb({ "dump", good, "--qp=17", "--type=poll_cq" });
	EXPECT_EQ(200, (int)r.out_lines().size()); // the polls with a completion of QP 17
	r = rb({ "dump", good, "--qp=0x11" });
	EXPECT_EQ(0, count(r.out, "] req_notify"));
	EXPECT_EQ(1, count(r.out, "] qp_create"));
	EXPECT_EQ(3, count(r.out, "] qp_modify"));
	EXPECT_EQ(1, count(r.out, "] qp_destroy"));
	r = rb({ "dump", good, "--qp=99" });
	EXPECT_EQ(0, r.code);
	EXPECT_EQ("", r.out);

	r = rb({ "dump", good, "--stream=4243" });
	lines = r.out_lines();
	EXPECT_EQ(5u, lines.size()); // 3 req_notify, loss, note
	for (const auto &l : lines)
		EXPECT_NE(std::string::npos, l.find(" [4243] ")) << l;
}

TEST_F(Cli, BadInputsGetOneClearLine)
{
	struct Case {
		std::string name, content, says;
	};
	std::string garbage = "#!/bin/sh\necho this is not a trace\n";
	std::string good_bytes = slurp(good);
	std::vector<Case> cases = {
		{ "empty.rbt", "", "empty file" },
		{ "script.sh", garbage, "not an rbtrace trace" },
		{ "header_cut.rbt", good_bytes.substr(0, 20),
		  "truncated inside the file header" },
	};
	for (const auto &c : cases) {
		std::string p = tmpdir() + "/" + c.name;
		spit(p, c.content);
		for (const char *cmd : { "info", "dump" }) {
			Result r = rb({ cmd, p });
			EXPECT_EQ(1, r.code) << cmd << " " << c.name;
			EXPECT_TRUE(one_line(r.err)) << r.err;
			EXPECT_NE(std::string::npos, r.err.find(p)) << r.err;
			EXPECT_NE(std::string::npos, r.err.find(c.says)) << r.err;
			EXPECT_EQ("", r.out);
		}
	}
	for (const char *cmd : { "info", "dump" }) {
		Result r = rb({ cmd, tmpdir() + "/no/such.rbt" });
		EXPECT_EQ(1, r.code);
		EXPECT_TRUE(one_line(r.err)) << r.err;
		EXPECT_NE(std::string::npos, r.err.find("/no/such.rbt: No such file"))
			<< r.err;
		r = rb({ cmd, tmpdir() });
		EXPECT_EQ(1, r.code);
		EXPECT_TRUE(one_line(r.err)) << r.err;
		EXPECT_NE(std::string::npos, r.err.find("is a directory")) << r.err;
	}
}

TEST_F(Cli, TruncatedAndCorruptedTracesAreSalvaged)
{
	std::string bytes = slurp(good);
	Result full = rb({ "dump", good });
	int all = count(full.out, "\n");

	// kill -9 in the middle of writing: the tail of the file is missing.
	std::string cut = tmpdir() + "/cut.rbt";
	spit(cut, bytes.substr(0, bytes.size() * 2 / 3));
	Result r = rb({ "dump", cut });
	EXPECT_EQ(1, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find(cut + ": truncated at byte ")) << r.err;
	EXPECT_NE(std::string::npos, r.err.find(" events salvaged, ")) << r.err;
	EXPECT_NE(std::string::npos, r.err.find(" lost")) << r.err;
	int salvaged = count(r.out, "\n");
	EXPECT_GT(salvaged, all / 3);
	EXPECT_LT(salvaged, all);
	EXPECT_EQ(0u, full.out.find(r.out)); // exactly the start of the full dump
	r = rb({ "info", cut });
	EXPECT_EQ(1, r.code);
	EXPECT_NE(std::string::npos, r.out.find("finished:  no"));
	EXPECT_TRUE(one_line(r.err)) << r.err;

	// A flipped bit in the middle: that chunk is lost, the rest is printed.
	std::string bad = tmpdir() + "/flipped.rbt";
	std::string b = bytes;
	b[b.size() / 2] ^= 0x10;
	spit(bad, b);
	r = rb({ "dump", bad });
	EXPECT_EQ(1, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find(bad + ": damaged at byte ")) << r.err;
	EXPECT_NE(std::string::npos, r.err.find(" events salvaged, ")) << r.err;
	int kept = count(r.out, "\n");
	EXPECT_GT(kept, all / 2);
	EXPECT_LT(kept, all);
	r = rb({ "info", bad });
	EXPECT_EQ(1, r.code);
	EXPECT_NE(std::string::npos, r.out.find(" 1 damaged"));
	EXPECT_NE(std::string::npos, r.out.find("finished:  yes"));

	// Cut exactly at the trailer: every event, but the file was not finished.
	std::string notrailer = tmpdir() + "/notrailer.rbt";
	spit(notrailer, bytes.substr(0, bytes.size() - 56));
	r = rb({ "dump", notrailer });
	EXPECT_EQ(1, r.code);
	EXPECT_EQ(full.out, r.out);
	EXPECT_NE(std::string::npos, r.err.find("not finished cleanly")) << r.err;
}
