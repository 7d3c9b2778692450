/* cli_util.c - option parsing and error printing shared by every subcommand.
 *
 * Errors are one line on stderr naming the command and the file or argument at
 * fault. Nothing here may allocate per argument or exit except rbt_cli_die().
 */
#include <errno.h>
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

struct rbt_reader *rbt_cli_open_trace(const char *cmd, const char *path)
{
	struct rbt_reader *r;
	int err = rbt_reader_open(path, &r);
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
