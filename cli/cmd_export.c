/* cmd_export.c - `rbtrace export [--format=csv|ndjson] [--resources] [-o OUT]
 * TRACE...`: one row per completed work request (or per resource) for the engines
 * users already run (DuckDB, Spark, pandas). The rows are the analyzer's
 * (rbt_analyzer.h); this file only parses the command line.
 *
 * Like report: never leaves a half-written output file behind on a failure it
 * detects, never destroys an existing file on a failed run, never writes over one
 * of its inputs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analyzer/rbt_analyzer.h"
#include "cli/rbt_cli.h"

static const char usage[] =
	"usage: rbtrace export [--format=csv|ndjson] [--resources] [-o OUT] [-q]\n"
	"                      [--from=T] [--to=T] [--around=T[,W]] [--qp=N[,N..]]\n"
	"                      [--pid=N] [--thread=TID] TRACE...\n"
	"\n"
	"Writes one row per completed work request of the traces (send WRs and\n"
	"receives: trace, process, thread, QP, opcode, size, when posted and polled,\n"
	"the post / NIC / poll phases or their bounds, status), or with --resources\n"
	"one row per resource (context, PD, MR, CQ, SRQ, QP, ...: lifetime, QP number,\n"
	"state, counters), for DuckDB, Spark or pandas. The phases are the numbers\n"
	"`rbtrace report` computes its percentiles from. Columns: docs/export.md.\n"
	"\n"
	"  --format=F   csv (default; a header line, empty = null) or ndjson (one JSON\n"
	"               object a line, null where a column does not apply)\n"
	"  --resources  rows of resources instead of work requests\n"
	"  -o, --output=OUT  write there instead of stdout (replaced only when the\n"
	"               export is complete; never one of the TRACEs)\n"
	"  -q, --quiet  no progress line on a terminal's stderr\n"
	"\n" RBT_CLI_FILTER_HELP
	"With --resources, --pid keeps that trace's rows and --qp those QPs' rows.\n"
	"\n"
	"examples:\n"
	"  rbtrace export -o wrs.csv client.rbt server.rbt\n"
	"  duckdb -c \"select qp_num, quantile_disc(e2e_ns, 0.99) from 'wrs.csv' "
	"group by 1\"\n"
	"  rbtrace export --format=ndjson --resources client.rbt\n"
	"  rbtrace export --from=1000 --to=1500 --qp=0x11 -o zoom.csv client.rbt\n";

int rbt_cmd_export(int argc, char **argv)
{
	const char *cmd = "export";
	const char *format = "csv", *out_path = NULL;
	int resources = 0, quiet = 0;
	struct rbt_cli_filter_args fa = { 0 };
	char *pos[256];
	const struct rbt_cli_opt opts[] = {
		{ "format", 0, &format, NULL },
		{ "resources", 0, NULL, &resources },
		{ "output", 'o', &out_path, NULL },
		{ "quiet", 'q', NULL, &quiet },
		RBT_CLI_FILTER_OPTS(fa),
		{ 0 },
	};
	int n = rbt_cli_parse(cmd, argc, argv, opts, 0, pos, 256);
	int done = rbt_cli_parse_done(n, usage);
	if (done >= 0)
		return done;
	if (n == 0)
		return rbt_cli_usage(cmd, "no trace given");
	int ndjson;
	if (!strcmp(format, "csv"))
		ndjson = 0;
	else if (!strcmp(format, "ndjson"))
		ndjson = 1;
	else
		return rbt_cli_usage(cmd, "--format: '%s' is not csv or ndjson", format);
	if (out_path && !*out_path)
		return rbt_cli_usage(cmd, "--output: empty path");
	struct stat ost, in[256];
	int out_exists = out_path && stat(out_path, &ost) == 0;
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		if (stat(pos[i], &in[i]) != 0) {
			rbt_cli_error(cmd, "%s: %s", pos[i], strerror(errno));
			return RBT_EXIT_FAIL;
		}
		total += (uint64_t)in[i].st_size;
		for (int j = 0; j < i; j++)
			if (in[j].st_dev == in[i].st_dev && in[j].st_ino == in[i].st_ino)
				return rbt_cli_usage(cmd,
						     "%s is given twice (also as %s)",
						     pos[i], pos[j]);
		if (out_exists && S_ISREG(in[i].st_mode) && in[i].st_dev == ost.st_dev &&
		    in[i].st_ino == ost.st_ino)
			return rbt_cli_usage(cmd,
					     "--output %s is the trace %s: it would be "
					     "overwritten",
					     out_path, pos[i]);
	}
	struct rbt_analyzer_filter filt;
	int fret = rbt_cli_filter_build(cmd, &fa, pos, n, &filt);
	if (fret != RBT_EXIT_OK)
		return fret;
	FILE *out = stdout;
	struct rbt_cli_out ro = { 0 };
	if (out_path) {
		int e = rbt_cli_out_open(out_path, &ro);
		if (e) {
			rbt_cli_error(cmd, "%s: %s", out_path, strerror(-e));
			return RBT_EXIT_FAIL;
		}
		out = ro.f;
	}
	struct rbt_analyzer_opts ao = { 0 };
	ao.export_ndjson = ndjson;
	ao.filter = &filt;
	ao.progress = isatty(2) && !quiet;
	ao.progress_bytes = total;
	ao.progress_name = "rbtrace export";
	ao.progress_delay_ms = rbt_cli_progress_delay_ms();
	if (!resources)
		ao.export_wrs = out;
	struct rbt_analyzer *an = NULL;
	int ret = rbt_analyzer_create(&ao, &an);
	char err[512] = "";
	if (ret == 0)
		ret = rbt_analyzer_run_files(an, (const char *const *)pos, n, err,
					     sizeof(err));
	if (ret == 0)
		ret = rbt_analyzer_finish(an);
	if (ret == 0)
		rbt_cli_filter_warn(cmd, an, &filt);
	if (ret == 0 && resources)
		ret = rbt_analyzer_write_resources(an, out);
	if (ret == 0 && err[0])
		rbt_cli_error(cmd, "warning: %s (the export covers what could be read)",
			      err);
	rbt_analyzer_destroy(an);
	if (out != stdout) {
		int e = rbt_cli_out_close(&ro, out_path, ret == 0);
		if (ret == 0)
			ret = e;
	}
	if (ret != 0) {
		if (err[0])
			rbt_cli_error(cmd, "%s", err);
		else
			rbt_cli_error(cmd, "%s: %s", out_path ? out_path : "export",
				      strerror(ret < 0 ? -ret : ret));
		return RBT_EXIT_FAIL;
	}
	return RBT_EXIT_OK;
}
