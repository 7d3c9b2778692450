/* cmd_snapshot.c - `rbtrace snapshot PID...`: asks a process recorded in flight
 * mode (--flight, RBTRACE_FLIGHT) to write a snapshot of its recent past.
 *
 * The request is SIGUSR2 queued with the value RBT_SNAPSHOT_SIGVAL (sigqueue),
 * which the recorder tells apart from a plain SIGUSR2 (trigger "request", not
 * "sigusr2"). A process is only signalled once /proc says it has librbtrace.so
 * loaded and RBTRACE_FLIGHT set: SIGUSR2's default action would kill any other.
 * It never waits for the snapshot: the recorder writes it within its "after"
 * window (RBTRACE_FLIGHT_AFTER_MS), beside the process's trace.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/rbt_cli.h"
#include "interpose/rbt_interpose.h"

static const char usage[] =
	"usage: rbtrace snapshot PID [PID...]\n"
	"\n"
	"Asks each process, recorded with `rbtrace record --flight=SIZE` (or\n"
	"RBTRACE_FLIGHT), to write a snapshot of the trace it keeps in memory: a\n"
	"complete trace FILE-snapN.rbt beside its trace FILE, with a snapshot event\n"
	"of trigger \"request\". It is sent as SIGUSR2 with a value (sigqueue); a\n"
	"process without the flight recorder is refused, never signalled.\n"
	"\n"
	"example:\n"
	"  rbtrace record --softnic --flight=64M -o svc.rbt -- ./service &\n"
	"  rbtrace snapshot $(pgrep -n service)\n"
	"  rbtrace report svc-snap1.rbt\n";

static const char *cmd = "snapshot";

/* The whole of a small /proc file, NUL-terminated; NULL when unreadable. */
static char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap + 1);
	while (b) {
		ssize_t k = read(fd, b + n, cap - n);
		if (k <= 0)
			break;
		n += (size_t)k;
		if (n == cap) {
			char *nb = cap < (64u << 20) ? realloc(b, cap * 2 + 1) : NULL;
			if (!nb)
				break;
			b = nb;
			cap *= 2;
		}
	}
	close(fd);
	if (b)
		b[n] = 0;
	*len = n;
	return b;
}

/* 0: the process records in flight mode; else says why not. */
static int check(pid_t pid)
{
	char path[64];
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	char *maps = slurp(path, &n);
	if (!maps) {
		rbt_cli_error(cmd, "process %d: %s", (int)pid,
			      errno == ENOENT ? "no such process" : strerror(errno));
		return -1;
	}
	int has = strstr(maps, "librbtrace.so") != NULL;
	free(maps);
	if (!has) {
		rbt_cli_error(cmd, "process %d is not recorded by rbtrace", (int)pid);
		return -1;
	}
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	char *env = slurp(path, &n);
	int flight = 0;
	for (size_t i = 0; env && i < n; i += strlen(env + i) + 1) {
		const char *e = env + i;
		size_t k = strlen(RBT_ENV_FLIGHT);
		if (!strncmp(e, RBT_ENV_FLIGHT, k) && e[k] == '=' && e[k + 1] &&
		    strcmp(e + k + 1, "0"))
			flight = 1;
	}
	free(env);
	if (!flight) {
		rbt_cli_error(cmd,
			      "process %d does not record in flight mode (no "
			      "RBTRACE_FLIGHT; use rbtrace record --flight=SIZE)",
			      (int)pid);
		return -1;
	}
	return 0;
}

int rbt_cmd_snapshot(int argc, char **argv)
{
	char *pos[64];
	int n = rbt_cli_parse(cmd, argc, argv, NULL, 0, pos, 64);
	int rc = rbt_cli_parse_done(n, usage);
	if (rc >= 0)
		return rc;
	if (n < 1)
		return rbt_cli_usage(cmd, "expects a process id");
	rc = RBT_EXIT_OK;
	for (int i = 0; i < n; i++) {
		char *end;
		errno = 0;
		long v = strtol(pos[i], &end, 10);
		if (errno || *end || v <= 0 || v > (1L << 22))
			return rbt_cli_usage(cmd, "'%s' is not a process id", pos[i]);
		if (check((pid_t)v)) {
			rc = RBT_EXIT_FAIL;
			continue;
		}
		union sigval sv = { .sival_int = RBT_SNAPSHOT_SIGVAL };
		if (sigqueue((pid_t)v, SIGUSR2, sv)) {
			rbt_cli_error(cmd, "process %ld: %s", v, strerror(errno));
			rc = RBT_EXIT_FAIL;
			continue;
		}
		fprintf(stderr, "rbtrace snapshot: asked process %ld for a snapshot\n",
			v);
	}
	return rc;
}
