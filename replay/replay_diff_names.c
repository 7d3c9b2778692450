/* replay_diff_names.c - a bridge for `rbtrace diff` while replay_diff.c still
 * lives in replay/: that file names completion statuses with libibverbs'
 * ibv_wc_status_str(), and diff must run where no libibverbs is installed.
 * BUILD.bazel compiles replay_diff.c with -Dibv_wc_status_str=<this function>,
 * which names them from trace_format's own table instead.
 *
 * Owns that one name lookup. Must never call into libibverbs; it goes away
 * with replay_diff.c when diff moves to the analyzer (issue 11).
 */
#include <infiniband/verbs.h>

#include "trace_format/rbt_format.h"

const char *rbt_replay_diff_wc_status(enum ibv_wc_status s);

const char *rbt_replay_diff_wc_status(enum ibv_wc_status s)
{
	const char *n = rbt_verbs_name(RBT_NAMES_WC_STATUS, (uint64_t)s);

	return n ? n : "unknown status";
}
