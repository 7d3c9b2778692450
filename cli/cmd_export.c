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
	"usage: rbtrace export [--format=csv|ndjson] [--resources] [-o OUT] [-q] [-j N]\n"
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
	"  -q, --quiet  no progress line on a terminal's stderr\n" RBT_CLI_JOBS_HELP
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
	const char *format = "csv", *out_path = NULL, *jobs = NULL;
	unsigned threads;
	int resources = 0, quiet = 0;
	struct rbt_cli_filter_args fa = { 0 };
	char *pos[256];
	const struct rbt_cli_opt opts[] = {
		{ "format", 0, &format, NULL },
		{ "jobs", 'j', &jobs, NULL },
		{ "resources", 0, NULL, &resources },
		{ "output", 'o', &out_path, NULL },
		{ "quiet", 'q', NULL, &quiet },
		RBT_CLI_FILTER_OPTS(fa),
		{ 0 },
	};
	int n;
	int done = rbt_cli_parse_traces(cmd, argc, argv, opts, usage, pos, 256, &jobs,
					&threads, &n);
	if (done >= 0)
		return done;
	static const char *const formats[] = { "csv", "ndjson", NULL };
	int ndjson = rbt_cli_choice(cmd, "format", format, formats);
	if (ndjson < 0)
		return RBT_EXIT_USAGE;
	uint64_t total;
	int rc = rbt_cli_inputs(cmd, pos, n, out_path, &total);
	if (rc != RBT_EXIT_OK)
		return rc;
	struct rbt_analyzer_filter filt;
	rc = rbt_cli_filter_build(cmd, &fa, pos, n, &filt);
	if (rc != RBT_EXIT_OK)
		return rc;
	FILE *out;
	struct rbt_cli_out ro = { 0 };
	rc = rbt_cli_out_begin(cmd, out_path, &ro, &out);
	if (rc != RBT_EXIT_OK)
		return rc;
	struct rbt_analyzer_opts ao = { .threads = threads };
	ao.export_ndjson = ndjson;
	ao.filter = &filt;
	ao.progress = isatty(2) && !quiet;
	ao.progress_bytes = total;
	ao.progress_name = "rbtrace export";
	ao.progress_delay_ms = rbt_cli_progress_delay_ms();
	if (!resources)
		ao.export_wrs = out;
	struct rbt_analyzer *an;
	char err[512];
	int ret = rbt_cli_analyze(cmd, &ao, pos, n, &an, err, sizeof(err));
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
