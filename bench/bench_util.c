/* bench_util.c - the benchmarks' softnic look-up, re-exec and death
 * (bench_util.h). Must never print anything but the one line of a death.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_util.h"

void bench_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", program_invocation_short_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* 1 when dir holds lib. */
static int bench_has(const char *dir, const char *lib)
{
	char so[PATH_MAX + 64];

	snprintf(so, sizeof(so), "%s/%s", dir, lib);
	return !access(so, R_OK);
}

int bench_softnic_dir(const char *lib, char *dir, size_t len)
{
	const char *cands[] = { "softnic", "../softnic", "bazel-bin/softnic" };
	const char *src = getenv("RUNFILES_DIR");
	char path[PATH_MAX];
	/* the bazel-bin link in the current directory may be another build */
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);

	if (n > 0) {
		path[n] = 0;
		strcpy(strrchr(path, '/'), "/../softnic");
		if (bench_has(path, lib))
			goto found;
	}
	if (src) {
		snprintf(path, sizeof(path), "%s/rbtrace/softnic", src);
		if (bench_has(path, lib))
			goto found;
	}
	for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
		if (realpath(cands[i], path) && bench_has(path, lib))
			goto found;
	return -1;
found:
	snprintf(dir, len, "%s", path);
	return 0;
}

void bench_reexec(char **argv, const char *dir, const char *once)
{
	setenv("LD_LIBRARY_PATH", dir, 1);
	setenv(once, "1", 1);
	execv("/proc/self/exe", argv);
	bench_die("execv: %s", strerror(errno));
}
