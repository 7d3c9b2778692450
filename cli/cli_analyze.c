/* cli_analyze.c - what report and export share around one analysis: the traces
 * checked before any work (each readable, none given twice, none the output),
 * the output opened (replaced only when complete), and the run itself (create,
 * read every file, finish, warn about a filter that matched nothing).
 *
 * Prints at most one line per problem on stderr and returns an exit code or the
 * analyzer's -errno; it never exits and never writes a report itself.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "analyzer/rbt_analyzer.h"
#include "cli/rbt_cli.h"

int rbt_cli_inputs(const char *cmd, char *const *pos, int n, const char *out_path,
		   uint64_t *total)
{
	struct stat ost, in[256];

	if (out_path && !*out_path)
		return rbt_cli_usage(cmd, "--output: empty path");
	if (n > 256)
		return rbt_cli_usage(cmd, "more than 256 traces");
	int out_exists = out_path && stat(out_path, &ost) == 0;
	*total = 0;
	for (int i = 0; i < n; i++) {
		if (stat(pos[i], &in[i]) != 0) {
			rbt_cli_error(cmd, "%s: %s", pos[i], strerror(errno));
			return RBT_EXIT_FAIL;
		}
		/* Read twice, every WR would count twice. */
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
		*total += (uint64_t)in[i].st_size;
	}
	return RBT_EXIT_OK;
}

int rbt_cli_out_begin(const char *cmd, const char *out_path, struct rbt_cli_out *ro,
		      FILE **out)
{
	*out = stdout;
	if (!out_path)
		return RBT_EXIT_OK;
	int e = rbt_cli_out_open(out_path, ro);
	if (e) {
		rbt_cli_error(cmd, "%s: %s", out_path, strerror(-e));
		return RBT_EXIT_FAIL;
	}
	*out = ro->f;
	return RBT_EXIT_OK;
}

int rbt_cli_analyze(const char *cmd, const struct rbt_analyzer_opts *ao, char *const *pos,
		    int n, struct rbt_analyzer **an, char *err, size_t errlen)
{
	*an = NULL;
	err[0] = 0;
	int ret = rbt_analyzer_create(ao, an);
	if (ret == 0)
		ret = rbt_analyzer_run_files(*an, (const char *const *)pos, n, err,
					     errlen);
	if (ret == 0)
		ret = rbt_analyzer_finish(*an);
	if (ret == 0)
		rbt_cli_filter_warn(cmd, *an, ao->filter);
	return ret;
}
