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

#include "tests/test_util.h"

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

// TEST_TMPDIR itself: the files here are named by the tests.
std::string tmpdir()
{
	return rbt_test::test_tmp();
}

using rbt_test::slurp;
using rbt_test::spit;

// Runs argv (no shell), capturing stdout and stderr.
Result run(std::vector<std::string> argv)
{
	rbt_test::run_result rr = rbt_test::run_argv(argv);
	Result r;
	r.code = rr.status;
	r.out = rr.out;
	r.err = rr.err;
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

// ---- the bad-input audit: every case below was a crash, a hang, a misleading
// message or silent data loss before it was fixed ----

namespace
{

const std::string traces = "tests/badinput_traces";

// CRC-32C (Castagnoli), as trace_format/FORMAT.md specifies it.
uint32_t crc32c(const std::string &s, uint32_t crc = 0)
{
	crc = ~crc;
	for (unsigned char c : s) {
		crc ^= c;
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
	}
	return ~crc;
}

void put32(std::string &s, size_t at, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		s[at + i] = (char)(v >> (8 * i));
}

uint32_t get32(const std::string &s, size_t at)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)(unsigned char)s[at + i] << (8 * i);
	return v;
}

// The file header's CRC over bytes 0..19 and the body (FORMAT.md "File header").
void fix_header_crc(std::string &b)
{
	uint32_t body = get32(b, 16);
	put32(b, 20, crc32c(b.substr(24, body), crc32c(b.substr(0, 20))));
}

// The process ended by a signal, or said more than one line: what bad input
// must never cause.
void expect_clean_failure(const Result &r, const std::string &what)
{
	EXPECT_TRUE(r.code == 0 || r.code == 1) << what << " exit " << r.code << r.err;
	EXPECT_EQ(std::string::npos, r.err.find("Sanitizer")) << what << r.err;
	EXPECT_EQ(std::string::npos, r.err.find("runtime error")) << what << r.err;
}

Result rb_timeout(std::vector<std::string> args)
{
	args.insert(args.begin(), { "/usr/bin/timeout", "5", rbtrace });
	return run(args);
}

} // namespace

