/* rbt_writer.c - encodes events into per-stream chunks, compresses each chunk into
 * one zstd frame and writes it with its fixed header (FORMAT.md).
 *
 * Each event type and record has its own encoder, generated from its X-macro list
 * (so the field kinds, offsets and presence tests are compile-time constants); a
 * generic, table-driven encoder serves the file header. It runs on the recorder's
 * background thread: it may allocate while a chunk grows, but it must never print,
 * never exit and never leave a half-written chunk header behind a successful
 * return.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "trace_format/rbt_internal.h"

struct rbt_writer {
	int fd;
	int err; /* first error; sticky */
	uint64_t bytes;
	size_t chunk_bytes;
	int level;
	ZSTD_CCtx *cctx;

	uint8_t *raw; /* the open chunk, encoded, before compression */
	size_t raw_cap;
	size_t raw_len;
	uint8_t *out; /* chunk header + compressed frame */
	size_t out_cap;

	int in_chunk;
	uint32_t stream;
	uint32_t nev;
	uint64_t first_ts, last_ts, prev_ts;
	uint64_t slots[RBT_MAX_SLOTS];

	uint64_t events, lost;
	uint32_t chunk_flags;
	/* The timestamp column (opts->ts_column, FORMAT.md "Timestamp column"):
	 * each event's ts delta, and the ts_exit of posts and polls, go to col
	 * instead of the event; the chunk is the events, col, and its length. */
	int tscol;
	uint8_t ev_type; /* of the event ev_open() began; 0: its ts_exit is taken */
	uint8_t *col;
	size_t col_len, col_cap, col_at;
	uint32_t flat_wc; /* rbt_writer_append_flat(): a poll's flags (wcx, dense) */
	int (*sink)(void *arg, const void *chunk, size_t len, uint64_t first_ts,
		    uint64_t last_ts);
	void *sink_arg;
};

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = write(fd, p, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static uint8_t *grow_slow(struct rbt_writer *w, uint8_t *p, size_t need)
{
	size_t off = (size_t)(p - w->raw);
	size_t cap = w->raw_cap * 2;
	while (cap < off + need)
		cap *= 2;
	uint8_t *n = realloc(w->raw, cap);
	if (!n)
		return NULL;
	w->raw = n;
	w->raw_cap = cap;
	return n + off;
}

/* Makes room for need more bytes at p; returns the (possibly moved) p. */
static inline uint8_t *grow(struct rbt_writer *w, uint8_t *p, size_t need)
{
	if (__builtin_expect((size_t)(p - w->raw) + need <= w->raw_cap, 1))
		return p;
	return grow_slow(w, p, need);
}

#define ENSURE(n)                    \
	do {                         \
		p = grow(w, p, (n)); \
		if (!p)              \
			return NULL; \
	} while (0)

/* Writes the length of the payload that starts at raw[start] and ends at p into
 * the one byte reserved before it, moving the payload when the length needs a
 * longer varint. Returns the new end. */
static uint8_t *patch_len_slow(struct rbt_writer *w, size_t start, uint8_t *p)
{
	size_t len = (size_t)(p - (w->raw + start));
	uint8_t tmp[10];
	size_t k = (size_t)(rbt__put_varint(tmp, len) - tmp);
	ENSURE(k);
	memmove(w->raw + start - 1 + k, w->raw + start, len);
	memcpy(w->raw + start - 1, tmp, k);
	return p + k - 1;
}

static inline uint8_t *patch_len(struct rbt_writer *w, size_t start, uint8_t *p)
{
	size_t len = (size_t)(p - (w->raw + start));
	if (__builtin_expect(len < 0x80, 1)) {
		w->raw[start - 1] = (uint8_t)len;
		return p;
	}
	return patch_len_slow(w, start, p);
}

/* Room for n scalar fields and a bitmap: at most 10 bytes each. */
#define SCALARS(n) ((size_t)(n)*10 + 16)

/* Which fields of d at base are present (not zero, not empty): bit i for field i. */
static inline uint64_t presence(const struct rbt_desc *d, const uint8_t *base)
{
	uint64_t mask = 0;
	for (uint32_t i = 0; i < d->nf; i++) {
		const struct rbt_fdesc *f = &d->f[i];
		const uint8_t *fp = base + f->off;
		uint64_t v;
		if (__builtin_expect(f->kind <= RBT_K_SCALAR, 1)) {
			memcpy(&v, fp, 8);
		} else if (f->kind == RBT_K_S) {
			const char *s;
			memcpy(&s, fp, sizeof(s));
			v = s && *s;
		} else if (f->kind == RBT_K_B) {
			struct rbt_blob b;
			memcpy(&b, fp, sizeof(b));
			v = b.data && b.len;
		} else {
			uint32_t n;
			const void *e;
			memcpy(&n, fp, sizeof(n));
			memcpy(&e, base + f->off2, sizeof(e));
			v = e && n;
		}
		mask |= (uint64_t)(v != 0) << i;
	}
	return mask;
}

/* Encodes the fields of desc d found at base at p: the presence bitmap, then each
 * present field in list order (FORMAT.md "Fields"). Nothing at all when no field
 * is present.
 *
 * The hot path: zero fields cost one test in presence(); present scalars go
 * through one branch-free transform (see struct rbt_fdesc); room is checked
 * once per record and after each variable-size field, never per scalar. */
static uint8_t *enc_fields(struct rbt_writer *w, const struct rbt_desc *d,
			   const uint8_t *base, uint8_t *p, uint64_t ts)
{
	uint64_t mask = presence(d, base);
	if (!mask)
		return p;
	uint64_t *slots = w->slots;
	ENSURE(SCALARS(d->nf));
	p = rbt__put_varint(p, mask);
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t i = (uint32_t)__builtin_ctzll(m);
		const struct rbt_fdesc *f = &d->f[i];
		const uint8_t *fp = base + f->off;
		if (__builtin_expect(f->kind <= RBT_K_SCALAR, 1)) {
			uint64_t v;
			memcpy(&v, fp, 8);
			uint64_t delta;
			if (rbt__slotted(f->kind)) {
				delta = v - slots[f->slot];
				slots[f->slot] = v;
			} else {
				delta = v - (ts & f->tmask);
			}
			uint64_t z = (delta << 1) ^ (uint64_t)((int64_t)delta >> 63);
			uint64_t e = f->zz ? z : delta;
			if (__builtin_expect(e < 0x80, 1))
				*p++ = (uint8_t)e;
			else
				p = rbt__put_varint(p, e);
			continue;
		}
		switch (f->kind) {
		case RBT_K_S: {
			const char *s;
			memcpy(&s, fp, sizeof(s));
			size_t n = strlen(s);
			ENSURE(n + SCALARS(d->nf - i));
			p = rbt__put_varint(p, n);
			memcpy(p, s, n);
			p += n;
			*p++ = 0;
			break;
		}
		case RBT_K_B: {
			struct rbt_blob b;
			memcpy(&b, fp, sizeof(b));
			ENSURE(b.len + SCALARS(d->nf - i));
			p = rbt__put_varint(p, b.len);
			memcpy(p, b.data, b.len);
			p += b.len;
			break;
		}
		case RBT_K_A: {
			uint32_t n;
			const uint8_t *elems;
			memcpy(&n, fp, sizeof(n));
			memcpy(&elems, base + f->off2, sizeof(elems));
			p = rbt__put_varint(p, n);
			const struct rbt_desc *rd = &rbt__rec[f->rec];
			for (uint32_t k = 0; k < n; k++) {
				ENSURE(SCALARS(rd->nf) + 1);
				*p++ = 0; /* length, patched below */
				size_t rs = (size_t)(p - w->raw);
				p = enc_fields(w, rd, elems + (size_t)k * rd->size, p,
					       ts);
				if (!p)
					return NULL;
				p = patch_len(w, rs, p);
				if (!p)
					return NULL;
			}
			ENSURE(SCALARS(d->nf - i));
			break;
		}
		default:
			return NULL;
		}
	}
	return p;
}

