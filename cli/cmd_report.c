/* cmd_report.c - `rbtrace report [--format=text|json|perfetto|html] [-o OUT] TRACE...`:
 * where each work request's time went (post, NIC, poll), statistics, and the RDMA
 * problems the traces prove. All the work is in analyzer/ (rbt_analyzer.h); this file
 * only parses the command line and picks the output.
 *
 * Never leaves a half-written output file behind on a failure it detects.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analyzer/rbt_analyzer.h"
#include "cli/rbt_cli.h"

static const char usage[] =
	"usage: rbtrace report [--format=text|json|perfetto|html] [-o OUT] TRACE...\n"
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
	"  -o, --output=OUT  write there instead of stdout\n"
	"\n"
	"examples:\n"
	"  rbtrace report app.rbt\n"
	"  rbtrace report client.rbt server.rbt\n"
	"  rbtrace report --format=perfetto -o app.json app.rbt   # open in "
	"ui.perfetto.dev\n"
	"  rbtrace report --format=html -o report.html client.rbt server.rbt\n";

int rbt_cmd_report(int argc, char **argv)
{
	const char *cmd = "report";
	const char *format = "text", *out_path = NULL;
	char *pos[256];
	const struct rbt_cli_opt opts[] = {
		{ "format", 0, &format, NULL },
		{ "output", 'o', &out_path, NULL },
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
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		struct stat st;
		if (stat(pos[i], &st) != 0) {
			rbt_cli_error(cmd, "%s: %s", pos[i], strerror(errno));
			return RBT_EXIT_FAIL;
		}
		total += (uint64_t)st.st_size;
	}
	FILE *out = stdout;
	if (out_path) {
		out = fopen(out_path, "w");
		if (!out) {
			rbt_cli_error(cmd, "%s: %s", out_path, strerror(errno));
			return RBT_EXIT_FAIL;
		}
	}
	struct rbt_analyzer_opts ao = { 0 };
	if (fmt == 2)
		ao.perfetto = out;
	/* a progress line only for someone watching a long run */
	ao.progress = isatty(2) && total > (64u << 20);
	ao.progress_bytes = total;
	struct rbt_analyzer *an = NULL;
	int ret = rbt_analyzer_create(&ao, &an);
	char err[512] = "";
	if (ret == 0)
		ret = rbt_analyzer_run_files(an, (const char *const *)pos, n, err,
					     sizeof(err));
	if (ret == 0)
		ret = rbt_analyzer_finish(an);
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
				rbt_cli_error(cmd, "warning: %s", f[i].title);
	}
	rbt_analyzer_destroy(an);
	if (out != stdout && fclose(out) != 0 && ret == 0)
		ret = -errno;
	if (ret != 0) {
		if (err[0])
			rbt_cli_error(cmd, "%s", err);
		else
			rbt_cli_error(cmd, "%s: %s", out_path ? out_path : "report",
				      strerror(ret < 0 ? -ret : ret));
		if (out_path)
			unlink(out_path);
		return RBT_EXIT_FAIL;
	}
	return RBT_EXIT_OK;
}
