/* cli_filter.c - the options that zoom into part of a trace, shared by report and
 * export: --from/--to (a time since the start, or a finding's time), --around, --qp,
 * --pid, --thread, parsed into the analyzer's struct rbt_analyzer_filter. What the
 * filter selects is the analyzer's (rbt_analyzer.h, docs/report.md "Zooming in").
 *
 * A bad value is one line naming the option, and exit code 2; nothing is read
 * before the command line is known to be good, except the first pass that finds a
 * finding's time (finding:N), which reads the traces once without a filter.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/rbt_analyzer.h"
#include "trace_format/rbt_format.h"
#include "cli/rbt_cli.h"

#define AROUND_DEFAULT_NS 100e6 /* --around=T: 100 ms on each side */

/* "1500", "1500ms", "2.5s", "300us", "40ns": ns in *ns. */
static int parse_time(const char *cmd, const char *opt, const char *s, double *ns)
{
	static const struct {
		const char *unit;
		double ns;
	} units[] = {
		{ "", 1e6 }, { "ms", 1e6 }, { "s", 1e9 }, { "us", 1e3 }, { "ns", 1 }
	};
	char *end;
	if (!s || *s < '0' || *s > '9' || strpbrk(s, "xXpP"))
		goto bad;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || !isfinite(v))
		goto bad;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(end, units[i].unit)) {
			*ns = v * units[i].ns;
			return 0;
		}
bad:
	rbt_cli_usage(cmd,
		      "--%s: '%s' is not a time (milliseconds since the start, or with "
		      "a unit: 1500ms, 2.5s, 300us; or finding:N)",
		      opt, s ? s : "");
	return -1;
}

