/* cli_util.c - option parsing and error printing shared by every subcommand.
 *
 * Errors are one line on stderr naming the command and the file or argument at
 * fault. Nothing here may allocate per argument or exit except rbt_cli_die().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/rbt_cli.h"
#include "trace_format/rbt_format.h"

static void verr(const char *cmd, const char *fmt, va_list ap)
{
	fflush(stdout); /* keep the error after what was already printed */
	fprintf(stderr, "rbtrace%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void rbt_cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(cmd, fmt, ap);
	va_end(ap);
}

void rbt_cli_die(int code, const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(cmd, fmt, ap);
	va_end(ap);
	exit(code);
}

int rbt_cli_usage(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	rbt_cli_error(cmd, "%s (see rbtrace %s%s--help)", msg, cmd ? cmd : "",
		      cmd ? " " : "");
	return RBT_EXIT_USAGE;
}

static const struct rbt_cli_opt *find_long(const struct rbt_cli_opt *opts, const char *s,
					   size_t n)
{
	for (; opts && opts->name; opts++)
		if (strlen(opts->name) == n && !strncmp(opts->name, s, n))
			return opts;
	return NULL;
}

static const struct rbt_cli_opt *find_short(const struct rbt_cli_opt *opts, char c)
{
	for (; opts && opts->name; opts++)
		if (opts->short_name && opts->short_name == c)
			return opts;
	return NULL;
}

int rbt_cli_parse(const char *cmd, int argc, char **argv, const struct rbt_cli_opt *opts,
		  int flags, char **pos, int max_pos)
{
	int npos = 0, only_pos = 0;
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		if (only_pos || a[0] != '-' || !a[1]) {
			if (npos >= max_pos) {
				if (max_pos > 1)
					rbt_cli_usage(
						cmd,
						"too many arguments at '%s' (at most %d)",
						a, max_pos);
				else
					rbt_cli_usage(cmd, "unexpected argument '%s'", a);
				return RBT_CLI_BAD;
			}
			pos[npos++] = a;
			if (flags & RBT_CLI_STOP_AT_POSITIONAL)
				only_pos = 1;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_pos = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return RBT_CLI_HELP;
		const struct rbt_cli_opt *o;
		const char *val = NULL;
		if (a[1] == '-') {
			const char *eq = strchr(a + 2, '=');
			size_t n = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
			o = find_long(opts, a + 2, n);
			if (eq)
				val = eq + 1;
		} else {
			o = find_short(opts, a[1]);
			if (o && a[2])
				val = a + 2;
		}
		if (!o) {
			rbt_cli_usage(cmd, "unknown option '%s'", a);
			return RBT_CLI_BAD;
		}
		if (o->arg) {
			if (!val) {
				if (i + 1 >= argc) {
					rbt_cli_usage(cmd, "option '%s' needs a value",
						      a);
					return RBT_CLI_BAD;
				}
				val = argv[++i];
			}
			*o->arg = val;
		} else {
			if (val) {
				rbt_cli_usage(cmd, "option '%s' takes no value", a);
				return RBT_CLI_BAD;
			}
			if (o->flag)
				(*o->flag)++;
		}
	}
	return npos;
}

int rbt_cli_parse_done(int parsed, const char *usage)
{
	if (parsed == RBT_CLI_HELP) {
		fputs(usage, stdout);
		return RBT_EXIT_OK;
	}
	if (parsed == RBT_CLI_BAD)
		return RBT_EXIT_USAGE;
	return -1;
}

int rbt_cli_u64(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	/* strtoull would skip blanks and negate: " -1" is not 2^64-1. */
	if (!s || *s < '0' || *s > '9')
		goto bad;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end)
		goto bad;
	*out = v;
	return 0;
bad:
	rbt_cli_usage(cmd, "--%s: '%s' is not a number", opt, s ? s : "");
	return -1;
}

void rbt_cli_put_text(const char *s)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
}

