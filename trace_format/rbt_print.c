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
#include "util/rbt_json.h"

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

/* A string, quoted and escaped the same way for text and JSON: rbtrace's one JSON
 * escaping rule (util/rbt_json.h). */
static void put_str(struct out *o, const char *s)
{
	size_t room = o->pos < o->len ? o->len - o->pos : 0;
	o->pos += rbt_json_escape(room ? o->buf + o->pos : NULL, room, s);
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
	static const char *const names[] = { "ret",    "wr_id",	   "opcode", "event",
					     "status", "byte_len", "length" };
	for (size_t i = 0; i < RBT_ARRAY_SIZE(names); i++)
		if (!strcmp(name, names[i]))
			return 1;
	return 0;
}

/* Symbolic names of verbs enums and flags in the text form (the JSON keeps the
 * numbers). The values are libibverbs ABI and never change. */
struct rbt_sym {
	uint32_t v;
	const char *name;
};

static const struct rbt_sym wr_opcodes[] = {
	{ 0, "RDMA_WRITE" },
	{ 1, "RDMA_WRITE_WITH_IMM" },
	{ 2, "SEND" },
	{ 3, "SEND_WITH_IMM" },
	{ 4, "RDMA_READ" },
	{ 5, "ATOMIC_CMP_AND_SWP" },
	{ 6, "ATOMIC_FETCH_AND_ADD" },
	{ 7, "LOCAL_INV" },
	{ 8, "BIND_MW" },
	{ 9, "SEND_WITH_INV" },
	{ 10, "TSO" },
	{ 11, "DRIVER1" },
	{ 15, "ATOMIC_WRITE" },
	{ 0, NULL },
};
static const struct rbt_sym wc_opcodes[] = {
	{ 0, "SEND" },
	{ 1, "RDMA_WRITE" },
	{ 2, "RDMA_READ" },
	{ 3, "COMP_SWAP" },
	{ 4, "FETCH_ADD" },
	{ 5, "BIND_MW" },
	{ 6, "LOCAL_INV" },
	{ 7, "TSO" },
	{ 9, "ATOMIC_WRITE" },
	{ 128, "RECV" },
	{ 129, "RECV_RDMA_WITH_IMM" },
	{ 130, "TM_ADD" },
	{ 131, "TM_DEL" },
	{ 132, "TM_SYNC" },
	{ 133, "TM_RECV" },
	{ 134, "TM_NO_TAG" },
	{ 135, "DRIVER1" },
	{ 0, NULL },
};
static const struct rbt_sym wc_status[] = {
	{ 0, "SUCCESS" },
	{ 1, "LOC_LEN_ERR" },
	{ 2, "LOC_QP_OP_ERR" },
	{ 3, "LOC_EEC_OP_ERR" },
	{ 4, "LOC_PROT_ERR" },
	{ 5, "WR_FLUSH_ERR" },
	{ 6, "MW_BIND_ERR" },
	{ 7, "BAD_RESP_ERR" },
	{ 8, "LOC_ACCESS_ERR" },
	{ 9, "REM_INV_REQ_ERR" },
	{ 10, "REM_ACCESS_ERR" },
	{ 11, "REM_OP_ERR" },
	{ 12, "RETRY_EXC_ERR" },
	{ 13, "RNR_RETRY_EXC_ERR" },
	{ 14, "LOC_RDD_VIOL_ERR" },
	{ 15, "REM_INV_RD_REQ_ERR" },
	{ 16, "REM_ABORT_ERR" },
	{ 17, "INV_EECN_ERR" },
	{ 18, "INV_EEC_STATE_ERR" },
	{ 19, "FATAL_ERR" },
	{ 20, "RESP_TIMEOUT_ERR" },
	{ 21, "GENERAL_ERR" },
	{ 22, "TM_ERR" },
	{ 23, "TM_RNDV_INCOMPLETE" },
	{ 0, NULL },
};
static const struct rbt_sym qp_states[] = {
	{ 0, "RESET" }, { 1, "INIT" }, { 2, "RTR" },	 { 3, "RTS" }, { 4, "SQD" },
	{ 5, "SQE" },	{ 6, "ERR" },  { 7, "UNKNOWN" }, { 0, NULL },
};
static const struct rbt_sym qp_types[] = {
	{ 2, "RC" },	   { 3, "UC" },	       { 4, "UD" },	  { 8, "RAW_PACKET" },
	{ 9, "XRC_SEND" }, { 10, "XRC_RECV" }, { 255, "DRIVER" }, { 0, NULL },
};
static const struct rbt_sym send_flags[] = {
	{ 1, "FENCE" },	 { 2, "SIGNALED" }, { 4, "SOLICITED" },
	{ 8, "INLINE" }, { 16, "IP_CSUM" }, { 0, NULL },
};
static const struct rbt_sym wc_flags[] = {
	{ 1, "GRH" },
	{ 2, "WITH_IMM" },
	{ 4, "IP_CSUM_OK" },
	{ 8, "WITH_INV" },
	{ 16, "TM_SYNC_REQ" },
	{ 32, "TM_MATCH" },
	{ 64, "TM_DATA_VALID" },
	{ 0, NULL },
};

