/* rbt_cli.h - what the `rbtrace` subcommands share: the command table entry,
 * one prototype per subcommand, and the helpers for options and errors.
 *
 * Adding a subcommand: write cmd_<name>.c defining int rbt_cmd_<name>(int argc,
 * char **argv) (argv[0] is the subcommand's name), declare it below, add one line
 * to the table in main.c and its deps to cli/BUILD.bazel. Subcommands return
 * the process exit code; they never call exit() themselves except through
 * rbt_cli_die().
 */
#ifndef RBT_CLI_H
#define RBT_CLI_H

#include <stddef.h>
#include <stdint.h>

struct rbt_cmd {
	const char *name;
	const char *summary; /* one line for `rbtrace --help` */
	int (*fn)(int argc, char **argv);
};

/* ---- subcommands (one file each: cmd_<name>.c) ---- */
int rbt_cmd_record(int argc, char **argv);
int rbt_cmd_info(int argc, char **argv);
int rbt_cmd_dump(int argc, char **argv);
int rbt_cmd_replay(int argc, char **argv);
int rbt_cmd_diff(int argc, char **argv);
int rbt_cmd_report(int argc, char **argv);
int rbt_cmd_export(int argc, char **argv);
int rbt_cmd_softnic(int argc, char **argv);
int rbt_cmd_snapshot(int argc, char **argv);

/* ---- exit codes ---- */
enum {
	RBT_EXIT_OK = 0,
	RBT_EXIT_FAIL = 1,  /* bad input, damaged trace, failed run */
	RBT_EXIT_USAGE = 2, /* bad command line */
};

/* ---- errors: one line on stderr, "rbtrace <cmd>: <message>" ---- */
__attribute__((format(printf, 2, 3))) void rbt_cli_error(const char *cmd, const char *fmt,
							 ...);
/* Prints the error and exits with code. */
__attribute__((noreturn, format(printf, 3, 4))) void
rbt_cli_die(int code, const char *cmd, const char *fmt, ...);
/* A bad command line: prints "rbtrace <cmd>: <message> (see rbtrace <cmd> --help)"
 * and returns RBT_EXIT_USAGE, so `return rbt_cli_usage(...)` ends a subcommand. */
__attribute__((format(printf, 2, 3))) int rbt_cli_usage(const char *cmd, const char *fmt,
							...);

/* ---- options ----
 * One table per subcommand:
 *	const char *out = NULL; int json = 0;
 *	const struct rbt_cli_opt opts[] = {
 *		{ "json", 0, NULL, &json },	// --json
 *		{ "output", 'o', &out, NULL },	// --output=F, --output F, -o F
 *		{ 0 } };
 * Options may appear before, between or after positionals; "--" ends them.
 * With RBT_CLI_STOP_AT_POSITIONAL the first positional ends them too (for
 * `rbtrace record ./app -x`: -x belongs to the app). Repeating a value option
 * keeps the last value.
 */
struct rbt_cli_opt {
	const char *name; /* long name, without "--" */
	char short_name;  /* 0: none */
	const char **arg; /* takes a value, stored here */
	int *flag;	  /* takes no value; set to 1 (counted up when repeated) */
};

#define RBT_CLI_STOP_AT_POSITIONAL 1
#define RBT_CLI_HELP		   (-1) /* -h or --help was given */
#define RBT_CLI_BAD		   (-2) /* an error was printed */

/* Returns the number of positionals stored in pos[] (at most max_pos, more is an
 * error), RBT_CLI_HELP or RBT_CLI_BAD. */
int rbt_cli_parse(const char *cmd, int argc, char **argv, const struct rbt_cli_opt *opts,
		  int flags, char **pos, int max_pos);

/* The standard handling of rbt_cli_parse's result: prints usage to stdout and
 * returns 0 for HELP; returns 2 for BAD; returns -1 (go on) otherwise. */
int rbt_cli_parse_done(int parsed, const char *usage);

