/* rbt_print.c - text and JSON printers, generated from the field tables: one
 * generic walker, two styles.
 *
 * snprintf-like: never write past len, always return the length needed. No
 * per-event code here; a new event or field prints without touching this file.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "trace_format/rbt_internal.h"

struct out {
	char *buf;
	size_t len, pos;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = o->pos < o->len ? o->len - o->pos : 0;
	int n = vsnprintf(room ? o->buf + o->pos : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->pos += (size_t)n;
}

static void putc_(struct out *o, char c)
{
	if (o->pos + 1 < o->len) {
		o->buf[o->pos] = c;
		o->buf[o->pos + 1] = 0;
	}
	o->pos++;
}

/* A string, quoted and escaped the same way for text and JSON. */
static void put_str(struct out *o, const char *s)
{
	putc_(o, '"');
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			putc_(o, '\\');
			putc_(o, (char)c);
		} else if (c == '\n') {
			put(o, "\\n");
		} else if (c < 0x20 || c == 0x7f) {
			put(o, "\\u%04x", c);
		} else {
			putc_(o, (char)c);
		}
	}
	putc_(o, '"');
}

static void put_hex(struct out *o, const struct rbt_blob *b, uint32_t max)
{
	uint32_t n = b->len < max ? b->len : max;
	for (uint32_t i = 0; i < n; i++)
		put(o, "%02x", b->data[i]);
}

/* Fields that read better shown even when zero (an opcode of 0 is RDMA_WRITE). */
static int always_shown(const char *name)
{
	static const char *const names[] = { "ret",    "wr_id",	   "opcode",
					     "status", "byte_len", "length" };
	for (size_t i = 0; i < RBT_ARRAY_SIZE(names); i++)
		if (!strcmp(name, names[i]))
			return 1;
	return 0;
}

static double ticks_us(const struct rbt_header *h, int64_t d)
{
	if (!h || !h->clock_hz)
		return (double)d / 1e3; /* unknown clock: assume ns */
	return (double)d * 1e6 / (double)h->clock_hz;
}

static void text_fields(struct out *o, const struct rbt_header *h,
			const struct rbt_desc *d, const uint8_t *base, uint64_t ts)
{
	int first = 1;
	for (uint32_t i = 0; i < d->nf; i++) {
		const struct rbt_fdesc *f = &d->f[i];
		const uint8_t *fp = base + f->off;
		uint64_t v = 0;
		if (f->kind <= RBT_K_H)
			memcpy(&v, fp, 8);
		switch (f->kind) {
		case RBT_K_U:
		case RBT_K_I:
		case RBT_K_H:
		case RBT_K_T:
			if (!v && !always_shown(f->name))
				continue;
			break;
		case RBT_K_S: {
			const char *s;
			memcpy(&s, fp, sizeof(s));
			if (!s || !*s)
				continue;
			break;
		}
		case RBT_K_B: {
			struct rbt_blob b;
			memcpy(&b, fp, sizeof(b));
			if (!b.len)
				continue;
			break;
		}
		case RBT_K_A: {
			uint32_t n;
			memcpy(&n, fp, sizeof(n));
			if (!n)
				continue;
			break;
		}
		}
		if (!first)
			putc_(o, ' ');
		first = 0;
		put(o, "%s=", f->name);
		switch (f->kind) {
		case RBT_K_U:
			if (v > 0xffff &&
			    (strstr(f->name, "addr") || strstr(f->name, "base")))
				put(o, "0x%" PRIx64, v);
			else
				put(o, "%" PRIu64, v);
			break;
		case RBT_K_I:
			put(o, "%" PRId64, (int64_t)v);
			break;
		case RBT_K_H:
			put(o, "0x%" PRIx64, v);
			break;
		case RBT_K_T:
			put(o, "%+.3fus", ticks_us(h, (int64_t)(v - ts)));
			break;
		case RBT_K_S: {
			const char *s;
			memcpy(&s, fp, sizeof(s));
			put_str(o, s);
			break;
		}
		case RBT_K_B: {
			struct rbt_blob b;
			memcpy(&b, fp, sizeof(b));
			put(o, "<%u bytes:", b.len);
			put_hex(o, &b, 16);
			put(o, "%s>", b.len > 16 ? "..." : "");
			break;
		}
		case RBT_K_A: {
			uint32_t n;
			const uint8_t *elems;
			memcpy(&n, fp, sizeof(n));
			memcpy(&elems, base + f->off2, sizeof(elems));
			const struct rbt_desc *rd = &rbt__rec[f->rec];
			putc_(o, '[');
			for (uint32_t k = 0; k < n; k++) {
				put(o, "%s{", k ? " " : "");
				text_fields(o, h, rd, elems + (size_t)k * rd->size, ts);
				putc_(o, '}');
			}
			putc_(o, ']');
			break;
		}
		}
	}
}