int rbt_cli_jobs(const char *cmd, const char *s, unsigned *out)
{
	uint64_t v;
	if (!s) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		*out = n > 1 ? (unsigned)(n > 1024 ? 1024 : n) : 1;
		return 0;
	}
	if (rbt_cli_u64(cmd, "jobs", s, &v))
		return -1;
	if (v < 1 || v > 1024) {
		rbt_cli_usage(cmd, "--jobs: %s is not between 1 and 1024", s);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

struct rbt_reader *rbt_cli_open_trace(const char *cmd, const char *path)
{
	return rbt_cli_open_trace_j(cmd, path, 1);
}

struct rbt_reader *rbt_cli_open_trace_j(const char *cmd, const char *path,
					unsigned threads)
{
	struct rbt_reader *r;
	struct rbt_reader_opts o = { .threads = threads };
	int err = rbt_reader_open_opts(path, &o, &r);
	if (err) {
		rbt_cli_error(cmd, "%s: %s", path,
			      err == -EINVAL ? "not a regular file" : rbt_strerror(err));
		return NULL;
	}
	return r;
}

int rbt_cli_trace_verdict(const char *cmd, const char *path, const struct rbt_reader *r,
			  int err)
{
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	if (err < 0) {
		rbt_cli_error(cmd, "%s: %s (%s); %llu events read", path,
			      rbt_strerror(err), rbt_reader_error(r),
			      (unsigned long long)st->events);
		return RBT_EXIT_FAIL;
	}
	if (st->bad_chunks || st->truncated || st->bad_bytes) {
		const struct rbt_trailer *t = rbt_reader_trailer(r);
		char lost[96];
		if (t && t->events >= st->events)
			snprintf(lost, sizeof(lost), "%llu lost",
				 (unsigned long long)(t->events - st->events));
		else if (st->unreadable_regions && !st->lost_events_in_bad_chunks)
			snprintf(lost, sizeof(lost), "an unknown number lost");
		else
			snprintf(lost, sizeof(lost), "%s%llu lost",
				 st->unreadable_regions ? "at least " : "",
				 (unsigned long long)st->lost_events_in_bad_chunks);
		char where[96] = "";
		uint64_t places = st->bad_chunks + (uint64_t)st->truncated;
		if (places > 1)
			snprintf(where, sizeof(where),
				 " in %llu places, first at byte %llu, last",
				 (unsigned long long)places,
				 (unsigned long long)st->first_damage_offset);
		rbt_cli_error(cmd, "%s: %s%s at %s; %llu events salvaged, %s", path,
			      st->truncated ? "truncated" : "damaged", where,
			      rbt_reader_error(r), (unsigned long long)st->events, lost);
		return RBT_EXIT_FAIL;
	}
	if (!st->finished && *rbt_reader_error(r)) {
		/* a rotated series whose next file is missing or foreign */
		rbt_cli_error(cmd, "%s: series incomplete (%s); %llu events read", path,
			      rbt_reader_error(r), (unsigned long long)st->events);
		return RBT_EXIT_FAIL;
	}
	if (!st->finished) {
		rbt_cli_error(cmd,
			      "%s: not finished cleanly (no trailer: the recorder was "
			      "killed or is still running); %llu events read, all chunks "
			      "intact",
			      path, (unsigned long long)st->events);
		return RBT_EXIT_FAIL;
	}
	return RBT_EXIT_OK;
}

int rbt_cli_check_output(const char *cmd, const char *what, const char *out)
{
	struct stat st;
	size_t n = strlen(out);
	char dir[PATH_MAX];

	if (!n) {
		errno = ENOENT;
		goto bad;
	}
	if (!stat(out, &st)) {
		if (S_ISDIR(st.st_mode) ? access(out, W_OK | X_OK) : access(out, W_OK))
			goto bad;
		return 0;
	}
	if (errno != ENOENT || out[n - 1] == '/')
		goto bad;
	const char *slash = strrchr(out, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == out)
		snprintf(dir, sizeof(dir), "/");
	else if (snprintf(dir, sizeof(dir), "%.*s", (int)(slash - out), out) >=
		 (int)sizeof(dir)) {
		errno = ENAMETOOLONG;
		goto bad;
	}
	if (stat(dir, &st))
		goto bad;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		goto bad;
	}
	if (access(dir, W_OK | X_OK))
		goto bad;
	return 0;
bad:
	rbt_cli_error(
		cmd, "%s%c%s: %s%s", what, *what == '-' ? ' ' : '=', out, strerror(errno),
		n && out[n - 1] == '/' && errno == ENOENT ? " (a DIR/ must exist)" : "");
	return -1;
}