/* The start of a command that reads traces: parses argv (opts, at most max
 * traces into pos, their number into *n), answers --help and bad options, refuses
 * no trace ("no trace given"; with max 1, not exactly one: "expects one trace
 * file") and, when jobs is not NULL, a bad --jobs (*jobs into *threads). Returns
 * -1 to go on, else the exit code. */
int rbt_cli_parse_traces(const char *cmd, int argc, char **argv,
			 const struct rbt_cli_opt *opts, const char *usage, char **pos,
			 int max, const char *const *jobs, unsigned *threads, int *n);

/* Numbers in decimal or 0x hex; print "rbtrace <cmd>: --<opt>: '<s>' is not a
 * number" and return -1 when s is not one. */
int rbt_cli_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);

/* The index of s in names (NULL-terminated); else prints "rbtrace <cmd>:
 * --<opt>: '<s>' is not A, B or C" (names in their order) and returns -1. */
int rbt_cli_choice(const char *cmd, const char *opt, const char *s,
		   const char *const *names);

/* Prints s to stdout with control characters as \xNN: strings from a trace
 * (command lines, host and thread names, module paths) must not break a line
 * of output nor send escape sequences to the terminal. NULL prints nothing. */
void rbt_cli_put_text(const char *s);

/* ---- zooming in (cli_filter.c): --from/--to/--around/--qp/--pid/--thread ----
 * Put RBT_CLI_FILTER_OPTS(args) in a command's option table and RBT_CLI_FILTER_HELP
 * in its usage; rbt_cli_filter_build() turns the values into the analyzer's filter
 * (a finding's time, finding:N, costs one unfiltered pass over the traces).
 * Returns RBT_EXIT_OK, or the exit code after one line naming the option. */
struct rbt_analyzer_filter;
struct rbt_cli_filter_args {
	const char *from, *to, *around, *qp, *pid, *thread;
};
/* clang-format off */
#define RBT_CLI_FILTER_OPTS(a)                                                  \
	{ "from", 0, &(a).from, NULL }, { "to", 0, &(a).to, NULL },             \
	{ "around", 0, &(a).around, NULL }, { "qp", 0, &(a).qp, NULL },         \
	{ "pid", 0, &(a).pid, NULL }, { "thread", 0, &(a).thread, NULL }
#define RBT_CLI_FILTER_HELP                                                          \
	"Zooming in (docs/report.md, \"Zooming in\"): only the WRs posted inside the\n"    \
	"window, on those QPs, by that process and thread, are counted; the resources\n"  \
	"always are. T: milliseconds since the start of the (earliest) trace, or with a\n"\
	"unit (1500ms, 2.5s, 300us), or finding:N (the time of the N-th finding of the\n"  \
	"unfiltered report, from 1) or finding:CODE (the first one with that code)\n"      \
	"  --from=T    the window starts at T\n"                                          \
	"  --to=T      the window ends just before T\n"                                   \
	"  --around=T[,W]  the window [T - W, T + W) (W: 100 ms when not given)\n"        \
	"  --qp=N[,N..]  these QP numbers (decimal or 0x hex)\n"                          \
	"  --pid=N     the trace of this process\n"                                       \
	"  --thread=TID  WRs posted and polls made by this thread\n"
/* clang-format on */
/* How long a run goes before its progress line shows: RBTRACE_PROGRESS_DELAY_MS
 * (for tests), else 0 (the analyzer's 1 s). */
uint32_t rbt_cli_progress_delay_ms(void);
int rbt_cli_filter_build(const char *cmd, const struct rbt_cli_filter_args *a,
			 char *const *paths, int n, struct rbt_analyzer_filter *f);
/* After the run: one warning line per --qp that no trace has. */
struct rbt_analyzer;
void rbt_cli_filter_warn(const char *cmd, const struct rbt_analyzer *an,
			 const struct rbt_analyzer_filter *f);

/* ---- traces ----
 * Opens a trace for reading; on failure prints "rbtrace <cmd>: <path>: <why>"
 * and returns NULL (exit with RBT_EXIT_FAIL then). */
