/* interpose_lossless_check.c - compares a trace written by the recorder with the
 * counts tests/progs/interpose_lossless.c kept of its own calls, and checks how
 * the trailer says the process ended.
 *
 * usage: interpose_lossless_check TRACE COUNTERS HOW [NUMBER [LOST]]
 * HOW: exit (NUMBER: the exit code), signal (NUMBER: the signal), exec. LOST: the
 * records the trailer must say were not kept (default 0).
 * For every worker thread: posts and polls that returned to the program (done)
 * <= what the trace holds <= the calls it started, and the completions it was
 * given are all in the trace. Exits 0 when all holds, 1 otherwise (one line
 * per failure); prints the counts either way.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trace_format/rbt_format.h"

#define NW 4
struct counters {
	uint64_t ready, nworkers;
	struct {
		uint64_t tid, post_started, post_done, poll_started, poll_done, wc_done,
			pad[2];
	} w[NW];
};

static int fails;
#define CHECK(cond, ...)                              \
	do {                                          \
		if (!(cond)) {                        \
			printf("FAIL: " __VA_ARGS__); \
			printf("\n");                 \
			fails++;                      \
		}                                     \
	} while (0)

int main(int argc, char **argv)
{
	struct counters c;
	struct rbt_reader *r;
	const struct rbt_event *ev;
	uint64_t posts[NW] = { 0 }, polls[NW] = { 0 }, wcs[NW] = { 0 };
	int err;

	if (argc < 4) {
		fprintf(stderr,
			"usage: interpose_lossless_check TRACE COUNTERS HOW [N]\n");
		return 2;
	}
	int fd = open(argv[2], O_RDONLY);
	if (fd < 0 || pread(fd, &c, sizeof(c), 0) != (ssize_t)sizeof(c)) {
		printf("FAIL: cannot read counters %s\n", argv[2]);
		return 1;
	}
	close(fd);
	err = rbt_reader_open(argv[1], &r);
	if (err < 0) {
		printf("FAIL: %s: %s\n", argv[1], rbt_strerror(err));
		return 1;
	}
	while ((err = rbt_reader_next(r, &ev)) == 1) {
		int w = -1;
		for (int i = 0; i < NW; i++)
			if (c.w[i].tid == ev->stream)
				w = i;
		if (w < 0)
			continue;
		if (ev->type == RBT_EV_POST_SEND)
			posts[w]++;
		else if (ev->type == RBT_EV_POLL_CQ) {
			polls[w] += ev->u.poll_cq.count ? ev->u.poll_cq.count : 1;
			wcs[w] += ev->u.poll_cq.n_wcs;
		}
	}
	CHECK(err == 0, "reading %s: %s", argv[1], rbt_reader_error(r));
	const struct rbt_trailer *t = rbt_reader_trailer(r);
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	CHECK(t != NULL, "no trailer: the trace was not finished");
	CHECK(!st->bad_chunks && !st->truncated, "damaged trace");
	if (t) {
		printf("trailer: end %s, signal %u, exit code %d, %" PRIu64
		       " events, %" PRIu64 " lost\n",
		       rbt_end_name(t->end_how) ? rbt_end_name(t->end_how) : "?",
		       t->end_signal, t->exit_code, t->events, t->lost_events);
		uint64_t lost = argc > 5 ? strtoull(argv[5], NULL, 0) : 0;
		CHECK(t->lost_events == lost,
		      "%" PRIu64 " records lost, expected %" PRIu64, t->lost_events,
		      lost);
		const char *how = argv[3];
		int n = argc > 4 ? atoi(argv[4]) : 0;
		if (!strcmp(how, "exit"))
			CHECK(t->end_how == RBT_END_EXIT && t->exit_code == n,
			      "trailer says %s/%d, expected exit(%d)",
			      rbt_end_name(t->end_how), t->exit_code, n);
		else if (!strcmp(how, "signal"))
			CHECK(t->end_how == RBT_END_SIGNAL && (int)t->end_signal == n,
			      "trailer says %s/%u, expected signal %d",
			      rbt_end_name(t->end_how), t->end_signal, n);
		else if (!strcmp(how, "exec"))
			CHECK(t->end_how == RBT_END_EXEC,
			      "trailer says %s, expected exec", rbt_end_name(t->end_how));
		else
			CHECK(0, "unknown HOW %s", how);
	}
	for (int i = 0; i < NW; i++) {
		printf("worker %d (tid %" PRIu64 "): posts started %" PRIu64
		       " done %" PRIu64 " traced %" PRIu64 "; polls started %" PRIu64
		       " done %" PRIu64 " traced %" PRIu64
		       "; completions returned %" PRIu64 " traced %" PRIu64 "\n",
		       i, c.w[i].tid, c.w[i].post_started, c.w[i].post_done, posts[i],
		       c.w[i].poll_started, c.w[i].poll_done, polls[i], c.w[i].wc_done,
		       wcs[i]);
		CHECK(c.w[i].post_done >= 2000, "worker %d did only %" PRIu64 " posts", i,
		      c.w[i].post_done);
		CHECK(c.w[i].post_done <= posts[i] && posts[i] <= c.w[i].post_started,
		      "worker %d: %" PRIu64 " posts traced, %" PRIu64
		      " returned, %" PRIu64 " started",
		      i, posts[i], c.w[i].post_done, c.w[i].post_started);
		CHECK(c.w[i].poll_done <= polls[i] && polls[i] <= c.w[i].poll_started,
		      "worker %d: %" PRIu64 " polls traced, %" PRIu64
		      " returned, %" PRIu64 " started",
		      i, polls[i], c.w[i].poll_done, c.w[i].poll_started);
		CHECK(c.w[i].wc_done <= wcs[i] && wcs[i] <= c.w[i].wc_done + 16,
		      "worker %d: %" PRIu64 " completions traced, %" PRIu64 " returned",
		      i, wcs[i], c.w[i].wc_done);
	}
	rbt_reader_close(r);
	printf("%s\n", fails ? "counts differ" : "trace and counters agree");
	return fails ? 1 : 0;
}