int rbt_cli_parse_traces(const char *cmd, int argc, char **argv,
			 const struct rbt_cli_opt *opts, const char *usage, char **pos,
			 int max, const char *const *jobs, unsigned *threads, int *n)
{
	*n = rbt_cli_parse(cmd, argc, argv, opts, 0, pos, max);
	int done = rbt_cli_parse_done(*n, usage);
	if (done >= 0)
		return done;
	if (max == 1 && *n != 1)
		return rbt_cli_usage(cmd, "expects one trace file");
	if (*n == 0)
		return rbt_cli_usage(cmd, "no trace given");
	if (jobs && rbt_cli_jobs(cmd, *jobs, threads))
		return RBT_EXIT_USAGE;
	return -1;
}

int rbt_cli_choice(const char *cmd, const char *opt, const char *s,
		   const char *const *names)
{
	char list[256] = "";
	int n = 0;
	for (int i = 0; names[i]; i++)
		if (!strcmp(s, names[i]))
			return i;
	while (names[n])
		n++;
	for (int i = 0; i < n; i++) {
		size_t l = strlen(list);
		snprintf(list + l, sizeof(list) - l, "%s%s",
			 i == 0	      ? ""
			 : i == n - 1 ? " or "
				      : ", ",
			 names[i]);
	}
	rbt_cli_usage(cmd, "--%s: '%s' is not %s", opt, s, list);
	return -1;
}

int rbt_cli_check_traces(const char *cmd, char *const *paths, int n, int distinct)
{
	struct rbt_header *hdr = calloc((size_t)n + 1, sizeof(*hdr));
	char **host = calloc((size_t)n + 1, sizeof(*host));
	struct stat *st = calloc((size_t)n + 1, sizeof(*st));
	int rc = RBT_EXIT_OK;

	if (!hdr || !host || !st) {
		rbt_cli_error(cmd, "%s", strerror(ENOMEM));
		rc = RBT_EXIT_FAIL;
		goto out;
	}
	for (int i = 0; i < n && rc == RBT_EXIT_OK; i++) {
		/* Named twice: a command-line mistake, found before the file is read. */
		if (distinct && !stat(paths[i], &st[i]))
			for (int k = 0; k < i; k++)
				if (st[k].st_ino == st[i].st_ino &&
				    st[k].st_dev == st[i].st_dev) {
					rc = rbt_cli_usage(
						cmd, "%s is given twice (also as %s)",
						paths[i], paths[k]);
					goto out;
				}
		struct rbt_reader *r = rbt_cli_open_trace(cmd, paths[i]);
		if (!r) {
			rc = RBT_EXIT_FAIL;
			break;
		}
		hdr[i] = *rbt_reader_header(r);
		host[i] = strdup(hdr[i].host ? hdr[i].host : "");
		hdr[i].host = host[i]; /* the reader's copy goes with it */
		hdr[i].cmdline = hdr[i].tool = NULL;
		rbt_reader_close(r);
		if (!distinct)
			continue;
		/* A copy of one recording: every QP would pair with itself. */
		for (int k = 0; k < i; k++)
			if (rbt_header_same_recording(&hdr[i], &hdr[k])) {
				rbt_cli_error(cmd,
					      "%s: the same recording as %s (host, pid "
					      "and start time): give each trace once",
					      paths[i], paths[k]);
				rc = RBT_EXIT_FAIL;
				break;
			}
	}
out:
	if (host)
		for (int i = 0; i < n; i++)
			free(host[i]);
	free(host);
	free(hdr);
	free(st);
	return rc;
}

