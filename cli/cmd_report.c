/* cmd_report.c - `rbtrace report [--format=text|json|perfetto|html] [-o OUT] TRACE...`:
 * where each work request's time went (post, NIC, poll), statistics, and the RDMA
 * problems the traces prove. All the work is in analyzer/ (rbt_analyzer.h); this file
 * only parses the command line and picks the output.
 *
 * Never leaves a half-written output file behind on a failure it detects, never
 * destroys an existing file on a failed run (a regular output file is written
 * beside it and renamed into place), and never writes over one of its inputs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analyzer/rbt_analyzer.h"
#include "cli/rbt_cli.h"

static const char usage[] =
	"usage: rbtrace report [--format=text|json|perfetto|html] [-o OUT] [-q]\n"
	"                      [--from=T] [--to=T] [--around=T[,W]] [--qp=N[,N..]]\n"
	"                      [--pid=N] [--thread=TID] TRACE...\n"
	"\n"
	"Attributes every work request's time to its post call, the NIC (post return to\n"
	"completion) and the poll that handed the completion to the application; gives\n"
	"percentiles per process, QP, opcode and size class; and diagnoses QPs in "
	"error,\n"
	"RNR, CQs too small, unbatched or all-signaled posting, missed inlining, MR\n"
	"registration on the data path, destroy order, and (with both ends' traces)\n"
	"MTU / PSN / QP number mismatches. Without NIC timestamps the completion time "
	"is\n"
	"given as a bound, never as a made-up point. Several traces are read together:\n"
	"the ends of a connection are paired by QP number and round trips are split "
	"into\n"
	"local post, NIC and wire, and remote application time.\n"
	"\n"
	"  --format=F  text (default), json (schema in docs/report.md), perfetto "
	"(trace-\n"
	"              event JSON for ui.perfetto.dev), html (one self-contained file)\n"
	"  -o, --output=OUT  write there instead of stdout (replaced only when the\n"
	"              report is complete; never one of the TRACEs)\n"
	"  -q, --quiet no progress line (one is drawn on a terminal's stderr when the\n"
	"              report takes more than a second)\n"
	"\n" RBT_CLI_FILTER_HELP
	"The filter in force is the text report's line \"filter: ...\" and the JSON's\n"
	"\"filter\".\n"
	"\n"
	"Give each trace once. A trace that could not be read whole is reported on\n"
	"what was read, with a warning on stderr; exit code 1 when a trace cannot be\n"
	"read at all or the output cannot be written.\n"
	"\n"
	"examples:\n"
	"  rbtrace report client.rbt\n"
	"  rbtrace report client.rbt server.rbt\n"
	"  rbtrace report --format=perfetto -o client.json client.rbt   # open in "
	"ui.perfetto.dev\n"
	"  rbtrace report --format=html -o report.html client.rbt server.rbt\n"
	"  rbtrace report --from=2s --to=2.5s --qp=0x11 client.rbt   # that half second\n"
	"  rbtrace report --around=finding:1,20ms client.rbt server.rbt\n"
	"  rbtrace report --pid=4242 --thread=4250 --format=json client.rbt server.rbt\n";

int rbt_cmd_report(int argc, char **argv)
{
	const char *cmd = "report";
	const char *format = "text", *out_path = NULL;
	int quiet = 0;
	struct rbt_cli_filter_args fa = { 0 };
	char *pos[256];
	const struct rbt_cli_opt opts[] = {
		{ "format", 0, &format, NULL },
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
	int fmt;
	if (!strcmp(format, "text"))
		fmt = 0;
	else if (!strcmp(format, "json"))
		fmt = 1;
	else if (!strcmp(format, "perfetto"))
		fmt = 2;
	else if (!strcmp(format, "html"))
		fmt = 3;
	else
		return rbt_cli_usage(cmd,
				     "--format: '%s' is not text, json, perfetto or html",
				     format);
	if (out_path && !*out_path)
		return rbt_cli_usage(cmd, "--output: empty path");
	struct stat ost;
	int out_exists = out_path && stat(out_path, &ost) == 0;
	uint64_t total = 0;
	struct stat in[256];
	for (int i = 0; i < n; i++) {
		struct stat st;
		if (stat(pos[i], &st) != 0) {
			rbt_cli_error(cmd, "%s: %s", pos[i], strerror(errno));
			return RBT_EXIT_FAIL;
		}
		/* Read twice, every WR would count twice. */
		for (int j = 0; j < i; j++)
			if (in[j].st_dev == st.st_dev && in[j].st_ino == st.st_ino)
				return rbt_cli_usage(cmd,
						     "%s is given twice (also as %s)",
						     pos[i], pos[j]);
		in[i] = st;
		if (out_exists && S_ISREG(st.st_mode) && st.st_dev == ost.st_dev &&
		    st.st_ino == ost.st_ino)
			return rbt_cli_usage(cmd,
					     "--output %s is the trace %s: it would be "
					     "overwritten",
					     out_path, pos[i]);
		total += (uint64_t)st.st_size;
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
	if (fmt == 2)
		ao.perfetto = out;
	ao.filter = &filt;
	/* a progress line only for someone watching a long run */
	ao.progress = isatty(2) && !quiet;
	ao.progress_bytes = total;
	ao.progress_name = "rbtrace report";
	ao.progress_delay_ms = rbt_cli_progress_delay_ms();
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
	if (ret == 0) {
		if (fmt == 0)
			ret = rbt_analyzer_write_text(an, out);
		else if (fmt == 1)
			ret = rbt_analyzer_write_json(an, out);
		else if (fmt == 3)
			ret = rbt_analyzer_write_html(an, out);
	}
	if (ret == 0 && err[0])
		rbt_cli_error(cmd, "warning: %s (the report covers what could be read)",
			      err);
	if (ret == 0) {
		const struct rbt_finding *f;
		int nf = rbt_analyzer_findings(an, &f);
		for (int i = 0; i < nf; i++)
			if (!strcmp(f[i].code, "trace_incomplete"))
				rbt_cli_error(cmd, "warning: %s: %.*s", f[i].title,
					      (int)strcspn(f[i].evidence, "\n"),
					      f[i].evidence);
	}
	rbt_analyzer_destroy(an);
	if (out != stdout) {
		int e = rbt_cli_out_close(&ro, out_path, ret == 0);
		if (ret == 0)
			ret = e;
	} /* stdout's write errors are main()'s to report */
	if (ret != 0) {
		if (err[0])
			rbt_cli_error(cmd, "%s", err);
		else if (ret == -EIO) /* stdio's "an earlier write failed" */
			rbt_cli_error(cmd,
				      "%s: writing failed (disk full, or a file size "
				      "limit?)",
				      out_path ? out_path : "standard output");
		else
			rbt_cli_error(cmd, "%s: %s", out_path ? out_path : "report",
				      strerror(ret < 0 ? -ret : ret));
		return RBT_EXIT_FAIL;
	}
	return RBT_EXIT_OK;
}
