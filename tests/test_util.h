// test_util.h - the process and file helpers every C++ test shares: where Bazel put
// a runfile, a fresh temporary directory and its removal, a file's bytes, and a
// command run with a timeout and its stdout / stderr captured. Under --config=asan
// it also says how to preload the ASan runtime ahead of an instrumented library.
//
// Test code only, header-only (C++17). A helper never aborts the test binary: a
// command that cannot start or runs out of time is a result (127, 124), never an
// exception, so the test says what it expected.
#ifndef RBT_TEST_UTIL_H
#define RBT_TEST_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace rbt_test
{

// A file of the test's runfiles (data = [...] in BUILD), by its workspace path.
inline std::string runfile(const std::string &rel)
{
	const char *d = getenv("TEST_SRCDIR");
	std::string base = d ? std::string(d) + "/rbtrace/" : std::string("./");
	return base + rel;
}

// The test's own scratch directory (TEST_TMPDIR, else /tmp).
inline std::string test_tmp()
{
	const char *t = getenv("TEST_TMPDIR");
	return t ? t : "/tmp";
}

// A new, empty directory under test_tmp(), named after tag; "" when it failed.
inline std::string tmpdir(const std::string &tag)
{
	std::string tmpl = test_tmp() + "/" + tag + ".XXXXXX";
	std::vector<char> buf(tmpl.begin(), tmpl.end());
	buf.push_back(0);
	char *p = mkdtemp(buf.data());
	return p ? std::string(p) : std::string();
}

// Removes dir and everything under it (symbolic links are not followed).
inline bool rmtree(const std::string &dir)
{
	auto rm = [](const char *p, const struct stat *, int, struct FTW *) {
		return remove(p);
	};
	return nftw(dir.c_str(), rm, 16, FTW_DEPTH | FTW_PHYS) == 0;
}

inline std::string slurp(const std::string &path)
{
	std::string s;
	FILE *f = fopen(path.c_str(), "rb");
	if (!f)
		return s;
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		s.append(buf, n);
	fclose(f);
	return s;
}

inline bool spit(const std::string &path, const std::string &data)
{
	FILE *f = fopen(path.c_str(), "wb");
	if (!f)
		return false;
	bool ok = fwrite(data.data(), 1, data.size(), f) == data.size();
	return fclose(f) == 0 && ok;
}

struct run_result {
	int status = -1; // exit code, 128+signal, 124 timed out, 127 could not start
	std::string out, err;
};

// Runs argv (argv[0] a path, no shell) in its own process group with stdout and
// stderr captured; after timeout_s the group gets SIGTERM, 5 s later SIGKILL,
// and the status is 124 (as timeout(1) says it).
inline run_result run_argv(std::vector<std::string> argv, int timeout_s = 120)
{
	run_result r;
	std::string d = tmpdir("run");
	if (d.empty() || argv.empty())
		return r;
	std::string o = d + "/out", e = d + "/err";
	std::vector<char *> a;
	for (auto &s : argv)
		a.push_back(&s[0]);
	a.push_back(nullptr);
	fflush(nullptr);
	pid_t pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		int fo = open(o.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fe = open(e.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(127);
		execv(a[0], a.data());
		_exit(127);
	}
	if (pid > 0) {
		struct timespec t0, now;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int st = 0, sig = 0;
		useconds_t nap = 100;
		for (;;) {
			pid_t w = waitpid(pid, &st, WNOHANG);
			if (w == pid || (w < 0 && errno != EINTR))
				break;
			clock_gettime(CLOCK_MONOTONIC, &now);
			double el = (double)(now.tv_sec - t0.tv_sec) +
				    (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
			if (!sig && el > timeout_s) {
				kill(-pid, SIGTERM);
				sig = SIGTERM;
			} else if (sig == SIGTERM && el > timeout_s + 5) {
				kill(-pid, SIGKILL);
				sig = SIGKILL;
			}
			usleep(nap);
			if (nap < 2000)
				nap *= 2;
		}
		r.status = sig		   ? 124
			   : WIFEXITED(st) ? WEXITSTATUS(st)
					   : 128 + WTERMSIG(st);
	}
	r.out = slurp(o);
	r.err = slurp(e);
	rmtree(d);
	return r;
}

// Runs `sh -c cmd`, as run_argv().
inline run_result run(const std::string &cmd, int timeout_s = 120)
{
	return run_argv({ "/bin/sh", "-c", cmd }, timeout_s);
}

// Under --config=asan an instrumented library needs the ASan runtime, which must
// be the first library of a process: its path, for LD_PRELOAD ("" otherwise).
inline std::string asan_runtime_for(const std::string &lib)
{
	std::string out;
	FILE *p = popen(("ldd " + lib + " 2>/dev/null").c_str(), "r");
	if (!p)
		return out;
	char line[1024];
	while (fgets(line, sizeof(line), p)) {
		std::string l = line;
		size_t a = l.find("libasan.so");
		size_t arrow = l.find("=> ");
		if (a != std::string::npos && arrow != std::string::npos) {
			size_t e = l.find(' ', arrow + 3);
			out = l.substr(arrow + 3, e - arrow - 3);
		}
	}
	pclose(p);
	return out;
}

// The LD_PRELOAD value that loads the recorder (with the ASan runtime first when
// the recorder was built with it).
inline std::string shim_preload()
{
	std::string lib = runfile("interpose/librbtrace.so");
	std::string asan = asan_runtime_for(lib);
	return asan.empty() ? lib : asan + ":" + lib;
}

// Programs that are not ours leak at exit; under ASan that would change their
// exit code, so leak checking is off in traced children. ASan's own SEGV handler
// would hide the recorder's (whose flush-then-die the tests check).
inline std::string asan_env()
{
	return asan_runtime_for(runfile("interpose/librbtrace.so")).empty()
		       ? std::string()
		       : std::string("ASAN_OPTIONS=detect_leaks=0:handle_segv=0 ");
}

// Runs a shell command line; its exit code (128 when it did not exit), its
// stdout and stderr together in *out. No timeout: the command line bounds itself.
inline int sh(const std::string &cmd, std::string *out)
{
	std::string full = cmd + " 2>&1";
	FILE *p = popen(full.c_str(), "r");
	if (!p)
		return -1;
	char buf[4096];
	size_t n;
	out->clear();
	while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
		out->append(buf, n);
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// Built with --config=asan: the sanitizer runtimes lib links (ASan, UBSan),
// each followed by ':', for the front of LD_PRELOAD in uninstrumented programs
// ("" otherwise).
inline std::string sanitizer_first(const std::string &lib)
{
	std::string out;
	FILE *p = popen(("ldd " + lib + " 2>/dev/null").c_str(), "r");
	char line[1024];

	while (p && fgets(line, sizeof(line), p)) {
		std::string l = line;
		size_t arrow = l.find("=> ");
		if (arrow == std::string::npos ||
		    (l.find("libasan.so") == std::string::npos &&
		     l.find("libubsan.so") == std::string::npos))
			continue;
		size_t e = l.find(' ', arrow + 3);
		out += l.substr(arrow + 3, e - arrow - 3) + ":";
	}
	if (p)
		pclose(p);
	return out;
}

// The environment (VAR=value words for a shell command line, ending in a space)
// that runs a command on softnic (a data dependency of the test, under the
// working directory) in the mode RBTRACE_SOFTNIC_MODE names: the drop-in
// libibverbs.so.1, or provider (the system's libibverbs with softnic's preload),
// on the fabric test_tmp()/fabric. pre: a library preloaded first (the recorder).
inline std::string softnic_env(const std::string &pre = "")
{
	char cwd[4096];
	if (!getcwd(cwd, sizeof(cwd)))
		return "";
	std::string dir = std::string(cwd) + "/softnic";
	const char *mode = getenv("RBTRACE_SOFTNIC_MODE");
	std::string fab = " SOFTNIC_FABRIC=" + test_tmp() + "/fabric ";
	if (mode && std::string(mode) == "provider") {
		std::string san =
			sanitizer_first(dir + "/provider/libsoftnic-preload.so");
		const char *opts = getenv("ASAN_OPTIONS");
		/* (the leaks of Debian's programs are theirs) */
		if (!san.empty())
			fab += "ASAN_OPTIONS=" + std::string(opts ? opts : "") +
			       ":detect_leaks=0 ";
		return "LD_PRELOAD=" + san + (pre.empty() ? "" : pre + ":") + dir +
		       "/provider/libsoftnic-preload.so RDMAV_DRIVERS=" + dir +
		       "/provider/libsoftnic" + fab;
	}
	return "LD_LIBRARY_PATH=" + dir + (pre.empty() ? "" : " LD_PRELOAD=" + pre) + fab;
}

} // namespace rbt_test

#endif
