/* main.c - the `rbtrace` command: a table of subcommands, each in cmd_<name>.c.
 *
 * Add a subcommand with one line in cmds[] (and its prototype in rbt_cli.h).
 * This file only dispatches: it must never know any subcommand's options.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "build_defs/rbt_version.h"
#include "cli/rbt_cli.h"
#include "trace_format/rbt_format.h"

static const struct rbt_cmd cmds[] = {
	{ "record", "run a program with the recorder, one trace per process",
	  rbt_cmd_record },
	{ "snapshot", "make a flight-recording process write a snapshot now",
	  rbt_cmd_snapshot },
	{ "info", "header, clocks, chunk and event counts, damage of a trace",
	  rbt_cmd_info },
	{ "dump", "every event of a trace, one line each or JSON", rbt_cmd_dump },
	{ "replay", "reissue recorded verbs on a device, report fidelity",
	  rbt_cmd_replay },
	{ "diff", "compare two traces per QP and opcode (original vs replay)",
	  rbt_cmd_diff },
	{ "report", "where the time went (post / NIC / poll), statistics, diagnoses",
	  rbt_cmd_report },
	{ "export", "one CSV / NDJSON row per WR or resource, for DuckDB, Spark, pandas",
	  rbt_cmd_export },
	{ "softnic", "run a program on softnic, the userspace RDMA device; counters",
	  rbt_cmd_softnic },
};

#define NCMDS ((int)(sizeof(cmds) / sizeof(cmds[0])))

static void usage(FILE *f)
{
	fprintf(f, "usage: rbtrace <command> [options] [args]\n"
		   "\n"
		   "Record, replay and explain what RDMA applications do through "
		   "libibverbs.\n"
		   "\n"
		   "commands:\n");
	for (int i = 0; i < NCMDS; i++)
		fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n"
		   "rbtrace help <command>  or  rbtrace <command> --help  shows a "
		   "command's options and an example;\n"
		   "rbtrace --version  the release and the trace format versions.\n");
}

static const struct rbt_cmd *find(const char *name)
{
	for (int i = 0; i < NCMDS; i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

/* Output that never reached its destination (a full disk, /dev/full, a closed
 * pipe with SIGPIPE ignored) must not pass for success. */
static int check_stdout(const char *cmd, int rc)
{
	int err = fflush(stdout) ? errno : 0;
	if (!err && !ferror(stdout))
		return rc;
	/* After an earlier failed write stdio no longer knows its errno. */
	fprintf(stderr, "rbtrace %s: writing standard output failed%s%s\n", cmd,
		err ? ": " : " (disk full or output closed?)", err ? strerror(err) : "");
	return rc ? rc : RBT_EXIT_FAIL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return RBT_EXIT_USAGE;
	}
	const char *name = argv[1];
	if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
		usage(stdout);
		return check_stdout("--help", RBT_EXIT_OK);
	}
	if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
		/* The recorder writes the same release into each trace's tool field. */
		printf("rbtrace %s\n"
		       "trace format %u: writes version %u, reads every trace whose "
		       "minimum reader version is %u or lower\n",
		       RBT_VERSION, RBT_FORMAT_VERSION, RBT_FORMAT_VERSION,
		       RBT_FORMAT_VERSION);
		return check_stdout("--version", RBT_EXIT_OK);
	}
	if (!strcmp(name, "help")) {
		if (argc < 3) {
			usage(stdout);
			return check_stdout("help", RBT_EXIT_OK);
		}
		const struct rbt_cmd *c = find(argv[2]);
		if (!c)
			return rbt_cli_usage(NULL, "no such command '%s'", argv[2]);
		char *hargv[] = { argv[2], "--help", NULL };
		return check_stdout(c->name, c->fn(2, hargv));
	}
	const struct rbt_cmd *c = find(name);
	if (!c) {
		rbt_cli_error(NULL, "no such command '%s' (see rbtrace --help)", name);
		return RBT_EXIT_USAGE;
	}
	return check_stdout(c->name, c->fn(argc - 1, argv + 1));
}