/* ---------------- softnic's two modes ---------------- */

int rbt_cli_softnic_arg(const char *cmd, int end, char **argv, int *mode)
{
	*mode = RBT_SOFTNIC_AUTO;
	for (int i = 1; i < end; i++) {
		const char *v;

		if (!strcmp(argv[i], "--"))
			break;
		if (strncmp(argv[i], "--softnic=", 10))
			continue;
		v = argv[i] + 10;
		if (!strcmp(v, "provider"))
			*mode = RBT_SOFTNIC_PROVIDER;
		else if (!strcmp(v, "dropin") || !strcmp(v, "drop-in"))
			*mode = RBT_SOFTNIC_DROPIN;
		else if (strcmp(v, "auto"))
			return rbt_cli_usage(
				cmd, "--softnic=%s: not provider, dropin or auto", v);
		argv[i] = "--softnic";
	}
	return 0;
}

/* softnic's directory: $RBTRACE_SOFTNIC_DIR, else ../softnic, softnic or .
 * next to the rbtrace executable (the first that holds the drop-in). */
static int softnic_dir(char *buf, size_t n)
{
	const char *env = getenv("RBTRACE_SOFTNIC_DIR");

	if (env && *env) {
		snprintf(buf, n, "%s", env);
		return 0;
	}
	return rbt_cli_find_part(RBT_CLI_SOFTNIC_DIRS, "libibverbs.so.1", buf, n);
}

/* The system's libibverbs.so.1 (never ours): its real path, its rdma-core
 * release from the file name (libibverbs.so.1.<n>.<release>.0) and the
 * private ABI it defines (IBVERBS_PRIVATE_<n>, read from its bytes: rbtrace
 * itself never loads it). Returns 0 when one was found. */
static int system_verbs(char *path, size_t n, int *release, int *pabi)
{
	static const char *const dirs[] = {
		"/usr/lib/x86_64-linux-gnu",
		"/lib/x86_64-linux-gnu",
		"/usr/lib64",
		"/lib64",
		"/usr/lib/aarch64-linux-gnu",
		"/usr/lib",
	};
	static const char key[] = "IBVERBS_PRIVATE_";
	/* another library to judge (tests; a non-standard prefix) */
	const char *force = getenv("RBTRACE_SYSTEM_LIBIBVERBS");
	size_t ndirs = force && *force ? 1 : sizeof(dirs) / sizeof(dirs[0]);

	for (size_t i = 0; i < ndirs; i++) {
		char cand[PATH_MAX], real[PATH_MAX], buf[65536];
		const char *p;
		size_t keep = 0, got;
		int a, b, rel, z;
		FILE *f;

		if (force && *force)
			snprintf(cand, sizeof(cand), "%s", force);
		else
			snprintf(cand, sizeof(cand), "%s/libibverbs.so.1", dirs[i]);
		if (!realpath(cand, real) || !(f = fopen(real, "rb")))
			continue;
		snprintf(path, n, "%s", real);
		p = strstr(real, ".so.");
		*release = p && sscanf(p, ".so.%d.%d.%d.%d", &a, &b, &rel, &z) == 4 ? rel
										    : 0;
		*pabi = 0;
		while (!*pabi &&
		       (got = fread(buf + keep, 1, sizeof(buf) - keep - 1, f)) > 0) {
			size_t len = keep + got;
			const char *q = memmem(buf, len, key, sizeof(key) - 1);

			if (q && q + sizeof(key) < buf + len)
				*pabi = atoi(q + sizeof(key) - 1);
			keep = len > 64 ? 64 : len;
			memmove(buf, buf + len - keep, keep);
		}
		fclose(f);
		return 0;
	}
	return -1;
}

