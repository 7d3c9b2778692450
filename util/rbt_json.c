/* rbt_json.c - the JSON writer and the escaping rule of rbt_json.h.
 *
 * Must never allocate or depend on anything of rbtrace: every part that prints JSON
 * links it, the trace format's printers included.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "util/rbt_json.h"

/* Length of the well-formed UTF-8 sequence at p (2..4), or 0. */
static int rbt_json_utf8_len(const unsigned char *p)
{
	unsigned char c = p[0];
	int n;
	uint32_t cp;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, cp = c & 0x07;
	else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0; /* overlong, beyond Unicode, or a surrogate */
	return n;
}

struct rbt_json_buf {
	char *buf;
	size_t len, pos;
};

static void rbt_json_put(struct rbt_json_buf *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++, o->pos++)
		if (o->pos + 1 < o->len)
			o->buf[o->pos] = s[i];
}

size_t rbt_json_escape(char *buf, size_t len, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	/* the control characters JSON has a short form for */
	static const char short_esc[0x20] = {
		['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r',
	};
	struct rbt_json_buf o = { buf, len, 0 };
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	rbt_json_put(&o, "\"", 1);
	while (*p) {
		unsigned char c = *p;
		char esc[7] = { '\\', 0 };
		int n;
		switch (c) {
		case '"':
		case '\\':
			esc[1] = (char)c;
			rbt_json_put(&o, esc, 2);
			break;
		default:
			if (c < 0x20 && short_esc[c]) {
				esc[1] = short_esc[c];
				rbt_json_put(&o, esc, 2);
			} else if (c >= 0x20 && c < 0x7f) {
				rbt_json_put(&o, (const char *)p, 1);
			} else if (c >= 0x80 && (n = rbt_json_utf8_len(p)) > 0) {
				rbt_json_put(&o, (const char *)p, (size_t)n);
				p += n;
				continue;
			} else {
				memcpy(esc + 1, "u00", 3);
				esc[4] = hex[c >> 4];
				esc[5] = hex[c & 15];
				rbt_json_put(&o, esc, 6);
			}
		}
		p++;
	}
	rbt_json_put(&o, "\"", 1);
	if (len)
		buf[o.pos < len ? o.pos : len - 1] = 0;
	return o.pos;
}

void rbt_json_fput_str(FILE *f, const char *s)
{
	char small[256];
	const char *p = s ? s : "";
	/* escape in pieces: a long string never needs a buffer of its size */
	fputc('"', f);
	while (*p) {
		size_t take = 0, used;
		char piece[40];
		/* whole UTF-8 sequences only: never cut one in two */
		while (p[take] && take < sizeof(piece) - 4) {
			int n = (unsigned char)p[take] >= 0x80
					? rbt_json_utf8_len((const unsigned char *)p +
							    take)
					: 1;
			take += n > 0 ? (size_t)n : 1;
		}
		memcpy(piece, p, take);
		piece[take] = 0;
		used = rbt_json_escape(small, sizeof(small), piece);
		fwrite(small + 1, 1, used - 2, f);
		p += take;
	}
	fputc('"', f);
}

/* ---- the writer ---- */

void rbt_json_init(struct rbt_json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
}

/* The comma before a member, when one came before it in its container. */
static void rbt_json_sep(struct rbt_json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	uint64_t bit = 1ull << (j->depth % RBT_JSON_MAX_DEPTH);
	if (j->depth && (j->nonempty & bit))
		fputs(j->depth == j->line_depth ? ",\n" : ",", j->f);
	j->nonempty |= bit;
}

static void rbt_json_open(struct rbt_json *j, char c)
{
	rbt_json_sep(j);
	fputc(c, j->f);
	j->depth++;
	j->nonempty &= ~(1ull << (j->depth % RBT_JSON_MAX_DEPTH));
}

static void rbt_json_close(struct rbt_json *j, char c)
{
	fputc(c, j->f);
	if (j->depth)
		j->depth--;
}

void rbt_json_obj(struct rbt_json *j)
{
	rbt_json_open(j, '{');
}

void rbt_json_obj_end(struct rbt_json *j)
{
	rbt_json_close(j, '}');
}

void rbt_json_arr(struct rbt_json *j)
{
	rbt_json_open(j, '[');
}

void rbt_json_arr_end(struct rbt_json *j)
{
	rbt_json_close(j, ']');
}

void rbt_json_key(struct rbt_json *j, const char *key)
{
	rbt_json_sep(j);
	rbt_json_fput_str(j->f, key);
	fputc(':', j->f);
	j->after_key = true;
}

void rbt_json_str(struct rbt_json *j, const char *s)
{
	rbt_json_sep(j);
	rbt_json_fput_str(j->f, s);
}

void rbt_json_u64(struct rbt_json *j, uint64_t v)
{
	rbt_json_sep(j);
	fprintf(j->f, "%" PRIu64, v);
}

void rbt_json_i64(struct rbt_json *j, int64_t v)
{
	rbt_json_sep(j);
	fprintf(j->f, "%" PRId64, v);
}

void rbt_json_dbl(struct rbt_json *j, const char *fmt, double v)
{
	rbt_json_sep(j);
	if (isfinite(v))
		fprintf(j->f, fmt, v);
	else
		fputs("null", j->f);
}

void rbt_json_bool(struct rbt_json *j, bool v)
{
	rbt_json_sep(j);
	fputs(v ? "true" : "false", j->f);
}

void rbt_json_null(struct rbt_json *j)
{
	rbt_json_sep(j);
	fputs("null", j->f);
}

void rbt_json_raw(struct rbt_json *j, const char *json)
{
	rbt_json_sep(j);
	fputs(json, j->f);
}

void rbt_json_kstr(struct rbt_json *j, const char *key, const char *s)
{
	rbt_json_key(j, key);
	rbt_json_str(j, s);
}

void rbt_json_ku64(struct rbt_json *j, const char *key, uint64_t v)
{
	rbt_json_key(j, key);
	rbt_json_u64(j, v);
}

void rbt_json_ki64(struct rbt_json *j, const char *key, int64_t v)
{
	rbt_json_key(j, key);
	rbt_json_i64(j, v);
}

void rbt_json_kdbl(struct rbt_json *j, const char *key, const char *fmt, double v)
{
	rbt_json_key(j, key);
	rbt_json_dbl(j, fmt, v);
}

void rbt_json_kbool(struct rbt_json *j, const char *key, bool v)
{
	rbt_json_key(j, key);
	rbt_json_bool(j, v);
}
