/* replay_bench.c - how fast and how punctual `rbtrace replay` is over softnic.
 *
 * 1. Message rate: a real verbs program (tests/replay_pacer, two RC QPs of one
 *    process, each SEND polled to completion on both ends) runs as fast as it can,
 *    recorded by librbtrace; its trace is replayed with --timing=asap. Prints both
 *    rates and the ratio replay/original (the baseline is measured in this run).
 * 2. Timing fidelity: the same program posting every 50 us, replayed with
 *    --timing=recorded (normal priority and --realtime): lateness p50/p99/max of
 *    every post against its schedule, and the replayer's own share of it.
 * 3. Threads: tests/replay_threads (8 threads, one QP each, --yield 1) recorded
 *    at full speed, replayed with --timing=asap from memory (the default for
 *    a trace that fits, RBTRACE_REPLAY_MEMORY_STEPS) and streamed in the
 *    default windows (RBTRACE_REPLAY_MEMORY_STEPS=0), in both --thread-order modes: post rate of the replay
 *    against the recorded program's (the same trace's span); then recorded
 *    every 50 us and replayed with --timing=recorded: lateness per recorded
 *    thread.
 * 4. Memory: the replayer's peak resident memory (VmHWM, from wait4) replaying
 *    synthetic SEND streams (tests/replay_synth --scenario stream, two traces)
 *    with --timing=asap: from memory (RBTRACE_REPLAY_WINDOW=0) at a small size,
 *    and streamed (the default windows) at 1 M and 10 M posts (--posts N,N,... for others, e.g.
 *    100000000: the traces take ~200 MB of disk and the replay minutes).
 * Prints numbers, never pass/fail. Needs, built in the same bazel-bin:
 * //cli:rbtrace, //softnic:libibverbs.so.1, //interpose:librbtrace.so and
 * //tests:replay_pacer, //tests:replay_threads, //tests:replay_synth (data
 * dependencies of this target).
 *   bazel build -c opt //bench:replay_bench && bazel-bin/bench/replay_bench
 *   bazel-bin/bench/replay_bench --memory-only --posts 1000000,100000000
 *   bazel-bin/bench/replay_bench --threads-only   (3. only)
 */
#define _GNU_SOURCE
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char bin[PATH_MAX], env[3 * PATH_MAX];

/* Runs cmd (with the softnic environment), returns its stdout+stderr. */
static char *run(const char *cmd)
{
	static char out[1 << 16];
	char full[8 * PATH_MAX];
	size_t n = 0, r;
	FILE *p;

	snprintf(full, sizeof(full), "%s %s 2>&1", env, cmd);
	p = popen(full, "r");
	if (!p)
		return NULL;
	while (n + 1 < sizeof(out) && (r = fread(out + n, 1, sizeof(out) - 1 - n, p)) > 0)
		n += r;
	out[n] = 0;
	pclose(p);
	return out;
}

static double json_num(const char *s, const char *obj, const char *key)
{
	const char *p = obj ? strstr(s, obj) : s;
	char k[64];

	if (!p)
		return -1;
	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(p, k);
	return p ? strtod(p + strlen(k), NULL) : -1;
}

/* Runs cmd (with the softnic environment) as a child of ours; its output in
 * out, its peak resident memory (KB) and wall time (s). */