int rbt_cli_softnic_setup(const char *cmd, int mode, struct rbt_softnic_setup *s)
{
	const char *env = getenv("RBTRACE_SOFTNIC_MODE");
	char sys[PATH_MAX] = "", why[PATH_MAX + 128] = "", so[sizeof(s->dir) + 32];
	int release = 0, pabi = 0, have_sys, can;

	memset(s, 0, sizeof(*s));
	if (mode == RBT_SOFTNIC_AUTO && env && *env) {
		if (!strcmp(env, "provider"))
			mode = RBT_SOFTNIC_PROVIDER;
		else if (!strcmp(env, "dropin") || !strcmp(env, "drop-in"))
			mode = RBT_SOFTNIC_DROPIN;
		else if (strcmp(env, "auto")) {
			rbt_cli_error(
				cmd,
				"RBTRACE_SOFTNIC_MODE=%s: not provider, dropin or auto",
				env);
			return RBT_EXIT_FAIL;
		}
	}
	if (softnic_dir(s->dir, sizeof(s->dir))) {
		rbt_cli_error(cmd, "softnic not found next to rbtrace (../softnic/ or "
				   "../lib/rbtrace/softnic/); set RBTRACE_SOFTNIC_DIR");
		return RBT_EXIT_FAIL;
	}
	snprintf(s->preload, sizeof(s->preload), "%s/provider/libsoftnic-preload.so",
		 s->dir);
	snprintf(s->provider, sizeof(s->provider), "%s/provider/libsoftnic", s->dir);
	snprintf(so, sizeof(so), "%s/provider/libsoftnic-rdmav34.so", s->dir);
	have_sys = !system_verbs(sys, sizeof(sys), &release, &pabi);
	can = have_sys && pabi == 34 && release >= 36 && release <= 56;
	if (!have_sys)
		snprintf(why, sizeof(why), "no system libibverbs.so.1");
	else if (pabi != 34)
		snprintf(why, sizeof(why), "the system's %s has private ABI %d, not 34",
			 sys, pabi);
	else if (!can)
		snprintf(why, sizeof(why),
			 "the system's %s is rdma-core v%d, not v36..v56 (provider "
			 "layout)",
			 sys, release);
	else if (access(s->preload, R_OK) || access(so, R_OK)) {
		snprintf(why, sizeof(why), "%s: %s (is //softnic/provider built?)", so,
			 strerror(errno));
		can = 0;
	}
	if (mode == RBT_SOFTNIC_PROVIDER && !can) {
		rbt_cli_error(cmd, "--softnic=provider: %s; use --softnic=dropin", why);
		return RBT_EXIT_FAIL;
	}
	s->mode = mode == RBT_SOFTNIC_AUTO
			  ? (can ? RBT_SOFTNIC_PROVIDER : RBT_SOFTNIC_DROPIN)
			  : mode;
	if (s->mode == RBT_SOFTNIC_DROPIN) {
		snprintf(so, sizeof(so), "%s/libibverbs.so.1", s->dir);
		if (access(so, R_OK)) {
			rbt_cli_error(cmd, "%s: %s (is softnic built?)", so,
				      strerror(errno));
			return RBT_EXIT_FAIL;
		}
	}
	if (s->mode == RBT_SOFTNIC_PROVIDER)
		snprintf(s->say, sizeof(s->say),
			 "rbtrace %s: softnic as a provider under %s\n", cmd, sys);
	else if (mode == RBT_SOFTNIC_DROPIN)
		snprintf(s->say, sizeof(s->say),
			 "rbtrace %s: softnic's drop-in libibverbs.so.1 (asked for)\n",
			 cmd);
	else
		snprintf(s->say, sizeof(s->say),
			 "rbtrace %s: softnic's drop-in libibverbs.so.1 (%s)\n", cmd,
			 why);
	return 0;
}

void rbt_cli_softnic_say(const struct rbt_softnic_setup *s)
{
	fputs(s->say, stderr);
}

void rbt_cli_softnic_said(void)
{
	const char *say = getenv("RBTRACE_SOFTNIC_SAY");

	if (say && *say)
		fputs(say, stderr);
	unsetenv("RBTRACE_SOFTNIC_SAY");
}

