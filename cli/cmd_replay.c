/* cmd_replay.c - `rbtrace replay`: reissues the verbs of recorded traces on a
 * device with the recorded timing and prints the fidelity report.
 *
 * Parses the command line and loads the replayer: the work is in replay/
 * (rbt_replay.h), a shared module that links libibverbs, dlopen()ed here and
 * only here so that rbtrace itself never needs an RDMA stack. Must never issue
 * a verb before the replayer has decided it can replay the traces.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/rbt_cli.h"
#include "replay/rbt_replay.h"

static const char usage[] =
	"usage: rbtrace replay [options] TRACE...\n"
	"       rbtrace replay --responder --listen PORT\n"
	"\n"
	"Rebuilds the resources of the traces (PDs, MRs, CQs, QPs, SRQs, AHs) on an "
	"RDMA\n"
	"device, reissues every post with the recorded timing, and reports how late "
	"each\n"
	"post was and whether completions came back as recorded. QP types RC, UC, "
	"UD and\n"
	"XRC (XRC domains, XRC SRQs, XRC_SEND/XRC_RECV QPs; the responder stands in "
	"for\n"
	"RC/UC peers only).\n"
	"\n"
	"options:\n"
	"  --softnic            replay on softnic, the userspace RDMA device (for a\n"
	"                       machine without RDMA hardware, as this one may be);\n"
	"                       --softnic=provider|dropin chooses its mode\n"
	"  --device NAME        the device to replay on (default: the recorded one, or "
	"the first)\n"
	"  --timing=MODE        recorded (default), asap, scale:X (X=2 is twice as "
	"slow),\n"
	"                       deps (after the completions seen before and the peers'\n"
	"                       RDMA WRITEs polled in memory, + think time)\n"
	"  --thread-order=ORDER shared (default): a post waits for another thread's\n"
	"                       polls before it on the CQs of its queues, and for\n"
	"                       every thread's QP creates, modifies and MR\n"
	"                       registrations before it; recorded: for every poll of\n"
	"                       every thread before it (keeps hand-offs through\n"
	"                       program memory, runs threads in the recorded\n"
	"                       interleaving)\n"
	"  --realtime           run the timeline SCHED_FIFO (root only): fewer late\n"
	"                       posts on a loaded machine\n"
	"  --listen PORT        wait for the peer replayer (or a responder) on this TCP "
	"port\n"
	"  --connect HOST:PORT  connect to the peer replayer or to a responder\n"
	"  --peers N            with --listen: N replayer processes connect (a job of\n"
	"                       many processes; default 1)\n"
	"  --responder          stand in for a missing peer (no trace; with --listen)\n"
	"  -o, --output FILE    record the replay itself as a trace (X.0.rbt, X.1.rbt "
	"...\n"
	"                       for X.rbt when several traces are given); its directory\n"
	"                       is checked before the replay starts\n"
	"  --allow-damaged      replay the intact part of a damaged trace\n"
	"  --json               the fidelity report as JSON\n"
	"  --poll-timeout MS    how long to wait for a recorded completion (default "
	"5000);\n"
	"                       after a divergence, waits that find nothing take at "
	"most\n"
	"                       2 s in all per trace, then that trace stops\n"
	"  --max-time S         end the run S seconds after the start (e.g. 1.5); "
	"what ran\n"
	"                       is reported and matched\n"
	"\n"
	"Each trace is given once: a ping-pong's two ends are two traces (client.rbt\n"
	"and server.rbt, e.g. recorded as in the README); one end alone needs a peer\n"
	"(--connect to a replayer of the other end, or to a responder).\n"
	"\n"
	"The replayer is librbtrace-replay.so, next to rbtrace (../replay) or named\n"
	"by $RBTRACE_REPLAY_MODULE; it needs libibverbs.so.1 (rdma-core, or softnic's\n"
	"with --softnic). The other commands need neither.\n"
	"\n"
	"SIGINT or SIGTERM ends the run with the report of what ran (a second one\n"
	"ends the process at once).\n"
	"\n"
	"Traces of up to 1 M steps in all (fewer when an eighth of the machine's\n"
	"memory holds fewer, at 2 kB a step; $RBTRACE_REPLAY_MEMORY_STEPS sets it)\n"
	"replay from memory. Longer ones are streamed: read again window by window\n"
	"of 2048 steps ($RBTRACE_REPLAY_WINDOW sets it and then streams every\n"
	"trace longer than that; 0 never streams; a thread decodes the next window\n"
	"while one runs, $RBTRACE_REPLAY_READ_AHEAD=0 reads it between windows),\n"
	"matched and freed as it goes, so memory stays that of a window or three;\n"
	"when a CPU is left over by the replayed threads, the next window's\n"
	"events are fed to the model while one runs ($RBTRACE_REPLAY_FEED_AHEAD=1\n"
	"always, 0 never), and the run pauses between windows to prepare the\n"
	"next. What cannot stream\n"
	"(-o, --listen/--connect, XRC, memory windows, ibv_rereg_mr mid-run)\n"
	"replays from memory, with a note.\n"
	"\n"
	"Exit status: 0 when every completion matched, 1 on divergence, refusal or an\n"
	"-o that could not be written, 2 for a bad command line (a file named twice,\n"
	"-o naming a trace), 128+N after the report when signal N ended the run.\n"
	"\n"
	"examples (over softnic):\n"
	"  rbtrace replay --softnic client.rbt server.rbt       # both ends, one "
	"process\n"
	"  rbtrace replay --softnic --listen 18600 server.rbt &\n"
	"  rbtrace replay --softnic --connect localhost:18600 client.rbt\n"
	"  rbtrace replay --softnic --responder --listen 18601 &\n"
	"  rbtrace replay --softnic --connect localhost:18601 client.rbt\n"
	"  rbtrace replay --softnic --timing=asap -o replay.rbt client.rbt server.rbt "
	"&&\n"
	"      rbtrace diff client.rbt replay.0.rbt               # original vs replay\n";

/* softnic (provider or drop-in) must be in place before the dynamic loader
 * starts us, so --softnic re-executes rbtrace with the environment set. */
