/* cmd_record.c - `rbtrace record [-o FILE|DIR] [--softnic] -- CMD ARGS`: runs CMD
 * with librbtrace.so preloaded (and softnic's libibverbs when asked), then says
 * where each trace went, with its events, size and losses.
 *
 * The traced processes find out where to write through RBTRACE_OUTPUT and list
 * every trace they create in a manifest file named by RBTRACE_MANIFEST, so forked
 * children and exec'd programs are reported too. The exit code is CMD's. This
 * command itself never loads libibverbs and never touches CMD's stdout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/rbt_cli.h"
#include "interpose/rbt_interpose.h"
#include "trace_format/rbt_format.h"

static const char usage[] =
	"usage: rbtrace record [-o FILE|DIR] [--softnic] [--light]\n"
	"                      [--flight=SIZE|--rotate=SIZE] -- CMD [ARGS...]\n"
	"\n"
	"Runs CMD with the rbtrace recorder (librbtrace.so) preloaded. Every process\n"
	"of CMD that uses libibverbs writes its own trace; when CMD ends, each trace\n"
	"is listed on stderr with its events, size and losses. The exit code is CMD's\n"
	"(128+N when CMD died of signal N; 127 when CMD was not found, 126 when it\n"
	"could not be run). -o must name a writable place, checked before CMD runs.\n"
	"\n"
	"options:\n"
	"  -o, --output FILE|DIR  where traces go (default: the current directory,\n"
	"                         as rbtrace-<program>-<pid>.rbt). With a FILE, the\n"
	"                         first traced process writes FILE and others write\n"
	"                         FILE-<pid>.rbt beside it. A DIR must exist (write\n"
	"                         DIR/ to insist on a directory).\n"
	"  --softnic[=MODE]       run CMD on softnic, the software RDMA device: as a\n"
	"                         provider under the system's libibverbs where it\n"
	"                         can (rdma-core, private ABI 34), else its drop-in\n"
	"                         libibverbs.so.1; MODE provider|dropin chooses\n"
	"                         (softnic's librdmacm.so.1 too; rdma_cm calls and\n"
	"                         events are recorded, on hardware as well)\n"
	"  --flight=SIZE          flight recorder: keep the last SIZE (64M, 1G) of\n"
	"                         compressed trace in memory per process and write a\n"
	"                         snapshot FILE-snapN.rbt when something goes wrong\n"
	"                         (an error completion, a QP moved to ERR, an async\n"
	"                         event, a stall, a slow post or poll, SIGUSR2,\n"
	"                         `rbtrace snapshot PID`); FILE itself gets the last\n"
	"                         window at the end. Each snapshot is a complete trace.\n"
	"  --light                light mode: each post and poll takes one timestamp\n"
	"                         (its entry), not two, and no stacks are taken: a\n"
	"                         cheaper hot path, but the report can no longer\n"
	"                         say how long a post or a poll took (the post phase\n"
	"                         reads 0; completions count from the entry of the\n"
	"                         poll that returned them)\n"
	"  --rotate=SIZE|DURATION a numbered series FILE, FILE-part1.rbt, ... each at\n"
	"                         most SIZE (50M) or DURATION (10s, 5min, 1h) long and\n"
	"                         complete; info, dump, report and replay given FILE\n"
	"                         read the whole series as one trace\n"
	"\n"
	"settings (environment, passed on to CMD; see docs/recording.md):\n"
	"  RBTRACE_OUTPUT=FILE|DIR   same as -o\n"
	"  RBTRACE_BUFFER_KB=2048    per-thread record ring, KiB\n"
	"  RBTRACE_FLUSH_MS=100      longest time a record waits before it is in the\n"
	"                            file (what kill -9 can lose at most)\n"
	"  RBTRACE_BLOCK_MS=1000     longest wait of a thread whose ring is full; then\n"
	"                            records are dropped and counted in LOSS events\n"
	"  RBTRACE_STACKS=1          call stacks where resources are created/modified\n"
	"  RBTRACE_NIC_TS=0          1: NIC completion timestamps on every CQ, and\n"
	"                            periodic host/NIC clock samples\n"
	"  RBTRACE_PAYLOAD=0         bytes of each send's payload to keep (on = 256);\n"
	"                            off by default: payloads can hold secrets\n"
	"  RBTRACE_WRITER_CPU=N      run the trace writer thread on CPU N only\n"
	"  RBTRACE_LIGHT=0           1: same as --light\n"
	"  RBTRACE_FLIGHT=SIZE       same as --flight; RBTRACE_ROTATE: --rotate\n"
	"  RBTRACE_FLIGHT_BEFORE_MS=0     window before a trigger (0: whole ring)\n"
	"  RBTRACE_FLIGHT_AFTER_MS=100    window after it\n"
	"  RBTRACE_FLIGHT_GAP_MS=1000     least time between two snapshots\n"
	"  RBTRACE_FLIGHT_MAX=32          most snapshots per process\n"
	"  RBTRACE_FLIGHT_STALL_MS=1000   stall: signaled sends outstanding, no\n"
	"                                 completion for this long (0: off)\n"
	"  RBTRACE_FLIGHT_SLOW_POST_US=0  a post this slow is a trigger (0: off)\n"
	"  RBTRACE_FLIGHT_SLOW_POLL_US=0  a poll this slow is a trigger (0: off)\n"
	"  RBTRACE_DEBUG=0           1: recorder diagnostics on stderr\n"
	"  RBTRACE_DISABLE           1: record nothing, forward every call untouched\n"
	"  RBTRACE_LIB=PATH          librbtrace.so to use (default: next to rbtrace)\n"
	"  RBTRACE_SOFTNIC_DIR=DIR   softnic's libibverbs.so.1 directory for --softnic\n"
	"  RBTRACE_SOFTNIC_MODE=M    --softnic's mode when none is given\n"
	"\n"
	"examples (--softnic: on softnic, no RDMA hardware needed; a server is\n"
	"given a second to listen, as the client does not retry, and `wait` lets it\n"
	"finish its trace):\n"
	"  rbtrace record --softnic -- ibv_devinfo -d softnic0\n"
	"  rbtrace record --softnic -o server.rbt -- ibv_rc_pingpong -n 1000 &\n"
	"  sleep 1; rbtrace record --softnic -o client.rbt -- ibv_rc_pingpong -n 1000 "
	"localhost; wait\n"
	"  mkdir -p traces\n"
	"  RBTRACE_NIC_TS=1 rbtrace record --softnic -o traces/ -- ib_write_bw &\n"
	"  sleep 1; RBTRACE_NIC_TS=1 rbtrace record --softnic -o traces/ -- ib_write_bw "
	"localhost; wait\n"
	"  rbtrace record --softnic --flight=64M -o svc.rbt -- ./service &\n"
	"  rbtrace snapshot $(pgrep -n service)   # svc-snap1.rbt, now\n"
	"  rbtrace record --softnic --rotate=50M -o long.rbt -- ./service\n"
	"  rbtrace report long.rbt                # long.rbt, long-part1.rbt, ...\n";

static const char *cmd = "record";
static volatile pid_t child_pid;

static void pass_on(int sig)
{
	if (child_pid > 0)
		kill(child_pid, sig);
}

/* where: 0 puts value first, 1 last (LD_PRELOAD: a sanitizer runtime the user
 * preloads must stay first). */