TEST_F(Cli, FifoIsRefusedNotWaitedFor)
{
	std::string fifo = tmpdir() + "/trace.fifo";
	unlink(fifo.c_str());
	ASSERT_EQ(0, mkfifo(fifo.c_str(), 0600));
	// Before: open(2) waited forever for a writer (timeout's exit 124).
	for (const char *cmd : { "info", "dump", "report" }) {
		Result r = rb_timeout({ cmd, fifo });
		EXPECT_EQ(1, r.code) << cmd;
		EXPECT_TRUE(one_line(r.err)) << r.err;
		EXPECT_NE(std::string::npos, r.err.find(fifo + ": not a regular file"))
			<< r.err;
	}
	Result r = rb_timeout({ "diff", good, fifo });
	EXPECT_EQ(1, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	// was "Invalid argument", from diff and replay alike
	EXPECT_NE(std::string::npos, r.err.find("diff: " + fifo + ": not a regular file"))
		<< r.err;
	r = rb_timeout({ "replay", "/dev/null" });
	EXPECT_EQ(1, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("replay: /dev/null: not a regular file"))
		<< r.err;
	r = rb_timeout({ "report", "/dev/null" }); // was "Invalid argument"
	EXPECT_NE(std::string::npos, r.err.find("/dev/null: not a regular file"))
		<< r.err;
	unlink(fifo.c_str());
}

TEST_F(Cli, FullOutputIsAnErrorNotSuccess)
{
	// Before: every command exited 0 with its output lost.
	std::vector<std::vector<std::string>> cmds = {
		{ "info", good },
		{ "dump", good },
		{ "dump", "--json", good },
		{ "report", good },
		{ "report", "--format=json", good },
		{ "diff", good, good },
		{ "--help" },
	};
	for (auto c : cmds) {
		std::string line = rbtrace;
		for (auto &a : c)
			line += " " + a;
		Result r = run({ "/bin/sh", "-c", line + " >/dev/full" });
		EXPECT_EQ(1, r.code) << line << r.err;
		EXPECT_NE(std::string::npos, r.err.find("writing standard output failed"))
			<< line << r.err;
	}
	// -o whose writes fail (EFBIG past a file size limit, as a full disk would):
	// exit 1, and no partial report left (before: exit 0 for perfetto and
	// html; the old code also unlinked -o on failure, even /dev/full as root,
	// which is why this is not tried on a device).
	for (const char *f : { "text", "perfetto", "html" }) {
		std::string out = tmpdir() + "/big." + f;
		unlink(out.c_str());
		Result r = run({ "/bin/sh", "-c",
				 "trap '' XFSZ; ulimit -f 1; exec " + rbtrace +
					 " report --format=" + f + " -o " + out + " " +
					 good });
		EXPECT_EQ(1, r.code) << f << r.err;
		EXPECT_TRUE(r.err.find(out + ": File too large") != std::string::npos ||
			    r.err.find(out + ": writing failed") != std::string::npos)
			<< r.err;
		EXPECT_NE(0, access(out.c_str(), F_OK)) << out;
	}
}

TEST_F(Cli, ReportOutputIsReplacedOnlyOnSuccess)
{
	std::string out = tmpdir() + "/keep.txt", empty = tmpdir() + "/empty2.rbt";
	spit(out, "an older report\n");
	chmod(out.c_str(), 0640);
	spit(empty, "");
	// Before: the failed run truncated the file, then deleted it.
	Result r = rb({ "report", "-o", out, empty });
	EXPECT_EQ(1, r.code);
	EXPECT_EQ("an older report\n", slurp(out));
	// Through a symbolic link: the target is replaced, the link stays.
	std::string link = tmpdir() + "/keep.lnk";
	unlink(link.c_str());
	ASSERT_EQ(0, symlink(out.c_str(), link.c_str()));
	r = rb({ "report", "-o", link, empty });
	EXPECT_EQ("an older report\n", slurp(out));
	r = rb({ "report", "-o", link, good });
	EXPECT_EQ(0, r.code) << r.err;
	EXPECT_EQ(0u, slurp(out).find("rbtrace report: 1 trace"));
	struct stat st;
	ASSERT_EQ(0, lstat(link.c_str(), &st));
	EXPECT_TRUE(S_ISLNK(st.st_mode));
	ASSERT_EQ(0, stat(out.c_str(), &st));
	EXPECT_EQ(0640u, st.st_mode & 07777); // the mode of the file it replaced
	// A FIFO with a reader: written in place, never removed on failure.
	std::string fifo = tmpdir() + "/out.fifo";
	unlink(fifo.c_str());
	ASSERT_EQ(0, mkfifo(fifo.c_str(), 0600));
	pid_t reader = fork();
	if (reader == 0) {
		execl("/bin/sh", "sh", "-c", ("cat " + fifo + " >/dev/null").c_str(),
		      (char *)nullptr);
		_exit(127);
	}
	r = rb_timeout({ "report", "-o", fifo, empty });
	EXPECT_EQ(1, r.code);
	waitpid(reader, nullptr, 0);
	ASSERT_EQ(0, lstat(fifo.c_str(), &st));
	EXPECT_TRUE(S_ISFIFO(st.st_mode));
	unlink(fifo.c_str());
}

TEST_F(Cli, ReportRefusesToOverwriteOrRepeatItsInputs)
{
	std::string t = tmpdir() + "/victim.rbt", copy = tmpdir() + "/copy.rbt";
	std::string bytes = slurp(good);
	spit(t, bytes);
	spit(copy, bytes);
	// Before: -o truncated the trace it was about to read, then deleted it.
	Result r = rb({ "report", "-o", t, t });
	EXPECT_EQ(2, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("it would be overwritten")) << r.err;
	EXPECT_EQ(bytes, slurp(t));
	// Before: every WR counted twice, without a word.
	r = rb({ "report", t, good, t });
	EXPECT_EQ(2, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("given twice")) << r.err;
	r = rb({ "report", t, copy });
	EXPECT_EQ(1, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("the same recording as")) << r.err;
	EXPECT_EQ("", r.out);
}

TEST_F(Cli, NumbersAreNumbers)
{
	for (const char *v :
	     { " -1", "-1", "1e99", "18446744073709551616", "", "0x", "+5", "12abc" }) {
		Result r = rb({ "dump", good, std::string("--qp=") + v });
		EXPECT_EQ(2, r.code) << "'" << v << "'";
		EXPECT_TRUE(one_line(r.err)) << r.err;
		EXPECT_NE(std::string::npos, r.err.find("is not a number")) << r.err;
	}
	EXPECT_EQ(0, rb({ "dump", good, "--qp=0x11" }).code);
	Result many = rb({ "diff", good, good, good }); // was "unexpected argument"
	EXPECT_EQ(2, many.code);
	EXPECT_NE(std::string::npos, many.err.find("too many arguments at")) << many.err;
	EXPECT_NE(std::string::npos, many.err.find("(at most 2)")) << many.err;
	Result r = rb({ "softnic", "--jitter", "18446744073709551615", "--", "true" });
	EXPECT_EQ(2, r.code); // jitter + 1 overflowed to 0: a division by zero
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("more than a minute")) << r.err;
}

