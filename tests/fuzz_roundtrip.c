/* fuzz_roundtrip.c - libFuzzer harness for the writer and the reader together: the
 * input bytes choose a header and up to 256 events of every known type, every
 * field drawn from the input (extremes, deltas that wrap, strings, blobs, arrays),
 * streams switching and chunk sizes small enough to split them. They are written
 * through rbt_writer_open_fd() into a memory file, read back with the reader, and
 * every event must come back equal, field by field, each stream's in its order
 * (the reader merges streams by time, and these ts are arbitrary: FORMAT.md's
 * bound does not hold, so the order across streams is not checked), with a
 * clean trailer and no damage. Anything else aborts (the fuzzer keeps the input).
 *
 * The field copies and comparisons are generated from rbt_format.h's lists, so a
 * field added there is round-tripped here too. Built like fuzz_reader.c (see
 * there); it must never compare what the format does not promise (a NULL string
 * reads back as "").
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trace_format/rbt_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_EVENTS 256

struct in {
	const uint8_t *p;
	size_t left;
};

static uint8_t take8(struct in *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

/* Mostly small values and the extremes, else 8 raw bytes. */
static uint64_t take64(struct in *in)
{
	uint8_t sel = take8(in);
	if (sel < 0x80)
		return sel;
	switch (sel & 7) {
	case 0:
		return UINT64_MAX - (sel >> 3 & 15);
	case 1:
		return 1ull << 63;
	case 2:
		return UINT32_MAX;
	default: {
		uint64_t v = 0;
		for (int i = 0; i < 8; i++)
			v = v << 8 | take8(in);
		return v;
	}
	}
}

/* Strings, blobs and arrays live here until the trace is read back. */
static uint8_t arena[1 << 20];
static size_t arena_used;

static void *alloc(size_t n)
{
	n = (n + 7) & ~(size_t)7;
	if (arena_used + n > sizeof(arena))
		return NULL;
	void *p = arena + arena_used;
	arena_used += n;
	memset(p, 0, n);
	return p;
}

static const char *take_str(struct in *in)
{
	uint8_t n = take8(in);
	if (n == 0xff)
		return NULL;
	n %= 40;
	char *s = alloc((size_t)n + 1);
	if (!s)
		return "";
	for (uint8_t i = 0; i < n; i++) {
		s[i] = (char)take8(in);
		if (!s[i])
			s[i] = 'z';
	}
	return s;
}

static struct rbt_blob take_blob(struct in *in)
{
	uint32_t n = take8(in) % 80;
	if (n > in->left)
		n = (uint32_t)in->left;
	struct rbt_blob b = { in->p, n };
	in->p += n;
	in->left -= n;
	return b;
}