static int add_env(const char *name, const char *value, char sep, int last)
{
	const char *old = getenv(name);
	char *v;

	if (old && *old) {
		if ((last ? asprintf(&v, "%s%c%s", old, sep, value)
			  : asprintf(&v, "%s%c%s", value, sep, old)) < 0)
			return -1;
	} else {
		v = strdup(value);
		if (!v)
			return -1;
	}
	int r = setenv(name, v, 1);
	free(v);
	return r;
}

/* The recorder's size and duration syntax (shim_flight.c): 64M, 512K, 1G, a
 * number of bytes; 500ms, 10s, 5min, 2h. */
static int valid_size(const char *s, unsigned long long least)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return 0;
	unsigned long long mul = 1;
	if (*end == 'k' || *end == 'K')
		mul = 1 << 10, end++;
	else if (*end == 'M')
		mul = 1 << 20, end++;
	else if (*end == 'g' || *end == 'G')
		mul = 1 << 30, end++;
	if (*end == 'i' && end[1] == 'B')
		end++;
	if (*end == 'B')
		end++;
	return !*end && v * mul >= least && v <= (64ull << 30);
}

static int valid_duration(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-' || !v)
		return 0;
	return !strcmp(end, "ms") || !strcmp(end, "s") || !strcmp(end, "m") ||
	       !strcmp(end, "min") || !strcmp(end, "h");
}

