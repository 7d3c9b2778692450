/* format_bench.c - the trace format's speed and size on realistic streams: a
 * ping-pong of posts and polls with steady timestamps and repeating ids, and an
 * ib_write_bw-like stream of 1-WR RDMA writes whose local and remote addresses
 * walk through a 4 KiB ring in 64-byte steps (as recorded from ib_write_bw -s 64).
 *
 * Prints encode+compress rate, compressed bytes per event and decode rate, each
 * beside a memcpy of the same raw bytes (the decoded events) measured in the same
 * run, as ratios. Never a pass/fail on absolute times. Build with -c opt. Some
 * streams run twice: in the plain layout and with the recorder's timestamp
 * column (the zstd level is printed with each).
 *
 * The stream is generated window by window into a small buffer that stays in
 * cache, as the recorder builds each event just before appending it; the time
 * to generate it is measured alone and subtracted from the encode time.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "trace_format/rbt_format.h"

#define WINDOW 600 /* events generated at a time */
#define PASSES 3340

struct storage {
	struct rbt_send_wr swr;
	struct rbt_recv_wr rwr;
	struct rbt_wc wc;
	struct rbt_sge sge;
};

static struct rbt_event *events;
static struct storage *store;
static double raw_bytes; /* decoded size of all events generated */

/* The generator's state, continued from window to window. */
static struct gen {
	uint64_t ts, seed, i;
	unsigned jitter;
	int write_bw; /* the write_bw stream instead of the ping-pong */
} g;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* not descheduled time */
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Event k of the window, cleared, on the one stream; *j: this event's jitter. */
static struct rbt_event *gen_event(int k, uint64_t *seed, uint64_t *j, struct storage **s)
{
	struct rbt_event *ev = &events[k];

	*s = &store[k];
	memset(ev, 0, sizeof(*ev));
	memset(*s, 0, sizeof(**s));
	*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
	*j = g.jitter ? (*seed >> 33) % (g.jitter + 1) : 0;
	ev->stream = 31337;
	raw_bytes += 16; /* type, stream, ts */
	return ev;
}

/* A post_send of s's one WR with its one SGE. */
static void gen_post_send(struct rbt_event *ev, struct storage *s, uint64_t ts_exit,
			  uint64_t qp, uint64_t qp_num)
{
	ev->type = RBT_EV_POST_SEND;
	s->swr.n_sges = 1;
	s->swr.sges = &s->sge;
	ev->u.post_send.ts_exit = ts_exit;
	ev->u.post_send.qp = qp;
	ev->u.post_send.qp_num = qp_num;
	ev->u.post_send.n_wrs = 1;
	ev->u.post_send.wrs = &s->swr;
	raw_bytes += sizeof(struct rbt_ev_post_send) + sizeof(s->swr) + sizeof(s->sge);
}

/* A poll_cq that returns s's one completion. */
static void gen_poll_one(struct rbt_event *ev, struct storage *s, uint64_t ts_exit,
			 uint64_t cq)
{
	ev->type = RBT_EV_POLL_CQ;
	ev->u.poll_cq.ts_exit = ts_exit;
	ev->u.poll_cq.ret = 1;
	ev->u.poll_cq.cq = cq;
	ev->u.poll_cq.asked = 16;
	ev->u.poll_cq.count = 1;
	ev->u.poll_cq.n_wcs = 1;
	ev->u.poll_cq.wcs = &s->wc;
	raw_bytes += sizeof(struct rbt_ev_poll_cq) + sizeof(s->wc);
}

/* One round trip is six events: the ping (post_send), an empty poll, its send
 * completion, the receive posted again, an empty poll, the pong's receive
 * completion. jitter: the largest random deviation of each timestamp, in ticks. */
static void make_write_bw(void);