static int rp_cli_softnic_exec(int argc, char **argv, int mode)
{
	char exe[PATH_MAX];
	struct rbt_softnic_setup sn;
	char **nargv = calloc((size_t)argc + 2, sizeof(*nargv));
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int k = 0;

	if (n <= 0 || !nargv) {
		rbt_cli_error("replay", "--softnic: cannot find the rbtrace executable");
		free(nargv);
		return RBT_EXIT_FAIL;
	}
	exe[n] = 0;
	if (rbt_cli_softnic_setup("replay", mode, &sn) || rbt_cli_softnic_apply(&sn)) {
		free(nargv);
		return RBT_EXIT_FAIL;
	}
	setenv("RBTRACE_SOFTNIC_ACTIVE", "1", 1);
	setenv("RBTRACE_SOFTNIC_SAY", sn.say, 1);
	nargv[k++] = "rbtrace";
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], "--softnic"))
			nargv[k++] = argv[i];
	nargv[k] = NULL;
	execv(exe, nargv);
	rbt_cli_error("replay", "--softnic: cannot run %s: %s", exe, strerror(errno));
	free(nargv);
	return RBT_EXIT_FAIL;
}

/* -o names the replay's own trace(s): FILE for one trace, else X.N.rbt for
 * X.rbt (FILE.N otherwise), the rule of replay/ (rp_out_name). */
static void rp_cli_out_name(char *name, size_t len, const char *out, int n, int i)
{
	size_t l = strlen(out);

	if (n == 1)
		snprintf(name, len, "%s", out);
	else if (l > 4 && !strcmp(out + l - 4, ".rbt"))
		snprintf(name, len, "%.*s.%d.rbt", (int)(l - 4), out, i);
	else
		snprintf(name, len, "%s.%d", out, i);
}

/* None of the -o names may be one of the traces being replayed: it would be
 * overwritten while, or before, it is read. */
static int out_overwrites_input(const char *out, char **pos, int n)
{
	for (int i = 0; i < n; i++) {
		char name[PATH_MAX];
		struct stat so, si;
		rp_cli_out_name(name, sizeof(name), out, n, i);
		if (stat(name, &so))
			continue;
		for (int k = 0; k < n; k++)
			if (!stat(pos[k], &si) && S_ISREG(si.st_mode) &&
			    si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
				rbt_cli_usage("replay",
					      "-o %s would overwrite the trace %s being "
					      "replayed",
					      out, pos[k]);
				return 1;
			}
	}
	return 0;
}

/* -o names the file(s) the replay records itself into; with several traces
 * they are derived from it (X.0.rbt ...), which only makes sense for a file
 * name: a directory, or a device such as /dev/full, would have them created
 * beside it. */
static int check_replay_output(const char *out, int n)
{
	struct stat st;

	if (!*out)
		return rbt_cli_usage("replay", "-o: empty path");
	if (!stat(out, &st) && S_ISDIR(st.st_mode))
		return rbt_cli_usage("replay", "-o %s is a directory: give a FILE", out);
	if (n > 1 && !stat(out, &st) && !S_ISREG(st.st_mode))
		return rbt_cli_usage("replay",
				     "-o %s is not a regular file: with %d traces the "
				     "replay writes %d files named after it",
				     out, n, n);
	for (int i = 0; i < n; i++) {
		char name[PATH_MAX];

		rp_cli_out_name(name, sizeof(name), out, n, i);
		if (rbt_cli_check_output("replay", "-o", name))
			return RBT_EXIT_FAIL;
	}
	return RBT_EXIT_OK;
}