struct rbt_reader;
struct rbt_reader *rbt_cli_open_trace(const char *cmd, const char *path);
/* The same, decoding on threads (rbt_reader_opts.threads). */
struct rbt_reader *rbt_cli_open_trace_j(const char *cmd, const char *path,
					unsigned threads);

/* The value of -j N / --jobs=N (NULL: not given): the threads that decode the
 * traces, 1 to 1024; by default every online CPU. Prints a usage error and
 * returns -1 when s is not such a number. */
int rbt_cli_jobs(const char *cmd, const char *s, unsigned *out);
/* The line of --help that documents it. */
#define RBT_CLI_JOBS_HELP                                                              \
	"  -j, --jobs=N  decode the traces on N threads (default: every online CPU;\n" \
	"              -j 1: on one); the output is the same whatever N\n"

/* After rbt_reader_next() returned 0 (or err < 0): when the trace was damaged,
 * truncated or not finished, prints one line saying so with the byte offset,
 * the events salvaged and the events lost, and returns RBT_EXIT_FAIL; otherwise
 * prints nothing and returns RBT_EXIT_OK. */
int rbt_cli_trace_verdict(const char *cmd, const char *path, const struct rbt_reader *r,
			  int err);

/* Where a command will write (what: "--output", "-o" or an environment
 * variable's name): a FILE needs an existing, writable directory; an existing
 * DIR (or DIR/) must be writable; devices such as /dev/null are fine. Prints
 * "rbtrace <cmd>: <what> <out>: <why>" and returns -1 when it is not usable,
 * so that a bad path is refused before any work rather than after it. */
int rbt_cli_check_output(const char *cmd, const char *what, const char *out);

/* Opens each trace once, before any work, and says why one cannot be read as
 * info and dump do ("not a regular file" for a FIFO or a device). With
 * distinct, a file named twice is a usage error and two copies of one
 * recording (same host, pid and start time) an error: the commands that join
 * traces (replay) would pair every QP with itself. Returns RBT_EXIT_OK, or the
 * exit code after one line on stderr. */
int rbt_cli_check_traces(const char *cmd, char *const *paths, int n, int distinct);

/* ---- rbtrace's own parts ----
 * Found relative to the directory of the rbtrace executable (/proc/self/exe), in
 * each layout rbtrace runs from, in this order: bazel-bin (cli/rbtrace beside
 * interpose/ and softnic/), then an installed prefix (PREFIX/bin/rbtrace with
 * PREFIX/lib/rbtrace/..., as packaging/artifacts installs them). A part added to
 * the artifact list gets its pair of paths here. */
#define RBT_CLI_RECORDER_PATHS                                                     \
	(const char *const[])                                                      \
	{                                                                          \
		"../interpose/librbtrace.so", "../lib/rbtrace/librbtrace.so", NULL \
	}
#define RBT_CLI_SOFTNIC_DIRS                                 \
	(const char *const[])                                \
	{                                                    \
		"../softnic", "../lib/rbtrace/softnic", NULL \
	}
/* Sets out to <dir of rbtrace>/<rel> for the first rel of the NULL-ended list
 * where that path exists (with file: where <path>/<file> is readable) and
 * returns 0; -1 when none does. */
int rbt_cli_find_part(const char *const *rels, const char *file, char *out, size_t len);

/* ---- softnic ----
 * Which front end of softnic runs a program: the provider under the
 * system's libibverbs (rdma-core with private ABI 34, v36..v56) wherever one
 * is installed, else the drop-in libibverbs.so.1. `--softnic=provider|dropin`
 * (or RBTRACE_SOFTNIC_MODE) chooses. */
enum { RBT_SOFTNIC_AUTO, RBT_SOFTNIC_PROVIDER, RBT_SOFTNIC_DROPIN };

