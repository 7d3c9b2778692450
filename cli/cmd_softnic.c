/* cmd_softnic.c - `rbtrace softnic [options] -- CMD ARGS`: run an unmodified
 * verbs program on softnic (our userspace RDMA device): as a provider under the
 * system's libibverbs (preload and RDMAV_DRIVERS) where rdma-core with private
 * ABI 34 is installed, else with softnic's drop-in libibverbs.so.1 first on
 * LD_LIBRARY_PATH (see rbt_cli_softnic_setup); and `rbtrace softnic --counters`
 * to print the fabric's port and per-QP counters.
 *
 * It only sets the environment and execs: it must never link libibverbs or
 * touch the fabric files except to read counters.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/rbt_cli.h"
#include "softnic/rbt_softnic.h"

static const char cmd[] = "softnic";

#define RBT_SN_MAX_NS	      60000000000ull /* --latency, --jitter: 1 minute */
#define RBT_SN_MAX_NS_PER_KIB 1000000000ull  /* --ns-per-kib: 1 s */

static const char usage[] =
	"usage: rbtrace softnic [options] [--] CMD [ARGS...]\n"
	"       rbtrace softnic --counters\n"
	"\n"
	"Runs CMD on softnic, a userspace RDMA device (softnic0): processes on this\n"
	"host talk through a shared fabric directory, with no RDMA hardware or\n"
	"kernel support. Where the system has rdma-core's libibverbs (private ABI\n"
	"34, v36..v56) softnic runs as its provider, under that very library (a\n"
	"small preload gives it a fake sysfs, a device node and completion\n"
	"channels; no root needed); elsewhere as a drop-in libibverbs.so.1 (with\n"
	"the preload's fake sysfs alone, libsoftnic-sysfs.so, so that tools that\n"
	"read /sys/class/infiniband/softnic0 find it). One line on stderr says\n"
	"which.\n"
	"\n"
	"options:\n"
	"  --fabric DIR      fabric directory (default /dev/shm/softnic-<uid>, or\n"
	"                    /tmp/softnic-<uid> when /dev/shm is not writable or has\n"
	"                    less than 512 MiB free)\n"
	"  --link ib|eth     link layer: InfiniBand (LID) or Ethernet (RoCE v2)\n"
	"  --latency NS      NIC time added to every WR before it completes (<= 60 s)\n"
	"  --ns-per-kib NS   NIC time per KiB of payload (<= 1 s)\n"
	"  --jitter NS       uniform random extra NIC time, 0..NS (<= 60 s)\n"
	"  --counters        print port and per-QP counters of the fabric, exit\n"
	"  --softnic=MODE    provider, dropin or auto (the default; also\n"
	"                    RBTRACE_SOFTNIC_MODE)\n"
	"  --quirks=mlx5     behave like mlx5 where tools must cope: the ibv_wr_*\n"
	"                    pointers of a QP are rewritten on every move to RTS\n"
	"                    and RESET, the clock ticks at 156.25 MHz (also\n"
	"                    SOFTNIC_QUIRKS; none = off)\n"
	"\n"
	"Finds softnic in $RBTRACE_SOFTNIC_DIR, else next to rbtrace: ../softnic (a\n"
	"build) or ../lib/rbtrace/softnic (installed).\n"
	"\n"
	"examples:\n"
	"  rbtrace softnic -- ibv_rc_pingpong &\n"
	"  sleep 1; rbtrace softnic -- ibv_rc_pingpong localhost   # server listens "
	"first\n"
	"  rbtrace softnic --softnic=dropin -- ibv_devinfo -v\n"
	"  rbtrace softnic --link eth -- ib_send_lat -x 0 &\n"
	"  sleep 1; rbtrace softnic --link eth -- ib_send_lat -x 0 localhost\n"
	"  rbtrace softnic --counters\n";

/* A number option put in the environment as given: -1 after one line when it is
 * not a number or above max (too_big says why, with the value); 0 when absent. */
__attribute__((format(printf, 5, 0))) static int
sn_env_u64(const char *cmd, const char *opt, const char *val, uint64_t max,
	   const char *too_big, const char *env)
{
	uint64_t v;
	char why[128];
	if (!val)
		return 0;
	if (rbt_cli_u64(cmd, opt, val, &v))
		return -1;
	if (v > max) {
		snprintf(why, sizeof(why), too_big, val);
		rbt_cli_usage(cmd, "--%s: %s", opt, why);
		return -1;
	}
	setenv(env, val, 1);
	return 0;
}