/* ---- generated encoders ----------------------------------------------------------
 * One function per list, expanded from the X-macros of rbt_format.h: the same
 * bytes as enc_fields() (FORMAT.md "Fields"), but the loop over the fields is
 * unrolled at compile time. The field index i and the slot index h are
 * counters the compiler folds into constants; h counts H and D fields in list
 * order from the list's slot0, exactly as rbt_tables.c numbers the slots.
 */
static inline __attribute__((always_inline)) uint8_t *put_v(uint8_t *p, uint64_t v)
{
	if (__builtin_expect(v < 0x80, 1)) {
		*p = (uint8_t)v;
		return p + 1;
	}
	if (v < 0x4000) {
		p[0] = (uint8_t)(v | 0x80);
		p[1] = (uint8_t)(v >> 7);
		return p + 2;
	}
	return rbt__put_varint(p, v);
}

#define ZZ(d) (((uint64_t)(d) << 1) ^ (uint64_t)((int64_t)(d) >> 63))

/* Is the field present (FORMAT.md: writers leave out exactly the zero values)? */
#define PRES_U(x) ((x) != 0)
#define PRES_I(x) ((x) != 0)
#define PRES_T(x) ((x) != 0)
#define PRES_H(x) ((x) != 0)
#define PRES_D(x) ((x) != 0)
#define PRES_S(x) ((x) != NULL && (x)[0] != 0)
#define PRES_B(x) ((x).data != NULL && (x).len != 0)
#define GP_F(k, n)                                    \
	m |= (uint64_t)(PRES_##k(s->n) ? 1 : 0) << i; \
	i++;
#define GP_A(r, n)                                                   \
	m |= (uint64_t)(s->n != NULL && s->n_##n != 0 ? 1 : 0) << i; \
	i++;

#define ISH_U 0
#define ISH_I 0
#define ISH_T 0
#define ISH_H 1
#define ISH_D 1
#define ISH_S 0
#define ISH_B 0

/* Encoders of one present field. Scalars need no room check: the list's
 * SCALARS(NF) was ensured before its bitmap and after every variable field. */
#define ENC_U(n) p = put_v(p, s->n);
#define ENC_I(n) p = put_v(p, ZZ(s->n));
#define ENC_T(n) p = put_v(p, ZZ(s->n - ts));
#define ENC_H(n)                              \
	{                                     \
		uint64_t v_ = s->n;           \
		p = put_v(p, ZZ(v_ - sl[h])); \
		sl[h] = v_;                   \
	}
#define ENC_D(n) ENC_H(n) /* the same bytes; D differs only in print */
#define ENC_S(n)                                          \
	{                                                 \
		p = enc_str(w, p, s->n, SCALARS(NF - i)); \
		if (!p)                                   \
			return NULL;                      \
	}
#define ENC_B(n)                                           \
	{                                                  \
		p = enc_blob(w, p, s->n, SCALARS(NF - i)); \
		if (!p)                                    \
			return NULL;                       \
	}
#define GE_F(k, n)         \
	if (m >> i & 1) {  \
		ENC_##k(n) \
	}                  \
	i++;               \
	h += ISH_##k;
#define GE_A(r, n)                                         \
	if (m >> i & 1) {                                  \
		p = enc_arr_##r(w, p, s->n_##n, s->n, ts); \
		if (!p)                                    \
			return NULL;                       \
		ENSURE(SCALARS(NF - i));                   \
	}                                                  \
	i++;

#define ONE_F(k, n) +1
#define ONE_A(r, n) +1

static uint8_t *enc_str(struct rbt_writer *w, uint8_t *p, const char *str, size_t after)
{
	size_t n = strlen(str);
	ENSURE(n + after);
	p = rbt__put_varint(p, n);
	memcpy(p, str, n);
	p += n;
	*p++ = 0;
	return p;
}

static uint8_t *enc_blob(struct rbt_writer *w, uint8_t *p, struct rbt_blob b,
			 size_t after)
{
	ENSURE(b.len + after);
	p = rbt__put_varint(p, b.len);
	memcpy(p, b.data, b.len);
	return p + b.len;
}

/* The body of one list's encoder: s points at its struct, sl at its slots; GA
 * encodes its A fields (GE_A over record structs, GE_FA over flat views). */
#define GEN_BODY(LIST, GA)                  \
	enum { NF = 0 LIST(ONE_F, ONE_A) }; \
	uint64_t m = 0;                     \
	unsigned i = 0, h = 0;              \
	(void)h;                            \
	(void)sl;                           \
	(void)ts;                           \
	LIST(GP_F, GP_A)                    \
	if (!m)                             \
		return p;                   \
	ENSURE(SCALARS(NF));                \
	p = put_v(p, m);                    \
	i = 0;                              \
	LIST(GE_F, GA)                      \
	return p;

/* The length byte before a record, patched after it. */
#define FREC(call)                                 \
	do {                                       \
		ENSURE(SCALARS(NF) + 1);           \
		*p++ = 0;                          \
		size_t rs_ = (size_t)(p - w->raw); \
		p = (call);                        \
		if (!p)                            \
			return NULL;               \
		p = patch_len(w, rs_, p);          \
		if (!p)                            \
			return NULL;               \
	} while (0)

/* A record list: its field-set encoder, then the A-field encoder for arrays of
 * it (count, then each record behind a length byte patched afterwards). */
#define GEN_REC(lname)                                                                \
	static inline __attribute__((always_inline))                                  \
	uint8_t *enc_rec_##lname(struct rbt_writer *w, const struct rbt_##lname *s,   \
				 uint8_t *p, uint64_t ts)                             \
	{                                                                             \
		uint64_t *sl = w->slots + rbt__rec[RBT_RECID_##lname].slot0;          \
		GEN_BODY(RBT_REC_##lname, GE_A)                                       \
	}                                                                             \
	static uint8_t *enc_arr_##lname(struct rbt_writer *w, uint8_t *p, uint32_t n, \
					const struct rbt_##lname *e, uint64_t ts)     \
	{                                                                             \
		enum { NF = 0 RBT_REC_##lname(ONE_F, ONE_A) };                        \
		p = put_v(p, n);                                                      \
		for (uint32_t k = 0; k < n; k++)                                      \
			FREC(enc_rec_##lname(w, e + k, p, ts));                       \
		return p;                                                             \
	}
/* In dependency order: send_wr and recv_wr hold sges. */
GEN_REC(sge)
GEN_REC(frame)
GEN_REC(wc)
GEN_REC(send_wr)
GEN_REC(recv_wr)

#define GEN_EV(NAME, id, lname)                                               \
	static inline uint8_t *enc_ev_##lname(struct rbt_writer *w,           \
					      const struct rbt_ev_##lname *s, \
					      uint8_t *p, uint64_t ts)        \
	{                                                                     \
		uint64_t *sl = w->slots + rbt__ev[id].slot0;                  \
		GEN_BODY(RBT_EV_##lname, GE_A)                                \
	}
RBT_EVENT_LIST(GEN_EV)

/* The fields of ev, by its type's generated encoder; NULL when memory ran out. */
static uint8_t *enc_event(struct rbt_writer *w, const struct rbt_event *ev, uint8_t *p)
{
	switch (ev->type) {
#define ENC_CASE(NAME, id, lname) \
	case id:                  \
		return enc_ev_##lname(w, &ev->u.lname, p, ev->ts);
		RBT_EVENT_LIST(ENC_CASE)
#undef ENC_CASE
	default:
		return NULL;
	}
}

static int flush_chunk(struct rbt_writer *w)
{
	if (!w->nev)
		return 0;
	uint32_t flags = w->chunk_flags;
	if (w->tscol) {
		/* the events, then the column, then its length */
		uint8_t *p = grow(w, w->raw + w->raw_len, w->col_len + 4);
		if (!p)
			return -ENOMEM;
		memcpy(p, w->col, w->col_len);
		rbt__put_le32(p + w->col_len, (uint32_t)w->col_len);
		w->raw_len += w->col_len + 4;
		w->col_len = 0;
		flags |= RBT_CHUNK_TSCOL;
	}
	size_t bound = ZSTD_compressBound(w->raw_len) + RBT_CHUNK_HDR;
	if (bound > w->out_cap) {
		uint8_t *n = realloc(w->out, bound);
		if (!n)
			return -ENOMEM;
		w->out = n;
		w->out_cap = bound;
	}
	size_t c = ZSTD_compressCCtx(w->cctx, w->out + RBT_CHUNK_HDR,
				     w->out_cap - RBT_CHUNK_HDR, w->raw, w->raw_len,
				     w->level);
	if (ZSTD_isError(c))
		return -EIO;
	struct rbt_chunk_hdr h = {
		.comp_len = (uint32_t)c,
		.raw_len = (uint32_t)w->raw_len,
		.events = w->nev,
		.stream = w->stream,
		.first_ts = w->first_ts,
		.last_ts = w->last_ts,
		.flags = flags,
		.data_crc = rbt__crc32c(0, w->out + RBT_CHUNK_HDR, c),
	};
	rbt__chunk_hdr_put(w->out, &h);
	int err = w->sink ? w->sink(w->sink_arg, w->out, RBT_CHUNK_HDR + c, w->first_ts,
				    w->last_ts)
			  : write_all(w->fd, w->out, RBT_CHUNK_HDR + c);
	if (err > 0)
		err = 0;
	if (err)
		return err;
	w->bytes += RBT_CHUNK_HDR + c;
	w->raw_len = 0;
	w->nev = 0;
	memset(w->slots, 0, sizeof(w->slots[0]) * rbt__nslots);
	return 0;
}

static int write_header(struct rbt_writer *w, const struct rbt_header *hdr)
{
	struct rbt_header h = *hdr;
	uint8_t *p = w->raw + RBT_FILE_PREFIX;
	p = enc_fields(w, &rbt__hdr_desc, (const uint8_t *)&h, p, 0);
	if (!p)
		return -ENOMEM;
	size_t body = (size_t)(p - w->raw) - RBT_FILE_PREFIX;
	if (body > RBT_MAX_HEADER_BODY)
		return -E2BIG;
	memcpy(w->raw, RBT_FILE_MAGIC, 8);
	rbt__put_le32(w->raw + 8, RBT_FORMAT_VERSION);
	rbt__put_le32(w->raw + 12, w->tscol ? RBT_MIN_READER_COL : RBT_MIN_READER);
	rbt__put_le32(w->raw + 16, (uint32_t)body);
	/* One checksum over the prefix before it and the body after it. */
	uint32_t crc = rbt__crc32c(0, w->raw, 20);
	crc = rbt__crc32c(crc, w->raw + RBT_FILE_PREFIX, body);
	rbt__put_le32(w->raw + 20, crc);
	int err = write_all(w->fd, w->raw, RBT_FILE_PREFIX + body);
	if (!err)
		w->bytes += RBT_FILE_PREFIX + body;
	return err;
}

static int writer_open(int fd, const struct rbt_header *hdr,
		       const struct rbt_writer_opts *opts, struct rbt_writer **out)
{
	*out = NULL;
	int sink = opts && opts->sink;
	if ((fd < 0 && !sink) || !hdr) {
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	rbt__init();
	struct rbt_writer *w = calloc(1, sizeof(*w));
	if (!w) {
		close(fd);
		return -ENOMEM;
	}
	w->fd = fd;
	if (opts) {
		w->sink = opts->sink;
		w->sink_arg = opts->sink_arg;
		w->chunk_flags = opts->chunk_flags & ~RBT_CHUNK_TSCOL;
		w->tscol = opts->ts_column != 0;
	}
	w->chunk_bytes = opts && opts->chunk_bytes ? opts->chunk_bytes : 256 << 10;
	if (w->chunk_bytes > RBT_MAX_RAW / 2)
		w->chunk_bytes = RBT_MAX_RAW / 2;
	w->level = opts && opts->zstd_level ? opts->zstd_level : 3;
	w->raw_cap = w->chunk_bytes + 4096;
	w->raw = malloc(w->raw_cap);
	w->cctx = ZSTD_createCCtx();
	if (w->tscol) {
		w->col_cap = 64 << 10;
		w->col = malloc(w->col_cap);
	}
	int err = -ENOMEM;
	if (w->raw && w->cctx && (w->col || !w->tscol))
		err = w->sink ? 0 : write_header(w, hdr);
	if (err) {
		w->err = err; /* close only releases: no trailer after a failed open */
		rbt_writer_close(w, NULL);
		return err;
	}
	*out = w;
	return 0;
}

int rbt_writer_open_fd(int fd, const struct rbt_header *hdr,
		       const struct rbt_writer_opts *opts, struct rbt_writer **out)
{
	if (opts && opts->sink) {
		struct rbt_writer_opts o = *opts;
		o.sink = NULL; /* a file writer */
		return writer_open(fd, hdr, &o, out);
	}
	return writer_open(fd, hdr, opts, out);
}

int rbt_writer_open_sink(const struct rbt_header *hdr, const struct rbt_writer_opts *opts,
			 struct rbt_writer **out)
{
	*out = NULL;
	if (!opts || !opts->sink)
		return -EINVAL;
	return writer_open(-1, hdr, opts, out);
}

int rbt_writer_copy_chunk(struct rbt_writer *w, const void *chunk, size_t len)
{
	struct rbt_chunk_hdr h;

	if (!w || !chunk)
		return -EINVAL;
	if (w->err)
		return w->err;
	if (len < RBT_CHUNK_HDR || rbt__chunk_hdr_get(chunk, &h) ||
	    RBT_CHUNK_HDR + (size_t)h.comp_len != len)
		return -EBADMSG;
	if ((h.flags & RBT_CHUNK_TSCOL) && !w->tscol)
		return -EINVAL; /* the file's header promised older readers */
	int err = flush_chunk(w);
	if (err)
		return w->err = err;
	w->in_chunk = 0;
	err = w->sink ? w->sink(w->sink_arg, chunk, len, h.first_ts, h.last_ts)
		      : write_all(w->fd, chunk, len);
	if (err < 0)
		return w->err = err;
	w->bytes += len;
	w->events += h.events;
	return 0;
}

int rbt_writer_open(const char *path, const struct rbt_header *hdr,
		    const struct rbt_writer_opts *opts, struct rbt_writer **out)
{
	*out = NULL;
	if (!path)
		return -EINVAL;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	return rbt_writer_open_fd(fd, hdr, opts, out);
}

int rbt_writer_begin_chunk(struct rbt_writer *w, uint32_t stream)
{
	if (!w)
		return -EINVAL;
	if (w->err)
		return w->err;
	if (w->in_chunk && w->stream != stream) {
		int err = flush_chunk(w);
		if (err)
			return w->err = err;
	}
	w->in_chunk = 1;
	w->stream = stream;
	return 0;
}

static int col_grow(struct rbt_writer *w)
{
	uint8_t *n = realloc(w->col, w->col_cap * 2);
	if (!n)
		return -ENOMEM;
	w->col = n;
	w->col_cap *= 2;
	return 0;
}

/* The framing of one event: its type, a length byte patched at ev_close(), the
 * ts delta. Returns where the fields go; *start is where the length counts from. */
static inline uint8_t *ev_open(struct rbt_writer *w, uint32_t type, uint64_t ts,
			       size_t *start)
{
	if (!w->nev) {
		w->first_ts = ts;
		w->prev_ts = ts;
	}
	uint8_t *p = grow(w, w->raw + w->raw_len, 32);
	if (!p)
		return NULL;
	*p++ = (uint8_t)type; /* ids < 64: a one-byte varint */
	*p++ = 0;	      /* payload length, patched below */
	*start = (size_t)(p - w->raw);
	uint64_t d = rbt__zigzag((int64_t)(ts - w->prev_ts));
	if (!w->tscol)
		return put_v(p, d);
	if (__builtin_expect(w->col_cap - w->col_len < 32, 0) && col_grow(w))
		return NULL;
	w->ev_type = (uint8_t)type;
	w->col_at = w->col_len;
	w->col_len = (size_t)(put_v(w->col + w->col_len, d) - w->col);
	return p;
}

/* The ts_exit of a post or poll (field 0, present when bit 0 of the bitmap
 * at start is set) moves from the event to the column. */
static inline uint8_t *tscol_take_exit(struct rbt_writer *w, size_t start, uint8_t *p)
{
	uint8_t *f = w->raw + start;
	if (p == f || !(f[0] & 1))
		return p;
	while (*f++ & 0x80)
		; /* the bitmap */
	uint8_t *x = f;
	while (*x++ & 0x80)
		; /* ts_exit */
	size_t k = (size_t)(x - f);
	if (__builtin_expect(w->col_cap - w->col_len < 16, 0) && col_grow(w))
		return NULL;
	memcpy(w->col + w->col_len, f, k);
	w->col_len += k;
	memmove(f, x, (size_t)(p - x));
	return p - k;
}

/* Ends the event that ev_open() began at raw_len; p is its end (NULL: out of
 * memory). */
/* Counts the event that ends at p, its length written, and ends a full chunk. */
static inline int ev_commit(struct rbt_writer *w, uint8_t *p, uint64_t ts)
{
	w->raw_len = (size_t)(p - w->raw);
	w->prev_ts = ts;
	w->last_ts = ts;
	w->nev++;
	w->events++;
	if (w->raw_len + w->col_len >= w->chunk_bytes) {
		int err = flush_chunk(w);
		if (err)
			return w->err = err;
	}
	return 0;
}

static inline int ev_close(struct rbt_writer *w, uint8_t *p, size_t start, uint64_t ts)
{
	size_t at = w->raw_len;
	if (w->tscol) {
		if (p && w->ev_type >= RBT_EV_POST_SEND && w->ev_type <= RBT_EV_POLL_CQ)
			p = tscol_take_exit(w, start, p);
	} else if (p && p == w->raw + start + 1 && w->raw[start] == 0) {
		p--; /* a zero ts delta with no field after it is left out too */
	}
	if (p)
		p = patch_len(w, start, p);
	if (!p)
		return w->err = -ENOMEM;
	size_t len = (size_t)(p - w->raw);
	/* (With a column: the events, the column and its length in RBT_MAX_RAW.) */
	if (__builtin_expect(len - at > RBT_MAX_RAW / 2 - (w->tscol ? 64 : 0), 0)) {
		/* Drop it (no reader would accept the chunk). Its handles are already
		 * in the slots, so end the chunk here: the next one starts afresh. */
		w->raw_len = at;
		w->col_len = w->col_at;
		int err = flush_chunk(w);
		if (err)
			return w->err = err;
		memset(w->slots, 0, sizeof(w->slots[0]) * rbt__nslots);
		return -E2BIG;
	}
	return ev_commit(w, p, ts);
}

int rbt_writer_append(struct rbt_writer *w, const struct rbt_event *ev)
{
	if (!w || !ev)
		return -EINVAL;
	if (w->err)
		return w->err;
	const struct rbt_desc *d = ev->type <= RBT_EV_MAX_ID ? &rbt__ev[ev->type] : NULL;
	if (!d || !d->name)
		return -EINVAL;
	if (!w->in_chunk) {
		w->in_chunk = 1;
		w->stream = ev->stream;
	}
	size_t start;
	uint8_t *p = ev_open(w, ev->type, ev->ts, &start);
	if (p)
		p = enc_event(w, ev, p);
	int err = ev_close(w, p, start, ev->ts);
	if (!err && ev->type == RBT_EV_LOSS)
		w->lost += ev->u.loss.events;
	return err;
}

/* ---- flat records ------------------------------------------------------------------
 * The generated encoders again, over "flat views": the record structs with
 * their arrays pointing at flat elements (rbt_format.h), walked by the
 * enc_farr_* functions below. The field lists, presence rules and slots are
 * the same macros as above, so the bytes are the same as append()'s; the
 * views are locals the compiler keeps in registers, and where a flat record
 * says a field is zero (no ext, no payload, no hw_ts) the copy specialised
 * for it tests nothing. */
#define FV_ARRAY(rec, name) \
	uint32_t n_##name;  \
	const void *name;
struct fv_send_wr {
	RBT_REC_send_wr(RBT__FIELD, FV_ARRAY)
};
struct fv_recv_wr {
	RBT_REC_recv_wr(RBT__FIELD, FV_ARRAY)
};
struct fv_post_send {
	RBT_EV_post_send(RBT__FIELD, FV_ARRAY)
};
struct fv_post_recv {
	RBT_EV_post_recv(RBT__FIELD, FV_ARRAY)
};
struct fv_post_srq_recv {
	RBT_EV_post_srq_recv(RBT__FIELD, FV_ARRAY)
};
struct fv_poll_cq {
	RBT_EV_poll_cq(RBT__FIELD, FV_ARRAY)
};

#define GE_FA(r, n)                                         \
	if (m >> i & 1) {                                   \
		p = enc_farr_##r(w, p, s->n_##n, s->n, ts); \
		if (!p)                                     \
			return NULL;                        \
		ENSURE(SCALARS(NF - i));                    \
	}                                                   \
	i++;

static inline __attribute__((always_inline)) uint8_t *
enc_farr_sge(struct rbt_writer *w, uint8_t *p, uint32_t n, const void *e, uint64_t ts)
{
	enum { NF = 0 RBT_REC_sge(ONE_F, ONE_A) };
	const struct rbt_flat_sge *sg = e;
	p = put_v(p, n);
	for (uint32_t k = 0; k < n; k++) {
		struct rbt_sge v = { .addr = sg[k].addr,
				     .length = sg[k].length,
				     .lkey = sg[k].lkey };
		FREC(enc_rec_sge(w, &v, p, ts));
	}
	return p;
}

static inline __attribute__((always_inline)) uint8_t *
enc_frec_send_wr(struct rbt_writer *w, const struct fv_send_wr *s, uint8_t *p,
		 uint64_t ts)
{
	uint64_t *sl = w->slots + rbt__rec[RBT_RECID_send_wr].slot0;
	GEN_BODY(RBT_REC_send_wr, GE_FA)
}

static inline __attribute__((always_inline)) uint8_t *
enc_frec_recv_wr(struct rbt_writer *w, const struct fv_recv_wr *s, uint8_t *p,
		 uint64_t ts)
{
	uint64_t *sl = w->slots + rbt__rec[RBT_RECID_recv_wr].slot0;
	GEN_BODY(RBT_REC_recv_wr, GE_FA)
}

/* e: the WRs as rbt_writer_append_flat() checked them. */
static uint8_t *enc_farr_send_wr(struct rbt_writer *w, uint8_t *p, uint32_t n,
				 const void *e, uint64_t ts)
{
	enum { NF = 0 RBT_REC_send_wr(ONE_F, ONE_A) };
	const uint8_t *q = e;
	p = put_v(p, n);
	for (uint32_t k = 0; k < n; k++) {
		const struct rbt_flat_swr *x = (const void *)q;
		struct fv_send_wr v = { .wr_id = x->wr_id,
					.opcode = x->opcode,
					.send_flags = x->send_flags,
					.imm_data = x->imm,
					.remote_addr = x->remote_addr,
					.rkey = x->rkey,
					.n_sges = x->nsge };
		q += sizeof(*x);
		if (__builtin_expect(!x->ext && !x->payload_len, 1)) {
			v.sges = q;
			q += (size_t)x->nsge * sizeof(struct rbt_flat_sge);
			FREC(enc_frec_send_wr(w, &v, p, ts));
			continue;
		}
		if (x->ext) {
			const struct rbt_flat_swr_ext *s = (const void *)q;
			struct fv_send_wr *d = &v;
			RBT_SWR_EXT_FIELDS(RBT_FIELD_CP)
			q += sizeof(*s);
		}
		v.sges = q;
		q += (size_t)x->nsge * sizeof(struct rbt_flat_sge);
		v.payload.len = x->payload_len;
		v.payload.data = x->payload_len ? q : NULL;
		q += ((size_t)x->payload_len + 7) & ~(size_t)7;
		FREC(enc_frec_send_wr(w, &v, p, ts));
	}
	return p;
}

/* The view of one dense send WR at q (rbt_writer_append_flat() checked it);
 * returns where the next one begins. A WR with nothing but its head and sges
 * leaves every field that only the other parts hold zero, constants here. */
static inline __attribute__((always_inline)) const uint8_t *fv_dswr(struct fv_send_wr *v,
								    const uint8_t *q)
{
	const struct rbt_flat_dswr *x = (const void *)q;
	*v = (struct fv_send_wr){ .wr_id = x->wr_id,
				  .opcode = x->opcode,
				  .send_flags = x->send_flags,
				  .imm_data = x->imm,
				  .n_sges = x->nsge };
	q += sizeof(*x);
	if (__builtin_expect(x->shape & RBT_DSWR_RDMA, 0)) {
		const struct rbt_flat_dswr_rdma *r = (const void *)q;
		v->remote_addr = r->remote_addr;
		v->rkey = r->rkey;
		q += sizeof(*r);
	}
	if (__builtin_expect(x->shape & RBT_DSWR_EXT, 0)) {
		const struct rbt_flat_swr_ext *s = (const void *)q;
		struct fv_send_wr *d = v;
		RBT_SWR_EXT_FIELDS(RBT_FIELD_CP)
		q += sizeof(*s);
	}
	uint32_t pl = 0;
	if (__builtin_expect(x->shape & RBT_DSWR_WIDE, 0)) {
		const struct rbt_flat_dswr_wide *wd = (const void *)q;
		v->send_flags = wd->send_flags;
		pl = wd->payload_len;
		q += sizeof(*wd);
	}
	v->sges = q;
	q += (size_t)x->nsge * sizeof(struct rbt_flat_sge);
	if (pl) {
		v->payload.len = pl;
		v->payload.data = q;
		q += ((size_t)pl + 7) & ~(size_t)7;
	}
	return q;
}

static uint8_t *enc_farr_dswr(struct rbt_writer *w, uint8_t *p, uint32_t n, const void *e,
			      uint64_t ts)
{
	enum { NF = 0 RBT_REC_send_wr(ONE_F, ONE_A) };
	const uint8_t *q = e;
	p = put_v(p, n);
	for (uint32_t k = 0; k < n; k++) {
		const struct rbt_flat_dswr *x = (const void *)q;
		struct fv_send_wr v;
		if (__builtin_expect(!x->shape, 1)) {
			/* head and sges only: the other fields are known zeros */
			v = (struct fv_send_wr){ .wr_id = x->wr_id,
						 .opcode = x->opcode,
						 .send_flags = x->send_flags,
						 .imm_data = x->imm,
						 .n_sges = x->nsge,
						 .sges = x + 1 };
			q += sizeof(*x) + (size_t)x->nsge * sizeof(struct rbt_flat_sge);
			FREC(enc_frec_send_wr(w, &v, p, ts));
			continue;
		}
		q = fv_dswr(&v, q);
		FREC(enc_frec_send_wr(w, &v, p, ts));
	}
	return p;
}

static uint8_t *enc_farr_recv_wr(struct rbt_writer *w, uint8_t *p, uint32_t n,
				 const void *e, uint64_t ts)
{
	enum { NF = 0 RBT_REC_recv_wr(ONE_F, ONE_A) };
	const uint8_t *q = e;
	p = put_v(p, n);
	for (uint32_t k = 0; k < n; k++) {
		const struct rbt_flat_rwr *x = (const void *)q;
		struct fv_recv_wr v = { .wr_id = x->wr_id,
					.n_sges = x->nsge,
					.sges = x + 1 };
		q += sizeof(*x) + (size_t)x->nsge * sizeof(struct rbt_flat_sge);
		FREC(enc_frec_recv_wr(w, &v, p, ts));
	}
	return p;
}

static inline __attribute__((always_inline)) void fv_wc(struct rbt_wc *v,
							const struct rbt_flat_wc *x)
{
	v->wr_id = x->wr_id;
	v->status = x->status;
	v->opcode = x->opcode;
	v->vendor_err = x->vendor_err;
	v->byte_len = x->byte_len;
	v->imm_data = x->wc_flags & RBT_FLAT_WC_WITH_INV ? x->imm : be32toh(x->imm);
	v->qp_num = x->qp_num;
	v->src_qp = x->src_qp;
	v->wc_flags = x->wc_flags;
	v->pkey_index = x->pkey_index;
	v->slid = x->slid;
	v->sl = x->sl;
	v->dlid_path_bits = x->dlid_path_bits;
	v->payload.data = NULL;
	v->payload.len = 0;
}

/* e: n rbt_flat_wc, n rbt_flat_wcx (RBT_FLAT_WCX in w->flat_wc), or n dense
 * completions (RBT_FLAT_DENSE). */
static uint8_t *enc_farr_wc(struct rbt_writer *w, uint8_t *p, uint32_t n, const void *e,
			    uint64_t ts)
{
	enum { NF = 0 RBT_REC_wc(ONE_F, ONE_A) };
	p = put_v(p, n);
	if (w->flat_wc & RBT_FLAT_DENSE) {
		const uint8_t *q = e;
		for (uint32_t k = 0; k < n; k++) {
			struct rbt_wc v;
			q += rbt_flat_dwc_get(&v, q);
			FREC(enc_rec_wc(w, &v, p, ts));
		}
		return p;
	}
	if (!(w->flat_wc & RBT_FLAT_WCX)) {
		const struct rbt_flat_wc *x = e;
		for (uint32_t k = 0; k < n; k++) {
			struct rbt_wc v;
			fv_wc(&v, x + k);
			v.hw_ts = 0;
			FREC(enc_rec_wc(w, &v, p, ts));
		}
		return p;
	}
	const struct rbt_flat_wcx *x = e;
	for (uint32_t k = 0; k < n; k++) {
		struct rbt_wc v;
		fv_wc(&v, &x[k].wc);
		v.hw_ts = x[k].hw_ts;
		FREC(enc_rec_wc(w, &v, p, ts));
	}
	return p;
}

#define GEN_FEV(lname, ID)                                                      \
	static uint8_t *enc_fev_##lname(struct rbt_writer *w,                   \
					const struct fv_##lname *s, uint8_t *p, \
					uint64_t ts)                            \
	{                                                                       \
		uint64_t *sl = w->slots + rbt__ev[ID].slot0;                    \
		GEN_BODY(RBT_EV_##lname, GE_FA)                                 \
	}
GEN_FEV(post_send, RBT_EV_POST_SEND)
/* The same over dense send WRs: its A field walks them with enc_farr_dswr. */
#define enc_farr_send_wr enc_farr_dswr
static uint8_t *enc_fev_post_sendd(struct rbt_writer *w, const struct fv_post_send *s,
				   uint8_t *p, uint64_t ts)
{
	uint64_t *sl = w->slots + rbt__ev[RBT_EV_POST_SEND].slot0;
	GEN_BODY(RBT_EV_post_send, GE_FA)
}
#undef enc_farr_send_wr
GEN_FEV(post_recv, RBT_EV_POST_RECV)
GEN_FEV(post_srq_recv, RBT_EV_POST_SRQ_RECV)
GEN_FEV(poll_cq, RBT_EV_POLL_CQ)

/* The commonest post of all, one send WR with one sge and nothing that needs
 * the extension or a payload, in straight-line code: the bytes of
 * enc_fev_post_send() for it (format_test compares them), field by field in
 * list order. Each record is far below 128 bytes (its fields are at most 10
 * bytes each), so its length is one byte, written at the end. */
struct post1_wr {
	uint64_t wr_id, remote_addr;
	uint32_t opcode, send_flags, imm_data, rkey;
};

static inline __attribute__((always_inline)) uint8_t *
enc_post1(struct rbt_writer *w, const struct rbt_flat_post *r, const struct post1_wr *x,
	  const struct rbt_flat_sge *g, uint8_t *p, uint64_t ts)
{
	uint64_t *se = w->slots + rbt__ev[RBT_EV_POST_SEND].slot0;
	uint64_t *sw = w->slots + rbt__rec[RBT_RECID_send_wr].slot0;
	uint64_t *sg = w->slots + rbt__rec[RBT_RECID_sge].slot0;

	p = grow(w, p, 256);
	if (!p)
		return NULL;
	/* post_send: ts_exit ret qp qp_num bad_wr api wrs */
	uint64_t m = (uint64_t)(r->ts_exit != 0) | (uint64_t)(r->ret != 0) << 1 |
		     (uint64_t)(r->obj != 0) << 2 | (uint64_t)(r->qp_num != 0) << 3 |
		     (uint64_t)(r->bad_wr != 0) << 4 | (uint64_t)(r->api != 0) << 5 |
		     1u << 6;
	p = put_v(p, m);
	if (r->ts_exit && w->tscol) {
		/* to the column (ev_open() left room for it), as ev_close() would */
		w->col_len = (size_t)(put_v(w->col + w->col_len, ZZ(r->ts_exit - ts)) -
				      w->col);
		w->ev_type = 0;
	} else if (r->ts_exit) {
		p = put_v(p, ZZ(r->ts_exit - ts));
	}
	if (r->ret)
		p = put_v(p, ZZ((int64_t)r->ret));
	if (r->obj) {
		p = put_v(p, ZZ(r->obj - se[0]));
		se[0] = r->obj;
	}
	if (r->qp_num)
		p = put_v(p, r->qp_num);
	if (r->bad_wr)
		p = put_v(p, r->bad_wr);
	if (r->api)
		p = put_v(p, r->api);
	*p++ = 1; /* one WR */
	uint8_t *lw = p++;
	/* send_wr: wr_id opcode send_flags imm_data remote_addr rkey, the five
	 * extension fields (zero), sges, payload (none) */
	m = (uint64_t)(x->wr_id != 0) | (uint64_t)(x->opcode != 0) << 1 |
	    (uint64_t)(x->send_flags != 0) << 2 | (uint64_t)(x->imm_data != 0) << 3 |
	    (uint64_t)(x->remote_addr != 0) << 4 | (uint64_t)(x->rkey != 0) << 5 |
	    1u << 11;
	p = put_v(p, m);
	if (x->wr_id)
		p = put_v(p, x->wr_id);
	if (x->opcode)
		p = put_v(p, x->opcode);
	if (x->send_flags)
		p = put_v(p, x->send_flags);
	if (x->imm_data)
		p = put_v(p, x->imm_data);
	if (x->remote_addr) {
		p = put_v(p, ZZ(x->remote_addr - sw[0]));
		sw[0] = x->remote_addr;
	}
	if (x->rkey)
		p = put_v(p, x->rkey);
	*p++ = 1; /* one sge */
	uint8_t *lg = p++;
	/* sge: addr length lkey */
	m = (uint64_t)(g->addr != 0) | (uint64_t)(g->length != 0) << 1 |
	    (uint64_t)(g->lkey != 0) << 2;
	if (m) {
		*p++ = (uint8_t)m;
		if (g->addr) {
			p = put_v(p, ZZ(g->addr - sg[0]));
			sg[0] = g->addr;
		}
		if (g->length)
			p = put_v(p, g->length);
		if (g->lkey)
			p = put_v(p, g->lkey);
	}
	*lg = (uint8_t)(p - (lg + 1));
	*lw = (uint8_t)(p - (lw + 1));
	return p;
}

/* Whether n dense completions (and the extensions they name) fit in len. */
static int flat_dwcs_fit(const uint8_t *q, uint32_t n, size_t len)
{
	size_t off = 0;
	for (uint32_t k = 0; k < n; k++) {
		const struct rbt_flat_dwc *x = (const void *)(q + off);
		if (off + sizeof(*x) > len)
			return 0;
		off += sizeof(*x) + (x->ext ? sizeof(struct rbt_flat_dwc_ext) : 0);
		if (off > len)
			return 0;
	}
	return 1;
}

/* Bytes the WRs of a flat post take (0: they overrun len). */
static size_t flat_wrs_size(enum rbt_flat_kind kind, uint32_t flags, const uint8_t *q,
			    uint32_t n, size_t len)
{
	size_t off = 0;
	for (uint32_t k = 0; k < n; k++) {
		size_t sz;
		if (kind == RBT_FLAT_POST_SEND && (flags & RBT_FLAT_DENSE)) {
			const struct rbt_flat_dswr *x = (const void *)(q + off);
			if (off + sizeof(*x) > len)
				return 0;
			sz = sizeof(*x) + (size_t)x->nsge * sizeof(struct rbt_flat_sge);
			if (x->shape & RBT_DSWR_RDMA)
				sz += sizeof(struct rbt_flat_dswr_rdma);
			if (x->shape & RBT_DSWR_EXT)
				sz += sizeof(struct rbt_flat_swr_ext);
			if (x->shape & RBT_DSWR_WIDE) {
				const struct rbt_flat_dswr_wide *wd;
				size_t at = sz -
					    (size_t)x->nsge * sizeof(struct rbt_flat_sge);
				if (off + at + sizeof(*wd) > len)
					return 0;
				wd = (const void *)(q + off + at);
				sz += sizeof(*wd) +
				      (((size_t)wd->payload_len + 7) & ~(size_t)7);
			}
			if (x->shape & ~(RBT_DSWR_RDMA | RBT_DSWR_EXT | RBT_DSWR_WIDE))
				return 0;
		} else if (kind == RBT_FLAT_POST_SEND) {
			const struct rbt_flat_swr *x = (const void *)(q + off);
			if (off + sizeof(*x) > len)
				return 0;
			sz = sizeof(*x) + (x->ext ? sizeof(struct rbt_flat_swr_ext) : 0) +
			     (size_t)x->nsge * sizeof(struct rbt_flat_sge) +
			     (((size_t)x->payload_len + 7) & ~(size_t)7);
		} else {
			const struct rbt_flat_rwr *x = (const void *)(q + off);
			if (off + sizeof(*x) > len)
				return 0;
			sz = sizeof(*x) + (size_t)x->nsge * sizeof(struct rbt_flat_sge);
		}
		if (sz > len - off)
			return 0;
		off += sz;
	}
	return off ? off : 1;
}

int rbt_writer_append_flat(struct rbt_writer *w, enum rbt_flat_kind kind, uint32_t flags,
			   const void *rec, size_t len)
{
	if (!w || !rec)
		return -EINVAL;
	if (w->err)
		return w->err;
	if (!w->in_chunk)
		return -EINVAL; /* a flat record names no stream: begin_chunk() first */
	size_t start;
	uint8_t *p;
	uint64_t ts;
	if (kind == RBT_FLAT_POLL) {
		const struct rbt_flat_poll *r = rec;
		size_t el = flags & RBT_FLAT_DENSE ? sizeof(struct rbt_flat_dwc)
			    : flags & RBT_FLAT_WCX ? sizeof(struct rbt_flat_wcx)
						   : sizeof(struct rbt_flat_wc);
		if (len < sizeof(*r) || r->nwc > (len - sizeof(*r)) / el ||
		    ((flags & RBT_FLAT_DENSE) &&
		     !flat_dwcs_fit((const uint8_t *)(r + 1), r->nwc, len - sizeof(*r))))
			return -EBADMSG;
		struct fv_poll_cq v = { .ts_exit = r->ts_exit,
					.ret = r->ret,
					.cq = r->cq,
					.asked = r->asked,
					.api = r->api,
					.count = r->count ? r->count : 1,
					.n_wcs = r->nwc,
					.wcs = r + 1 };
		ts = r->ts;
		w->flat_wc = flags;
		p = ev_open(w, RBT_EV_POLL_CQ, ts, &start);
		if (p && w->tscol && v.ts_exit) {
			/* ts_exit straight to the column (ev_open() left room for
			 * it), not moved there by ev_close(): encoded without it,
			 * the bitmap's bit 0 then set (count makes it non-empty) */
			w->col_len =
				(size_t)(put_v(w->col + w->col_len, ZZ(v.ts_exit - ts)) -
					 w->col);
			w->ev_type = 0;
			v.ts_exit = 0;
			p = enc_fev_poll_cq(w, &v, p, ts);
			if (p)
				w->raw[start] |= 1;
		} else if (p) {
			p = enc_fev_poll_cq(w, &v, p, ts);
		}
		return ev_close(w, p, start, ts);
	}
	const struct rbt_flat_post *r = rec;
	if (len < sizeof(*r) || (kind != RBT_FLAT_POST_SEND &&
				 kind != RBT_FLAT_POST_RECV && kind != RBT_FLAT_POST_SRQ))
		return len < sizeof(*r) ? -EBADMSG : -EINVAL;
	ts = r->ts;
	const struct rbt_flat_dswr *d = (const void *)(r + 1);
	if (kind == RBT_FLAT_POST_SEND && (flags & RBT_FLAT_DENSE) && r->nwr == 1 &&
	    len >= sizeof(*r) + sizeof(*d) + sizeof(struct rbt_flat_sge) &&
	    d->nsge == 1 && !(d->shape & ~RBT_DSWR_RDMA)) {
		/* the commonest post, sized here: its head, the remote part when
		 * there is one, then the sge */
		const struct rbt_flat_dswr_rdma *rd = (const void *)(d + 1);
		struct rbt_flat_dswr_rdma none = { 0 };
		size_t rl = d->shape ? sizeof(*rd) : 0;
		if (len < sizeof(*r) + sizeof(*d) + rl + sizeof(struct rbt_flat_sge))
			return -EBADMSG;
		if (!d->shape)
			rd = &none;
		struct post1_wr x = { d->wr_id,	     rd->remote_addr, d->opcode,
				      d->send_flags, d->imm,	      rd->rkey };
		p = ev_open(w, RBT_EV_POST_SEND, ts, &start);
		if (p)
			p = enc_post1(w, r, &x,
				      (const void *)((const uint8_t *)(d + 1) + rl), p,
				      ts);
		if (!p || !w->tscol)
			return ev_close(w, p, start, ts);
		/* Its ts_exit is in the column already and its fields are far
		 * below 128 bytes (enc_post1()): ev_close() would only do this. */
		w->raw[start - 1] = (uint8_t)(p - (w->raw + start));
		return ev_commit(w, p, ts);
	}
	if (r->nwr && !flat_wrs_size(kind, flags, (const uint8_t *)(r + 1), r->nwr,
				     len - sizeof(*r)))
		return -EBADMSG;
	switch (kind) {
	case RBT_FLAT_POST_SEND: {
		struct fv_post_send v = { .ts_exit = r->ts_exit,
					  .ret = r->ret,
					  .qp = r->obj,
					  .qp_num = r->qp_num,
					  .bad_wr = r->bad_wr,
					  .api = r->api,
					  .n_wrs = r->nwr,
					  .wrs = r + 1 };
		p = ev_open(w, RBT_EV_POST_SEND, ts, &start);
		if (!p)
			break;
		if (flags & RBT_FLAT_DENSE) {
			p = enc_fev_post_sendd(w, &v, p, ts);
			break;
		}
		const struct rbt_flat_swr *x = (const void *)(r + 1);
		if (r->nwr == 1 && x->nsge == 1 && !x->ext && !x->payload_len) {
			struct post1_wr f = { x->wr_id,	     x->remote_addr, x->opcode,
					      x->send_flags, x->imm,	     x->rkey };
			p = enc_post1(w, r, &f, (const void *)(x + 1), p, ts);
		} else {
			p = enc_fev_post_send(w, &v, p, ts);
		}
		break;
	}
	case RBT_FLAT_POST_RECV: {
		struct fv_post_recv v = { .ts_exit = r->ts_exit,
					  .ret = r->ret,
					  .qp = r->obj,
					  .qp_num = r->qp_num,
					  .bad_wr = r->bad_wr,
					  .n_wrs = r->nwr,
					  .wrs = r + 1 };
		p = ev_open(w, RBT_EV_POST_RECV, ts, &start);
		if (p)
			p = enc_fev_post_recv(w, &v, p, ts);
		break;
	}
	default: {
		struct fv_post_srq_recv v = { .ts_exit = r->ts_exit,
					      .ret = r->ret,
					      .srq = r->obj,
					      .bad_wr = r->bad_wr,
					      .n_wrs = r->nwr,
					      .wrs = r + 1 };
		p = ev_open(w, RBT_EV_POST_SRQ_RECV, ts, &start);
		if (p)
			p = enc_fev_post_srq_recv(w, &v, p, ts);
		break;
	}
	}
	return ev_close(w, p, start, ts);
}

int rbt_writer_end_chunk(struct rbt_writer *w)
{
	if (!w)
		return -EINVAL;
	if (w->err)
		return w->err;
	int err = flush_chunk(w);
	if (err)
		return w->err = err;
	w->in_chunk = 0;
	return 0;
}

int rbt_writer_close(struct rbt_writer *w, const struct rbt_trailer *trailer)
{
	if (!w)
		return 0;
	int err = w->err;
	if (!err && w->cctx && w->raw)
		err = rbt_writer_end_chunk(w);
	if (!err && w->cctx && w->raw && !w->sink) {
		struct rbt_trailer t = { 0 };
		if (trailer)
			t = *trailer;
		t.events = w->events;
		if (t.lost_events < w->lost)
			t.lost_events = w->lost;
		uint8_t buf[RBT_TRAILER_SIZE];
		rbt__trailer_put(buf, &t);
		err = write_all(w->fd, buf, sizeof(buf));
		if (!err)
			w->bytes += sizeof(buf);
	}
	if (w->fd >= 0 && close(w->fd) && !err)
		err = -errno;
	ZSTD_freeCCtx(w->cctx);
	free(w->raw);
	free(w->out);
	free(w->col);
	free(w);
	return err;
}

uint64_t rbt_writer_bytes(const struct rbt_writer *w)
{
	return w ? w->bytes : 0;
}