struct summary {
	uint64_t events, lost;
	int finished, damaged;
	uint64_t series_index; /* > 0: a later file of a series */
	uint32_t series_files; /* the first file of a series: the files after it */
	uint64_t trigger;      /* a flight snapshot: what fired it */
};

static int summarize(const char *path, struct summary *s)
{
	struct rbt_reader *r;
	const struct rbt_event *ev;
	int err;

	memset(s, 0, sizeof(*s));
	err = rbt_reader_open(path, &r);
	if (err < 0)
		return err;
	while ((err = rbt_reader_next(r, &ev)) > 0) {
		s->events++;
		if (ev->type == RBT_EV_LOSS)
			s->lost += ev->u.loss.events;
		if (ev->type == RBT_EV_SNAPSHOT)
			s->trigger = ev->u.snapshot.trigger;
	}
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	s->series_index = rbt_reader_header(r)->series_index;
	s->series_files = st->series_files;
	s->finished = rbt_reader_trailer(r) != NULL;
	s->damaged = err < 0 || st->bad_chunks || st->truncated;
	s->lost += st->lost_events_in_bad_chunks;
	rbt_reader_close(r);
	return 0;
}

static int report(const char *manifest)
{
	FILE *f = fopen(manifest, "r");
	char line[PATH_MAX + 2];
	char **seen = NULL;
	size_t nseen = 0;
	int any = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!*line)
			continue;
		int dup = 0;
		for (size_t i = 0; i < nseen; i++)
			dup |= !strcmp(seen[i], line);
		if (dup)
			continue;
		char **ns = realloc(seen, (nseen + 1) * sizeof(*seen));
		if (!ns)
			break;
		seen = ns;
		seen[nseen++] = strdup(line);
		any = 1;

		struct stat st;
		struct summary s;
		if (stat(line, &st) != 0) {
			fprintf(stderr, "rbtrace record: %s: missing (%s)\n", line,
				strerror(errno));
			continue;
		}
		if (!S_ISREG(st.st_mode)) { /* -o /dev/null: nothing to read back */
			fprintf(stderr,
				"rbtrace record: %s: not a regular file, not read back\n",
				line);
			continue;
		}
		int err = summarize(line, &s);
		if (err < 0) {
			fprintf(stderr,
				"rbtrace record: %s: %lld bytes, unreadable: %s\n", line,
				(long long)st.st_size, rbt_strerror(err));
			continue;
		}
		if (s.series_index)
			continue; /* counted in the series' first file */
		char extra[96] = "";
		if (s.series_files)
			snprintf(extra, sizeof(extra),
				 " (a series of %u files read as one)",
				 s.series_files + 1);
		else if (s.trigger && s.trigger != RBT_TRIGGER_END)
			snprintf(extra, sizeof(extra), " (flight snapshot: %s)",
				 rbt_trigger_name(s.trigger) ? rbt_trigger_name(s.trigger)
							     : "?");
		fprintf(stderr,
			"rbtrace record: %s: %" PRIu64 " events, %lld bytes, %" PRIu64
			" lost%s%s%s\n",
			line, s.events, (long long)st.st_size, s.lost,
			s.finished ? "" : ", not finished (process killed?)",
			s.damaged ? ", damaged" : "", extra);
	}
	fclose(f);
	for (size_t i = 0; i < nseen; i++)
		free(seen[i]);
	free(seen);
	if (!any)
		fprintf(stderr,
			"rbtrace record: no trace written (the program made no verbs "
			"calls, or recording was off)\n");
	return 0;
}

