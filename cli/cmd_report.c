/* cmd_report.c - `rbtrace report [--format=text|json|perfetto|perfetto-json|html] [-o OUT] TRACE...`:
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
	"usage: rbtrace report [--format=text|json|perfetto|perfetto-json|html] [-o "
	"OUT]\n"
	"                      [-q] [-j N] [--from=T] [--to=T] [--around=T[,W]]\n"
	"                      [--qp=N[,N..]] [--pid=N] [--thread=TID]\n"
	"                      [--perfetto-max-wrs=N] [--perfetto-detail=FROM_MS:TO_MS]\n"
	"                      [--perfetto-bin=US] TRACE...\n"
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
	"  --format=F  text (default), json (schema in docs/report.md), perfetto\n"
	"              (Perfetto's protobuf trace format, for ui.perfetto.dev),\n"
	"              perfetto-json (Chrome trace-event JSON, far larger), html (one\n"
	"              self-contained page: per QP its WR rate, outstanding WRs, CQ\n"
	"              occupancy against the CQ's depth and latency over time, the\n"
	"              round-trip split, the findings linked to their time in the "
	"plots)\n"
	"  --perfetto-max-wrs=N  above N WRs (default 1000000) the perfetto timeline\n"
	"              shows WRs one by one only in the detail window (or the first N),\n"
	"              the others as per-QP slices per time bin\n"
	"  --perfetto-detail=FROM_MS:TO_MS  the detail window, ms since the earliest\n"
	"              trace's start\n"
	"  --perfetto-bin=US  the width of those bins and of the WR rate (default 1000)\n"
	"  -o, --output=OUT  write there instead of stdout (replaced only when the\n"
	"              report is complete; never one of the TRACEs)\n"
	"  -q, --quiet no progress line (one is drawn on a terminal's stderr when the\n"
	"              report takes more than a second)\n" RBT_CLI_JOBS_HELP
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
	"  rbtrace report --format=perfetto -o client.pftrace client.rbt   # open in "
	"ui.perfetto.dev\n"
	"  rbtrace report --format=html -o report.html client.rbt server.rbt\n"
	"  rbtrace report --from=2s --to=2.5s --qp=0x11 client.rbt   # that half second\n"
	"  rbtrace report --around=finding:1,20ms client.rbt server.rbt\n"
	"  rbtrace report --pid=4242 --thread=4250 --format=json client.rbt server.rbt\n";

int rbt_cmd_report(int argc, char **argv)
{
	const char *cmd = "report";
	const char *format = "text", *out_path = NULL, *jobs = NULL;
	const char *max_wrs = NULL, *detail = NULL, *bin = NULL;
	unsigned threads;
	int quiet = 0;
	struct rbt_cli_filter_args fa = { 0 };
	char *pos[256];
	const struct rbt_cli_opt opts[] = {
		{ "format", 0, &format, NULL },
		{ "output", 'o', &out_path, NULL },
		{ "jobs", 'j', &jobs, NULL },
		{ "perfetto-max-wrs", 0, &max_wrs, NULL },
		{ "perfetto-detail", 0, &detail, NULL },
		{ "perfetto-bin", 0, &bin, NULL },
		{ "quiet", 'q', NULL, &quiet },
		RBT_CLI_FILTER_OPTS(fa),
		{ 0 },
	};
	int n;
	int done = rbt_cli_parse_traces(cmd, argc, argv, opts, usage, pos, 256, &jobs,
					&threads, &n);
	if (done >= 0)
		return done;
	enum { F_TEXT, F_JSON, F_PERFETTO, F_PERFETTO_JSON, F_HTML };
	static const char *const formats[] = { "text",		"json", "perfetto",
					       "perfetto-json", "html", NULL };
	int fmt = rbt_cli_choice(cmd, "format", format, formats);
	if (fmt < 0)
		return RBT_EXIT_USAGE;
	struct rbt_analyzer_opts ao = { 0 };
	if (max_wrs &&
	    rbt_cli_u64(cmd, "perfetto-max-wrs", max_wrs, &ao.perfetto_max_wrs))
		return RBT_EXIT_USAGE;
	if (max_wrs && !ao.perfetto_max_wrs)
		return rbt_cli_usage(cmd, "--perfetto-max-wrs: must be at least 1");
	if (bin && rbt_cli_u64(cmd, "perfetto-bin", bin, &ao.perfetto_bin_us))
		return RBT_EXIT_USAGE;
	if (bin && (!ao.perfetto_bin_us || ao.perfetto_bin_us > 3600000000ull))
		return rbt_cli_usage(cmd, "--perfetto-bin: '%s' is not 1 us to 1 hour",
				     bin);
	if (detail) {
		double a, b;
		char tail;
		if (sscanf(detail, "%lf:%lf%c", &a, &b, &tail) != 2 || !(a >= 0) ||
		    !(b > a) || b > 1e12)
			return rbt_cli_usage(
				cmd,
				"--perfetto-detail: '%s' is not FROM_MS:TO_MS "
				"with 0 <= FROM < TO",
				detail);
		ao.perfetto_detail = 1;
		ao.perfetto_detail_from_ms = a;
		ao.perfetto_detail_to_ms = b;
	}
	if ((max_wrs || detail || bin) && fmt != F_PERFETTO)
		return rbt_cli_usage(cmd, "--perfetto-*: only with --format=perfetto");
	uint64_t total;
	int rc = rbt_cli_inputs(cmd, pos, n, out_path, &total);
	if (rc != RBT_EXIT_OK)
		return rc;
	if (fmt == F_PERFETTO && !out_path && isatty(1))
		return rbt_cli_usage(cmd, "--format=perfetto is binary: give -o FILE or "
					  "redirect the output");
	struct rbt_analyzer_filter filt;
	rc = rbt_cli_filter_build(cmd, &fa, pos, n, &filt);
	if (rc != RBT_EXIT_OK)
		return rc;
	FILE *out;
	struct rbt_cli_out ro = { 0 };
	rc = rbt_cli_out_begin(cmd, out_path, &ro, &out);
	if (rc != RBT_EXIT_OK)
		return rc;
	ao.threads = threads;
	if (fmt == F_PERFETTO || fmt == F_PERFETTO_JSON)
		ao.perfetto = out;
	ao.perfetto_json = fmt == F_PERFETTO_JSON;
	ao.series = fmt == F_HTML; /* the HTML page's plots over time */
	ao.filter = &filt;
	/* a progress line only for someone watching a long run */
	ao.progress = isatty(2) && !quiet;
	ao.progress_bytes = total;
	ao.progress_name = "rbtrace report";
	ao.progress_delay_ms = rbt_cli_progress_delay_ms();
	struct rbt_analyzer *an;
	char err[512];
	int ret = rbt_cli_analyze(cmd, &ao, pos, n, &an, err, sizeof(err));
	if (ret == 0) {
		if (fmt == F_TEXT)
			ret = rbt_analyzer_write_text(an, out);
		else if (fmt == F_JSON)
			ret = rbt_analyzer_write_json(an, out);
		else if (fmt == F_HTML)
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