static void json_fields(struct out *o, const struct rbt_desc *d, const uint8_t *base)
{
	for (uint32_t i = 0; i < d->nf; i++) {
		const struct rbt_fdesc *f = &d->f[i];
		const uint8_t *fp = base + f->off;
		uint64_t v = 0;
		if (f->kind <= RBT_K_H)
			memcpy(&v, fp, 8);
		put(o, "%s\"%s\":", i ? "," : "", f->name);
		switch (f->kind) {
		case RBT_K_U:
		case RBT_K_T:
			put(o, "%" PRIu64, v);
			break;
		case RBT_K_I:
			put(o, "%" PRId64, (int64_t)v);
			break;
		case RBT_K_H:
			put(o, "\"0x%" PRIx64 "\"", v);
			break;
		case RBT_K_S: {
			const char *s;
			memcpy(&s, fp, sizeof(s));
			put_str(o, s);
			break;
		}
		case RBT_K_B: {
			struct rbt_blob b;
			memcpy(&b, fp, sizeof(b));
			putc_(o, '"');
			put_hex(o, &b, b.len);
			putc_(o, '"');
			break;
		}
		case RBT_K_A: {
			uint32_t n;
			const uint8_t *elems;
			memcpy(&n, fp, sizeof(n));
			memcpy(&elems, base + f->off2, sizeof(elems));
			const struct rbt_desc *rd = &rbt__rec[f->rec];
			putc_(o, '[');
			for (uint32_t k = 0; k < n; k++) {
				put(o, "%s{", k ? "," : "");
				json_fields(o, rd, elems + (size_t)k * rd->size);
				putc_(o, '}');
			}
			putc_(o, ']');
			break;
		}
		}
	}
}

static const struct rbt_desc *desc_of(const struct rbt_event *ev)
{
	rbt__init();
	if (ev->type > RBT_EV_MAX_ID || !rbt__ev[ev->type].name)
		return NULL;
	return &rbt__ev[ev->type];
}

size_t rbt_event_format_text(const struct rbt_header *h, const struct rbt_event *ev,
			     char *buf, size_t len)
{
	struct out o = { buf, len, 0 };
	if (len)
		buf[0] = 0;
	const struct rbt_desc *d = desc_of(ev);
	put(&o, "%.9f [%u] ", rbt_ticks_to_ns(h, ev->ts) / 1e9, ev->stream);
	if (!d) {
		put(&o, "unknown_%u", ev->type);
		return o.pos;
	}
	put(&o, "%s ", d->name);
	text_fields(&o, h, d, (const uint8_t *)&ev->u, ev->ts);
	return o.pos;
}

size_t rbt_event_format_json(const struct rbt_header *h, const struct rbt_event *ev,
			     char *buf, size_t len)
{
	struct out o = { buf, len, 0 };
	if (len)
		buf[0] = 0;
	const struct rbt_desc *d = desc_of(ev);
	if (!d) {
		put(&o, "{\"type\":\"unknown\",\"id\":%u", ev->type);
	} else {
		put(&o, "{\"type\":\"%s\"", d->name);
	}
	put(&o, ",\"stream\":%u,\"ts\":%" PRIu64 ",\"t_ns\":%.1f", ev->stream, ev->ts,
	    rbt_ticks_to_ns(h, ev->ts));
	if (d && d->nf) {
		putc_(&o, ',');
		json_fields(&o, d, (const uint8_t *)&ev->u);
	}
	putc_(&o, '}');
	return o.pos;
}