int rbt_cmd_record(int argc, char **argv)
{
	const char *out = NULL, *flight = NULL, *rotate = NULL;
	int softnic = 0, light = 0;
	char *pos[1];
	const struct rbt_cli_opt opts[] = {
		{ "output", 'o', &out, NULL },	{ "softnic", 0, NULL, &softnic },
		{ "flight", 0, &flight, NULL }, { "rotate", 0, &rotate, NULL },
		{ "light", 0, NULL, &light },	{ 0 },
	};
	char lib[PATH_MAX], manifest[] = "/tmp/rbtrace-manifest-XXXXXX";
	struct rbt_softnic_setup sn;
	int i, parsed, snmode;

	/* Our options end at "--" or at the first word that is not one of ours. */
	int split = argc;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			split = i;
			break;
		}
		if (argv[i][0] != '-') {
			split = i;
			break;
		}
		if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output") ||
		     !strcmp(argv[i], "--flight") || !strcmp(argv[i], "--rotate")) &&
		    i + 1 < argc)
			i++;
	}
	if (rbt_cli_softnic_arg(cmd, split, argv, &snmode))
		return RBT_EXIT_USAGE;
	parsed = rbt_cli_parse(cmd, split, argv, opts, 0, pos, 0);
	int done = rbt_cli_parse_done(parsed, usage);
	if (done >= 0)
		return done;
	int cmd_at = split < argc && !strcmp(argv[split], "--") ? split + 1 : split;
	if (cmd_at >= argc)
		return rbt_cli_usage(cmd, "no command to record");
	if (flight && rotate)
		return rbt_cli_usage(cmd, "--flight and --rotate do not go together");
	if (flight && !valid_size(flight, 1 << 20))
		return rbt_cli_usage(cmd, "--flight: expected a size of 1M or more "
					  "(e.g. 64M, 1G)");
	if (rotate && !valid_size(rotate, 64 << 10) && !valid_duration(rotate))
		return rbt_cli_usage(cmd, "--rotate: expected a size of 64K or more "
					  "(e.g. 50M) or a duration (e.g. 10s, 5min)");
	if ((flight && setenv(RBT_ENV_FLIGHT, flight, 1)) ||
	    (rotate && setenv(RBT_ENV_ROTATE, rotate, 1)) ||
	    (light && setenv(RBT_ENV_LIGHT, "1", 1))) {
		rbt_cli_error(cmd, "cannot set the environment: %s", strerror(errno));
		return RBT_EXIT_FAIL;
	}

	const char *envlib = getenv("RBTRACE_LIB");
	if (envlib && *envlib) {
		snprintf(lib, sizeof(lib), "%s", envlib);
	} else if (rbt_cli_find_part(RBT_CLI_RECORDER_PATHS, NULL, lib, sizeof(lib))) {
		rbt_cli_error(cmd, "librbtrace.so not found next to rbtrace "
				   "(../interpose/ or ../lib/rbtrace/); set RBTRACE_LIB");
		return RBT_EXIT_FAIL;
	}
	if (access(lib, R_OK)) {
		rbt_cli_error(cmd, "%s: %s", lib, strerror(errno));
		return RBT_EXIT_FAIL;
	}
	if (softnic && rbt_cli_softnic_setup(cmd, snmode, &sn))
		return RBT_EXIT_FAIL;
	if (out && !*out)
		return rbt_cli_usage(cmd, "--output: empty path");
	const char *envout = getenv(RBT_ENV_OUTPUT);
	/* the manifest lists one trace per line */
	const char *nl = out ? (strchr(out, '\n') ? "--output" : NULL)
			     : (envout && strchr(envout, '\n') ? RBT_ENV_OUTPUT : NULL);
	if (nl) {
		rbt_cli_error(cmd, "%s: a newline in the path is not supported", nl);
		return RBT_EXIT_FAIL;
	}
	/* Checked before CMD runs: the recorder would only warn and let CMD run
	 * untraced, which is easy to miss. */
	if (out ? rbt_cli_check_output(cmd, "--output", out)
		: envout && *envout && rbt_cli_check_output(cmd, RBT_ENV_OUTPUT, envout))
		return RBT_EXIT_FAIL;

	if (softnic)
		rbt_cli_softnic_say(&sn);
	int mfd = mkstemp(manifest);
	if (mfd < 0) {
		rbt_cli_error(cmd, "%s: %s", manifest, strerror(errno));
		return RBT_EXIT_FAIL;
	}
	close(mfd);

	/* While CMD runs, ^C and ^\ are its business (they reach it through the
	 * terminal); SIGTERM sent to us is passed on. */
	struct sigaction ign = { .sa_handler = SIG_IGN }, old_int, old_quit;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGINT, &ign, &old_int);
	sigaction(SIGQUIT, &ign, &old_quit);
	struct sigaction fwd = { .sa_handler = pass_on }, old_term, old_hup;
	sigemptyset(&fwd.sa_mask);
	sigaction(SIGTERM, &fwd, &old_term);
	sigaction(SIGHUP, &fwd, &old_hup);

	/* The child reports a failed exec through this pipe (closed by a
	 * successful one), so that we say it once and exit as a shell would. */
	int ep[2];
	if (pipe2(ep, O_CLOEXEC)) {
		rbt_cli_error(cmd, "pipe: %s", strerror(errno));
		unlink(manifest);
		return RBT_EXIT_FAIL;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		rbt_cli_error(cmd, "fork: %s", strerror(errno));
		close(ep[0]);
		close(ep[1]);
		unlink(manifest);
		return RBT_EXIT_FAIL;
	}
	if (pid == 0) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGQUIT, &old_quit, NULL);
		sigaction(SIGTERM, &old_term, NULL);
		sigaction(SIGHUP, &old_hup, NULL);
		/* the recorder first: it must see the calls softnic's preload
		 * serves (completion channels) */
		if (add_env("LD_PRELOAD", lib, ':', 1) ||
		    (softnic && rbt_cli_softnic_apply(&sn)) ||
		    setenv(RBT_ENV_MANIFEST, manifest, 1) ||
		    (out && setenv(RBT_ENV_OUTPUT, out, 1))) {
			fprintf(stderr, "rbtrace record: environment: %s\n",
				strerror(errno));
			_exit(127);
		}
		/* A FILE output is free for the first process of this run that
		 * records (see rbt_open_output): the last run's trace there is
		 * replaced, as the user asked. */
		const char *o = out ? out : getenv(RBT_ENV_OUTPUT);
		struct stat ost;
		if (o && *o && o[strlen(o) - 1] != '/' &&
		    !(stat(o, &ost) == 0 && S_ISDIR(ost.st_mode))) {
			unlink(o);
			setenv("RBTRACE_OUTPUT_CLAIMED", "excl", 1);
		} else {
			unsetenv("RBTRACE_OUTPUT_CLAIMED");
		}
		close(ep[0]);
		execvp(argv[cmd_at], argv + cmd_at);
		int e = errno;
		if (write(ep[1], &e, sizeof(e)) != (ssize_t)sizeof(e))
			fprintf(stderr, "rbtrace record: %s: %s\n", argv[cmd_at],
				strerror(e));
		_exit(e == ENOENT ? 127 : 126);
	}

	child_pid = pid;
	close(ep[1]);
	int exec_err = 0;
	while (read(ep[0], &exec_err, sizeof(exec_err)) < 0 && errno == EINTR)
		;
	close(ep[0]);
	int status = 0;
	for (;;) {
		pid_t w = waitpid(pid, &status, 0);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			status = 1 << 8;
			break;
		}
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGQUIT, &old_quit, NULL);
	if (exec_err) {
		/* Nothing ran: one line, and the exit code of a shell (127: not
		 * found, 126: found but not executable). */
		unlink(manifest);
		rbt_cli_error(cmd, "%s: %s", argv[cmd_at], strerror(exec_err));
		return exec_err == ENOENT ? 127 : 126;
	}
	if (WIFSIGNALED(status))
		fprintf(stderr, "rbtrace record: %s killed by signal %d (%s)\n",
			argv[cmd_at], WTERMSIG(status), strsignal(WTERMSIG(status)));
	report(manifest);
	unlink(manifest);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return RBT_EXIT_FAIL;
}
