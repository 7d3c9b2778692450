/* rbt_reader.c - the streaming reader: a file's streams merged by time (chunk
 * headers read ahead, one decoded chunk per stream), decoded event by event with per-type decoders generated from the X-macro lists (the
 * header body, read once, uses the generic table-driven decoder).
 *
 * Input is untrusted (truncated by kill -9, damaged on disk, or a fuzzer's):
 * every length is checked before use, memory stays bounded by RBT_MAX_RAW and
 * RBT_MAX_EVENT_ARENA, and damage is skipped, counted and described, never fatal
 * while intact chunks follow. Never abort, never print.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameContentSize is stable anyway */
#include <zstd.h>

#include "trace_format/rbt_internal.h"

#ifdef RBT_FUZZING
/* Let the fuzzer reach the decoder: checksums would reject nearly every input. */
#define CRC_OK(a, b) ((void)(a), (void)(b), 1)
#else
#define CRC_OK(a, b) ((a) == (b))
#endif

/* The previous value of every H and D field, per (event or record type, field): the
 * delta base of FORMAT.md "Field slots". Zeroed at each chunk. */
#define SL_F(k, n) SL_F_##k(n)
#define SL_F_U(n)
#define SL_F_I(n)
#define SL_F_T(n)
#define SL_F_S(n)
#define SL_F_B(n)
#define SL_F_H(n) uint64_t n;
#define SL_F_D(n) uint64_t n;
#define SL_A(rec, n)
#define SL_EV(NAME, id, lname)             \
	struct {                           \
		uint64_t unused_;          \
		RBT_EV_##lname(SL_F, SL_A) \
	} lname;
#define SL_REC(lname)                       \
	struct {                            \
		uint64_t unused_;           \
		RBT_REC_##lname(SL_F, SL_A) \
	} rec_##lname;
struct rd_slots {
	RBT_EVENT_LIST(SL_EV)
	SL_REC(sge)
	SL_REC(send_wr)
	SL_REC(recv_wr)
	SL_REC(wc)
	SL_REC(frame)
};

struct arena_block {
	struct arena_block *next;
	size_t size, used;
	max_align_t data[];
};

/* What the per-type decoders use besides the bytes: the chunk's delta bases and
 * the arena for the event's arrays. The reader has one (events decoded as they
 * are handed out); each decoded-ahead chunk has its own (its events decoded on a
 * worker thread, all kept until the chunk is read). */
struct rd_ctx {
	struct rd_slots *sl;
	struct arena_block *arena;
	size_t arena_total;
	size_t ev_bytes; /* arena bytes of the event being decoded */
};

/* One decoded chunk being read: the reader keeps one per stream whose events
 * interleave in time with the others' (see "merged by time" below). */
struct rd_cur {
	uint8_t *raw; /* the decoded chunk, RD_SLACK zeroed bytes after it */
	size_t raw_cap;
	uint8_t *col; /* a chunk with a timestamp column, as decompressed */
	size_t col_cap;
	size_t raw_len, raw_pos;
	uint64_t chunk_off;
	uint64_t seq; /* the chunk's place in the file: ties and same-stream order */
	struct rbt_chunk_hdr ch;
	uint32_t decoded;
	int ended; /* cut short by damage (counted) */
	uint64_t prev_ts;
	uint64_t head_ts;   /* ts of the next event (peeked) */
	struct rd_slots sl; /* H fields' delta bases, per chunk */
	/* Decoded ahead on a worker thread (threads > 1): n_rec events as records
	 * (struct rd_rec) from recs + rec_at, their arrays in dc's arena; the rest
	 * of the chunk, from raw_pos on, is decoded here as usual. */
	uint8_t *recs;
	size_t recs_cap, recs_len, rec_at;
	uint32_t n_rec;
	struct rd_ctx dc;
};

/* One event decoded ahead: its type, ts and the size bytes of its member of the
 * union (rounded up to 8 in the buffer), which follow. */
struct rd_rec {
	uint32_t type;
	uint32_t size;
	uint64_t ts;
};

/* Chunks given to the worker threads together (consecutive in the file, so that
 * small chunks cost one hand-over for several): a worker checks and decompresses
 * each frame into its cursor and decodes its events ahead (the reader's thread
 * may take a queued job itself rather than wait). */
#define RD_JOB_CHUNKS 8
#define RD_JOB_COMP   (64u << 10) /* compressed bytes a job takes at most (but one) */
#define RD_JOB_RAW    (1u << 20)  /* decompressed bytes, the same */
enum { RD_JOB_QUEUED, RD_JOB_RUNNING, RD_JOB_DONE };
struct rd_job {
	struct rd_job *next; /* the pool's queue, or the reader's free list */
	int state;	     /* under the pool's lock */
	int n, left;	     /* chunks, and those not opened yet */
	uint8_t *comp;	     /* the frames' copies (fd readers) */
	size_t comp_len, comp_cap;
	struct {
		struct rbt_chunk_hdr ch;
		const uint8_t *frame; /* NULL: not readable */
		size_t at;	      /* in comp (fd readers) */
		struct rd_cur *c;
		int status; /* RD_LOAD_* */
	} k[RD_JOB_CHUNKS];
};

struct rd_pool {
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	struct rd_job *head, *tail;
	int stop, n;
	pthread_t th[];
};

/* A chunk whose header was read but whose frame is not decoded yet. */
struct rd_pend {
	uint64_t off, seq;
	struct rbt_chunk_hdr ch;
	struct rd_job *job; /* given to the workers, or NULL */
	int job_i;	    /* its place in job */
};

/* A stream with a chunk being read or chunks waiting: its chunks are read one
 * after the other, in file order. */
struct rd_stream {
	uint32_t id;
	int heap_at, at; /* places in r->heap and r->streams */
	struct rd_cur *cur;
	struct rd_pend *q; /* waiting chunks: q[qh, qh + qn) */
	uint32_t qh, qn, qcap;
	uint32_t qsub;		  /* q[qh, qh + qsub) were given to the workers */
	uint64_t key_ts, key_seq; /* the next event's ts, or the next chunk's */
};

/* Bounds of the merge (FORMAT.md "Order of events"): chunk headers are read up to
 * RD_MERGE_SEC of trace time past the earliest event still to hand, at most
 * RD_MAX_PEND of them, and decoded chunks hold at most RD_MAX_OPEN_BYTES (one
 * chunk per stream). Past a bound the reader hands the events in the best order
 * it has. */
#define RD_MERGE_SEC	  10
#define RD_MAX_PEND	  65536
#define RD_MAX_OPEN_BYTES (512u << 20)

struct rbt_reader {
	int fd; /* -1 for a memory reader */
	const uint8_t *mem;
	uint64_t size;
	uint64_t off; /* where the next chunk header starts */
	int done;     /* no chunk header left to read */

	/* fd readers: two windows of the file, [win_off, +win_len), one for the
	 * headers read ahead and one for the frames being decoded */
	uint8_t *scratch[2];
	size_t scratch_cap[2];
	uint64_t win_off[2];
	size_t win_len[2];
	int win_next; /* the window to replace next */

	struct rd_cur *cur;	    /* the chunk being decoded (the decoders' slots) */
	struct rd_stream **streams; /* active streams */
	struct rd_stream **heap;    /* the same, a min-heap on (key_ts, key_seq) */
	int n_streams, cap_streams;
	struct rd_cur *retired;	 /* holds the last event handed out */
	struct rd_cur *spare[4]; /* closed cursors, buffers kept for reuse */
	int n_spare;
	uint64_t n_pend;     /* chunk headers read, frames not decoded yet */
	uint64_t open_bytes; /* raw bytes of the decoded chunks */
	uint64_t seq;	     /* chunk headers read so far */
	uint64_t scan_ts;    /* first_ts of the last chunk header read */
	uint64_t window;     /* RD_MERGE_SEC in ticks */
	int rotate_wait;     /* at a rotated series' trailer, chunks still waiting */
	uint64_t slots[RBT_MAX_SLOTS]; /* the generic decoder's (header only) */
	ZSTD_DCtx *dctx;

	struct rbt_header hdr;
	uint8_t *hdr_body;
	struct rbt_trailer trailer;
	int have_trailer;

	struct rbt_event ev;
	struct rd_ctx dc; /* the decoders' state for events decoded on this thread */

	/* decoding ahead on threads (rbt_reader_opts.threads > 1): at most
	 * max_jobs chunks given to the workers and not opened yet (n_jobs) */
	struct rd_pool *pool;
	uint32_t n_jobs, max_jobs;
	uint64_t jobs_comp, max_comp; /* their compressed bytes */
	uint64_t jobs_raw, max_raw;   /* and decompressed */
	struct rd_job *free_jobs;

	struct rbt_reader_stats st;
	int damaged;
	char err[256];

	/* a rotated series: the path of the file being read, the series' sums of
	 * the trailers before it, and whether its carried chunks are skipped */
	char *path;
	uint64_t series_index;
	uint64_t sum_events, sum_lost;
	int skip_carried;
};

static void pool_start(struct rbt_reader *r, int n);
static void pool_stop(struct rbt_reader *r);
static void cur_free(struct rd_cur *c);

static void damage(struct rbt_reader *r, uint64_t off, const char *fmt, ...)
{
	int n = snprintf(r->err, sizeof(r->err), "byte %llu: ", (unsigned long long)off);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(r->err))
		vsnprintf(r->err + n, sizeof(r->err) - (size_t)n, fmt, ap);
	va_end(ap);
	if (!r->damaged)
		r->st.first_damage_offset = off;
	r->damaged = 1;
}

/* ---- the byte source --------------------------------------------------------- */