TEST_F(Cli, OddButValidTraces)
{
	std::string zero = tmpdir() + "/zero.rbt", noclock = tmpdir() + "/noclock.rbt",
		    res = tmpdir() + "/resources.rbt";
	ASSERT_EQ(0, run({ traces, "zero", zero }).code);
	ASSERT_EQ(0, run({ traces, "noclock", noclock }).code);
	ASSERT_EQ(0, run({ "tests/make_trace", res, "--iters", "0" }).code);
	// Before: info on a trace without events passed NULL to qsort (UBSan).
	Result r = rb({ "info", zero });
	EXPECT_EQ(0, r.code) << r.err;
	EXPECT_EQ("", r.err);
	EXPECT_NE(std::string::npos, r.out.find("events:    0\n"));
	for (const auto &t : { zero, noclock, res }) {
		for (const char *f :
		     { "text", "json", "perfetto", "perfetto-json", "html" }) {
			r = rb({ "report", std::string("--format=") + f, t });
			EXPECT_EQ(0, r.code) << t << " " << f << r.err;
			expect_clean_failure(r, t);
			if (std::string(f) == "json" ||
			    std::string(f) == "perfetto-json") {
				std::string o = r.out;
				while (!o.empty() && o.back() == '\n')
					o.pop_back();
				EXPECT_TRUE(json_object(o)) << t << " " << f;
			}
		}
		expect_clean_failure(rb({ "dump", t }), t);
		expect_clean_failure(rb({ "diff", t, good }), t);
	}
}

TEST_F(Cli, WildValuesAndHostileStrings)
{
	// Every event type, every field from extremes; strings with terminal
	// escapes, newlines and invalid UTF-8 in the header and the events.
	for (int seed = 1; seed <= 4; seed++) {
		std::string t = tmpdir() + "/wild.rbt";
		ASSERT_EQ(0,
			  run({ traces, "wild", t, std::to_string(seed), "1500" }).code);
		std::vector<std::vector<std::string>> cmds = {
			{ "info", t },
			{ "dump", t },
			{ "dump", "--json", t },
			{ "report", t },
			{ "report", "--format=json", t },
			{ "report", "--format=perfetto-json", t },
			{ "report", "--format=html", t },
			{ "diff", t, good },
		};
		/* protobuf: bytes, not text (its strings are made valid UTF-8) */
		expect_clean_failure(rb({ "report", "--format=perfetto", t }),
				     "perfetto seed " + std::to_string(seed));
		for (auto &c : cmds) {
			Result r = rb(c);
			expect_clean_failure(r, c[0] + " seed " + std::to_string(seed));
			// No raw control character reaches the output (before: the
			// header's command line and module paths were printed as is).
			for (char ch : r.out)
				ASSERT_FALSE((unsigned char)ch < 0x20 && ch != '\n' &&
					     ch != '\t')
					<< c[0] << " " << (c.size() > 2 ? c[1] : "")
					<< " printed control character " << (int)ch;
		}
	}
}

TEST_F(Cli, VersionsAndHeaderLengths)
{
	std::string bytes = slurp(good), p = tmpdir() + "/hdr.rbt";
	// A reader-version requirement above ours: refused, one line.
	std::string b = bytes;
	put32(b, 8, 3); // this reader is version 2
	put32(b, 12, 3);
	fix_header_crc(b);
	spit(p, b);
	for (const char *cmd : { "info", "dump", "report" }) {
		Result r = rb({ cmd, p });
		EXPECT_EQ(1, r.code) << cmd;
		EXPECT_TRUE(one_line(r.err)) << r.err;
		EXPECT_NE(std::string::npos, r.err.find("version too new")) << r.err;
	}
	// A newer writer that old readers may read: read.
	b = bytes;
	put32(b, 8, 99);
	fix_header_crc(b);
	spit(p, b);
	EXPECT_EQ(0, rb({ "info", p }).code);
	// A header claiming a 4 GiB body: the chunks after it are salvaged, and
	// report says the clock calibration is gone (before: nothing said).
	b = bytes;
	put32(b, 16, 0xffffffffu);
	spit(p, b);
	Result r = rb({ "info", p });
	EXPECT_EQ(1, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("file header is damaged")) << r.err;
	r = rb({ "report", p });
	EXPECT_EQ(0, r.code);
	EXPECT_NE(std::string::npos, r.err.find("warning: trace " + p + " is incomplete"))
		<< r.err;
	// Cut right after the header: report says the trace was not finished.
	spit(p, bytes.substr(0, 24 + get32(bytes, 16)));
	r = rb({ "report", p });
	EXPECT_NE(std::string::npos, r.err.find("not finished")) << r.err;
}