int rbt_cmd_softnic(int argc, char **argv)
{
	const char *fabric = NULL, *link = NULL, *lat = NULL, *kib = NULL, *jit = NULL;
	const char *quirks = NULL;
	int counters = 0, flag = 0, i, split = argc, parsed, done;
	const struct rbt_cli_opt opts[] = {
		{ "fabric", 0, &fabric, NULL },
		{ "link", 0, &link, NULL },
		{ "latency", 0, &lat, NULL },
		{ "ns-per-kib", 0, &kib, NULL },
		{ "jitter", 0, &jit, NULL },
		{ "counters", 0, NULL, &counters },
		{ "softnic", 0, NULL, &flag },
		{ "quirks", 0, &quirks, NULL },
		{ 0 },
	};
	struct rbt_softnic_setup sn;
	char *pos[1];
	int mode;

	/* our options end at "--" or at the first word that is not an option */
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--") || argv[i][0] != '-') {
			split = i;
			break;
		}
		if (!strchr(argv[i], '=') && strcmp(argv[i], "--counters") &&
		    strcmp(argv[i], "--softnic") && strcmp(argv[i], "-h") &&
		    strcmp(argv[i], "--help") && i + 1 < argc)
			i++;
	}
	if (rbt_cli_softnic_arg(cmd, split, argv, &mode))
		return RBT_EXIT_USAGE;
	parsed = rbt_cli_parse(cmd, split, argv, opts, 0, pos, 0);
	done = rbt_cli_parse_done(parsed, usage);
	if (done >= 0)
		return done;
	if (fabric && !*fabric) /* would silently mean the default fabric */
		return rbt_cli_usage(cmd, "--fabric: empty path");
	if (fabric)
		setenv("SOFTNIC_FABRIC", fabric, 1);
	static const char *const quirk_names[] = { "mlx5", "none", NULL };
	static const char *const link_names[] = { "ib", "eth", NULL };
	if (quirks) {
		if (rbt_cli_choice(cmd, "quirks", quirks, quirk_names) < 0)
			return RBT_EXIT_USAGE;
		setenv("SOFTNIC_QUIRKS", quirks, 1);
	}
	if (link) {
		if (rbt_cli_choice(cmd, "link", link, link_names) < 0)
			return RBT_EXIT_USAGE;
		setenv("SOFTNIC_LINK", link, 1);
	}
	/* Beyond a minute a completion never comes in practice, and huge values
	 * overflow the model's arithmetic. */
	if (sn_env_u64(cmd, "latency", lat, RBT_SN_MAX_NS, "%s ns is more than a minute",
		       "SOFTNIC_LATENCY_NS") ||
	    sn_env_u64(cmd, "ns-per-kib", kib, RBT_SN_MAX_NS_PER_KIB,
		       "%s is more than a second", "SOFTNIC_NS_PER_KIB") ||
	    sn_env_u64(cmd, "jitter", jit, RBT_SN_MAX_NS, "%s ns is more than a minute",
		       "SOFTNIC_JITTER_NS"))
		return RBT_EXIT_USAGE;
	if (counters) {
		char fd[PATH_MAX];
		int ret;

		rbt_softnic_fabric_dir(fd, sizeof(fd));
		ret = rbt_softnic_print_counters(stdout, fd);
		if (ret) {
			rbt_cli_error(cmd, "%s: %s", fd,
				      ret == -ENOENT ? "no softnic fabric here yet"
						     : strerror(-ret));
			return RBT_EXIT_FAIL;
		}
		return RBT_EXIT_OK;
	}
	i = split < argc && !strcmp(argv[split], "--") ? split + 1 : split;
	if (i >= argc)
		return rbt_cli_usage(cmd, "no command to run");
	if (rbt_cli_softnic_setup(cmd, mode, &sn))
		return RBT_EXIT_FAIL;
	if (rbt_cli_softnic_apply(&sn)) {
		rbt_cli_error(cmd, "environment: %s", strerror(errno));
		return RBT_EXIT_FAIL;
	}
	rbt_cli_softnic_say(&sn);
	execvp(argv[i], argv + i);
	rbt_cli_error(cmd, "%s: %s", argv[i], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