static int softnic_setenv_list(const char *name, const char *value, int last)
{
	const char *old = getenv(name);
	size_t n = strlen(value) + (old ? strlen(old) : 0) + 2;
	char *v = malloc(n);
	int r;

	if (!v)
		return -1;
	if (old && *old)
		snprintf(v, n, "%s:%s", last ? old : value, last ? value : old);
	else
		snprintf(v, n, "%s", value);
	r = setenv(name, v, 1);
	free(v);
	return r;
}

/* LD_LIBRARY_PATH without dir (the drop-in must not shadow the system's). */
static int softnic_drop_dir(const char *dir)
{
	const char *old = getenv("LD_LIBRARY_PATH");
	char real[PATH_MAX], *copy, *out, *tok, *save = NULL;
	int r;

	if (!old || !*old || !realpath(dir, real))
		return 0;
	copy = strdup(old);
	out = calloc(1, strlen(old) + 1);
	if (!copy || !out) {
		free(copy);
		free(out);
		return -1;
	}
	for (tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
		char r2[PATH_MAX];

		if (realpath(tok, r2) && !strcmp(r2, real))
			continue;
		if (*out)
			strcat(out, ":");
		strcat(out, tok);
	}
	r = *out ? setenv("LD_LIBRARY_PATH", out, 1) : unsetenv("LD_LIBRARY_PATH");
	free(copy);
	free(out);
	return r;
}

/* A sanitizer runtime this process runs on (an ASan build of rbtrace), which
 * must come first in a program that preloads our instrumented libraries: the
 * program itself is not instrumented, and a runtime loaded after libc starts
 * too late (the program dies at start). */
static int softnic_runtime_of(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *b = strrchr(info->dlpi_name, '/');
	char **found = arg;

	(void)size;
	b = b ? b + 1 : info->dlpi_name;
	if (!strncmp(b, "libasan.so", 10) && !found[0])
		found[0] = strdup(info->dlpi_name);
	if (!strncmp(b, "libubsan.so", 11) && !found[1])
		found[1] = strdup(info->dlpi_name);
	return 0;
}

static int softnic_sanitizer_first(void)
{
	char *found[2] = { NULL, NULL };
	const char *old = getenv("LD_PRELOAD");
	int r = 0;

	dl_iterate_phdr(softnic_runtime_of, found);
	/* ASan's runtime first of all (UBSan's may follow anywhere) */
	if (found[1] && !(old && strstr(old, found[1])))
		r = softnic_setenv_list("LD_PRELOAD", found[1], 0);
	old = getenv("LD_PRELOAD");
	if (!r && found[0] && !(old && !strncmp(old, found[0], strlen(found[0]))))
		r = softnic_setenv_list("LD_PRELOAD", found[0], 0);
	/* the program is not ours: its own leaks are not this build's to report
	 * (the last setting of a flag wins) */
	if (!r && found[0])
		r = softnic_setenv_list("ASAN_OPTIONS", "detect_leaks=0", 1);
	free(found[0]);
	free(found[1]);
	return r;
}

int rbt_cli_softnic_apply(const struct rbt_softnic_setup *s)
{
	char cm[sizeof(s->dir) + 32];

	if (s->mode == RBT_SOFTNIC_DROPIN) {
		if (softnic_setenv_list("LD_LIBRARY_PATH", s->dir, 0))
			return -1;
		/* the preload's fake sysfs alone, also at the real
		 * /sys/class/infiniband/softnic0 (pyverbs' tests look for the
		 * device's network interface there); appended, like the
		 * provider's, when it was built beside the drop-in */
		snprintf(cm, sizeof(cm), "%s/libsoftnic-sysfs.so", s->dir);
		if (access(cm, R_OK))
			return 0;
		if (softnic_sanitizer_first())
			return -1;
		return softnic_setenv_list("LD_PRELOAD", cm, 1);
	}
	if (softnic_drop_dir(s->dir) || softnic_sanitizer_first() ||
	    softnic_setenv_list("LD_PRELOAD", s->preload, 1) ||
	    setenv("RDMAV_DRIVERS", s->provider, 1))
		return -1;
	/* softnic's librdmacm.so.1, alone in cm/ so that the system's
	 * libibverbs stays the one found */
	snprintf(cm, sizeof(cm), "%s/cm/librdmacm.so.1", s->dir);
	if (!access(cm, R_OK)) {
		snprintf(cm, sizeof(cm), "%s/cm", s->dir);
		return softnic_setenv_list("LD_LIBRARY_PATH", cm, 0);
	}
	return 0;
}