TEST_F(Cli, DamagedChunkCountsOnce)
{
	// A chunk whose checksums are right but whose second event claims more
	// bytes than the chunk has: one damaged chunk, 2 of its 3 events lost.
	// Before: counted as 1 intact + 2 damaged chunks and 4 events lost.
	std::string bytes = slurp(good);
	std::string f = bytes.substr(0, 24 + get32(bytes, 16));
	std::string raw = std::string("\x06\x00\x06\x7f", 4); // note, note(len 127)
	// A zstd frame with one raw block (RFC 8878): magic, a single-segment
	// descriptor with a 1-byte content size, block header (last, raw, size).
	std::string frame = std::string("\x28\xb5\x2f\xfd\x20", 5);
	frame += (char)raw.size();
	uint32_t bh = 1 | (0u << 1) | ((uint32_t)raw.size() << 3);
	frame += std::string({ (char)bh, (char)(bh >> 8), (char)(bh >> 16) });
	frame += raw;
	std::string h(48, '\0');
	h.replace(0, 4, "RBCK");
	put32(h, 4, (uint32_t)frame.size());
	put32(h, 8, (uint32_t)raw.size());
	put32(h, 12, 3); // events
	put32(h, 16, 7); // stream
	put32(h, 40, crc32c(frame));
	put32(h, 44, crc32c(h.substr(0, 44)));
	std::string p = tmpdir() + "/badevent.rbt";
	spit(p, f + h + frame);
	Result r = rb({ "info", p });
	EXPECT_EQ(1, r.code);
	EXPECT_NE(std::string::npos, r.out.find("chunks:    0 intact, 1 damaged"))
		<< r.out;
	EXPECT_NE(std::string::npos, r.out.find("events:    1\n")) << r.out;
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("has a bad type or length")) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("1 events salvaged, 2 lost")) << r.err;
}

TEST_F(Cli, EveryTruncationAndBitFlipFailsCleanly)
{
	std::string bytes = slurp(good), p = tmpdir() + "/cut2.rbt";
	for (size_t n = 0; n < bytes.size(); n += 97) {
		spit(p, bytes.substr(0, n));
		for (const char *cmd : { "info", "dump", "report" }) {
			Result r = rb({ cmd, p });
			std::string what =
				std::string(cmd) + " cut at " + std::to_string(n);
			expect_clean_failure(r, what);
			if (std::string(cmd) != "report") {
				EXPECT_EQ(1, r.code) << what;
				EXPECT_TRUE(one_line(r.err)) << what << r.err;
			} else if (r.code == 0) { // the intact part, with a warning
				EXPECT_NE(std::string::npos, r.err.find("incomplete"))
					<< what;
			}
		}
	}
	unsigned seed = 12345;
	for (int i = 0; i < 60; i++) {
		std::string b = bytes;
		seed = seed * 1103515245u + 12345u;
		size_t at = (seed >> 8) % b.size();
		b[at] ^= (char)(1 << ((seed >> 4) % 8));
		spit(p, b);
		for (const char *cmd : { "info", "dump", "report" }) {
			Result r = rb({ cmd, p });
			std::string what =
				std::string(cmd) + " flip at " + std::to_string(at);
			expect_clean_failure(r, what);
			if (std::string(cmd) != "report") {
				EXPECT_LE(count(r.err, "\n"), 1) << what << r.err;
			}
		}
	}
}