static int parse_u32(const char *cmd, const char *opt, const char *s, uint32_t max,
		     uint32_t *out)
{
	uint64_t v;
	if (rbt_cli_u64(cmd, opt, s, &v))
		return -1;
	if (v > max) {
		rbt_cli_usage(cmd, "--%s: %s is out of range (at most %u)", opt, s, max);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int parse_qps(const char *cmd, const char *s, struct rbt_analyzer_filter *f)
{
	char buf[1024];
	if (strlen(s) >= sizeof(buf))
		return rbt_cli_usage(cmd, "--qp: too long"), -1;
	strcpy(buf, s);
	char *save = NULL, *p = buf;
	if (!*p || p[strlen(p) - 1] == ',' || *p == ',' || strstr(p, ",,"))
		return rbt_cli_usage(cmd, "--qp: '%s' is not a list of QP numbers", s),
		       -1;
	for (char *tok; (tok = strtok_r(p, ",", &save)); p = NULL) {
		if (f->n_qps == RBT_ANALYZER_FILTER_QPS)
			return rbt_cli_usage(cmd, "--qp: more than %d QPs",
					     RBT_ANALYZER_FILTER_QPS),
			       -1;
		if (parse_u32(cmd, "qp", tok, 0xffffff, &f->qps[f->n_qps]))
			return -1;
		f->n_qps++;
	}
	return 0;
}

/* "finding:N" (from 1, in the order the unfiltered report lists them) or
 * "finding:CODE" (the first finding with that code). */
static int is_finding(const char *s)
{
	return s && !strncmp(s, "finding:", 8);
}

struct first_pass {
	struct rbt_analyzer *an;
	int ran;
};

static int finding_time(const char *cmd, const char *opt, const char *ref,
			char *const *paths, int n, struct first_pass *fp, double *ns)
{
	if (!fp->ran) {
		fp->ran = 1;
		char err[512] = "";
		int ret = rbt_analyzer_create(NULL, &fp->an);
		if (ret == 0)
			ret = rbt_analyzer_run_files(fp->an, (const char *const *)paths,
						     n, err, sizeof(err));
		if (ret == 0)
			ret = rbt_analyzer_finish(fp->an);
		if (ret) {
			rbt_cli_error(cmd, "%s", err[0] ? err : strerror(-ret));
			rbt_analyzer_destroy(fp->an);
			fp->an = NULL;
		}
	}
	if (!fp->an)
		return RBT_EXIT_FAIL;
	const struct rbt_finding *f;
	int nf = rbt_analyzer_findings(fp->an, &f);
	const char *what = ref + 8;
	int idx = -1;
	if (*what >= '0' && *what <= '9') {
		uint32_t k;
		if (parse_u32(cmd, opt, what, 1u << 30, &k))
			return RBT_EXIT_USAGE;
		if (k < 1 || (int)k > nf)
			return rbt_cli_usage(
				cmd,
				"--%s: %s: the report has %d finding%s (counted "
				"from 1)",
				opt, ref, nf, nf == 1 ? "" : "s");
		idx = (int)k - 1;
	} else {
		for (int i = 0; i < nf && idx < 0; i++)
			if (!strcmp(f[i].code, what))
				idx = i;
		if (idx < 0)
			return rbt_cli_usage(cmd, "--%s: %s: no finding with that code",
					     opt, ref);
	}
	if (f[idx].time_ns == 0)
		return rbt_cli_usage(
			cmd,
			"--%s: %s (%s) is a pattern over the whole trace, with "
			"no moment of its own",
			opt, ref, f[idx].code);
	*ns = rbt_analyzer_finding_timeline_ns(fp->an, &f[idx]);
	return RBT_EXIT_OK;
}

static int when(const char *cmd, const char *opt, const char *s, char *const *paths,
		int n, struct first_pass *fp, double *ns)
{
	if (is_finding(s))
		return finding_time(cmd, opt, s, paths, n, fp, ns);
	return parse_time(cmd, opt, s, ns) ? RBT_EXIT_USAGE : RBT_EXIT_OK;
}

static int build(const char *cmd, const struct rbt_cli_filter_args *a, char *const *paths,
		 int n, struct rbt_analyzer_filter *f, struct first_pass *fp)
{
	/* the cheap checks first: a bad value is refused before any reading */
	double half = AROUND_DEFAULT_NS;
	char around[512] = "";
	if (a->around) {
		if (a->from || a->to)
			return rbt_cli_usage(cmd, "--around: not with --from or --to");
		if (strlen(a->around) >= sizeof(around))
			return rbt_cli_usage(cmd, "--around: too long");
		strcpy(around, a->around);
		char *comma = strrchr(around, ',');
		if (comma) {
			*comma = 0;
			if (parse_time(cmd, "around", comma + 1, &half))
				return RBT_EXIT_USAGE;
		}
		double t;
		if (!is_finding(around) && parse_time(cmd, "around", around, &t))
			return RBT_EXIT_USAGE;
	}
	if (a->from && !is_finding(a->from) &&
	    parse_time(cmd, "from", a->from, &f->from_ns))
		return RBT_EXIT_USAGE;
	if (a->to && !is_finding(a->to) && parse_time(cmd, "to", a->to, &f->to_ns))
		return RBT_EXIT_USAGE;
	if (a->qp && parse_qps(cmd, a->qp, f))
		return RBT_EXIT_USAGE;
	if (a->pid) {
		if (parse_u32(cmd, "pid", a->pid, UINT32_MAX, &f->pid))
			return RBT_EXIT_USAGE;
		f->has_pid = 1;
	}
	if (a->thread) {
		if (parse_u32(cmd, "thread", a->thread, UINT32_MAX, &f->tid))
			return RBT_EXIT_USAGE;
		f->has_tid = 1;
	}
	/* a process none of the traces is of is a mistake, not an empty report */
	if (f->has_pid) {
		char pids[256] = "";
		size_t len = 0;
		int found = 0;
		for (int i = 0; i < n && !found; i++) {
			struct rbt_reader *r = NULL;
			if (rbt_reader_open(paths[i], &r))
				continue; /* the run names what is wrong with it */
			uint32_t pid = rbt_reader_header(r)->pid;
			found = pid == f->pid;
			if (len < sizeof(pids) - 16)
				len += (size_t)snprintf(pids + len, sizeof(pids) - len,
							"%s%u", len ? ", " : "", pid);
			rbt_reader_close(r);
		}
		if (!found && len)
			return rbt_cli_usage(
				cmd, "--pid: no trace is of process %u (they are of %s)",
				f->pid, pids);
	}
	int ret;
	if (a->around) {
		double t;
		if ((ret = when(cmd, "around", around, paths, n, fp, &t)))
			return ret;
		f->from_ns = t > half ? t - half : 0;
		f->to_ns = t + half;
		f->has_from = f->has_to = 1;
		return RBT_EXIT_OK;
	}
	if (a->from) {
		if ((ret = when(cmd, "from", a->from, paths, n, fp, &f->from_ns)))
			return ret;
		f->has_from = 1;
	}
	if (a->to) {
		if ((ret = when(cmd, "to", a->to, paths, n, fp, &f->to_ns)))
			return ret;
		f->has_to = 1;
	}
	if (f->has_from && f->has_to && !(f->to_ns > f->from_ns))
		return rbt_cli_usage(cmd, "--to: %s is not after --from (%s)", a->to,
				     a->from);
	return RBT_EXIT_OK;
}

int rbt_cli_filter_build(const char *cmd, const struct rbt_cli_filter_args *a,
			 char *const *paths, int n, struct rbt_analyzer_filter *f)
{
	struct first_pass fp = { 0 };
	memset(f, 0, sizeof(*f));
	int ret = build(cmd, a, paths, n, f, &fp);
	rbt_analyzer_destroy(fp.an);
	return ret;
}

uint32_t rbt_cli_progress_delay_ms(void)
{
	const char *s = getenv("RBTRACE_PROGRESS_DELAY_MS");
	char *end;
	if (!s || *s < '0' || *s > '9')
		return 0;
	unsigned long v = strtoul(s, &end, 10);
	return *end || v > 3600000 ? 0 : (uint32_t)(v ? v : 1);
}

void rbt_cli_filter_warn(const char *cmd, const struct rbt_analyzer *an,
			 const struct rbt_analyzer_filter *f)
{
	for (int i = 0; i < f->n_qps; i++)
		if (!rbt_analyzer_has_qp(an, f->qps[i]))
			rbt_cli_error(cmd, "warning: --qp: no QP 0x%x in the traces",
				      f->qps[i]);
}
