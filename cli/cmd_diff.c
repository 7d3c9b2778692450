/* cmd_diff.c - `rbtrace diff A B`: compares two traces of one job (typically an
 * original and its replay) per QP and opcode; exits 1 when they diverge.
 *
 * Only parses the command line: the comparison is rbt_analyzer_diff() in analyzer/,
 * on the model (reading traces needs no RDMA stack).
 */
#include <stdio.h>

#include "cli/rbt_cli.h"
#include "analyzer/rbt_analyzer.h"

static const char usage[] =
	"usage: rbtrace diff [--json] A.rbt B.rbt\n"
	"\n"
	"Compares two traces per QP (paired in creation order) and opcode: WRs posted\n"
	"(count, bytes, sizes), WRs completed (count, bytes, errors) and completions\n"
	"by status. Those that differ are divergences (marked '!'). The phases of\n"
	"`rbtrace report` (post, NIC or its bounds, poll, end to end, a receive's\n"
	"wait; p50 and p99 in ns) are shown side by side, not judged.\n"
	"\n"
	"A trace that is damaged, truncated or was not finished cleanly gets one\n"
	"warning line on stderr; what could be read of it is compared and judged.\n"
	"\n"
	"Exit status: 0 when the traces agree, 1 when they diverge or cannot be read.\n"
	"\n"
	"example (client.rbt and server.rbt: the two ends of a ping-pong):\n"
	"  rbtrace replay --softnic -o replay.rbt client.rbt server.rbt &&\n"
	"      rbtrace diff client.rbt replay.0.rbt\n";

int rbt_cmd_diff(int argc, char **argv)
{
	int json = 0, n, rc;
	char *pos[2];
	const struct rbt_cli_opt opts[] = {
		{ "json", 0, NULL, &json },
		{ 0 },
	};
	struct rbt_analyzer_diff_opts o = { .json = json };

	n = rbt_cli_parse("diff", argc, argv, opts, 0, pos, 2);
	rc = rbt_cli_parse_done(n, usage);
	if (rc >= 0)
		return rc;
	if (n != 2)
		return rbt_cli_usage("diff", "give two traces");
	o.json = json;
	/* unreadable traces get the words info and dump use for them */
	if ((rc = rbt_cli_check_traces("diff", pos, 2, 0)) != RBT_EXIT_OK)
		return rc;
	rc = rbt_analyzer_diff(pos[0], pos[1], &o);
	return rc == 0 ? RBT_EXIT_OK : RBT_EXIT_FAIL;
}