/* fd readers read the file in windows of this size (or one chunk when bigger):
 * one pread per many small chunks instead of three per chunk. */
#define RD_WINDOW (256u << 10)

/* n bytes at off, or NULL when the file has fewer. The pointer is valid until the
 * next call. */
static const uint8_t *src_get(struct rbt_reader *r, uint64_t off, size_t n)
{
	if (off > r->size || n > r->size - off)
		return NULL;
	if (r->mem)
		return r->mem + off;
	for (int w = 0; w < 2; w++) {
		if (r->win_len[w] && off >= r->win_off[w] && n <= r->win_len[w] &&
		    off - r->win_off[w] <= r->win_len[w] - n) {
			r->win_next = !w;
			return r->scratch[w] + (off - r->win_off[w]);
		}
	}
	int w = r->win_next;
	size_t want = n > RD_WINDOW ? n : RD_WINDOW;
	if (want > r->size - off)
		want = (size_t)(r->size - off);
	if (want > r->scratch_cap[w]) {
		uint8_t *p = realloc(r->scratch[w], want);
		if (!p)
			return NULL;
		r->scratch[w] = p;
		r->scratch_cap[w] = want;
	}
	r->win_len[w] = 0;
	size_t got = 0;
	while (got < want) {
		ssize_t k =
			pread(r->fd, r->scratch[w] + got, want - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	if (got < n)
		return NULL;
	r->win_off[w] = off;
	r->win_len[w] = got;
	r->win_next = !w;
	return r->scratch[w];
}

/* CRC-32C of the chunk data: the SSE4.2 crc32 instruction computes exactly this
 * CRC (Castagnoli, reflected), several times faster than the tables of
 * rbt__crc32c(), which stays the reference and the fallback. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t
rd_crc32c_hw(uint32_t crc, const uint8_t *p, size_t len)
{
	uint64_t c = (uint32_t)~crc;
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
	}
	uint32_t c32 = (uint32_t)c;
	while (len--)
		c32 = __builtin_ia32_crc32qi(c32, *p++);
	return ~c32;
}

static uint32_t rd_crc32c(uint32_t crc, const uint8_t *p, size_t len)
{
	if (__builtin_cpu_supports("sse4.2"))
		return rd_crc32c_hw(crc, p, len);
	return rbt__crc32c(crc, p, len);
}
#else
#define rd_crc32c rbt__crc32c
#endif

/* Is there a chunk header or a trailer with a good checksum at off? */
static int valid_at(struct rbt_reader *r, uint64_t off)
{
	const uint8_t *p = src_get(r, off, 4);
	if (!p)
		return 0;
	uint32_t m = rbt__get_le32(p);
	struct rbt_chunk_hdr h;
	struct rbt_trailer t;
	if (m == RBT_CHUNK_MAGIC) {
		p = src_get(r, off, RBT_CHUNK_HDR);
		return p && !rbt__chunk_hdr_get(p, &h) && h.comp_len <= RBT_MAX_COMP &&
		       h.raw_len <= RBT_MAX_RAW;
	}
	if (m == RBT_TRAILER_MAGIC) {
		p = src_get(r, off, RBT_TRAILER_SIZE);
		return p && !rbt__trailer_get(p, &t);
	}
	return 0;
}

/* The offset of the next valid chunk header or trailer at or after from, or the
 * file size when there is none. */
static uint64_t resync(struct rbt_reader *r, uint64_t from)
{
	const size_t win = 65536;
	for (uint64_t base = from; base < r->size; base += win) {
		size_t n = r->size - base < win + 3 ? (size_t)(r->size - base) : win + 3;
		const uint8_t *p = src_get(r, base, n);
		if (!p)
			return r->size;
		uint8_t *copy = malloc(n); /* src_get's buffer is reused by valid_at */
		if (!copy)
			return r->size;
		memcpy(copy, p, n);
		for (size_t i = 0; i + 4 <= n && i < win; i++) {
			if (copy[i] != 'R' || copy[i + 1] != 'B')
				continue;
			if (!((copy[i + 2] == 'C' && copy[i + 3] == 'K') ||
			      (copy[i + 2] == 'N' && copy[i + 3] == 'D')))
				continue;
			if (valid_at(r, base + i)) {
				free(copy);
				return base + i;
			}
		}
		free(copy);
	}
	return r->size;
}

/* ---- per-event arena --------------------------------------------------------- */

/* Starts over: the blocks of the last events are reused (several are replaced by
 * one that fits them all next time). */
static void arena_reset(struct rd_ctx *r)
{
	struct arena_block *b = r->arena;
	r->ev_bytes = 0;
	if (b && b->next) {
		size_t total = r->arena_total;
		while (b) {
			struct arena_block *n = b->next;
			free(b);
			b = n;
		}
		r->arena = malloc(sizeof(*b) + total);
		if (r->arena) {
			r->arena->next = NULL;
			r->arena->size = total;
		}
		r->arena_total = r->arena ? total : 0;
		b = r->arena;
	}
	if (b)
		b->used = 0;
}

static void arena_free(struct rd_ctx *r)
{
	while (r->arena) {
		struct arena_block *n = r->arena->next;
		free(r->arena);
		r->arena = n;
	}
	r->arena_total = 0;
}

/* A new block, twice the last one, when the current block is full. */
static void *arena_alloc_slow(struct rd_ctx *r, size_t n)
{
	struct arena_block *b = r->arena;
	size_t sz = b ? b->size * 2 : 4096;
	if (sz < n)
		sz = n;
	if (sz > RBT_MAX_EVENT_ARENA && n <= RBT_MAX_EVENT_ARENA)
		sz = RBT_MAX_EVENT_ARENA;
	struct arena_block *nb = malloc(sizeof(*nb) + sz);
	if (!nb)
		return NULL;
	nb->next = b;
	nb->size = sz;
	nb->used = n;
	r->arena = nb;
	r->arena_total += sz;
	return nb->data;
}

/* One event's arrays may take at most RBT_MAX_EVENT_ARENA bytes: a rule of the
 * event alone, so that a chunk decoded ahead (many events in one arena) and one
 * decoded event by event fail on the same events. */
static inline void *arena_alloc(struct rd_ctx *r, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (__builtin_expect(n > RBT_MAX_EVENT_ARENA - r->ev_bytes, 0))
		return NULL;
	r->ev_bytes += n;
	struct arena_block *b = r->arena;
	if (__builtin_expect(!b || b->size - b->used < n, 0))
		return arena_alloc_slow(r, n);
	void *p = (uint8_t *)b->data + b->used;
	b->used += n;
	return p;
}

/* ---- the generic decoder (the header body) ----------------------------------------------------- */

static const char empty_str[1];

/* Zeroes a decoded struct (a multiple of 8 bytes, at most a few hundred): inline
 * stores beat a call to memset for these sizes, and the empty asm keeps the
 * compiler from turning the loop back into one. */
static inline void rbt_zero(uint8_t *p, uint32_t n)
{
	for (uint32_t k = 0; k < n; k += 8) {
		uint64_t z = 0;
		memcpy(p + k, &z, 8);
		__asm__("" : "+r"(p));
	}
}

/* Decodes the fields of d from [q, end) into base: the presence bitmap, then the
 * present fields in list order; absent fields are zero, strings empty, never NULL.
 * Bitmap bits and bytes for fields this reader does not know are ignored
 * (FORMAT.md "Fields"). */
static int dec_fields(struct rbt_reader *r, const struct rbt_desc *d, uint8_t *base,
		      const uint8_t *q, const uint8_t *end, uint64_t ts)
{
	rbt_zero(base, d->size);
	uint64_t mask = 0;
	if (q < end && *q < 0x80) {
		mask = *q++;
	} else if (q < end) {
		/* LEB128 groups of 7 field bits; a known list has at most 63 fields,
		 * groups past the ninth only name fields from the future. */
		unsigned shift = 0;
		uint8_t b;
		do {
			if (q >= end)
				return -1;
			b = *q++;
			if (shift < 63)
				mask |= (uint64_t)(b & 0x7f) << shift;
			shift += 7;
		} while (b & 0x80);
	}
	if (d->nf < 64)
		mask &= (1ull << d->nf) - 1;
	uint64_t *slots = r->slots;
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t i = (uint32_t)__builtin_ctzll(m);
		const struct rbt_fdesc *f = &d->f[i];
		uint8_t *fp = base + f->off;
		uint64_t v;
		if (__builtin_expect(q < end && *q < 0x80, 1))
			v = *q++;
		else if (!(q = rbt__get_varint(q, end, &v)))
			return -1;
		if (__builtin_expect(f->kind <= RBT_K_SCALAR, 1)) {
			/* The branch-free scalar transform (struct rbt_fdesc). */
			uint64_t delta = f->zz ? (uint64_t)rbt__unzigzag(v) : v;
			if (rbt__slotted(f->kind)) {
				v = slots[f->slot] += delta;
			} else {
				v = delta + (ts & f->tmask);
			}
			memcpy(fp, &v, 8);
			continue;
		}
		switch (f->kind) {
		case RBT_K_S: {
			const char *s = empty_str;
			if (v) {
				if (v >= (uint64_t)(end - q) || q[v] != 0)
					return -1;
				s = (const char *)q;
				q += v + 1;
			}
			memcpy(fp, &s, sizeof(s));
			break;
		}
		case RBT_K_B: {
			struct rbt_blob b = { 0 };
			if (v) {
				if (v > (uint64_t)(end - q) || v > UINT32_MAX)
					return -1;
				b.data = q;
				b.len = (uint32_t)v;
				q += v;
			}
			memcpy(fp, &b, sizeof(b));
			break;
		}
		case RBT_K_A: {
			/* Every element takes at least its length byte. */
			if (v > (uint64_t)(end - q))
				return -1;
			if (!v)
				break;
			const struct rbt_desc *rd = &rbt__rec[f->rec];
			uint8_t *elems = arena_alloc(&r->dc, (size_t)v * rd->size);
			if (!elems)
				return -1;
			for (uint64_t k = 0; k < v; k++) {
				uint64_t len;
				if (!(q = rbt__get_varint(q, end, &len)) ||
				    len > (uint64_t)(end - q))
					return -1;
				if (dec_fields(r, rd, elems + k * rd->size, q, q + len,
					       ts))
					return -1;
				q += len;
			}
			uint32_t n = (uint32_t)v;
			memcpy(fp, &n, sizeof(n));
			memcpy(base + f->off2, &elems, sizeof(elems));
			break;
		}
		default:
			return -1;
		}
	}
	/* Strings that are absent are empty, never NULL. */
	if (d->has_str)
		for (uint32_t i = 0; i < d->nf; i++)
			if (d->f[i].kind == RBT_K_S && !(mask >> i & 1))
				memcpy(base + d->f[i].off, &(const char *){ empty_str },
				       sizeof(char *));
	return 0;
}

/* ---- the generated per-type decoders ------------------------------------------
 *
 * One function per event type and per record type, expanded from the same X-macro
 * lists as the structs (one list, many uses): the presence bitmap is shifted one
 * field at a time, so every field's offset, kind and slot are constants and no
 * descriptor is looked up per field. Each field is either decoded or set to its
 * absent value (0, "", empty), so the struct needs no separate zeroing. Bitmap
 * bits past the known fields and the bytes after them are ignored (FORMAT.md
 * "Fields"); every read is bounded by end.
 */

/* The decoded chunk is followed by RD_SLACK zeroed bytes (load_chunk), so the
 * varint decoders may load 8 bytes at any position up to the end of the chunk and
 * check the length found against end afterwards. */
#define RD_SLACK 16

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* A varint of 2 to 8 bytes without a loop: find the last byte (the first with its
 * high bit clear) in one 8-byte load, then squeeze the 7-bit groups together.
 * Returns 0 when the varint is longer than 8 bytes. */
static inline __attribute__((always_inline)) size_t rd_varint8(const uint8_t *p,
							       uint64_t *out)
{
	uint64_t x;
	memcpy(&x, p, 8);
	uint64_t stop = ~x & 0x8080808080808080ull;
	if (!stop)
		return 0;
	unsigned bits = (unsigned)__builtin_ctzll(stop) + 1; /* 8, 16, ... 64 */
	if (bits < 64)
		x &= (1ull << bits) - 1;
	x &= 0x7f7f7f7f7f7f7f7full;
	x = ((x & 0x7f007f007f007f00ull) >> 1) | (x & 0x007f007f007f007full);
	x = ((x & 0x3fff00003fff0000ull) >> 2) | (x & 0x00003fff00003fffull);
	x = ((x & 0x0fffffff00000000ull) >> 4) | (x & 0x000000000fffffffull);
	*out = x;
	return bits >> 3;
}
#else
static inline size_t rd_varint8(const uint8_t *p, uint64_t *out)
{
	(void)p;
	(void)out;
	return 0;
}
#endif

/* Multi-byte varints; the one-byte case is inlined by rd_varint. */
static const uint8_t *rd_varint_slow(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
	if (p >= end)
		return NULL;
	if (end - p >= 3 && p[1] >= 0x80 && p[2] < 0x80) {
		*out = (uint64_t)(p[0] & 0x7f) | (uint64_t)(p[1] & 0x7f) << 7 |
		       (uint64_t)p[2] << 14;
		return p + 3;
	}
	size_t n = rd_varint8(p, out);
	if (n)
		return n <= (size_t)(end - p) ? p + n : NULL;
	return rbt__get_varint(p, end, out);
}

/* The one- and two-byte LEB128 cases, inlined where a field is read (slow, a
 * constant at every use, becomes a direct call); slow has the others and says
 * what the end of the input means. */
static inline __attribute__((always_inline)) const uint8_t *
rd_leb(const uint8_t *p, const uint8_t *end, uint64_t *out,
       const uint8_t *(*slow)(const uint8_t *, const uint8_t *, uint64_t *))
{
	if (__builtin_expect(p < end && *p < 0x80, 1)) {
		*out = *p;
		return p + 1;
	}
	/* Two bytes: timestamps deltas, lengths, small ids. */
	if (__builtin_expect(end - p >= 2 && p[1] < 0x80, 1)) {
		*out = (uint64_t)(p[0] & 0x7f) | (uint64_t)p[1] << 7;
		return p + 2;
	}
	return slow(p, end, out);
}

static inline __attribute__((always_inline)) const uint8_t *
rd_varint(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
	return rd_leb(p, end, out, rd_varint_slow);
}

/* The presence bitmap: any number of LEB128 bytes; bits from the 64th on name
 * fields from the future and are dropped. An empty field set has no bitmap. */
static const uint8_t *rd_mask_slow(const uint8_t *q, const uint8_t *end, uint64_t *mask)
{
	uint64_t m = 0;
	if (q < end) {
		size_t n = rd_varint8(q, &m);
		if (n) {
			*mask = m;
			return n <= (size_t)(end - q) ? q + n : NULL;
		}
		unsigned shift = 0;
		uint8_t b;
		do {
			if (q >= end)
				return NULL;
			b = *q++;
			if (shift < 63)
				m |= (uint64_t)(b & 0x7f) << shift;
			shift += 7;
		} while (b & 0x80);
	}
	*mask = m;
	return q;
}

static inline __attribute__((always_inline)) const uint8_t *
rd_mask(const uint8_t *q, const uint8_t *end, uint64_t *mask)
{
	return rd_leb(q, end, mask, rd_mask_slow);
}

#define RD_GET(v)                                   \
	do {                                        \
		if (!(q = rd_varint(q, end, &(v)))) \
			return -1;                  \
	} while (0)

/* The bitmap is shifted right after each field: bit 0 is always the current
 * field's (measured faster than testing constant bits of an unshifted mask). */
#define RD_BIT(n) (m & 1)

#define RD_F(k, n)   RD_F_##k(n) m >>= 1;
#define RD_A(rec, n) RD_A_(rec, n) m >>= 1;
#define RD_F_U(n)          \
	if (RD_BIT(n)) {   \
		RD_GET(v); \
		o->n = v;  \
	} else {           \
		o->n = 0;  \
	}
#define RD_F_I(n)                        \
	if (RD_BIT(n)) {                 \
		RD_GET(v);               \
		o->n = rbt__unzigzag(v); \
	} else {                         \
		o->n = 0;                \
	}
#define RD_F_T(n)                                       \
	if (RD_BIT(n)) {                                \
		RD_GET(v);                              \
		o->n = ts + (uint64_t)rbt__unzigzag(v); \
	} else {                                        \
		o->n = 0;                               \
	}
#define RD_F_H(n)                                           \
	if (RD_BIT(n)) {                                    \
		RD_GET(v);                                  \
		o->n = sl->n += (uint64_t)rbt__unzigzag(v); \
	} else {                                            \
		o->n = 0;                                   \
	}
#define RD_F_D(n) RD_F_H(n) /* the same bytes as H */
#define RD_F_S(n)                                                  \
	o->n = empty_str;                                          \
	if (RD_BIT(n)) {                                           \
		RD_GET(v);                                         \
		if (v) {                                           \
			if (v >= (uint64_t)(end - q) || q[v] != 0) \
				return -1;                         \
			o->n = (const char *)q;                    \
			q += v + 1;                                \
		}                                                  \
	}
#define RD_F_B(n)                                                      \
	o->n = (struct rbt_blob){ 0 };                                 \
	if (RD_BIT(n)) {                                               \
		RD_GET(v);                                             \
		if (v) {                                               \
			if (v > (uint64_t)(end - q) || v > UINT32_MAX) \
				return -1;                             \
			o->n.data = q;                                 \
			o->n.len = (uint32_t)v;                        \
			q += v;                                        \
		}                                                      \
	}
/* Every element takes at least its length byte, which bounds the count. */
#define RD_A_(rec, n)                                                                   \
	o->n_##n = 0;                                                                   \
	o->n = NULL;                                                                    \
	if (RD_BIT(n)) {                                                                \
		RD_GET(v);                                                              \
		if (v > (uint64_t)(end - q))                                            \
			return -1;                                                      \
		if (v) {                                                                \
			struct rbt_##rec *el = arena_alloc(r, (size_t)v * sizeof(*el)); \
			if (!el)                                                        \
				return -1;                                              \
			for (uint64_t k = 0; k < v; k++) {                              \
				uint64_t len;                                           \
				RD_GET(len);                                            \
				if (len > (uint64_t)(end - q) ||                        \
				    rd_rec_##rec(r, &el[k], q, q + len, ts))            \
					return -1;                                      \
				q += len;                                               \
			}                                                               \
			o->n_##n = (uint32_t)v;                                         \
			o->n = el;                                                      \
		}                                                                       \
	}

#define RD_PROTO(lname)                                                    \
	static inline __attribute__((always_inline)) int rd_rec_##lname(   \
		struct rd_ctx *r, struct rbt_##lname *o, const uint8_t *q, \
		const uint8_t *end, uint64_t ts);
RD_PROTO(sge)
RD_PROTO(send_wr)
RD_PROTO(recv_wr)
RD_PROTO(wc)
RD_PROTO(frame)

/* The body shared by records and events; unused-variable casts keep -Wextra
 * quiet for lists without arrays, strings or handles. Bits past the known
 * fields are never tested: they name fields from the future. */
#define RD_BODY(list, slots)              \
	uint64_t m, v;                    \
	(void)v;                          \
	(void)ts;                         \
	(void)r;                          \
	__typeof__(slots) *sl = &(slots); \
	(void)sl;                         \
	if (!(q = rd_mask(q, end, &m)))   \
		return -1;                \
	list(RD_F, RD_A) return 0;

#define RD_REC(lname)                                                      \
	static inline __attribute__((always_inline)) int rd_rec_##lname(   \
		struct rd_ctx *r, struct rbt_##lname *o, const uint8_t *q, \
		const uint8_t *end, uint64_t ts)                           \
	{                                                                  \
		RD_BODY(RBT_REC_##lname, r->sl->rec_##lname)               \
	}
RD_REC(sge)
RD_REC(send_wr)
RD_REC(recv_wr)
RD_REC(wc)
RD_REC(frame)

typedef int (*rd_ev_fn)(struct rd_ctx *r, struct rbt_event *ev, const uint8_t *q,
			const uint8_t *end, uint64_t ts);

#define RD_EV(NAME, id, lname)                                                      \
	static int rd_ev_##lname(struct rd_ctx *r, struct rbt_event *ev,            \
				 const uint8_t *q, const uint8_t *end, uint64_t ts) \
	{                                                                           \
		struct rbt_ev_##lname *o = &ev->u.lname;                            \
		RD_BODY(RBT_EV_##lname, r->sl->lname)                               \
	}
RBT_EVENT_LIST(RD_EV)

static const rd_ev_fn rd_ev_tab[RBT_EV_MAX_ID + 1] = {
#define RD_TAB(NAME, id, lname) [id] = rd_ev_##lname,
	RBT_EVENT_LIST(RD_TAB)
};

/* ---- open -------------------------------------------------------------------- */

static int read_header(struct rbt_reader *r)
{
	if (r->size == 0)
		return -ENODATA;
	const uint8_t *p = src_get(r, 0, r->size < 8 ? (size_t)r->size : 8);
	if (!p)
		return -EIO;
	if (memcmp(p, RBT_FILE_MAGIC, r->size < 8 ? (size_t)r->size : 8))
		return -EILSEQ;
	if (!(p = src_get(r, 0, RBT_FILE_PREFIX)))
		return -ENOMSG;
	uint8_t prefix[RBT_FILE_PREFIX];
	memcpy(prefix, p, sizeof(prefix));
	uint32_t version = rbt__get_le32(prefix + 8);
	uint32_t min_reader = rbt__get_le32(prefix + 12);
	uint32_t body_len = rbt__get_le32(prefix + 16);
	uint32_t crc = rbt__get_le32(prefix + 20);
	r->hdr.host = r->hdr.cmdline = r->hdr.tool = r->hdr.series = empty_str;
	r->off = RBT_FILE_PREFIX;
	p = NULL;
	if (body_len <= RBT_MAX_HEADER_BODY)
		p = src_get(r, RBT_FILE_PREFIX, body_len);
	uint32_t got = 0;
	if (p)
		got = rbt__crc32c(rbt__crc32c(0, prefix, 20), p, body_len);
	if (!p || !CRC_OK(got, crc)) {
		/* Trust nothing of the header, not even its length or min_reader:
		 * salvage the chunks that follow it. */
		uint64_t next = resync(r, RBT_FILE_PREFIX);
		if (!p && next >= r->size)
			return -ENOMSG; /* most likely cut inside the header */
		damage(r, RBT_FILE_PREFIX, "file header is damaged; skipped %llu bytes",
		       (unsigned long long)(next - RBT_FILE_PREFIX));
		r->st.bad_bytes += next;
		r->off = next;
		return 0;
	}
	if (min_reader > RBT_FORMAT_VERSION)
		return -EPROTONOSUPPORT;
	r->off = RBT_FILE_PREFIX + (uint64_t)body_len;
	r->hdr_body = malloc(body_len ? body_len : 1);
	if (!r->hdr_body)
		return -ENOMEM;
	memcpy(r->hdr_body, p, body_len);
	struct rbt_header h;
	if (dec_fields(r, &rbt__hdr_desc, (uint8_t *)&h, r->hdr_body,
		       r->hdr_body + body_len, 0)) {
		damage(r, RBT_FILE_PREFIX, "file header fields do not decode");
		r->st.bad_bytes += body_len;
		return 0;
	}
	h.version = version;
	r->hdr = h;
	return 0;
}

static int reader_init(struct rbt_reader *r)
{
	rbt__init();
	r->dctx = ZSTD_createDCtx();
	if (!r->dctx)
		return -ENOMEM;
	int err = read_header(r);
	uint64_t hz = r->hdr.clock_hz ? r->hdr.clock_hz : 1000000000ull;
	r->window = hz > UINT64_MAX / RD_MERGE_SEC ? UINT64_MAX : hz * RD_MERGE_SEC;
	return err;
}

/* Threads past this many decode nothing faster (the reader's thread merges). */
#define RD_MAX_THREADS 64

static void reader_threads(struct rbt_reader *r, const struct rbt_reader_opts *opts)
{
	unsigned n = opts ? opts->threads : 0;
	if (n > RD_MAX_THREADS)
		n = RD_MAX_THREADS;
	if (n > 1)
		pool_start(r, (int)n);
}

int rbt_reader_open_mem(const void *buf, size_t len, struct rbt_reader **out)
{
	return rbt_reader_open_mem_opts(buf, len, NULL, out);
}

int rbt_reader_open(const char *path, struct rbt_reader **out)
{
	return rbt_reader_open_opts(path, NULL, out);
}

int rbt_reader_open_mem_opts(const void *buf, size_t len,
			     const struct rbt_reader_opts *opts, struct rbt_reader **out)
{
	*out = NULL;
	if (!buf && len)
		return -EINVAL;
	struct rbt_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->fd = -1;
	r->mem = buf ? buf : (const uint8_t *)empty_str;
	r->size = len;
	int err = reader_init(r);
	if (err) {
		rbt_reader_close(r);
		return err;
	}
	reader_threads(r, opts);
	*out = r;
	return 0;
}

int rbt_reader_open_opts(const char *path, const struct rbt_reader_opts *opts,
			 struct rbt_reader **out)
{
	*out = NULL;
	if (!path)
		return -EINVAL;
	/* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	 * writer forever; it is refused below like any non-regular file. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st)) {
		int err = -errno;
		close(fd);
		return err;
	}
	if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode)) {
		close(fd);
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	struct rbt_reader *r = calloc(1, sizeof(*r));
	if (!r) {
		close(fd);
		return -ENOMEM;
	}
	r->fd = fd;
	r->size = (uint64_t)st.st_size;
	r->path = strdup(path);
	int err = r->path ? reader_init(r) : -ENOMEM;
	if (!err)
		r->series_index = r->hdr.series_index;
	if (err) {
		rbt_reader_close(r);
		return err;
	}
	reader_threads(r, opts);
	*out = r;
	return 0;
}

void rbt_reader_close(struct rbt_reader *r)
{
	if (!r)
		return;
	pool_stop(r);
	if (r->fd >= 0)
		close(r->fd);
	ZSTD_freeDCtx(r->dctx);
	free(r->scratch[0]);
	free(r->scratch[1]);
	for (int i = 0; i < r->n_streams; i++) {
		struct rd_stream *st = r->streams[i];
		cur_free(st->cur);
		free(st->q);
		free(st);
	}
	cur_free(r->retired);
	for (int i = 0; i < r->n_spare; i++)
		cur_free(r->spare[i]);
	free(r->streams);
	free(r->heap);
	free(r->hdr_body);
	free(r->path);
	arena_free(&r->dc);
	free(r);
}

/* ---- chunk by chunk ---------------------------------------------------------- */

static void lose_chunk(struct rbt_reader *r, uint32_t events)
{
	r->st.bad_chunks++;
	r->st.lost_events_in_bad_chunks += events;
}

/* The file of a rotated series after the one just finished: opened in its place
 * (1), or 0 with the damage said (missing, not the same recording). */
static int next_in_series(struct rbt_reader *r)
{
	const char *series = r->hdr.series;
	char name[4096], path[8192];

	if (r->fd < 0 || !r->path || !series || !*series || strchr(series, '/'))
		return 0;
	if (!rbt_series_path(series, (uint32_t)r->series_index + 1, name, sizeof(name)) ||
	    strlen(name) >= sizeof(name))
		return 0;
	const char *slash = strrchr(r->path, '/');
	int dl = slash ? (int)(slash - r->path + 1) : 0;
	if (snprintf(path, sizeof(path), "%.*s%s", dl, r->path, name) >=
	    (int)sizeof(path))
		return 0;
	struct rbt_reader *n;
	int err = rbt_reader_open(path, &n);
	if (err) {
		damage(r, r->size, "the series goes on in %s: %s", path,
		       rbt_strerror(err));
		r->have_trailer = 0;
		r->st.finished = 0;
		return 0;
	}
	if (!rbt_header_same_recording(&r->hdr, &n->hdr) ||
	    strcmp(n->hdr.series, series) || n->hdr.series_index != r->series_index + 1) {
		damage(r, r->size, "%s is not the next file of this series", path);
		rbt_reader_close(n);
		r->have_trailer = 0;
		r->st.finished = 0;
		return 0;
	}
	/* Take over its file; keep our header (the first file's). */
	r->sum_events += r->trailer.events;
	r->sum_lost += r->trailer.lost_events;
	close(r->fd);
	r->fd = n->fd;
	n->fd = -1;
	r->size = n->size;
	r->off = n->off;
	r->win_len[0] = r->win_len[1] = 0;
	free(r->path);
	r->path = n->path;
	n->path = NULL;
	r->series_index = n->hdr.series_index;
	rbt_reader_close(n);
	r->have_trailer = 0;
	r->st.finished = 0;
	r->done = 0;
	r->skip_carried = 1;
	r->st.series_files++;
	return 1;
}

/* Reads the next chunk header (skipping damage, reading the trailer at the end):
 * 1 with *out set, 0 at the end of the file. The frame is checked and decoded
 * later, by open_chunk(). */
static int scan_chunk(struct rbt_reader *r, struct rd_pend *out)
{
	while (!r->done) {
		uint64_t off = r->off;
		if (off >= r->size) {
			r->done = 1;
			break;
		}
		uint64_t left = r->size - off;
		const uint8_t *p = src_get(r, off, left < 4 ? (size_t)left : 4);
		if (!p) {
			damage(r, off, "read error");
			r->done = 1;
			break;
		}
		uint32_t magic = left >= 4 ? rbt__get_le32(p) : 0;
		if (magic == RBT_TRAILER_MAGIC && left >= RBT_TRAILER_SIZE &&
		    (p = src_get(r, off, RBT_TRAILER_SIZE)) &&
		    !rbt__trailer_get(p, &r->trailer)) {
			if (r->trailer.end_how == RBT_END_ROTATED && r->n_pend) {
				/* The next file replaces this one: first decode
				 * the chunks still waiting here (their offsets are
				 * this file's). */
				r->rotate_wait = 1;
				return 0;
			}
			r->have_trailer = 1;
			r->st.finished = 1;
			if (left > RBT_TRAILER_SIZE) {
				damage(r, off + RBT_TRAILER_SIZE,
				       "%llu unexpected bytes after the trailer",
				       (unsigned long long)(left - RBT_TRAILER_SIZE));
				r->st.bad_bytes += left - RBT_TRAILER_SIZE;
			}
			r->done = 1;
			if (r->trailer.end_how == RBT_END_ROTATED && next_in_series(r))
				continue;
			r->trailer.events += r->sum_events;
			r->trailer.lost_events += r->sum_lost;
			break;
		}
		if (magic == RBT_TRAILER_MAGIC && left == RBT_TRAILER_SIZE) {
			damage(r, off, "the trailer is damaged (no events lost)");
			r->st.bad_bytes += left;
			r->done = 1;
			break;
		}
		if (magic == RBT_TRAILER_MAGIC && left < RBT_TRAILER_SIZE) {
			damage(r, off, "file ends inside the trailer (no events lost)");
			r->st.truncated = 1;
			r->st.bad_bytes += left;
			r->done = 1;
			break;
		}
		struct rbt_chunk_hdr h;
		if (left < RBT_CHUNK_HDR) {
			damage(r, off, "file ends inside a chunk header (truncated)");
			r->st.truncated = 1;
			r->st.unreadable_regions++;
			r->st.bad_bytes += left;
			r->done = 1;
			break;
		}
		p = src_get(r, off, RBT_CHUNK_HDR);
		if (!p || rbt__chunk_hdr_get(p, &h) || h.comp_len > RBT_MAX_COMP ||
		    h.raw_len > RBT_MAX_RAW) {
			uint64_t next = resync(r, off + 1);
			damage(r, off, "%s; skipped %llu bytes to %s",
			       magic == RBT_CHUNK_MAGIC ? "chunk header is damaged"
							: "no chunk starts here",
			       (unsigned long long)(next - off),
			       next < r->size ? "the next chunk" : "the end of the file");
			r->st.bad_chunks++;
			r->st.unreadable_regions++;
			r->st.bad_bytes += next - off;
			r->off = next;
			continue;
		}
		uint64_t total = RBT_CHUNK_HDR + (uint64_t)h.comp_len;
		if (total > left) {
			damage(r, off,
			       "file ends inside a chunk (truncated; %u events lost)",
			       h.events);
			r->st.truncated = 1;
			r->st.lost_events_in_bad_chunks += h.events;
			r->st.bad_bytes += left;
			r->done = 1;
			break;
		}
		r->off = off + total;
		if (r->skip_carried && (h.flags & RBT_CHUNK_CARRIED)) {
			r->st.carried_skipped += h.events;
			r->sum_events -= h.events;
			continue;
		}
		out->off = off;
		out->seq = r->seq++;
		out->ch = h;
		out->job = NULL;
		return 1;
	}
	return 0;
}

static struct rd_cur *cur_get(struct rbt_reader *r)
{
	if (r->n_spare)
		return r->spare[--r->n_spare];
	return calloc(1, sizeof(struct rd_cur));
}

static void cur_free(struct rd_cur *c)
{
	if (!c)
		return;
	free(c->raw);
	free(c->col);
	free(c->recs);
	arena_free(&c->dc);
	free(c);
}

/* Buffers of a spare cursor are kept up to these sizes. */
#define RD_SPARE_RECS  (8u << 20)
#define RD_SPARE_ARENA (8u << 20)

static void cur_put(struct rbt_reader *r, struct rd_cur *c)
{
	r->open_bytes -= c->raw_len;
	c->raw_len = 0;
	c->n_rec = 0;
	if (r->n_spare < (int)(sizeof(r->spare) / sizeof(r->spare[0])) &&
	    c->raw_cap <= RD_WINDOW * 4) {
		if (c->recs_cap > RD_SPARE_RECS) {
			free(c->recs);
			c->recs = NULL;
			c->recs_cap = 0;
		}
		if (c->dc.arena_total > RD_SPARE_ARENA)
			arena_free(&c->dc);
		r->spare[r->n_spare++] = c;
		return;
	}
	cur_free(c);
}

/* The ts of c's next event, read ahead (a damaged one reads as the previous
 * ts: decoding it ends the chunk). */
static void cur_peek(struct rd_cur *c)
{
	c->head_ts = c->prev_ts;
	const uint8_t *q = c->raw + c->raw_pos, *end = c->raw + c->raw_len;
	uint64_t type, len, delta = 0;
	if (!(q = rd_varint(q, end, &type)) || !(q = rd_varint(q, end, &len)) ||
	    len > (uint64_t)(end - q))
		return;
	if (len && !rd_varint(q, q + len, &delta))
		return;
	c->head_ts = c->prev_ts + (uint64_t)rbt__unzigzag(delta);
}

/* n bytes from src to dst in 16-byte pieces: it may read up to 15 bytes past
 * src + n and write as far past dst + n (tscol_rebuild() has room for both:
 * RD_SLACK after its input and after its output). */
static inline __attribute__((always_inline)) void rd_copy(uint8_t *dst,
							  const uint8_t *src, size_t n)
{
	for (;;) {
		memcpy(dst, src, 16);
		if (n <= 16)
			return;
		dst += 16;
		src += 16;
		n -= 16;
	}
}

/* FORMAT.md "Timestamp column": the events of in[0..n) (a chunk's payload:
 * the events without their ts deltas and post/poll ts_exits, the column of
 * those, its length) put back together at out (room for n + n / 2). Returns
 * the bytes of the events it could rebuild: it stops at the first one that
 * does not (the chunk then ends early, as at any damage). */
static size_t tscol_rebuild(const uint8_t *in, size_t n, uint8_t *out)
{
	if (n < 4)
		return 0;
	uint32_t cl = rbt__get_le32(in + n - 4);
	if (cl > n - 4)
		return 0;
	const uint8_t *b = in, *bend = in + n - 4 - cl, *a = bend, *aend = in + n - 4;
	size_t o = 0;
	while (b < bend) {
		uint64_t type, len, v;
		const uint8_t *t, *f, *d = a, *x = NULL;
		if (!(t = rd_varint(b, bend, &type)) || !(f = rd_varint(t, bend, &len)) ||
		    len > (uint64_t)(bend - f) || !(a = rd_varint(a, aend, &v)))
			break;
		size_t dl = (size_t)(a - d), xl = 0, ml = 0;
		if (type >= RBT_EV_POST_SEND && type <= RBT_EV_POLL_CQ && len &&
		    (f[0] & 1)) {
			uint64_t mask;
			const uint8_t *m = rd_varint(f, f + len, &mask);
			x = a;
			if (!m || !(a = rd_varint(a, aend, &v)))
				break;
			ml = (size_t)(m - f);
			xl = (size_t)(a - x);
		}
		/* an event with no field and a zero delta has no payload at all */
		uint64_t plen = len || dl > 1 || d[0] ? dl + len + xl : 0;
		size_t tl = (size_t)(t - b);
		uint8_t *q = out + o;
		rd_copy(q, b, tl); /* the type */
		uint8_t *pl = rbt__put_varint(q + tl, plen);
		size_t ll = (size_t)(pl - (q + tl));
		q = pl;
		if (plen) {
			rd_copy(q, d, dl);
			q += dl;
			rd_copy(q, f, ml);
			q += ml;
			if (xl)
				rd_copy(q, x, xl);
			rd_copy(q + xl, f + ml, (size_t)len - ml);
		}
		o += tl + ll + (size_t)plen;
		b = f + len;
	}
	return o;
}

/* What became of a chunk's frame: the same checks, in the same order, whether
 * the reader's thread or a worker loads it. */
enum { RD_LOAD_OK, RD_LOAD_CRC, RD_LOAD_SIZE, RD_LOAD_NOMEM, RD_LOAD_DECOMP };

/* Checks and decompresses the frame of the chunk h into c (c may be NULL: out of
 * memory): RD_LOAD_OK with c ready at its first event, or why the chunk is lost.
 * Touches nothing but c, so that any thread may run it. */
static int chunk_load(ZSTD_DCtx *dctx, const uint8_t *frame,
		      const struct rbt_chunk_hdr *h, struct rd_cur *c)
{
	if (!frame || !CRC_OK(rd_crc32c(0, frame, h->comp_len), h->data_crc))
		return RD_LOAD_CRC;
	unsigned long long csize = ZSTD_getFrameContentSize(frame, h->comp_len);
	if (csize != h->raw_len)
		return RD_LOAD_SIZE;
	if (!c)
		return RD_LOAD_NOMEM;
	c->raw_len = 0;
	if (h->raw_len > c->raw_cap || !c->raw) {
		uint8_t *n = realloc(c->raw, (size_t)h->raw_len + RD_SLACK);
		if (!n)
			return RD_LOAD_NOMEM;
		c->raw = n;
		c->raw_cap = h->raw_len;
		/* All of it, not just the slack: a chunk that fails to decompress
		 * may leave bytes that a smaller one after it would then have past
		 * its end, read by rd_varint8(). */
		memset(n, 0, (size_t)h->raw_len + RD_SLACK);
	}
	size_t got = h->raw_len ? ZSTD_decompressDCtx(dctx, c->raw, c->raw_cap, frame,
						      h->comp_len)
				: 0;
	if (h->raw_len && (ZSTD_isError(got) || got != h->raw_len))
		return RD_LOAD_DECOMP;
	if (h->flags & RBT_CHUNK_TSCOL) {
		/* The column's events put back where the decoders expect them, in
		 * one pass: each takes its bytes from the events and the column,
		 * and its length's varint grows by at most a byte (its payload by
		 * at most 20), for events of 2 bytes at least. */
		size_t cap = got + got / 2 + RD_SLACK;
		if (cap > c->col_cap || !c->col) {
			uint8_t *b = realloc(c->col, cap);
			if (!b)
				return RD_LOAD_NOMEM;
			c->col = b;
			c->col_cap = cap;
		}
		size_t n = tscol_rebuild(c->raw, got, c->col);
		memset(c->col + n, 0, RD_SLACK);
		uint8_t *t = c->raw;
		size_t tc = c->raw_cap;
		c->raw = c->col;
		c->raw_cap = c->col_cap - RD_SLACK;
		c->col = t;
		c->col_cap = tc + RD_SLACK;
		got = n;
	}
	c->ch = *h;
	c->raw_len = got;
	c->raw_pos = 0;
	c->decoded = 0;
	c->ended = 0;
	c->prev_ts = h->first_ts;
	c->n_rec = 0;
	c->recs_len = c->rec_at = 0;
	memset(&c->sl, 0, sizeof(c->sl));
	return RD_LOAD_OK;
}

/* The reader's side of chunk_load(): the damage said and counted, c returned
 * open or put back (NULL). */
static struct rd_cur *chunk_opened(struct rbt_reader *r, const struct rd_pend *p,
				   struct rd_cur *c, int status)
{
	const struct rbt_chunk_hdr *h = &p->ch;
	uint64_t off = p->off, total = RBT_CHUNK_HDR + (uint64_t)h->comp_len;
	if (status == RD_LOAD_OK) {
		c->chunk_off = off;
		c->seq = p->seq;
		r->open_bytes += c->raw_len;
		r->st.chunks++;
		if (c->n_rec)
			c->head_ts = ((const struct rd_rec *)(const void *)c->recs)->ts;
		else
			cur_peek(c);
		return c;
	}
	if (c) {
		c->raw_len = 0;
		cur_put(r, c);
	}
	switch (status) {
	case RD_LOAD_CRC:
		damage(r, off, "chunk data checksum mismatch (%u events lost)",
		       h->events);
		break;
	case RD_LOAD_SIZE:
		damage(r, off,
		       "chunk frame size disagrees with its header "
		       "(%u events lost)",
		       h->events);
		break;
	case RD_LOAD_NOMEM:
		damage(r, off, "out of memory");
		lose_chunk(r, h->events);
		return NULL;
	default:
		damage(r, off, "chunk does not decompress (%u events lost)", h->events);
		break;
	}
	lose_chunk(r, h->events);
	r->st.bad_bytes += total;
	return NULL;
}

/* Checks and decodes the frame of p into a new cursor, on this thread: NULL when
 * the chunk is lost (damage counted). */
static struct rd_cur *open_chunk(struct rbt_reader *r, const struct rd_pend *p)
{
	const uint8_t *frame = src_get(r, p->off + RBT_CHUNK_HDR, p->ch.comp_len);
	struct rd_cur *c = frame ? cur_get(r) : NULL;
	return chunk_opened(r, p, c, chunk_load(r->dctx, frame, &p->ch, c));
}

/* ---- decoding ahead on threads -------------------------------------------------
 * With rbt_reader_opts.threads > 1, the chunk headers read ahead (scan_ahead)
 * are given to worker threads in file order, a few consecutive chunks a job
 * (RD_JOB_CHUNKS, RD_JOB_COMP), about 2 jobs per thread at a time: a worker
 * checks and decompresses each chunk and decodes its events into records
 * (decode_ahead). The reader's thread still merges the streams exactly as
 * above; opening a chunk takes its records instead of its bytes, and hands them
 * out one by one. A worker stops at the first event that does not decode, and
 * at a memory budget: the reader's thread decodes the rest of that chunk itself,
 * so damage is found, said and counted exactly where and as the single-threaded
 * reader does. */

/* Records and arrays one chunk decoded ahead may take; the rest of a bigger
 * chunk is decoded when it is read. */
#define RD_JOB_BUDGET (8u << 20)

static const uint32_t rd_ev_size[RBT_EV_MAX_ID + 1] = {
#define RD_SIZE(NAME, id, lname) [id] = sizeof(struct rbt_ev_##lname),
	RBT_EVENT_LIST(RD_SIZE)
};

/* Decodes c's events from raw_pos on into records, until one does not decode
 * (left for the reader's thread to find) or the budget is spent. */
static void decode_ahead(struct rd_cur *c)
{
	struct rd_ctx *d = &c->dc;
	struct rbt_event tmp;
	d->sl = &c->sl;
	arena_reset(d);
	c->recs_len = c->rec_at = 0;
	c->n_rec = 0;
	size_t used = 0; /* of the arena (its blocks may be bigger) */
	while (c->raw_pos < c->raw_len && c->recs_len + used <= RD_JOB_BUDGET) {
		const uint8_t *q = c->raw + c->raw_pos, *end = c->raw + c->raw_len;
		uint64_t type, len, delta = 0;
		if (!(q = rd_varint(q, end, &type)) || !(q = rd_varint(q, end, &len)) ||
		    len > (uint64_t)(end - q))
			return;
		const uint8_t *pend = q + len;
		if (q < pend && !(q = rd_varint(q, pend, &delta)))
			return;
		uint64_t ts = c->prev_ts + (uint64_t)rbt__unzigzag(delta);
		rd_ev_fn fn = type <= RBT_EV_MAX_ID ? rd_ev_tab[type] : NULL;
		uint32_t size = fn ? rd_ev_size[type] : 0;
		size_t need = sizeof(struct rd_rec) + ((size + 7u) & ~7u);
		if (c->recs_cap - c->recs_len < need) {
			size_t cap = c->recs_cap ? 2 * c->recs_cap : 64u << 10;
			while (cap - c->recs_len < need)
				cap *= 2;
			uint8_t *n = realloc(c->recs, cap);
			if (!n)
				return;
			c->recs = n;
			c->recs_cap = cap;
		}
		if (fn) {
			/* A failure here leaves c as it was before the event but
			 * for its delta bases, which no later event of the chunk
			 * reads: the reader's thread fails on it the same way. */
			d->ev_bytes = 0;
			if (fn(d, &tmp, q, pend, ts))
				return;
			used += d->ev_bytes;
		}
		struct rd_rec *rec = (struct rd_rec *)(void *)(c->recs + c->recs_len);
		rec->type = type > UINT32_MAX ? UINT32_MAX : (uint32_t)type;
		rec->size = size;
		rec->ts = ts;
		if (size)
			memcpy(rec + 1, &tmp.u, size);
		c->recs_len += need;
		c->n_rec++;
		c->raw_pos = (size_t)(pend - c->raw);
		c->prev_ts = ts;
	}
}

static void job_run(struct rd_job *j, ZSTD_DCtx *dctx)
{
	for (int i = 0; i < j->n; i++) {
		j->k[i].status = chunk_load(dctx, j->k[i].frame, &j->k[i].ch, j->k[i].c);
		if (j->k[i].status == RD_LOAD_OK)
			decode_ahead(j->k[i].c);
	}
}

static void *pool_worker(void *arg)
{
	struct rd_pool *pl = arg;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	if (!dctx)
		return NULL; /* the reader's thread runs the jobs itself */
	pthread_mutex_lock(&pl->mu);
	for (;;) {
		while (!pl->head && !pl->stop)
			pthread_cond_wait(&pl->work, &pl->mu);
		if (pl->stop)
			break;
		struct rd_job *j = pl->head;
		pl->head = j->next;
		if (!pl->head)
			pl->tail = NULL;
		j->state = RD_JOB_RUNNING;
		pthread_mutex_unlock(&pl->mu);
		job_run(j, dctx);
		pthread_mutex_lock(&pl->mu);
		j->state = RD_JOB_DONE;
		pthread_cond_broadcast(&pl->done);
	}
	pthread_mutex_unlock(&pl->mu);
	ZSTD_freeDCtx(dctx);
	return NULL;
}

/* Starts n workers (fewer when threads cannot be made: the reader's thread then
 * runs the queued jobs itself). Signals stay with the program's threads. */
static void pool_start(struct rbt_reader *r, int n)
{
	struct rd_pool *pl = calloc(1, sizeof(*pl) + (size_t)n * sizeof(pthread_t));
	if (!pl)
		return;
	pthread_mutex_init(&pl->mu, NULL);
	pthread_cond_init(&pl->work, NULL);
	pthread_cond_init(&pl->done, NULL);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (int i = 0; i < n; i++)
		if (!pthread_create(&pl->th[pl->n], NULL, pool_worker, pl))
			pl->n++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	r->pool = pl;
	/* about 2 jobs per thread */
	r->max_jobs = 2u * (uint32_t)n * RD_JOB_CHUNKS;
	r->max_comp = 2u * (uint64_t)n * RD_JOB_COMP;
	r->max_raw = 2u * (uint64_t)n * RD_JOB_RAW;
}

static void job_free(struct rd_job *j)
{
	if (!j)
		return;
	for (int i = 0; i < j->n; i++)
		cur_free(j->k[i].c);
	free(j->comp);
	free(j);
}

static void pool_stop(struct rbt_reader *r)
{
	struct rd_pool *pl = r->pool;
	if (!pl)
		return;
	pthread_mutex_lock(&pl->mu);
	pl->stop = 1;
	pthread_cond_broadcast(&pl->work);
	pthread_mutex_unlock(&pl->mu);
	for (int i = 0; i < pl->n; i++)
		pthread_join(pl->th[i], NULL);
	pthread_cond_destroy(&pl->work);
	pthread_cond_destroy(&pl->done);
	pthread_mutex_destroy(&pl->mu);
	free(pl);
	r->pool = NULL;
	/* jobs given and not opened are on their streams' queues */
	for (int i = 0; i < r->n_streams; i++) {
		struct rd_stream *st = r->streams[i];
		for (uint32_t k = 0; k < st->qsub; k++) {
			struct rd_pend *p = &st->q[st->qh + k];
			cur_free(p->job->k[p->job_i].c);
			p->job->k[p->job_i].c = NULL;
			if (!--p->job->left)
				job_free(p->job);
		}
		st->qsub = 0;
	}
	while (r->free_jobs) {
		struct rd_job *j = r->free_jobs;
		r->free_jobs = j->next;
		job_free(j);
	}
}

/* The stream whose next chunk not given to the workers comes first in the file. */
static struct rd_stream *next_unsubmitted(struct rbt_reader *r)
{
	struct rd_stream *best = NULL;
	for (int i = 0; i < r->n_streams; i++) {
		struct rd_stream *s = r->streams[i];
		if (s->qsub < s->qn &&
		    (!best ||
		     s->q[s->qh + s->qsub].seq < best->q[best->qh + best->qsub].seq))
			best = s;
	}
	return best;
}

/* Gives the workers the chunks read ahead and not given yet, in file order,
 * while fewer than max_jobs chunks wait to be opened. */
static void submit_more(struct rbt_reader *r)
{
	struct rd_pool *pl = r->pool;
	while (r->n_jobs < r->max_jobs && r->n_pend > r->n_jobs &&
	       r->jobs_comp < r->max_comp && r->jobs_raw < r->max_raw) {
		struct rd_job *j = r->free_jobs;
		if (j)
			r->free_jobs = j->next;
		else if (!(j = calloc(1, sizeof(*j))))
			return; /* decoded when they are read */
		j->n = 0;
		j->comp_len = 0;
		struct rd_stream *st;
		while (j->n < RD_JOB_CHUNKS && r->n_jobs < r->max_jobs &&
		       (st = next_unsubmitted(r))) {
			struct rd_pend *p = &st->q[st->qh + st->qsub];
			uint32_t len = p->ch.comp_len;
			if (j->n && (j->comp_len + len > RD_JOB_COMP ||
				     r->jobs_raw + p->ch.raw_len > r->max_raw))
				break;
			struct rd_cur *c = cur_get(r);
			if (!c)
				break;
			const uint8_t *f = src_get(r, p->off + RBT_CHUNK_HDR, len);
			if (f && !r->mem) {
				if (j->comp_cap - j->comp_len < len) {
					size_t cap = j->comp_len + len;
					if (cap < RD_JOB_COMP)
						cap = RD_JOB_COMP;
					uint8_t *n = realloc(j->comp, cap);
					if (!n) {
						cur_free(c);
						break;
					}
					j->comp = n;
					j->comp_cap = cap;
				}
				memcpy(j->comp + j->comp_len, f, len);
				j->k[j->n].at = j->comp_len;
				j->comp_len += len;
			}
			j->k[j->n].frame = f;
			j->k[j->n].ch = p->ch;
			j->k[j->n].c = c;
			p->job = j;
			p->job_i = j->n++;
			st->qsub++;
			r->n_jobs++;
			r->jobs_comp += len;
			r->jobs_raw += p->ch.raw_len;
		}
		if (!j->n) {
			j->next = r->free_jobs;
			r->free_jobs = j;
			return;
		}
		if (!r->mem) /* the copies are placed now: comp may have moved */
			for (int i = 0; i < j->n; i++)
				if (j->k[i].frame)
					j->k[i].frame = j->comp + j->k[i].at;
		j->left = j->n;
		j->next = NULL;
		j->state = RD_JOB_QUEUED;
		pthread_mutex_lock(&pl->mu);
		if (pl->tail)
			pl->tail->next = j;
		else
			pl->head = j;
		pl->tail = j;
		pthread_cond_signal(&pl->work);
		pthread_mutex_unlock(&pl->mu);
	}
}

/* Opens the chunk p given to the workers: waits for its job, or runs the job
 * here when no worker has taken it yet. */
static struct rd_cur *open_job(struct rbt_reader *r, const struct rd_pend *p)
{
	struct rd_pool *pl = r->pool;
	struct rd_job *j = p->job;
	int mine = 0;
	if (j->left == j->n) { /* its first chunk opened: is the job done? */
		pthread_mutex_lock(&pl->mu);
		if (j->state == RD_JOB_QUEUED) {
			struct rd_job **pp = &pl->head, *prev = NULL;
			while (*pp != j) {
				prev = *pp;
				pp = &(*pp)->next;
			}
			*pp = j->next;
			if (pl->tail == j)
				pl->tail = prev;
			j->state = RD_JOB_RUNNING;
			mine = 1;
		}
		while (!mine && j->state != RD_JOB_DONE)
			pthread_cond_wait(&pl->done, &pl->mu);
		pthread_mutex_unlock(&pl->mu);
		if (mine) {
			job_run(j, r->dctx);
			j->state = RD_JOB_DONE; /* no worker holds it */
		}
	}
	struct rd_cur *c = j->k[p->job_i].c;
	int status = j->k[p->job_i].status;
	j->k[p->job_i].c = NULL;
	r->n_jobs--;
	r->jobs_comp -= p->ch.comp_len;
	r->jobs_raw -= p->ch.raw_len;
	if (!--j->left) {
		j->n = 0;
		j->next = r->free_jobs;
		r->free_jobs = j;
	}
	return chunk_opened(r, p, c, status);
}

static void end_chunk_early(struct rbt_reader *r, struct rd_cur *c, const char *why)
{
	uint32_t lost = c->ch.events > c->decoded ? c->ch.events - c->decoded : 0;
	damage(r, c->chunk_off, "chunk event %u %s (%u events lost)", c->decoded, why,
	       lost);
	/* The chunk was counted intact when it loaded; it is one damaged chunk,
	 * counted once: its rest must not be reported missing a second time. */
	if (r->st.chunks)
		r->st.chunks--;
	r->st.bad_chunks++;
	r->st.lost_events_in_bad_chunks += lost;
	c->raw_pos = c->raw_len;
	c->ended = 1;
}

/* ---- merged by time ------------------------------------------------------------
 * Each stream's events keep their order; across streams the reader hands the
 * event with the smallest ts (ties: the earlier chunk in the file). A stream's
 * key is its next event's ts, or its next chunk's first_ts before that chunk is
 * decoded: only the chunk of the stream on top of the heap is ever decoded. */

static int st_less(const struct rd_stream *a, const struct rd_stream *b)
{
	return a->key_ts < b->key_ts ||
	       (a->key_ts == b->key_ts && a->key_seq < b->key_seq);
}

static void heap_swap(struct rbt_reader *r, int i, int j)
{
	struct rd_stream *t = r->heap[i];
	r->heap[i] = r->heap[j];
	r->heap[j] = t;
	r->heap[i]->heap_at = i;
	r->heap[j]->heap_at = j;
}

static void heap_up(struct rbt_reader *r, int i)
{
	while (i > 0 && st_less(r->heap[i], r->heap[(i - 1) / 2])) {
		heap_swap(r, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(struct rbt_reader *r, int i)
{
	for (;;) {
		int l = 2 * i + 1, m = i;
		if (l < r->n_streams && st_less(r->heap[l], r->heap[m]))
			m = l;
		if (l + 1 < r->n_streams && st_less(r->heap[l + 1], r->heap[m]))
			m = l + 1;
		if (m == i)
			return;
		heap_swap(r, i, m);
		i = m;
	}
}

static void st_key(struct rd_stream *st)
{
	if (st->cur) {
		st->key_ts = st->cur->head_ts;
		st->key_seq = st->cur->seq;
	} else {
		st->key_ts = st->q[st->qh].ch.first_ts;
		st->key_seq = st->q[st->qh].seq;
	}
}

/* Takes st out of the heap and the active streams, and frees it. */
static void st_drop(struct rbt_reader *r, struct rd_stream *st)
{
	int i = st->heap_at, last = --r->n_streams;
	if (i != last) {
		r->heap[i] = r->heap[last];
		r->heap[i]->heap_at = i;
		heap_down(r, i);
		heap_up(r, i);
	}
	r->streams[st->at] = r->streams[last];
	r->streams[st->at]->at = st->at;
	free(st->q);
	free(st);
}

/* After st's open chunk moved on: a chunk read to its end is closed (defer: its
 * buffer holds the event just handed out, freed at the next call), a stream
 * with nothing left leaves, and st's place in the heap follows its key. */
static void st_fix(struct rbt_reader *r, struct rd_stream *st, int defer)
{
	struct rd_cur *c = st->cur;
	if (c && !c->n_rec && c->raw_pos >= c->raw_len) {
		if (c->raw_len && !c->ended && c->decoded < c->ch.events)
			end_chunk_early(r, c, "missing: chunk ends early");
		if (defer)
			r->retired = c;
		else
			cur_put(r, c);
		st->cur = NULL;
	}
	if (!st->cur && !st->qn) {
		st_drop(r, st);
		return;
	}
	st_key(st);
	int i = st->heap_at;
	heap_down(r, i);
	if (st->heap_at == i)
		heap_up(r, i);
}

/* Queues a scanned chunk on its stream: 0, or -ENOMEM. */
static int st_queue(struct rbt_reader *r, const struct rd_pend *p)
{
	struct rd_stream *st = NULL;
	for (int i = 0; i < r->n_streams; i++) {
		if (r->streams[i]->id == p->ch.stream) {
			st = r->streams[i];
			break;
		}
	}
	if (!st) {
		if (r->n_streams == r->cap_streams) {
			int cap = r->cap_streams ? 2 * r->cap_streams : 8;
			struct rd_stream **a =
				realloc(r->streams, (size_t)cap * sizeof(*a));
			if (!a)
				return -ENOMEM;
			r->streams = a;
			a = realloc(r->heap, (size_t)cap * sizeof(*a));
			if (!a)
				return -ENOMEM;
			r->heap = a;
			r->cap_streams = cap;
		}
		st = calloc(1, sizeof(*st));
		if (st)
			st->q = malloc(4 * sizeof(*st->q));
		if (!st || !st->q) {
			free(st);
			return -ENOMEM;
		}
		st->qcap = 4;
		st->id = p->ch.stream;
		st->at = st->heap_at = r->n_streams;
		r->streams[r->n_streams] = st;
		r->heap[r->n_streams] = st;
		r->n_streams++;
	}
	if (st->qh + st->qn == st->qcap) {
		if (st->qh) {
			memmove(st->q, st->q + st->qh, st->qn * sizeof(*st->q));
			st->qh = 0;
		} else {
			uint32_t cap = st->qcap ? 2 * st->qcap : 4;
			struct rd_pend *q = realloc(st->q, cap * sizeof(*q));
			if (!q)
				return -ENOMEM;
			st->q = q;
			st->qcap = cap;
		}
	}
	st->q[st->qh + st->qn++] = *p;
	r->n_pend++;
	if (!st->cur && st->qn == 1) {
		st_key(st);
		heap_up(r, st->heap_at);
	}
	return 0;
}

/* Reads chunk headers ahead until the last one read starts RD_MERGE_SEC past
 * the earliest event still to hand: FORMAT.md's bound says no chunk after it
 * holds anything earlier. */
static void scan_ahead(struct rbt_reader *r)
{
	if (r->rotate_wait && !r->n_pend)
		r->rotate_wait = 0;
	while (!r->done && !r->rotate_wait && r->n_pend < RD_MAX_PEND) {
		if (r->n_streams && r->seq) {
			uint64_t top = r->heap[0]->key_ts;
			uint64_t lim = top > UINT64_MAX - r->window ? UINT64_MAX
								    : top + r->window;
			if (r->scan_ts > lim)
				return;
		}
		struct rd_pend p;
		if (!scan_chunk(r, &p))
			return;
		r->scan_ts = p.ch.first_ts;
		if (st_queue(r, &p)) {
			damage(r, p.off, "out of memory (%u events lost)", p.ch.events);
			lose_chunk(r, p.ch.events);
		}
	}
}

/* The stream whose next event comes next (its chunk open), or NULL at the end. */
static struct rd_stream *next_stream(struct rbt_reader *r)
{
	for (;;) {
		scan_ahead(r);
		if (r->pool && r->n_jobs < r->max_jobs && r->n_pend > r->n_jobs &&
		    r->jobs_comp < r->max_comp && r->jobs_raw < r->max_raw)
			submit_more(r);
		if (!r->n_streams)
			return NULL;
		struct rd_stream *st = r->heap[0];
		if (st->cur)
			return st;
		struct rd_pend p = st->q[st->qh];
		if (r->open_bytes && r->open_bytes + p.ch.raw_len > RD_MAX_OPEN_BYTES) {
			/* Too much decoded at once (no recorder's file gets
			 * here): an open chunk goes on first. */
			struct rd_stream *o = NULL;
			for (int i = 0; i < r->n_streams; i++) {
				struct rd_stream *s = r->streams[i];
				if (s->cur && (!o || st_less(s, o)))
					o = s;
			}
			if (o)
				return o;
		}
		st->qh++;
		st->qn--;
		r->n_pend--;
		if (p.job) {
			st->qsub--;
			st->cur = open_job(r, &p);
		} else {
			st->cur = open_chunk(r, &p);
		}
		st_fix(r, st, 0);
	}
}

int rbt_reader_next(struct rbt_reader *r, const struct rbt_event **out)
{
	*out = NULL;
	if (!r)
		return -EINVAL;
	if (r->retired) {
		cur_put(r, r->retired);
		r->retired = NULL;
	}
	for (;;) {
		struct rd_stream *s = next_stream(r);
		if (!s)
			return 0;
		struct rd_cur *c = s->cur;
		struct rbt_event *ev = &r->ev;
		if (c->n_rec) {
			/* decoded ahead */
			const struct rd_rec *rec =
				(const struct rd_rec *)(const void *)(c->recs +
								      c->rec_at);
			c->rec_at += sizeof(*rec) + ((rec->size + 7u) & ~7u);
			c->n_rec--;
			uint32_t type = rec->type;
			if (type <= RBT_EV_MAX_ID && rd_ev_tab[type]) {
				memcpy(&ev->u, rec + 1, rec->size);
			} else {
				memset(&ev->u, 0, sizeof(ev->u));
				r->st.unknown_events++;
			}
			ev->type = type;
			ev->stream = c->ch.stream;
			ev->ts = rec->ts;
			c->decoded++;
			r->st.events++;
			r->st.events_by_type[type <= RBT_EV_MAX_ID ? type : 0]++;
			if (c->n_rec)
				c->head_ts =
					((const struct rd_rec *)(const void *)(c->recs +
									       c->rec_at))
						->ts;
			else if (c->raw_pos < c->raw_len)
				cur_peek(c);
			st_fix(r, s, 1);
			*out = ev;
			return 1;
		}
		r->cur = c;
		r->dc.sl = &c->sl;
		const uint8_t *q = c->raw + c->raw_pos, *end = c->raw + c->raw_len;
		uint64_t type, len;
		if (!(q = rd_varint(q, end, &type)) || !(q = rd_varint(q, end, &len)) ||
		    len > (uint64_t)(end - q)) {
			end_chunk_early(r, c, "has a bad type or length");
			st_fix(r, s, 0);
			continue;
		}
		const uint8_t *pend = q + len;
		c->raw_pos = (size_t)(pend - c->raw);
		uint64_t delta = 0;
		if (q < pend && !(q = rd_varint(q, pend, &delta))) {
			end_chunk_early(r, c, "has a bad timestamp");
			st_fix(r, s, 0);
			continue;
		}
		uint64_t ts = c->prev_ts + (uint64_t)rbt__unzigzag(delta);
		c->prev_ts = ts;
		arena_reset(&r->dc);
		rd_ev_fn fn = type <= RBT_EV_MAX_ID ? rd_ev_tab[type] : NULL;
		if (fn) {
			if (fn(&r->dc, ev, q, pend, ts)) {
				end_chunk_early(r, c, "does not decode");
				st_fix(r, s, 0);
				continue;
			}
		} else {
			memset(&ev->u, 0, sizeof(ev->u));
			r->st.unknown_events++;
		}
		ev->type = type > UINT32_MAX ? UINT32_MAX : (uint32_t)type;
		ev->stream = c->ch.stream;
		ev->ts = ts;
		c->decoded++;
		r->st.events++;
		r->st.events_by_type[type <= RBT_EV_MAX_ID ? type : 0]++;
		if (c->raw_pos < c->raw_len)
			cur_peek(c);
		st_fix(r, s, 1);
		*out = ev;
		return 1;
	}
}

const struct rbt_header *rbt_reader_header(const struct rbt_reader *r)
{
	return r ? &r->hdr : NULL;
}

const struct rbt_trailer *rbt_reader_trailer(const struct rbt_reader *r)
{
	return r && r->have_trailer ? &r->trailer : NULL;
}

const struct rbt_reader_stats *rbt_reader_stats(const struct rbt_reader *r)
{
	return r ? &r->st : NULL;
}

const char *rbt_reader_error(const struct rbt_reader *r)
{
	return r ? r->err : "";
}
