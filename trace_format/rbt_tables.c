/* rbt_tables.c - the descriptor tables generated from the X-macro lists of
 * rbt_format.h, the names, the checksum and the fixed little-endian structures.
 *
 * Everything here is generated from the lists: never write a per-event case by
 * hand, or the encoder, decoder and printers will drift apart.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "trace_format/rbt_internal.h"

struct rbt_desc rbt__ev[RBT_EV_MAX_ID + 1];
struct rbt_desc rbt__rec[RBT_REC_COUNT];
uint32_t rbt__nslots;

#define RBT__D_F(k, n) { .kind = RBT_K_##k, .off = offsetof(cur_t, n), .name = #n },
#define RBT__D_A(r, n)                   \
	{ .kind = RBT_K_A,               \
	  .rec = RBT_RECID_##r,          \
	  .off = offsetof(cur_t, n_##n), \
	  .off2 = offsetof(cur_t, n),    \
	  .name = #n },

static void set_desc(struct rbt_desc *d, const char *name, struct rbt_fdesc *f, size_t nf,
		     size_t size)
{
	d->name = name;
	d->nf = (uint32_t)nf;
	d->size = (uint32_t)size;
	d->f = f;
	d->has_var = 0;
	d->has_str = 0;
	/* The writer's generated encoders count H and D fields from here, in list
	 * order. */
	d->slot0 = rbt__nslots;
	for (size_t i = 0; i < nf; i++) {
		f[i].zz = f[i].kind == RBT_K_I || f[i].kind == RBT_K_T ||
			  rbt__slotted(f[i].kind);
		f[i].tmask = f[i].kind == RBT_K_T ? ~0ull : 0;
		f[i].slot = 0;
		if (rbt__slotted(f[i].kind))
			f[i].slot = (uint16_t)rbt__nslots++;
		if (f[i].kind == RBT_K_S || f[i].kind == RBT_K_B || f[i].kind == RBT_K_A)
			d->has_var = 1;
		if (f[i].kind == RBT_K_S)
			d->has_str = 1;
	}
}

/* Offsets must be taken against each struct in turn, so each list expands inside
 * its own function where cur_t names that struct. */
