/* badinput_traces.c - writes traces that are valid byte for byte but odd in
 * meaning, for the bad-input tests of every rbtrace command (tests/badinput_test.sh):
 *
 *   badinput_traces zero OUT          header and trailer, no event at all
 *   badinput_traces noclock OUT       a few verbs, clock_hz 0 and no start pair
 *   badinput_traces wild OUT SEED [N] N (default 3000) events of every known type,
 *                                     every field drawn from
 *                                     extremes (0, 1, all ones, 2^63, random) and
 *                                     handles from a small pool so that they join;
 *                                     timestamps that jump and run backwards
 *                                     (unknown event ids: the fuzz corpus has them)
 *
 * The field fillers are generated from the event lists of rbt_format.h, so a
 * field added there is exercised here too. Test fixture only: no verbs device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/trace_builder.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* splitmix64: reproducible from the seed on every machine */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Values that break arithmetic, and handles/keys/QP numbers that meet again. */
static uint64_t wild_u64(void)
{
	switch (rnd() % 12) {
	case 0:
		return 0;
	case 1:
		return 1;
	case 2:
		return UINT64_MAX;
	case 3:
		return 1ull << 63;
	case 4:
		return rnd();
	case 5:
		return rnd() % 17;
	case 6:
		return UINT32_MAX;
	case 7:
		return (uint64_t) - (int64_t)(rnd() % 100);
	default:
		return 0x1000 + rnd() % 4; /* the handle pool */
	}
}

/* Quotes, escapes, control characters (a terminal escape), invalid UTF-8,
 * paths that must never be opened blindly (a FIFO would block). */
static const char *const strs[] = { "",
				    "softnic0",
				    "a\"b\\c\n\t\x01",
				    "\x1b[2J\x1b]0;owned\x07",
				    "bad \xff\xfe utf-8 \xc3",
				    "</script><script>alert(1)</script>",
				    "/dev/null",
				    "/proc/self/fd/0",
				    "x" };

/* Every pointer handed to the writer lives until the event is appended. */
static struct rbt_sge sges[4];
static struct rbt_send_wr swrs[4];
static struct rbt_recv_wr rwrs[4];
static struct rbt_wc wcs[4];
static struct rbt_frame frames[4];
static const uint8_t blob[64] = { 1, 2, 3 };