TEST_F(Cli, DiffWarnsAboutIncompleteTraces)
{
	// Before: a trace cut before its trailer, or with a damaged file header,
	// was compared without a word (exit 0, nothing on stderr).
	std::string bytes = slurp(good), p = tmpdir() + "/diffcut.rbt";
	spit(p, bytes.substr(0, bytes.size() - 56)); // every chunk, no trailer
	Result r = rb({ "diff", p, good });
	EXPECT_EQ(0, r.code) << r.err; // what could be read agrees
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("diff: warning: " + p +
						": not finished cleanly (no trailer"))
		<< r.err;
	EXPECT_NE(std::string::npos, r.out.find("same: 0 divergence(s)")) << r.out;

	std::string b = bytes;
	put32(b, 16, 0xffffffffu); // the header claims a 4 GiB body
	spit(p, b);
	r = rb({ "diff", good, p });
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("diff: warning: " + p + ": damaged ("))
		<< r.err;
	EXPECT_NE(std::string::npos, r.err.find("file header is damaged")) << r.err;

	spit(p, bytes.substr(0, bytes.size() * 2 / 3)); // cut inside a chunk
	r = rb({ "diff", p, good });
	EXPECT_EQ(1, r.code); // the counts differ
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find("diff: warning: " + p + ": damaged ("))
		<< r.err;
	EXPECT_NE(std::string::npos, r.err.find("truncated")) << r.err;
	EXPECT_NE(std::string::npos, r.out.find("DIVERGES")) << r.out;

	r = rb({ "diff", good, good }); // an intact trace: no warning
	EXPECT_EQ(0, r.code);
	EXPECT_EQ("", r.err);
}

TEST_F(Cli, ReplayRefusesATraceGivenTwice)
{
	// Before: "QP 17 was connected to QP 16, which is in none of the given
	// traces". The check comes before any device is opened.
	std::string copy = tmpdir() + "/twice.rbt";
	spit(copy, slurp(good));
	Result r = rb({ "replay", good, good });
	EXPECT_EQ(2, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos,
		  r.err.find(good + " is given twice (also as " + good))
		<< r.err;
	r = rb({ "replay", good, copy });
	EXPECT_EQ(1, r.code);
	EXPECT_TRUE(one_line(r.err)) << r.err;
	EXPECT_NE(std::string::npos, r.err.find(copy + ": the same recording as " + good))
		<< r.err;
	EXPECT_EQ("", r.out);
}

TEST_F(Cli, HelpExamplesUseWhatWorksHere)
{
	// Each was an example that failed as written on a machine without RDMA
	// hardware, or an option missing from the list.
	Result r = rb({ "replay", "--help" });
	EXPECT_NE(std::string::npos, r.out.find("\n  --softnic ")) << r.out;
	EXPECT_NE(std::string::npos, r.out.find("\n  --realtime ")) << r.out;
	EXPECT_NE(std::string::npos,
		  r.out.find("rbtrace replay --softnic client.rbt server.rbt"));
	EXPECT_EQ(0, count(r.out, "rbtrace replay client.rbt")); // no device here
	EXPECT_EQ(std::string::npos, r.out.find("app.rbt")) << r.out;
	r = rb({ "diff", "--help" });
	EXPECT_EQ(std::string::npos, r.out.find("app.rbt")) << r.out;
	EXPECT_NE(std::string::npos, r.out.find("rbtrace diff client.rbt replay.0.rbt"));
	r = rb({ "record", "--help" });
	EXPECT_NE(std::string::npos, r.out.find("RBTRACE_DISABLE")) << r.out;
	EXPECT_NE(std::string::npos, r.out.find("mkdir -p traces")) << r.out;
	EXPECT_EQ(std::string::npos, r.out.find("rbtrace record -o traces/")) << r.out;
	r = rb({ "softnic", "--help" });
	EXPECT_NE(std::string::npos, r.out.find("sleep 1; rbtrace softnic --")) << r.out;
	EXPECT_NE(std::string::npos, r.out.find("/tmp/softnic-<uid>")) << r.out;
	r = rb({ "dump", "--help" });
	EXPECT_EQ(std::string::npos, r.out.find("jq")) << r.out; // not installed by ./dev
}

TEST_F(Cli, IncompleteTraceAdviceMatchesWhereFindingsAre)
{
	// The text report prints findings after the numbers: the advice said
	// "Numbers below".
	std::string p = tmpdir() + "/advice.rbt", bytes = slurp(good);
	spit(p, bytes.substr(0, bytes.size() - 56));
	Result r = rb({ "report", p });
	EXPECT_EQ(0, r.code) << r.err;
	EXPECT_NE(std::string::npos, r.out.find("trace_incomplete")) << r.out;
	EXPECT_EQ(std::string::npos, r.out.find("Numbers below")) << r.out;
	EXPECT_NE(std::string::npos, r.out.find("This report's numbers count only"))
		<< r.out;
}