/* Where librbtrace-replay.so is: $RBTRACE_REPLAY_MODULE, else beside the
 * executable as bazel-bin lays it out (../replay), in the same directory, or
 * as an install would (../lib/rbtrace). /proc/self/exe is the real file, so a
 * runfiles symlink to rbtrace leads to the module built beside it. */
static int rp_cli_module_path(char *buf, size_t n)
{
	static const char *const rel[] = { "../replay/" RBT_REPLAY_MODULE_SO,
					   RBT_REPLAY_MODULE_SO,
					   "../lib/rbtrace/" RBT_REPLAY_MODULE_SO };
	const char *env = getenv("RBTRACE_REPLAY_MODULE");

	if (env && *env) {
		snprintf(buf, n, "%s", env);
		return 0;
	}
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++)
		if (!rbt_cli_beside_self(rel[i], buf, n))
			return 0;
	return -1;
}

/* Loads the replayer, and with it libibverbs: a missing libibverbs is the one
 * failure a user can expect here, so it is named as such. */
static const struct rbt_replay_module *rp_cli_module(void)
{
	const struct rbt_replay_module *m;
	char path[PATH_MAX + 64];
	const char *err;
	void *h;

	if (rp_cli_module_path(path, sizeof(path))) {
		rbt_cli_error("replay",
			      "the replayer (%s) is not next to rbtrace (../replay); "
			      "set RBTRACE_REPLAY_MODULE",
			      RBT_REPLAY_MODULE_SO);
		return NULL;
	}
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		err = dlerror();
		if (err && strstr(err, "libibverbs"))
			rbt_cli_error(
				"replay",
				"cannot load libibverbs.so.1, which replaying needs "
				"(install rdma-core's libibverbs1, or use --softnic): "
				"%s",
				err);
		else
			rbt_cli_error("replay", "cannot load the replayer: %s",
				      err ? err : path);
		return NULL;
	}
	m = dlsym(h, RBT_REPLAY_MODULE_SYM);
	if (!m || m->abi != RBT_REPLAY_ABI ||
	    m->opts_size != sizeof(struct rbt_replay_opts) ||
	    m->summary_size != sizeof(struct rbt_replay_summary) || !m->run) {
		rbt_cli_error("replay",
			      "%s is not the replayer of this rbtrace (another build?)",
			      path);
		dlclose(h);
		return NULL;
	}
	return m;
}