#define FILL_F(kind, name) FILL_##kind(o->name)
#define FILL_U(x)	   x = wild_u64();
#define FILL_I(x)	   x = (int64_t)wild_u64();
#define FILL_T(x)	   x = ts + rnd() % 3 * (rnd() % 100000);
#define FILL_H(x)	   x = wild_u64();
#define FILL_D(x)	   x = wild_u64();
#define FILL_S(x)	   x = strs[rnd() % (sizeof(strs) / sizeof(strs[0]))];
#define FILL_B(x)	   x = (struct rbt_blob){ blob, (uint32_t)(rnd() % 3 ? 0 : rnd() % 64) };
#define FILL_A(rec, name)                          \
	o->n_##name = (uint32_t)(rnd() % 5);       \
	for (uint32_t k = 0; k < o->n_##name; k++) \
		fill_##rec(&ARR_##rec[k], ts);     \
	o->name = ARR_##rec;

#define ARR_sge	  sges
#define ARR_frame frames

static void fill_sge(struct rbt_sge *o, uint64_t ts)
{
	(void)ts;
	RBT_REC_sge(FILL_F, FILL_A)
}

static void fill_frame(struct rbt_frame *o, uint64_t ts)
{
	(void)ts;
	RBT_REC_frame(FILL_F, FILL_A)
}

/* Records with arrays of their own: the sge pool is shared (as fine as any). */
static void fill_send_wr(struct rbt_send_wr *o, uint64_t ts)
{
	(void)ts;
	RBT_REC_send_wr(FILL_F, FILL_A)
}

static void fill_recv_wr(struct rbt_recv_wr *o, uint64_t ts)
{
	(void)ts;
	RBT_REC_recv_wr(FILL_F, FILL_A)
}

static void fill_wc(struct rbt_wc *o, uint64_t ts)
{
	(void)ts;
	RBT_REC_wc(FILL_F, FILL_A)
}

#define ARR_send_wr swrs
#define ARR_recv_wr rwrs
#define ARR_wc	    wcs

#define FILL_EV(NAME, id, lname)                                       \
	static void fill_ev_##lname(struct rbt_event *ev, uint64_t ts) \
	{                                                              \
		struct rbt_ev_##lname *o = &ev->u.lname;               \
		(void)ts;                                              \
		RBT_EV_##lname(FILL_F, FILL_A)                         \
	}
RBT_EVENT_LIST(FILL_EV)

struct kind {
	uint32_t id;
	void (*fill)(struct rbt_event *, uint64_t);
};

static const struct kind kinds[] = {
#define KIND(NAME, id, lname) { id, fill_ev_##lname },
	RBT_EVENT_LIST(KIND)
};

static struct rbt_header header(uint64_t clock_hz, uint64_t start, int wild)
{
	return (struct rbt_header){
		.pid = 4242,
		.ppid = 1,
		.clock_source = RBT_CLOCK_MONO,
		.clock_hz = clock_hz,
		.start = { start, start, start ? 1700000000000000000ull : 0 },
		.host = wild ? strs[3] : "badinput",
		.cmdline =
			wild ? "app\n--arg \x1b[31mred\x1b[0m \xff" : "badinput_traces",
		.tool = wild ? strs[5] : "badinput_traces",
	};
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr,
			"usage: badinput_traces zero|noclock|wild OUT [SEED [N]]\n");
		return 2;
	}
	const char *mode = argv[1], *out = argv[2];
	struct rbt_tb_opts o = { .tool = "badinput_traces" };
	struct rbt_tb *tb;
	struct rbt_event ev;

	if (!strcmp(mode, "zero")) {
		struct rbt_header h = header(1000000000, 1000, 0);
		rbt_tb_close(rbt_tb_open_hdr(out, &h, &o), NULL);
		return 0;
	}
	if (!strcmp(mode, "noclock")) {
		struct rbt_header h = header(0, 0, 0);
		tb = rbt_tb_open_hdr(out, &h, &o);
		rbt_tb_stream(tb, 1);
		struct rbt_tb_qp q = { .qp = 0x1000, .qp_num = 9, .qp_type = 2 };
		rbt_tb_qp(tb, 10, 0, &q);
		struct rbt_send_wr swr = rbt_tb_send_wr(7, 2, 2, NULL);
		rbt_tb_post_send(tb, 20, 30, 0x1000, 9, &swr, 1);
		/* a completion polled from no CQ at all */
		struct rbt_wc wc = rbt_tb_wc(7, 0, 9, 0);
		rbt_tb_poll(tb, 40, 50, 0, 0, &wc, 1, 0);
		rbt_tb_close(tb, NULL);
		return 0;
	}
	if (strcmp(mode, "wild") || argc < 4) {
		fprintf(stderr, "badinput_traces: unknown mode '%s'\n", mode);
		return 2;
	}
	rng_state = strtoull(argv[3], NULL, 0);
	unsigned long n = argc > 4 ? strtoul(argv[4], NULL, 0) : 3000;
	struct rbt_header h = header(rnd() % 4 ? 1000000000 : wild_u64(), 1000, 1);
	o.chunk_bytes = 4096;
	tb = rbt_tb_open_hdr(out, &h, &o);
	uint64_t ts = 1000;
	uint32_t streams[3] = { 1, 2, (uint32_t)rnd() }, stream = 1;
	for (unsigned long i = 0; i < n; i++) {
		if (i % 97 == 0)
			rbt_tb_stream(tb, stream = streams[rnd() % 3]);
		switch (rnd() % 50) {
		case 0:
			ts -= rnd() % 100000; /* backwards */
			break;
		case 1:
			ts += rnd() % (1ull << 40); /* a long pause */
			break;
		default:
			ts += rnd() % 1000;
		}
		memset(&ev, 0, sizeof(ev));
		{
			/* The data path and QP life most often, as in real traces. */
			static const uint32_t hot[] = {
				RBT_EV_POST_SEND, RBT_EV_POST_RECV, RBT_EV_POLL_CQ,
				RBT_EV_QP_MODIFY, RBT_EV_QP_CREATE, RBT_EV_CQ_CREATE
			};
			const struct kind *k =
				&kinds[rnd() % (sizeof(kinds) / sizeof(kinds[0]))];
			ev.type = k->id;
			if (rnd() % 2) {
				ev.type = hot[rnd() % (sizeof(hot) / sizeof(hot[0]))];
				for (size_t j = 0; j < sizeof(kinds) / sizeof(kinds[0]);
				     j++)
					if (kinds[j].id == ev.type)
						k = &kinds[j];
			}
			k->fill(&ev, ts);
		}
		ev.ts = ts;
		rbt_tb_put(tb, &ev);
	}
	struct rbt_trailer t = { .end = { ts, ts, 1700000000000000000ull } };
	rbt_tb_close(tb, &t);
	return 0;
}