static int run_rss(const char *cmd, char *out, size_t n, long *kb, double *secs)
{
	char full[8 * PATH_MAX];
	struct timespec a, b;
	struct rusage ru;
	int fd[2], st = 0;
	size_t got = 0;
	ssize_t r;
	pid_t pid;

	snprintf(full, sizeof(full), "exec env %s %s 2>&1", env, cmd);
	if (pipe(fd))
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &a);
	pid = fork();
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		execl("/bin/sh", "sh", "-c", full, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	while (pid > 0 && got + 1 < n && (r = read(fd[0], out + got, n - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = 0;
	close(fd[0]);
	if (pid < 0 || wait4(pid, &st, 0, &ru) < 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &b);
	*kb = ru.ru_maxrss;
	*secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* 4: peak RSS of the replay of a synthetic SEND stream of `posts` posts. */
static void memory_row(const char *fab, long long posts, int from_memory)
{
	static char out[1 << 16];
	char cmd[4 * PATH_MAX];
	double secs = 0;
	long kb = 0;

	snprintf(cmd, sizeof(cmd),
		 "rm -rf %s/mem && mkdir -p %s/mem && %s/tests/replay_synth %s/mem "
		 "--scenario stream --iters %lld --interval-us 1",
		 fab, fab, bin, fab, posts / 2);
	if (system(cmd)) {
		printf("  %11lld posts: writing the traces failed\n", posts);
		return;
	}
	snprintf(cmd, sizeof(cmd),
		 "%s %s/cli/rbtrace replay --json --timing=asap "
		 "%s/mem/a.rbt %s/mem/b.rbt",
		 from_memory ? "RBTRACE_REPLAY_WINDOW=0"
			     : "RBTRACE_REPLAY_MEMORY_STEPS=0",
		 bin, fab, fab);
	if (run_rss(cmd, out, sizeof(out), &kb, &secs) != 0 ||
	    json_num(out, "\"completions\"", "matched") < 0) {
		printf("  %11lld posts: replay failed: %.300s\n", posts, out);
		return;
	}
	printf("  %11lld posts  %-8s  peak RSS %8.1f MB  %7.0f B/post  %.0f of %.0f "
	       "completions matched  %.1f s\n",
	       posts, from_memory ? "memory" : "streamed", kb / 1024.0,
	       kb * 1024.0 / (double)posts, json_num(out, "\"completions\"", "matched"),
	       json_num(out, "\"completions\"", "expected"), secs);
	fflush(stdout);
}

static void memory_section(const char *fab, const char *list, long long in_memory)
{
	printf("replay_bench: peak resident memory of the replayer (VmHWM), two traces "
	       "of a SEND stream (tests/replay_synth), --timing=asap\n");
	memory_row(fab, in_memory, 1);
	for (const char *p = list; p && *p;) {
		char *end;
		long long n = strtoll(p, &end, 10);

		if (end == p)
			break;
		memory_row(fab, n, 0);
		p = *end == ',' ? end + 1 : end;
	}
}

int main(int argc, char **argv)
{
	char self[PATH_MAX], fab[] = "/tmp/replay-bench-XXXXXX", cmd[4 * PATH_MAX], *o;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	double orig_rate, plain_rate, wall, posts, best_replay;
	int best_trace = 0;
	const int iters = 100000;
	const char *posts_list = "1000000,10000000";
	long long in_memory = 200000;
	int memory_only = 0, threads_only = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--memory-only")) {
			memory_only = 1;
		} else if (!strcmp(argv[i], "--threads-only")) {
			threads_only = 1;
		} else if (!strcmp(argv[i], "--posts") && i + 1 < argc) {
			posts_list = argv[++i];
		} else if (!strcmp(argv[i], "--in-memory-posts") && i + 1 < argc) {
			in_memory = atoll(argv[++i]);
		} else {
			fprintf(stderr, "usage: replay_bench [--memory-only | "
					"--threads-only] [--posts N,N,...] "
					"[--in-memory-posts N]\n");
			return 2;
		}
	}
	if (n <= 0 || !mkdtemp(fab)) {
		fprintf(stderr, "replay_bench: setup failed\n");
		return 1;
	}
	self[n] = 0;
	snprintf(bin, sizeof(bin), "%s/..", dirname(self));
	snprintf(env, sizeof(env), "SOFTNIC_FABRIC=%s LD_LIBRARY_PATH=%s/softnic", fab,
		 bin);
	if (memory_only)
		goto memory;
	if (threads_only)
		goto threads;

	/* 1. message rate: original (untraced, then traced) vs replay --timing=asap.
	 * The machine is shared: each is run 3 times, interleaved, best kept. */
	plain_rate = orig_rate = 0;
	best_replay = 0;
	posts = -1;
	for (int k = 0; k < 3; k++) {
		double r;

		snprintf(cmd, sizeof(cmd),
			 "%s/tests/replay_pacer --iters %d --interval-us 0", bin, iters);
		o = run(cmd);
		r = o && (o = strstr(o, "us (")) ? strtod(o + 4, NULL) : -1;
		if (r > plain_rate)
			plain_rate = r;
		snprintf(cmd, sizeof(cmd),
			 "LD_PRELOAD=%s/interpose/librbtrace.so "
			 "RBTRACE_OUTPUT=%s/fast%d.rbt "
			 "%s/tests/replay_pacer --iters %d --interval-us 0",
			 bin, fab, k, bin, iters);
		o = run(cmd);
		r = o && (o = strstr(o, "us (")) ? strtod(o + 4, NULL) : -1;
		if (r > orig_rate) {
			orig_rate = r;
			best_trace = k;
		}
	}
	for (int k = 0; k < 3; k++) {
		snprintf(cmd, sizeof(cmd),
			 "%s/cli/rbtrace replay --json --timing=asap %s/fast%d.rbt", bin,
			 fab, best_trace);
		o = run(cmd);
		wall = o ? json_num(o, NULL, "wall_ns") : -1;
		posts = o ? json_num(o, "\"completions\"", "matched") : -1;
		/* the span runs from the first to the last step: iters - 1 gaps */
		if (wall > 0 && (iters - 1) / (wall / 1e9) > best_replay)
			best_replay = (iters - 1) / (wall / 1e9);
	}
	printf("replay_bench: message rate, %d SENDs each polled to completion "
	       "(softnic), "
	       "best of 3\n",
	       iters);
	printf("  original, untraced                 %10.0f msg/s\n", plain_rate);
	printf("  original (recorded by librbtrace)  %10.0f msg/s\n", orig_rate);
	if (best_replay > 0 && orig_rate > 0)
		printf("  replay --timing=asap               %10.0f msg/s   ratio %.2f "
		       "vs "
		       "recorded, %.2f vs untraced  (%.0f of %d completions matched)\n",
		       best_replay, best_replay / orig_rate,
		       plain_rate > 0 ? best_replay / plain_rate : 0, posts, 2 * iters);
	else
		printf("  replay --timing=asap failed: %s\n", o ? o : "");

	/* 2. timing fidelity at one SEND every 50 us */
	snprintf(cmd, sizeof(cmd),
		 "LD_PRELOAD=%s/interpose/librbtrace.so RBTRACE_OUTPUT=%s/paced.rbt "
		 "%s/tests/replay_pacer --iters 2000 --interval-us 50",
		 bin, fab, bin);
	run(cmd);
	printf("replay_bench: --timing=recorded, a SEND every 50 us, 2000 sends "
	       "(lateness of each post vs its schedule; own = past the end of the step "
	       "before)\n");
	for (int rt = 0; rt < 2; rt++)
		for (int k = 0; k < 3; k++) {
			snprintf(cmd, sizeof(cmd),
				 "%s/cli/rbtrace replay --json %s %s/paced.rbt", bin,
				 rt ? "--realtime" : "", fab);
			o = run(cmd);
			if (!o || json_num(o, "lateness_ns", "p99") < 0) {
				printf("  replay failed: %s\n", o ? o : "");
				continue;
			}
			printf("  %-10s run %d: p50 %7.2f us  p99 %9.2f us  max %9.2f us "
			       "  own "
			       "p99 %6.2f us\n",
			       rt ? "realtime" : "normal", k + 1,
			       json_num(o, "\"lateness_ns\"", "p50") / 1e3,
			       json_num(o, "\"lateness_ns\"", "p99") / 1e3,
			       json_num(o, "\"lateness_ns\"", "max") / 1e3,
			       json_num(o, "\"own_lateness_ns\"", "p99") / 1e3);
		}
	/* 3. threads */
threads:
	/* --yield 1: 8 polling threads on a machine of fewer cores run at a
	 * steady rate only if an empty poll gives the CPU away (without it the
	 * same run took 0.16 s to 21 s here: the baseline would be luck) */
	snprintf(cmd, sizeof(cmd),
		 "LD_PRELOAD=%s/interpose/librbtrace.so RBTRACE_OUTPUT=%s/thr.rbt "
		 "%s/tests/replay_threads --threads 8 --iters 20000 --interval-us 0 "
		 "--yield 1 --relay 0",
		 bin, fab, bin);
	run(cmd);
	printf("replay_bench: 8 threads, one QP each (tests/replay_threads --yield 1, "
	       "20000 round trips per pair), --timing=asap, 3 runs each: from memory "
	       "(RBTRACE_REPLAY_WINDOW=0; the default, as it fits) and streamed "
	       "(the default windows, RBTRACE_REPLAY_MEMORY_STEPS=0), with "
	       "--thread-order=shared (default) and recorded\n");
	for (int k = 0; k < 12; k++) {
		const char *win = k % 4 < 2 ? "RBTRACE_REPLAY_WINDOW=0"
					    : "RBTRACE_REPLAY_MEMORY_STEPS=0";
		const char *ord = k % 2 ? "recorded" : "shared";
		double p, w, rw, pz;

		snprintf(cmd, sizeof(cmd),
			 "%s %s/cli/rbtrace replay --json "
			 "--timing=asap --thread-order=%s %s/thr.rbt",
			 win, bin, ord, fab);
		o = run(cmd);
		p = o ? json_num(o, NULL, "posts") : -1;
		w = o ? json_num(o, NULL, "wall_ns") : -1;
		rw = o ? json_num(o, NULL, "recorded_wall_ns") : -1;
		if (p <= 0 || w <= 0 || rw <= 0) {
			printf("  replay failed: %.300s\n", o ? o : "");
			continue;
		}
		pz = json_num(o, NULL, "paused_ns");
		if (pz < 0 || pz >= w)
			pz = 0;
		printf("  %-8s %-8s replay %9.0f posts/s, recorded %9.0f posts/s: "
		       "ratio %.2f, %.2f while running (%.0f of %.0f completions "
		       "matched, %.0f windows, %.0f cross-thread waits)\n",
		       k % 4 < 2 ? "memory" : "streamed", ord, p / (w / 1e9),
		       p / (rw / 1e9), rw / w, rw / (w - pz),
		       json_num(o, "\"completions\"", "matched"),
		       json_num(o, "\"completions\"", "expected"),
		       json_num(o, "\"sides\"", "windows"),
		       json_num(o, "\"sides\"", "cross_thread_waits"));
	}
	snprintf(cmd, sizeof(cmd),
		 "LD_PRELOAD=%s/interpose/librbtrace.so RBTRACE_OUTPUT=%s/thrp.rbt "
		 "%s/tests/replay_threads --threads 8 --iters 1000 --interval-us 50 "
		 "--yield 1 --relay 0",
		 bin, fab, bin);
	run(cmd);
	snprintf(cmd, sizeof(cmd), "%s/cli/rbtrace replay --json %s/thrp.rbt", bin, fab);
	o = run(cmd);
	printf("replay_bench: the same, a round trip every 50 us per pair, "
	       "--timing=recorded: lateness per recorded thread\n");
	for (const char *t = o ? strstr(o, "\"per_thread\"") : NULL;
	     t && (t = strstr(t, "{\"thread\":")); t++)
		printf("  thread %6.0f: p50 %9.2f us  p99 %9.2f us  max %9.2f us  (%.0f "
		       "posts)\n",
		       json_num(t, NULL, "thread"),
		       json_num(t, "\"lateness_ns\"", "p50") / 1e3,
		       json_num(t, "\"lateness_ns\"", "p99") / 1e3,
		       json_num(t, "\"lateness_ns\"", "max") / 1e3,
		       json_num(t, "\"lateness_ns\"", "count"));
	if (threads_only)
		goto done;
memory:
	memory_section(fab, posts_list, in_memory);
done:
	snprintf(cmd, sizeof(cmd), "rm -rf %s", fab);
	if (system(cmd))
		return 0;
	return 0;
}