#define RBT__GEN_REC(lname)                                                            \
	static void desc_rec_##lname(void)                                             \
	{                                                                              \
		typedef struct rbt_##lname cur_t;                                      \
		static struct rbt_fdesc f[] = { RBT_REC_##lname(RBT__D_F, RBT__D_A) }; \
		set_desc(&rbt__rec[RBT_RECID_##lname], #lname, f, RBT_ARRAY_SIZE(f),   \
			 sizeof(cur_t));                                               \
	}
RBT__GEN_REC(sge)
RBT__GEN_REC(send_wr)
RBT__GEN_REC(recv_wr)
RBT__GEN_REC(wc)
RBT__GEN_REC(frame)

#define RBT__GEN_EV(NAME, id, lname)                                                  \
	static void desc_ev_##lname(void)                                             \
	{                                                                             \
		typedef struct rbt_ev_##lname cur_t;                                  \
		static struct rbt_fdesc f[] = { RBT_EV_##lname(RBT__D_F, RBT__D_A) }; \
		_Static_assert(id > 0 && id <= RBT_EV_MAX_ID, "event id range");      \
		set_desc(&rbt__ev[id], #lname, f, RBT_ARRAY_SIZE(f), sizeof(cur_t));  \
	}
RBT_EVENT_LIST(RBT__GEN_EV)

/* The header body: not an event, but the same encoding (FORMAT.md). */
static struct rbt_fdesc hdr_fields[] = {
	{ .kind = RBT_K_U, .off = offsetof(struct rbt_header, pid), .name = "pid" },
	{ .kind = RBT_K_U, .off = offsetof(struct rbt_header, ppid), .name = "ppid" },
	{ .kind = RBT_K_U,
	  .off = offsetof(struct rbt_header, clock_source),
	  .name = "clock_source" },
	{ .kind = RBT_K_U,
	  .off = offsetof(struct rbt_header, clock_hz),
	  .name = "clock_hz" },
	{ .kind = RBT_K_U,
	  .off = offsetof(struct rbt_header, start.ticks),
	  .name = "start_ticks" },
	{ .kind = RBT_K_U,
	  .off = offsetof(struct rbt_header, start.mono_ns),
	  .name = "start_mono_ns" },
	{ .kind = RBT_K_U,
	  .off = offsetof(struct rbt_header, start.real_ns),
	  .name = "start_real_ns" },
	{ .kind = RBT_K_S, .off = offsetof(struct rbt_header, host), .name = "host" },
	{ .kind = RBT_K_S,
	  .off = offsetof(struct rbt_header, cmdline),
	  .name = "cmdline" },
	{ .kind = RBT_K_S, .off = offsetof(struct rbt_header, tool), .name = "tool" },
	{ .kind = RBT_K_U,
	  .off = offsetof(struct rbt_header, series_index),
	  .name = "series_index" },
	{ .kind = RBT_K_S, .off = offsetof(struct rbt_header, series), .name = "series" },
};
struct rbt_desc rbt__hdr_desc;

/* The slots must fit: count the scalar fields (a bound on the H and D fields) of
 * every list at compile time. */
#define RBT__ISX_U		     1
#define RBT__ISX_I		     1
#define RBT__ISX_T		     1
#define RBT__ISX_H		     1
#define RBT__ISX_D		     1
#define RBT__ISX_S		     0
#define RBT__ISX_B		     0
#define RBT__CNT_F(k, n)	     +RBT__ISX_##k
#define RBT__CNT_A(r, n)	     +0
#define RBT__CNT_EV(NAME, id, lname) RBT_EV_##lname(RBT__CNT_F, RBT__CNT_A)
_Static_assert(1 + 16 /* header */ RBT_EVENT_LIST(RBT__CNT_EV) RBT_REC_sge(
			   RBT__CNT_F, RBT__CNT_A) RBT_REC_send_wr(RBT__CNT_F, RBT__CNT_A)
				       RBT_REC_recv_wr(RBT__CNT_F, RBT__CNT_A)
					       RBT_REC_wc(RBT__CNT_F, RBT__CNT_A)
						       RBT_REC_frame(RBT__CNT_F,
								     RBT__CNT_A) <=
		       RBT_MAX_SLOTS,
	       "more scalar fields than RBT_MAX_SLOTS");

/* A presence bitmap is one uint64_t: at most 63 fields per list (FORMAT.md). */
#define RBT__ONE_F(k, n) +1
#define RBT__ONE_A(r, n) +1
#define RBT__NF_EV(NAME, id, lname)                                    \
	_Static_assert(0 RBT_EV_##lname(RBT__ONE_F, RBT__ONE_A) <= 63, \
		       #lname " has more than 63 fields");
RBT_EVENT_LIST(RBT__NF_EV)
#define RBT__NF_REC(lname)                                              \
	_Static_assert(0 RBT_REC_##lname(RBT__ONE_F, RBT__ONE_A) <= 63, \
		       #lname " has more than 63 fields");
RBT__NF_REC(sge)
RBT__NF_REC(send_wr)
RBT__NF_REC(recv_wr)
RBT__NF_REC(wc)
RBT__NF_REC(frame)

static uint32_t crc_tab[8][256];

static void init_once(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & -(c & 1));
		crc_tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^
					crc_tab[0][crc_tab[t - 1][i] & 0xff];

	rbt__nslots = 1; /* slot 0: unused */
	desc_rec_sge();
	desc_rec_send_wr();
	desc_rec_recv_wr();
	desc_rec_wc();
	desc_rec_frame();
#define RBT__CALL_EV(NAME, id, lname) desc_ev_##lname();
	RBT_EVENT_LIST(RBT__CALL_EV)
	set_desc(&rbt__hdr_desc, "header", hdr_fields, RBT_ARRAY_SIZE(hdr_fields),
		 sizeof(struct rbt_header));
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

void rbt__init(void)
{
	pthread_once(&once, init_once);
}

/* CRC-32C (Castagnoli), reflected, slicing by 8. Used on compressed bytes only,
 * so it is far from the hot path. */
uint32_t rbt__crc32c(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	crc = ~crc;
	while (len >= 8) {
		uint32_t lo = rbt__get_le32(p) ^ crc, hi = rbt__get_le32(p + 4);
		crc = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^
		      crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^
		      crc_tab[3][hi & 0xff] ^ crc_tab[2][(hi >> 8) & 0xff] ^
		      crc_tab[1][(hi >> 16) & 0xff] ^ crc_tab[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

/* A fixed block (chunk header, trailer): its magic first, the CRC32C of the bytes
 * before it at crc_at. */
static bool block_ok(const uint8_t *p, uint32_t magic, size_t crc_at)
{
	return rbt__get_le32(p) == magic &&
	       rbt__get_le32(p + crc_at) == rbt__crc32c(0, p, crc_at);
}

void rbt__chunk_hdr_put(uint8_t *p, const struct rbt_chunk_hdr *h)
{
	rbt__put_le32(p, RBT_CHUNK_MAGIC);
	rbt__put_le32(p + 4, h->comp_len);
	rbt__put_le32(p + 8, h->raw_len);
	rbt__put_le32(p + 12, h->events);
	rbt__put_le32(p + 16, h->stream);
	rbt__put_le32(p + 20, h->flags);
	rbt__put_le64(p + 24, h->first_ts);
	rbt__put_le64(p + 32, h->last_ts);
	rbt__put_le32(p + 40, h->data_crc);
	rbt__put_le32(p + 44, rbt__crc32c(0, p, 44));
}

int rbt__chunk_hdr_get(const uint8_t *p, struct rbt_chunk_hdr *h)
{
	if (!block_ok(p, RBT_CHUNK_MAGIC, 44))
		return -EBADMSG;
	h->comp_len = rbt__get_le32(p + 4);
	h->raw_len = rbt__get_le32(p + 8);
	h->events = rbt__get_le32(p + 12);
	h->stream = rbt__get_le32(p + 16);
	h->flags = rbt__get_le32(p + 20);
	h->first_ts = rbt__get_le64(p + 24);
	h->last_ts = rbt__get_le64(p + 32);
	h->data_crc = rbt__get_le32(p + 40);
	return 0;
}

void rbt__trailer_put(uint8_t *p, const struct rbt_trailer *t)
{
	rbt__put_le32(p, RBT_TRAILER_MAGIC);
	rbt__put_le32(p + 4, (t->end_how & 0xff) | (t->end_signal & 0xff) << 8);
	rbt__put_le64(p + 8, t->end.ticks);
	rbt__put_le64(p + 16, t->end.mono_ns);
	rbt__put_le64(p + 24, t->end.real_ns);
	rbt__put_le64(p + 32, t->events);
	rbt__put_le64(p + 40, t->lost_events);
	rbt__put_le32(p + 48, (uint32_t)t->exit_code);
	rbt__put_le32(p + 52, rbt__crc32c(0, p, 52));
}

int rbt__trailer_get(const uint8_t *p, struct rbt_trailer *t)
{
	if (!block_ok(p, RBT_TRAILER_MAGIC, 52))
		return -EBADMSG;
	t->end.ticks = rbt__get_le64(p + 8);
	t->end.mono_ns = rbt__get_le64(p + 16);
	t->end.real_ns = rbt__get_le64(p + 24);
	t->events = rbt__get_le64(p + 32);
	t->lost_events = rbt__get_le64(p + 40);
	t->end_how = rbt__get_le32(p + 4) & 0xff;
	t->end_signal = rbt__get_le32(p + 4) >> 8 & 0xff;
	t->exit_code = (int32_t)rbt__get_le32(p + 48);
	return 0;
}

/* The text of a (NAME, id, text) list's id, NULL for an id not in it: rbt_end_name
 * (RBT_END_LIST) and rbt_trigger_name (RBT_TRIGGER_LIST). */
#define RBT__CASE_TEXT(NAME, id, text) \
	case id:                       \
		return text;
#define RBT__TEXT_OF(fn, type, LIST)         \
	const char *fn(type v)               \
	{                                    \
		switch (v) {                 \
			LIST(RBT__CASE_TEXT) \
		}                            \
		return NULL;                 \
	}
RBT__TEXT_OF(rbt_end_name, uint32_t, RBT_END_LIST)
RBT__TEXT_OF(rbt_trigger_name, uint64_t, RBT_TRIGGER_LIST)
#undef RBT__TEXT_OF
#undef RBT__CASE_TEXT

const char *rbt_event_name(uint32_t type)
{
	static const char *const names[RBT_EV_MAX_ID + 1] = {
#define RBT__NAME(NAME, id, lname) [id] = #lname,
		RBT_EVENT_LIST(RBT__NAME)
	};
	return type <= RBT_EV_MAX_ID ? names[type] : NULL;
}

uint32_t rbt_event_type_from_name(const char *name)
{
	if (!name)
		return 0;
	for (uint32_t t = 1; t <= RBT_EV_MAX_ID; t++) {
		const char *n = rbt_event_name(t);
		if (n && !strcmp(n, name))
			return t;
	}
	return 0;
}

const char *rbt_strerror(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return "success";
	case ENODATA:
		return "empty file";
	case ENOMSG:
		return "truncated inside the file header";
	case EILSEQ:
		return "not an rbtrace trace (bad magic)";
	case EBADMSG:
		return "corrupted trace data";
	case EPROTONOSUPPORT:
		return "trace format version too new for this reader";
	case E2BIG:
		return "event or chunk too large";
	case EISDIR:
		return "is a directory, not a trace file";
	default:
		return strerror(err);
	}
}

double rbt_ticks_to_ns(const struct rbt_header *h, uint64_t ticks)
{
	if (!h || !h->clock_hz)
		return (double)ticks;
	double d = (double)(int64_t)(ticks - h->start.ticks);
	return d * 1e9 / (double)h->clock_hz;
}

int rbt_header_same_recording(const struct rbt_header *a, const struct rbt_header *b)
{
	if (!a->pid || !a->start.ticks)
		return 0;
	return a->pid == b->pid && a->start.ticks == b->start.ticks &&
	       a->start.real_ns == b->start.real_ns &&
	       !strcmp(a->host ? a->host : "", b->host ? b->host : "");
}

size_t rbt_series_path(const char *first, uint32_t index, char *buf, size_t len)
{
	size_t n = strlen(first);
	int k;

	if (!index)
		k = snprintf(buf, len, "%s", first);
	else if (n > 4 && !strcmp(first + n - 4, ".rbt"))
		k = snprintf(buf, len, "%.*s-part%u.rbt", (int)(n - 4), first, index);
	else
		k = snprintf(buf, len, "%s-part%u", first, index);
	return k < 0 ? 0 : (size_t)k;
}