int rbt_cli_beside_self(const char *rel, char *out, size_t len)
{
	char exe[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		return -1;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	*slash = 0;
	if (snprintf(out, len, "%s/%s", exe, rel) >= (int)len)
		return -1;
	return access(out, F_OK) == 0 ? 0 : -1;
}

int rbt_cli_find_part(const char *const *rels, const char *file, char *out, size_t len)
{
	char probe[2 * PATH_MAX + 2];

	for (; *rels; rels++) {
		if (rbt_cli_beside_self(*rels, out, len))
			continue;
		if (!file || (snprintf(probe, sizeof(probe), "%s/%s", out, file) <
				      (int)sizeof(probe) &&
			      !access(probe, R_OK)))
			return 0;
	}
	return -1;
}

/* rbt_cli_out_open / rbt_cli_out_close: see rbt_cli.h. */
int rbt_cli_out_open(const char *path, struct rbt_cli_out *o)
{
	struct stat st;
	int exists = lstat(path, &st) == 0;
	o->tmp = NULL;
	o->unlink_on_fail = 0;
	o->path = NULL;
	if (exists && S_ISLNK(st.st_mode)) {
		/* Replace what the link points to, not the link itself. */
		char *real = realpath(path, NULL);
		if (real && !lstat(real, &st) && S_ISREG(st.st_mode)) {
			o->path = real;
			path = real;
		} else {
			free(real);
			goto in_place;
		}
	}
	if ((exists && !S_ISREG(st.st_mode)) || (!exists && errno != ENOENT))
		goto in_place;
	size_t n = strlen(path) + 16;
	o->tmp = malloc(n);
	if (!o->tmp)
		return -ENOMEM;
	snprintf(o->tmp, n, "%s.tmp-XXXXXX", path);
	int fd = mkstemp(o->tmp);
	if (fd < 0) {
		int err = -errno;
		free(o->tmp);
		o->tmp = NULL;
		if (!exists)
			return err;
		/* A writable file in a read-only directory: the old way. */
		o->unlink_on_fail = 1;
		goto in_place;
	}
	/* mkstemp makes 0600; the report keeps the mode of the file it replaces,
	 * or gets the one fopen would have given it. */
	mode_t um = umask(0);
	umask(um);
	(void)!fchmod(fd, exists ? st.st_mode & 07777 : 0666 & ~um);
	o->f = fdopen(fd, "w");
	if (!o->f) {
		int err = -errno;
		close(fd);
		unlink(o->tmp);
		free(o->tmp);
		o->tmp = NULL;
		return err;
	}
	return 0;
in_place:
	o->f = fopen(path, "w");
	if (o->f)
		return 0;
	int err = -errno;
	free(o->path);
	o->path = NULL;
	return err;
}

/* 0, or the first write error of the whole output (-errno). */
int rbt_cli_out_close(struct rbt_cli_out *o, const char *path, int ok)
{
	if (o->path)
		path = o->path;
	/* -EIO: an earlier write failed and stdio no longer knows why. */
	int err = fflush(o->f) ? -errno : ferror(o->f) ? -EIO : 0;
	if (fclose(o->f) && !err)
		err = -errno;
	if (o->tmp) {
		if (ok && !err && rename(o->tmp, path))
			err = -errno;
		if (!ok || err)
			unlink(o->tmp);
		free(o->tmp);
	} else if ((!ok || err) && o->unlink_on_fail) {
		unlink(path);
	}
	free(o->path);
	return err;
}