struct rbt_softnic_setup {
	int mode;	     /* RBT_SOFTNIC_PROVIDER or RBT_SOFTNIC_DROPIN */
	char dir[4096];	     /* the drop-in's directory (has libibverbs.so.1) */
	char preload[4200];  /* provider mode: libsoftnic-preload.so */
	char provider[4200]; /* provider mode: .../libsoftnic (RDMAV_DRIVERS) */
	char say[8400];	     /* the line that says which, for rbt_cli_softnic_say */
};

/* "--softnic=MODE" anywhere before argv[end] becomes "--softnic" (a flag
 * for the option table) and *mode says which; other words are left alone.
 * Returns 0, or RBT_EXIT_USAGE after one line for an unknown MODE. */
int rbt_cli_softnic_arg(const char *cmd, int end, char **argv, int *mode);

/* Finds softnic and the system's libibverbs and decides the mode (mode AUTO:
 * RBTRACE_SOFTNIC_MODE, else provider where it can run). Returns 0, or
 * RBT_EXIT_FAIL after one line (softnic not built, provider asked for where
 * it cannot run). */
int rbt_cli_softnic_setup(const char *cmd, int mode, struct rbt_softnic_setup *s);
/* The one line on stderr that says which mode runs: printed once the command's
 * own checks passed, so that a refused command line stays one line. _said()
 * prints the line a parent left in RBTRACE_SOFTNIC_SAY (replay re-executes). */
void rbt_cli_softnic_say(const struct rbt_softnic_setup *s);
void rbt_cli_softnic_said(void);

/* Sets this process's environment so that what it execs runs on softnic:
 * LD_LIBRARY_PATH for the drop-in, and LD_PRELOAD for its fake sysfs
 * (libsoftnic-sysfs.so, appended, when present); for the provider LD_PRELOAD (appended:
 * a recorder preloaded before it sees the channel calls first),
 * RDMAV_DRIVERS, the drop-in's directory off LD_LIBRARY_PATH and softnic's
 * librdmacm (cm/) on it. Returns 0 or -1 with errno. */
int rbt_cli_softnic_apply(const struct rbt_softnic_setup *s);

/* dirname(/proc/self/exe)/rel into out when that exists: the real executable,
 * so a symlink to rbtrace (bazel's runfiles) still finds what was built beside
 * it. 0, or -1 when it is not there. */
int rbt_cli_beside_self(const char *rel, char *out, size_t len);

/* An output file of report / export: a regular file (new, existing, or the target
 * of a symbolic link) is written to a temporary file beside it and renamed over it
 * on success; anything else (/dev/null, a FIFO, a terminal) is written in place.
 * open: 0 or -errno; close(ok): 0, or the first write error (-errno). */
struct rbt_cli_out {
	FILE *f;
	char *path;	    /* a symbolic link's target, else NULL */
	char *tmp;	    /* NULL when written in place */
	int unlink_on_fail; /* a regular file written in place */
};
int rbt_cli_out_open(const char *path, struct rbt_cli_out *o);
int rbt_cli_out_close(struct rbt_cli_out *o, const char *path, int ok);

/* ---- one analysis (cli_analyze.c: report, export) ---- */
/* Before any work: --output not empty, each trace there, none given twice, none
 * the output; *total is their size in bytes. RBT_EXIT_OK or the exit code after
 * one line on stderr. */
int rbt_cli_inputs(const char *cmd, char *const *pos, int n, const char *out_path,
		   uint64_t *total);
/* *out: stdout, or the output file opened through ro. RBT_EXIT_OK or
 * RBT_EXIT_FAIL after one line. */
int rbt_cli_out_begin(const char *cmd, const char *out_path, struct rbt_cli_out *ro,
		      FILE **out);
/* Creates *an (the caller destroys it, also on error), reads the n traces, finishes
 * and warns about ao->filter's --qp that no trace has. 0 or -errno; err (errlen
 * bytes) names what could not be read, also when 0 is returned for a trace read in
 * part. */
struct rbt_analyzer_opts;
int rbt_cli_analyze(const char *cmd, const struct rbt_analyzer_opts *ao, char *const *pos,
		    int n, struct rbt_analyzer **an, char *err, size_t errlen);

#endif