int rbt_cmd_replay(int argc, char **argv)
{
	const struct rbt_replay_module *mod;
	const char *device = NULL, *timing = NULL, *listen = NULL, *connect = NULL,
		   *out = NULL, *ptmo = NULL, *maxt = NULL, *peers = NULL, *torder = NULL;
	int responder = 0, allow_damaged = 0, json = 0, softnic = 0, rt = 0, n, rc,
	    snmode;
	char *pos[16];
	const struct rbt_cli_opt opts[] = {
		{ "device", 0, &device, NULL },
		{ "timing", 0, &timing, NULL },
		{ "thread-order", 0, &torder, NULL },
		{ "listen", 0, &listen, NULL },
		{ "connect", 0, &connect, NULL },
		{ "peers", 0, &peers, NULL },
		{ "responder", 0, NULL, &responder },
		{ "output", 'o', &out, NULL },
		{ "allow-damaged", 0, NULL, &allow_damaged },
		{ "json", 0, NULL, &json },
		{ "poll-timeout", 0, &ptmo, NULL },
		{ "max-time", 0, &maxt, NULL },
		{ "softnic", 0, NULL, &softnic },
		{ "realtime", 0, NULL, &rt },
		{ 0 },
	};
	struct rbt_replay_opts o = { 0 };
	struct rbt_replay_summary sum;

	if (rbt_cli_softnic_arg("replay", argc, argv, &snmode))
		return RBT_EXIT_USAGE;
	n = rbt_cli_parse("replay", argc, argv, opts, 0, pos, 16);
	rc = rbt_cli_parse_done(n, usage);
	if (rc >= 0)
		return rc;
	if (softnic && !getenv("RBTRACE_SOFTNIC_ACTIVE"))
		return rp_cli_softnic_exec(argc, argv, snmode);
	o.device = device;
	o.listen = listen;
	o.connect = connect;
	o.responder = responder;
	o.out = out;
	o.allow_damaged = allow_damaged;
	o.json = json;
	o.realtime = rt;
	o.scale = 1.0;
	if (!timing || !strcmp(timing, "recorded")) {
		o.timing = RBT_REPLAY_RECORDED;
	} else if (!strcmp(timing, "asap")) {
		o.timing = RBT_REPLAY_ASAP;
	} else if (!strcmp(timing, "deps")) {
		o.timing = RBT_REPLAY_DEPS;
	} else if (!strncmp(timing, "scale:", 6)) {
		char *end;

		o.timing = RBT_REPLAY_SCALE;
		o.scale = strtod(timing + 6, &end);
		if (*end || !(o.scale > 0) || o.scale > 1e6)
			return rbt_cli_usage(
				"replay", "--timing=%s: scale must be a positive number",
				timing);
	} else {
		return rbt_cli_usage(
			"replay", "--timing=%s: expected recorded, asap, scale:X or deps",
			timing);
	}
	if (!torder || !strcmp(torder, "shared"))
		o.thread_order = RBT_REPLAY_ORDER_SHARED;
	else if (!strcmp(torder, "recorded"))
		o.thread_order = RBT_REPLAY_ORDER_RECORDED;
	else
		return rbt_cli_usage("replay",
				     "--thread-order=%s: expected shared or recorded",
				     torder);
	if (ptmo) {
		uint64_t v;

		if (rbt_cli_u64("replay", "poll-timeout", ptmo, &v) < 0)
			return RBT_EXIT_USAGE;
		o.poll_timeout_ms = (int)(v > 3600000 ? 3600000 : v);
	}
	if (maxt) {
		char *end;
		double v = strtod(maxt, &end);

		if (end == maxt || *end || !(v > 0) || v > 1e7)
			return rbt_cli_usage(
				"replay",
				"--max-time %s: expected seconds > 0 (e.g. 1.5)", maxt);
		o.max_time_ms = (uint64_t)(v * 1e3 + 0.5);
		if (!o.max_time_ms)
			o.max_time_ms = 1;
	}
	if (listen && connect)
		return rbt_cli_usage("replay",
				     "--listen and --connect exclude each other");
	if (peers) {
		char *end = NULL;
		long v = strtol(peers, &end, 10);

		if (!listen)
			return rbt_cli_usage("replay", "--peers needs --listen PORT");
		if (end == peers || *end || v < 1 || v > 7)
			return rbt_cli_usage(
				"replay", "--peers %s: expected 1..7 replayer processes",
				peers);
		if (responder)
			return rbt_cli_usage("replay", "--peers: a responder serves one "
						       "replayer");
		o.peers = (int)v;
	}
	/* Bad ports are command-line errors (exit 2), found before any work. */
	const char *port = listen;
	if (connect) {
		const char *colon = strrchr(connect, ':');
		if (!colon || colon == connect || !colon[1])
			return rbt_cli_usage("replay", "--connect %s: expected HOST:PORT",
					     connect);
		port = colon + 1;
	}
	if (port) {
		char *end = NULL;
		unsigned long v = 0;
		errno = 0;
		if (*port >= '0' && *port <= '9')
			v = strtoul(port, &end, 10);
		if (!v || *end || errno || v > 65535)
			return rbt_cli_usage("replay",
					     "--%s: '%s' is not a port number (1..65535)",
					     listen ? "listen" : "connect", port);
	}
	if (responder) {
		if (n)
			return rbt_cli_usage("replay", "--responder takes no trace");
		if (!listen && !connect)
			return rbt_cli_usage("replay", "--responder needs --listen PORT");
	} else if (n == 0) {
		return rbt_cli_usage("replay", "give at least one trace");
	}
	if (out && out_overwrites_input(out, pos, n))
		return RBT_EXIT_USAGE;
	/* -o and the traces are checked before any work: a replay that ran
	 * for minutes and then could not say where its recording went, or a
	 * trace that could not be read, should cost nothing. */
	if (out && (rc = check_replay_output(out, n)) != RBT_EXIT_OK)
		return rc;
	if ((rc = rbt_cli_check_traces("replay", pos, n, 1)) != RBT_EXIT_OK)
		return rc;
	if (!(mod = rp_cli_module()))
		return RBT_EXIT_FAIL;
	rc = mod->run((const char *const *)pos, n, &o, &sum);
	if (rc < 0)
		return RBT_EXIT_FAIL;
	rbt_cli_softnic_said();
	if (responder)
		return RBT_EXIT_OK;
	/* interrupted: the report of what ran was printed; the shell's code */
	if (sum.stopped == RBT_REPLAY_STOP_SIGNAL)
		return 128 + sum.stop_signal;
	return sum.divergences ? RBT_EXIT_FAIL : RBT_EXIT_OK;
}