static void make_events(void)
{
	const uint64_t qp = 0x55d4c0a01230, cq = 0x55d4c0a00f00, buf = 0x7f31c8000000;
	uint64_t ts = g.ts, seed = g.seed;
	if (g.write_bw) {
		make_write_bw();
		return;
	}
	for (int k = 0; k < WINDOW; k++) {
		uint64_t i = g.i++, j;
		struct storage *s;
		struct rbt_event *ev = gen_event(k, &seed, &j, &s);
		unsigned iter = (unsigned)(i / 6);
		switch (i % 6) {
		case 0:
			ts += 180 + j;
			s->sge = (struct rbt_sge){ buf, 64, 0x2f01 };
			s->swr.wr_id = iter % 16;
			s->swr.opcode = 2; /* IBV_WR_SEND */
			s->swr.send_flags = 2;
			gen_post_send(ev, s, ts + 95 + j, qp, 0x1a2);
			break;
		case 3:
			ts += 70 + j;
			ev->type = RBT_EV_POST_RECV;
			s->sge = (struct rbt_sge){ buf + 4096, 64, 0x2f01 };
			s->rwr.wr_id = 100 + iter % 16;
			s->rwr.n_sges = 1;
			s->rwr.sges = &s->sge;
			ev->u.post_recv.ts_exit = ts + 50 + j;
			ev->u.post_recv.qp = qp;
			ev->u.post_recv.qp_num = 0x1a2;
			ev->u.post_recv.n_wrs = 1;
			ev->u.post_recv.wrs = &s->rwr;
			raw_bytes += sizeof(struct rbt_ev_post_recv) + sizeof(s->rwr) +
				     sizeof(s->sge);
			break;
		case 1: /* empty polls, folded */
		case 4:
			ts += 120 + j;
			ev->type = RBT_EV_POLL_CQ;
			ev->u.poll_cq.ts_exit = ts + 40 + j;
			ev->u.poll_cq.cq = cq;
			ev->u.poll_cq.asked = 16;
			ev->u.poll_cq.count = 7;
			raw_bytes += sizeof(struct rbt_ev_poll_cq);
			break;
		default: /* 2: the send completion, 5: the pong received */
			ts += 900 + j;
			s->wc.wr_id = i % 6 == 2 ? iter % 16 : 100 + iter % 16;
			s->wc.opcode = i % 6 == 2 ? 0 : 128;
			s->wc.byte_len = 64;
			s->wc.qp_num = 0x1a2;
			gen_poll_one(ev, s, ts + 60 + j, cq);
			break;
		}
		ev->ts = ts;
	}
	g.ts = ts;
	g.seed = seed;
}

/* ib_write_bw -s 64 as recorded: RDMA writes of 64 bytes, the local and remote
 * addresses stepping by 64 through a 4 KiB ring, every 20th signaled and followed
 * by a poll that reaps its completion; posts 70-90 ticks apart. */
static void make_write_bw(void)
{
	const uint64_t qp = 0x556d712be500, cq = 0x556d712bd100, lbuf = 0x556d712bc000,
		       rbuf = 0x55912453c000;
	uint64_t ts = g.ts, seed = g.seed;
	for (int k = 0; k < WINDOW; k++) {
		uint64_t i = g.i++, j;
		struct storage *s;
		struct rbt_event *ev = gen_event(k, &seed, &j, &s);
		if (i % 21 == 20) {
			ts += 60 + j;
			s->wc.opcode = 1; /* IBV_WC_RDMA_WRITE */
			s->wc.qp_num = 525;
			gen_poll_one(ev, s, ts + 40 + j, cq);
		} else {
			uint64_t n = i - i / 21; /* posts so far */
			ts += 70 + j;
			s->sge = (struct rbt_sge){ lbuf + n % 64 * 64, 64, 309 };
			s->swr.opcode = 0; /* IBV_WR_RDMA_WRITE */
			s->swr.send_flags = i % 21 == 19 ? 2 : 0;
			s->swr.remote_addr = rbuf + n % 64 * 64;
			s->swr.rkey = 309;
			gen_post_send(ev, s, ts + 50 + j, qp, 525);
		}
		ev->ts = ts;
	}
	g.ts = ts;
	g.seed = seed;
}

/* Seconds to memcpy the raw bytes of PASSES windows, in 256 KiB pieces (the
 * recorder's chunk size) from a buffer larger than the caches. */
static double memcpy_seconds(double bytes)
{
	static uint8_t *src, *dst;
	const size_t big = 64u << 20, piece = 256u << 10;
	if (!src) {
		src = malloc(big);
		dst = malloc(piece);
		memset(src, 1, big);
		memset(dst, 0, piece);
	}
	double t0 = now();
	size_t off = 0;
	for (double done = 0; done < bytes; done += piece) {
		memcpy(dst, src + off, piece);
		__asm__ volatile("" : : "r"(dst) : "memory");
		off = (off + piece) % big;
	}
	return now() - t0;
}

/* Writes PASSES windows through the writer on fd (closed by the writer). */
static int encode(int fd, int level, int ts_column, double *secs)
{
	struct rbt_header h = { .pid = 1,
				.clock_source = RBT_CLOCK_TSC,
				.clock_hz = 2400000000ull,
				.host = "bench",
				.cmdline = "format_bench",
				.tool = "format_bench" };
	struct rbt_writer_opts o = { .zstd_level = level, .ts_column = ts_column };
	struct rbt_writer *w;
	double t0 = now();
	if (rbt_writer_open_fd(fd, &h, &o, &w))
		return -1;
	rbt_writer_begin_chunk(w, 31337);
	for (int p = 0; p < PASSES; p++) {
		make_events();
		for (int i = 0; i < WINDOW; i++)
			if (rbt_writer_append(w, &events[i]))
				return -1;
	}
	if (rbt_writer_close(w, NULL))
		return -1;
	*secs = now() - t0;
	return 0;
}