#define TAKE_F(kind, name) TAKE_##kind(o->name)
#define TAKE_U(x)	   x = take64(in);
#define TAKE_I(x)	   x = (int64_t)take64(in);
#define TAKE_T(x)	   x = take64(in);
#define TAKE_H(x)	   x = take64(in);
#define TAKE_D(x)	   x = take64(in);
#define TAKE_S(x)	   x = take_str(in);
#define TAKE_B(x)	   x = take_blob(in);
#define TAKE_A(rec, name)                                               \
	{                                                               \
		uint32_t n = take8(in) % 5;                             \
		struct rbt_##rec *v = n ? alloc(n * sizeof(*v)) : NULL; \
		o->n_##name = v ? n : 0;                                \
		for (uint32_t k = 0; k < o->n_##name; k++)              \
			take_##rec(in, &v[k]);                          \
		o->name = v;                                            \
	}

#define SAME_F(kind, name) SAME_##kind(a->name, b->name)
#define SAME_U(x, y)	   ok &= (x) == (y);
#define SAME_I(x, y)	   ok &= (x) == (y);
#define SAME_T(x, y)	   ok &= (x) == (y);
#define SAME_H(x, y)	   ok &= (x) == (y);
#define SAME_D(x, y)	   ok &= (x) == (y);
#define SAME_S(x, y)	   ok &= !strcmp((x) ? (x) : "", (y) ? (y) : "");
#define SAME_B(x, y) \
	ok &= (x).len == (y).len && (!(x).len || !memcmp((x).data, (y).data, (x).len));
#define SAME_A(rec, name)                                \
	ok &= a->n_##name == b->n_##name;                \
	for (uint32_t k = 0; ok && k < a->n_##name; k++) \
		ok &= same_##rec(&a->name[k], &b->name[k]);

#define REC(rec)                                                                    \
	static void take_##rec(struct in *in, struct rbt_##rec *o)                  \
	{                                                                           \
		RBT_REC_##rec(TAKE_F, TAKE_A)                                       \
	}                                                                           \
	static int same_##rec(const struct rbt_##rec *a, const struct rbt_##rec *b) \
	{                                                                           \
		int ok = 1;                                                         \
		RBT_REC_##rec(SAME_F, SAME_A) return ok;                            \
	}
/* Sub-records first: the records with arrays use them. */
REC(sge)
REC(frame)
REC(send_wr)
REC(recv_wr)
REC(wc)

#define EV(NAME, id, lname)                                                              \
	static void take_ev_##lname(struct in *in, struct rbt_event *ev)                 \
	{                                                                                \
		struct rbt_ev_##lname *o = &ev->u.lname;                                 \
		RBT_EV_##lname(TAKE_F, TAKE_A)                                           \
	}                                                                                \
	static int same_ev_##lname(const struct rbt_event *x, const struct rbt_event *y) \
	{                                                                                \
		const struct rbt_ev_##lname *a = &x->u.lname, *b = &y->u.lname;          \
		int ok = 1;                                                              \
		RBT_EV_##lname(SAME_F, SAME_A) return ok;                                \
	}
RBT_EVENT_LIST(EV)

struct kind {
	uint32_t id;
	void (*take)(struct in *, struct rbt_event *);
	int (*same)(const struct rbt_event *, const struct rbt_event *);
};

static const struct kind kinds[] = {
#define KIND(NAME, id, lname) { id, take_ev_##lname, same_ev_##lname },
	RBT_EVENT_LIST(KIND)
#undef KIND
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

static struct rbt_event evs[MAX_EVENTS];
static uint8_t ev_kind[MAX_EVENTS];

static void fail(const char *what, int i)
{
	fprintf(stderr, "fuzz_roundtrip: %s (event %d)\n", what, i);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	arena_used = 0;

	struct rbt_header h;
	memset(&h, 0, sizeof(h));
	h.pid = (uint32_t)take64(&in);
	h.ppid = (uint32_t)take64(&in);
	h.clock_source = take8(&in) & 1 ? RBT_CLOCK_TSC : RBT_CLOCK_MONO;
	h.clock_hz = take64(&in);
	h.start.ticks = take64(&in);
	h.start.mono_ns = take64(&in);
	h.start.real_ns = take64(&in);
	h.host = take_str(&in);
	h.cmdline = take_str(&in);
	h.tool = take_str(&in);
	size_t chunk = 64 + (size_t)take8(&in) * 64;
	uint8_t how = take8(&in);
	struct rbt_writer_opts wo = { .chunk_bytes = chunk,
				      .zstd_level = how % 4,
				      .ts_column = how >> 2 & 1 };

	int fd = memfd_create("fuzz_roundtrip", 0);
	if (fd < 0)
		return 0; /* the machine's problem, not an input's */
	int wfd = dup(fd);
	struct rbt_writer *w;
	if (wfd < 0 || rbt_writer_open_fd(wfd, &h, &wo, &w))
		fail("writer open failed", -1);

	int n = 0;
	uint32_t stream = 0;
	int in_chunk = 0;
	while (in.left && n < MAX_EVENTS) {
		uint8_t op = take8(&in);
		struct rbt_event *ev = &evs[n];
		memset(ev, 0, sizeof(*ev));
		ev_kind[n] = (uint8_t)(op % N_KINDS);
		ev->type = kinds[ev_kind[n]].id;
		/* A decoded event's stream is its chunk's: switch chunks to switch. */
		if (!in_chunk || op & 0x80) {
			stream = (uint32_t)take64(&in);
			if (rbt_writer_begin_chunk(w, stream))
				fail("begin_chunk failed", n);
			in_chunk = 1;
		}
		ev->stream = stream;
		ev->ts = take64(&in);
		kinds[ev_kind[n]].take(&in, ev);
		if (rbt_writer_append(w, ev))
			fail("append refused a valid event", n);
		if (op & 0x40 && take8(&in) & 1) {
			if (rbt_writer_end_chunk(w))
				fail("end_chunk failed", n);
			in_chunk = 0;
		}
		n++;
	}
	if (rbt_writer_close(w, NULL))
		fail("writer close failed", n);

	off_t len = lseek(fd, 0, SEEK_END);
	void *map = len > 0 ? mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, fd, 0)
			    : MAP_FAILED;
	close(fd);
	if (map == MAP_FAILED)
		fail("nothing written", n);
	struct rbt_reader *r;
	if (rbt_reader_open_mem(map, (size_t)len, &r))
		fail("reader refused the writer's file", -1);
	const struct rbt_header *rh = rbt_reader_header(r);
	if (rh->pid != h.pid || rh->ppid != h.ppid || rh->clock_hz != h.clock_hz ||
	    rh->clock_source != h.clock_source || rh->start.ticks != h.start.ticks ||
	    rh->start.mono_ns != h.start.mono_ns ||
	    rh->start.real_ns != h.start.real_ns ||
	    strcmp(rh->host, h.host ? h.host : "") ||
	    strcmp(rh->cmdline, h.cmdline ? h.cmdline : "") ||
	    strcmp(rh->tool, h.tool ? h.tool : ""))
		fail("header differs", -1);
	const struct rbt_event *ev;
	static uint8_t used[MAX_EVENTS];
	memset(used, 0, sizeof(used));
	int i = 0, rc;
	while ((rc = rbt_reader_next(r, &ev)) > 0) {
		if (i >= n)
			fail("more events read than written", i);
		int k = 0; /* the next event of this stream not read back yet */
		while (k < n && (used[k] || evs[k].stream != ev->stream))
			k++;
		if (k == n)
			fail("an event of a stream read back more often than written", i);
		used[k] = 1;
		const struct rbt_event *want = &evs[k];
		if (ev->type != want->type || ev->ts != want->ts ||
		    !kinds[ev_kind[k]].same(want, ev))
			fail("event differs", k);
		i++;
	}
	if (rc < 0 || i != n)
		fail("events missing", i);
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	const struct rbt_trailer *t = rbt_reader_trailer(r);
	if (st->bad_chunks || st->truncated || !st->finished || !t ||
	    t->events != (uint64_t)n)
		fail("file not clean", n);
	rbt_reader_close(r);
	munmap(map, (size_t)len);
	return 0;
}
