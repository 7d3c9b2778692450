/* analyzer_pbuf.c - the protobuf wire format, as the Perfetto timeline needs it:
 * varints, two's-complement int64, doubles, length-delimited strings and nested
 * messages, built in one growing buffer and written out whole messages at a time.
 *
 * It knows no message, only the wire rules (tag = field << 3 | wire type). It
 * never writes a half message to the file: an_pb_flush() writes only at depth 0.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

enum { AN_PB_VARINT = 0, AN_PB_I64 = 1, AN_PB_LEN = 2 };

static bool an_pb_room(struct an_pb *pb, size_t more)
{
	if (pb->oom)
		return false;
	if (pb->n + more <= pb->cap)
		return true;
	size_t cap = pb->cap ? pb->cap : 1 << 16;
	while (cap < pb->n + more)
		cap *= 2;
	uint8_t *b = realloc(pb->b, cap);
	if (!b) {
		pb->oom = true;
		return false;
	}
	pb->b = b;
	pb->cap = cap;
	return true;
}

static size_t an_pb_put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

static void an_pb_raw_varint(struct an_pb *pb, uint64_t v)
{
	if (an_pb_room(pb, 10))
		pb->n += an_pb_put_varint(pb->b + pb->n, v);
}

static void an_pb_tag(struct an_pb *pb, uint32_t field, int wt)
{
	an_pb_raw_varint(pb, (uint64_t)field << 3 | (uint64_t)wt);
}

void an_pb_varint(struct an_pb *pb, uint32_t field, uint64_t v)
{
	an_pb_tag(pb, field, AN_PB_VARINT);
	an_pb_raw_varint(pb, v);
}

void an_pb_int(struct an_pb *pb, uint32_t field, int64_t v)
{
	an_pb_varint(pb, field, (uint64_t)v);
}

void an_pb_double(struct an_pb *pb, uint32_t field, double v)
{
	uint64_t u;
	memcpy(&u, &v, sizeof(u));
	an_pb_tag(pb, field, AN_PB_I64);
	if (!an_pb_room(pb, 8))
		return;
	for (int i = 0; i < 8; i++)
		pb->b[pb->n++] = (uint8_t)(u >> (8 * i));
}

void an_pb_bytes(struct an_pb *pb, uint32_t field, const void *p, size_t len)
{
	an_pb_tag(pb, field, AN_PB_LEN);
	an_pb_raw_varint(pb, len);
	if (len && an_pb_room(pb, len)) {
		memcpy(pb->b + pb->n, p, len);
		pb->n += len;
	}
}

void an_pb_str(struct an_pb *pb, uint32_t field, const char *s)
{
	an_pb_bytes(pb, field, s, strlen(s));
}

void an_pb_begin(struct an_pb *pb, uint32_t field)
{
	an_pb_tag(pb, field, AN_PB_LEN);
	if (pb->depth >= (int)(sizeof(pb->open) / sizeof(pb->open[0]))) {
		pb->oom = true; /* a writer bug, not data: fail the output */
		return;
	}
	pb->open[pb->depth++] = pb->n;
}

/* The length goes in front of the content: move the content up by its size
 * (messages here are small; the memmove is a few dozen bytes). */
void an_pb_end(struct an_pb *pb)
{
	if (pb->depth <= 0) {
		pb->oom = true;
		return;
	}
	size_t start = pb->open[--pb->depth];
	if (pb->oom)
		return;
	size_t len = pb->n - start;
	uint8_t tmp[10];
	size_t k = an_pb_put_varint(tmp, len);
	if (!an_pb_room(pb, k))
		return;
	memmove(pb->b + start + k, pb->b + start, len);
	memcpy(pb->b + start, tmp, k);
	pb->n += k;
}

int an_pb_flush(struct an_pb *pb, FILE *f)
{
	if (pb->oom)
		return -ENOMEM;
	if (pb->depth)
		return 0;
	if (pb->n && fwrite(pb->b, 1, pb->n, f) != pb->n)
		return -EIO;
	pb->n = 0;
	return 0;
}

void an_pb_free(struct an_pb *pb)
{
	free(pb->b);
	memset(pb, 0, sizeof(*pb));
}