static double best(double a, double b)
{
	return a < b ? a : b;
}

static int write_bw; /* the stream run() measures */

static void gen_reset(unsigned jitter)
{
	g = (struct gen){
		.ts = 1ull << 40, .seed = 12345, .jitter = jitter, .write_bw = write_bw
	};
	raw_bytes = 0;
}

/* ts_column: with the recorder's timestamp column (FORMAT.md). */
static void run(const char *name, unsigned jitter, int level, int ts_column)
{
	const double n = (double)WINDOW * PASSES;
	double enc = 1e9, dec = 1e9, mc = 1e9, gen = 1e9, raw = 0;
	uint64_t size = 0;
	int fd = -1;
	for (int rep = 0; rep < 5; rep++) {
		gen_reset(jitter);
		double t0 = now();
		for (int p = 0; p < PASSES; p++)
			make_events();
		gen = best(gen, now() - t0);
		raw = raw_bytes;

		gen_reset(jitter);
		fd = memfd_create("format_bench", 0);
		double s;
		if (fd < 0 || encode(dup(fd), level, ts_column, &s)) {
			fprintf(stderr, "format_bench: encode failed\n");
			exit(1);
		}
		size = (uint64_t)lseek(fd, 0, SEEK_END);
		enc = best(enc, s);
		uint8_t *file = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (file == MAP_FAILED) {
			fprintf(stderr, "format_bench: mmap failed\n");
			exit(1);
		}
		struct rbt_reader *r;
		t0 = now();
		if (rbt_reader_open_mem(file, size, &r)) {
			fprintf(stderr, "format_bench: reader failed\n");
			exit(1);
		}
		const struct rbt_event *ev;
		uint64_t sum = 0, cnt = 0;
		while (rbt_reader_next(r, &ev) > 0) {
			sum += ev->ts;
			cnt++;
		}
		rbt_reader_close(r);
		dec = best(dec, now() - t0);
		if (cnt != (uint64_t)n) {
			fprintf(stderr, "format_bench: read %llu of %.0f events\n",
				(unsigned long long)cnt, n);
			exit(1);
		}
		__asm__ volatile("" : : "r"(sum));
		munmap(file, size);
		close(fd);
		mc = best(mc, memcpy_seconds(raw));
	}
	enc -= gen; /* the generator's own time, measured alone */
	printf("%s (zstd level %d%s), %.0f events, %.1f raw bytes/event\n"
	       "  (generating them: %.1f M events/s, not counted below):\n",
	       name, level, ts_column ? ", timestamp column" : "", n, raw / n,
	       n / gen / 1e6);
	printf("  encode+compress  %7.1f M events/s   memcpy %7.1f M events/s   ratio "
	       "%.3f\n",
	       n / enc / 1e6, n / mc / 1e6, mc / enc);
	printf("  decode           %7.1f M events/s   memcpy %7.1f M events/s   ratio "
	       "%.3f\n",
	       n / dec / 1e6, n / mc / 1e6, mc / dec);
	printf("  size             %7.2f bytes/event   raw/compressed %.1fx\n",
	       (double)size / n, raw / (double)size);
}

int main(void)
{
	events = calloc(WINDOW, sizeof(*events));
	store = calloc(WINDOW, sizeof(*store));
	if (!events || !store)
		return 1;
	printf("format_bench: one core; best of 5, thread CPU time; raw = the decoded "
	       "events' bytes\n");
	fflush(stdout);
	run("ping-pong, steady timestamps, repeating ids", 0, 3, 0);
	run("ping-pong, steady timestamps, repeating ids", 0, 1, 0);
	run("ping-pong, timestamps jittering by up to 15 ticks", 15, 3, 0);
	run("ping-pong, timestamps jittering by up to 15 ticks", 15, 1, 1);
	run("ping-pong, timestamps jittering by up to 255 ticks", 255, 3, 0);
	write_bw = 1;
	/* as the recorder wrote it before the timestamp column, then as now */
	const char *wbw =
		"write_bw (ib_write_bw -s 64 as recorded), jitter up to 15 ticks";
	run(wbw, 15, 3, 0);
	run(wbw, 15, 3, 1);
	run(wbw, 15, 1, 1);
	run(wbw, 15, -1, 1);
	return 0;
}