static const struct rbt_sym cm_fns[] = {
#define RBT__CM_FN_SYM(NAME, id, text) { id, text },
	RBT_CM_FN_LIST(RBT__CM_FN_SYM)
#undef RBT__CM_FN_SYM
		{ 0, NULL },
};
/* enum rdma_cm_event_type (librdmacm ABI). */
static const struct rbt_sym cm_events[] = {
	{ 0, "ADDR_RESOLVED" },
	{ 1, "ADDR_ERROR" },
	{ 2, "ROUTE_RESOLVED" },
	{ 3, "ROUTE_ERROR" },
	{ 4, "CONNECT_REQUEST" },
	{ 5, "CONNECT_RESPONSE" },
	{ 6, "CONNECT_ERROR" },
	{ 7, "UNREACHABLE" },
	{ 8, "REJECTED" },
	{ 9, "ESTABLISHED" },
	{ 10, "DISCONNECTED" },
	{ 11, "DEVICE_REMOVAL" },
	{ 12, "MULTICAST_JOIN" },
	{ 13, "MULTICAST_ERROR" },
	{ 14, "ADDR_CHANGE" },
	{ 15, "TIMEWAIT_EXIT" },
	{ 0, NULL },
};
/* enum rdma_port_space. */
static const struct rbt_sym cm_ps[] = {
	{ 0x0002, "IPOIB" }, { 0x0106, "TCP" }, { 0x0111, "UDP" },
	{ 0x013f, "IB" },    { 0, NULL },
};

const char *rbt_verbs_name(enum rbt_verbs_enum which, uint64_t v)
{
	static const struct rbt_sym *const tables[] = {
		[RBT_NAMES_WR_OPCODE] = wr_opcodes, [RBT_NAMES_WC_OPCODE] = wc_opcodes,
		[RBT_NAMES_WC_STATUS] = wc_status,  [RBT_NAMES_QP_STATE] = qp_states,
		[RBT_NAMES_QP_TYPE] = qp_types,	    [RBT_NAMES_CM_FN] = cm_fns,
		[RBT_NAMES_CM_EVENT] = cm_events,
	};

	if ((unsigned)which >= RBT_ARRAY_SIZE(tables))
		return NULL;
	for (const struct rbt_sym *y = tables[which]; y->name; y++)
		if (y->v == v)
			return y->name;
	return NULL;
}

