/* rbt_internal.h - what the writer, the reader and the printers of trace_format/
 * share: the field descriptor tables generated from the lists in rbt_format.h, the
 * on-disk constants and the varint/checksum primitives.
 *
 * Never include this outside trace_format/: the bytes of a trace are private here.
 */
#ifndef RBT_INTERNAL_H
#define RBT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "trace_format/rbt_format.h"

#define RBT_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- on-disk constants (FORMAT.md) ---------------------------------------- */
#define RBT_FILE_MAGIC	    "\x89RBTRACE" /* 8 bytes */
#define RBT_FILE_PREFIX	    24		  /* magic, version, min_reader, body_len, crc */
#define RBT_MIN_READER	    1		  /* oldest reader that can read what we write */
#define RBT_MIN_READER_COL  2		  /* ... with a timestamp column (ts_column) */
#define RBT_CHUNK_MAGIC	    0x4b434252u	  /* "RBCK" little-endian */
#define RBT_TRAILER_MAGIC   0x444e4252u	  /* "RBND" */
#define RBT_CHUNK_HDR	    48
#define RBT_TRAILER_SIZE    56
#define RBT_MAX_RAW	    (64u << 20) /* largest decoded chunk a reader accepts */
#define RBT_MAX_COMP	    (RBT_MAX_RAW + (RBT_MAX_RAW >> 7) + 4096)
#define RBT_MAX_HEADER_BODY (1u << 20)
#define RBT_MAX_EVENT_ARENA (64u << 20)

/* ---- field descriptors --------------------------------------------------- */
/* The scalar kinds come first (RBT_K_SCALAR ends them): they are all one
 * uint64_t in the decoded struct and one varint on disk. H and D are coded
 * alike, as deltas in a slot (FORMAT.md "Field slots"); they differ only in how
 * they print (H is an identity, D a number like U). */
enum rbt_kind { RBT_K_U, RBT_K_I, RBT_K_T, RBT_K_H, RBT_K_D, RBT_K_S, RBT_K_B, RBT_K_A };
#define RBT_K_SCALAR RBT_K_D /* kinds <= this are scalars */

/* Does a field of this kind have a slot (a delta base)? */
static inline int rbt__slotted(unsigned kind)
{
	return kind == RBT_K_H || kind == RBT_K_D;
}

enum rbt_rec_id {
	RBT_RECID_sge,
	RBT_RECID_send_wr,
	RBT_RECID_recv_wr,
	RBT_RECID_wc,
	RBT_RECID_frame,
	RBT_REC_COUNT,
};

struct rbt_fdesc {
	uint8_t kind;	/* enum rbt_kind */
	uint8_t rec;	/* A: enum rbt_rec_id of the elements */
	uint8_t zz;	/* I, T, H, D: the varint holds a zigzag value */
	uint16_t off;	/* offset of the value (A: of the count n_<name>) */
	uint16_t off2;	/* A: offset of the element pointer */
	uint16_t slot;	/* H, D: index of this field's previous-value slot */
	uint64_t tmask; /* all ones for T: value = delta + (ts & tmask) */
	const char *name;
};

/* One event type or sub-record: its fields in list order. */
struct rbt_desc {
	const char *name; /* NULL: not a known type */
	uint32_t nf;
	uint32_t size;	  /* sizeof the decoded struct */
	uint32_t has_var; /* any S, B or A field */
	uint32_t has_str; /* any S field: absent ones must read as "" */
	uint32_t slot0;	  /* slot of the first H or D field; the others follow it */
	struct rbt_fdesc *f;
};

extern struct rbt_desc rbt__ev[RBT_EV_MAX_ID + 1];
extern struct rbt_desc rbt__rec[RBT_REC_COUNT];
extern uint32_t rbt__nslots; /* 1 + the H and D fields of all events and records */
#define RBT_MAX_SLOTS 1024

/* Fills the tables once; every public entry point that uses them calls it. */
void rbt__init(void);

/* The header's own field list (FORMAT.md "File header"), encoded with the same
 * generic code as events. */
extern struct rbt_desc rbt__hdr_desc;

/* ---- primitives ----------------------------------------------------------- */
uint32_t rbt__crc32c(uint32_t crc, const void *buf, size_t len);

static inline uint8_t *rbt__put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static inline uint64_t rbt__zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t rbt__unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* Returns the position after the varint, or NULL when it runs past end or is
 * longer than 10 bytes. */
static inline const uint8_t *rbt__get_varint(const uint8_t *p, const uint8_t *end,
					     uint64_t *out)
{
	if (p < end && *p < 0x80) {
		*out = *p;
		return p + 1;
	}
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 70; shift += 7) {
		if (p >= end)
			return NULL;
		uint8_t b = *p++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return p;
		}
	}
	return NULL;
}

static inline void rbt__put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void rbt__put_le64(uint8_t *p, uint64_t v)
{
	rbt__put_le32(p, (uint32_t)v);
	rbt__put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t rbt__get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t rbt__get_le64(const uint8_t *p)
{
	return rbt__get_le32(p) | (uint64_t)rbt__get_le32(p + 4) << 32;
}

/* The fixed chunk header, decoded. */
struct rbt_chunk_hdr {
	uint32_t comp_len;
	uint32_t raw_len;
	uint32_t events;
	uint32_t stream;
	uint32_t flags;
	uint64_t first_ts;
	uint64_t last_ts;
	uint32_t data_crc;
};

void rbt__chunk_hdr_put(uint8_t *p, const struct rbt_chunk_hdr *h);
/* 0, or -EBADMSG when the magic or the header checksum is wrong. */
int rbt__chunk_hdr_get(const uint8_t *p, struct rbt_chunk_hdr *h);

void rbt__trailer_put(uint8_t *p, const struct rbt_trailer *t);
int rbt__trailer_get(const uint8_t *p, struct rbt_trailer *t);

#endif