static const struct {
	const char *owner, *field; /* desc name (event or record), field name */
	const struct rbt_sym *syms;
	int flags; /* a bit set, printed A|B */
} sym_fields[] = {
	{ "send_wr", "opcode", wr_opcodes, 0 },
	{ "send_wr", "send_flags", send_flags, 1 },
	{ "wc", "opcode", wc_opcodes, 0 },
	{ "wc", "status", wc_status, 0 },
	{ "wc", "wc_flags", wc_flags, 1 },
	{ "qp_modify", "qp_state", qp_states, 0 },
	{ "qp_modify", "cur_qp_state", qp_states, 0 },
	{ "qp_query", "qp_state", qp_states, 0 },
	{ "qp_final_state", "qp_state", qp_states, 0 },
	{ "qp_create", "qp_type", qp_types, 0 },
	{ "cm_call", "fn", cm_fns, 0 },
	{ "cm_event", "event", cm_events, 0 },
	{ "cm_ack", "event", cm_events, 0 },
	{ "cm_id", "ps", cm_ps, 0 },
	{ "cm_id", "qp_type", qp_types, 0 },
};

/* Prints v by name when the field has names and v is one of them (or, for flags,
 * any bits); returns 0 to let the caller print the number. */
static int put_sym(struct out *o, const char *owner, const char *field, uint64_t v)
{
	for (size_t i = 0; i < RBT_ARRAY_SIZE(sym_fields); i++) {
		if (strcmp(sym_fields[i].owner, owner) ||
		    strcmp(sym_fields[i].field, field))
			continue;
		const struct rbt_sym *y = sym_fields[i].syms;
		if (!sym_fields[i].flags) {
			for (; y->name; y++)
				if (y->v == v) {
					put(o, "%s", y->name);
					return 1;
				}
			return 0;
		}
		if (!v)
			return 0;
		const char *sep = "";
		for (; y->name; y++)
			if (v & y->v) {
				put(o, "%s%s", sep, y->name);
				sep = "|";
				v &= ~(uint64_t)y->v;
			}
		if (v)
			put(o, "%s0x%" PRIx64, sep, v);
		return 1;
	}
	return 0;
}

static double ticks_us(const struct rbt_header *h, int64_t d)
{
	if (!h || !h->clock_hz)
		return (double)d / 1e3; /* unknown clock: assume ns */
	return (double)d * 1e6 / (double)h->clock_hz;
}

static void text_fields(struct out *o, const struct rbt_header *h,
			const struct rbt_desc *d, const uint8_t *base, uint64_t ts);
static void json_fields(struct out *o, const struct rbt_desc *d, const uint8_t *base);

/* An array field: its elements' fields in braces, in brackets (text: separated by
 * spaces; JSON: objects separated by commas). */
static void put_array(struct out *o, const struct rbt_header *h,
		      const struct rbt_fdesc *f, const uint8_t *base, uint64_t ts,
		      int json)
{
	uint32_t n;
	const uint8_t *elems;
	memcpy(&n, base + f->off, sizeof(n));
	memcpy(&elems, base + f->off2, sizeof(elems));
	const struct rbt_desc *rd = &rbt__rec[f->rec];
	putc_(o, '[');
	for (uint32_t k = 0; k < n; k++) {
		const uint8_t *e = elems + (size_t)k * rd->size;
		put(o, "%s{", k ? (json ? "," : " ") : "");
		if (json)
			json_fields(o, rd, e);
		else
			text_fields(o, h, rd, e, ts);
		putc_(o, '}');
	}
	putc_(o, ']');
}

/* A field's value, as its kind holds it. */
struct fval {
	uint64_t v;	   /* the scalars */
	const char *s;	   /* RBT_K_S */
	struct rbt_blob b; /* RBT_K_B */
	uint32_t n;	   /* RBT_K_A: the number of elements */
};

static void field_load(const struct rbt_fdesc *f, const uint8_t *base, struct fval *x)
{
	const uint8_t *fp = base + f->off;
	memset(x, 0, sizeof(*x));
	if (f->kind <= RBT_K_SCALAR)
		memcpy(&x->v, fp, 8);
	else if (f->kind == RBT_K_S)
		memcpy(&x->s, fp, sizeof(x->s));
	else if (f->kind == RBT_K_B)
		memcpy(&x->b, fp, sizeof(x->b));
	else if (f->kind == RBT_K_A)
		memcpy(&x->n, fp, sizeof(x->n));
}

/* The text form leaves out zeros (but the fields always shown), empty strings,
 * blobs and arrays. */
static int field_empty(const struct rbt_fdesc *f, const struct fval *x)
{
	switch (f->kind) {
	case RBT_K_S:
		return !x->s || !*x->s;
	case RBT_K_B:
		return !x->b.len;
	case RBT_K_A:
		return !x->n;
	default:
		return !x->v && !always_shown(f->name);
	}
}

static void text_fields(struct out *o, const struct rbt_header *h,
			const struct rbt_desc *d, const uint8_t *base, uint64_t ts)
{
	int first = 1;
	for (uint32_t i = 0; i < d->nf; i++) {
		const struct rbt_fdesc *f = &d->f[i];
		struct fval x;
		field_load(f, base, &x);
		if (field_empty(f, &x))
			continue;
		if (!first)
			putc_(o, ' ');
		first = 0;
		put(o, "%s=", f->name);
		switch (f->kind) {
		case RBT_K_U:
		case RBT_K_D: /* stored as a delta, printed as the number it is */
			if (put_sym(o, d->name, f->name, x.v))
				break;
			if (x.v > 0xffff &&
			    (strstr(f->name, "addr") || strstr(f->name, "base")))
				put(o, "0x%" PRIx64, x.v);
			else
				put(o, "%" PRIu64, x.v);
			break;
		case RBT_K_I:
			put(o, "%" PRId64, (int64_t)x.v);
			break;
		case RBT_K_H:
			put(o, "0x%" PRIx64, x.v);
			break;
		case RBT_K_T:
			put(o, "%+.3fus", ticks_us(h, (int64_t)(x.v - ts)));
			break;
		case RBT_K_S:
			put_str(o, x.s);
			break;
		case RBT_K_B:
			put(o, "<%u bytes:", x.b.len);
			put_hex(o, &x.b, 16);
			put(o, "%s>", x.b.len > 16 ? "..." : "");
			break;
		case RBT_K_A:
			put_array(o, h, f, base, ts, 0);
			break;
		}
	}
}

static void json_fields(struct out *o, const struct rbt_desc *d, const uint8_t *base)
{
	for (uint32_t i = 0; i < d->nf; i++) {
		const struct rbt_fdesc *f = &d->f[i];
		struct fval x;
		field_load(f, base, &x);
		put(o, "%s\"%s\":", i ? "," : "", f->name);
		switch (f->kind) {
		case RBT_K_U:
		case RBT_K_D:
		case RBT_K_T:
			put(o, "%" PRIu64, x.v);
			break;
		case RBT_K_I:
			put(o, "%" PRId64, (int64_t)x.v);
			break;
		case RBT_K_H:
			put(o, "\"0x%" PRIx64 "\"", x.v);
			break;
		case RBT_K_S:
			put_str(o, x.s);
			break;
		case RBT_K_B:
			putc_(o, '"');
			put_hex(o, &x.b, x.b.len);
			putc_(o, '"');
			break;
		case RBT_K_A:
			put_array(o, NULL, f, base, 0, 1);
			break;
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

/* buf (len bytes) as an empty output: "" even when nothing more is put. */
static struct out out_begin(char *buf, size_t len)
{
	if (len)
		buf[0] = 0;
	return (struct out){ buf, len, 0 };
}

size_t rbt_event_format_text(const struct rbt_header *h, const struct rbt_event *ev,
			     char *buf, size_t len)
{
	struct out o = out_begin(buf, len);
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
	struct out o = out_begin(buf, len);
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
