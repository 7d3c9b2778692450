/* analyzer_perfetto_enc.c - the encoding layer of the Perfetto timeline
 * (analyzer_perfetto.c is the sink that uses it): strings made valid UTF-8,
 * names interned per sequence, packets with a sequence's incremental clock,
 * track events with their counters and annotations, track descriptors.
 *
 * It knows protobuf fields and Perfetto's packet rules, nothing of WRs, QPs or
 * the detail rule. Never trusts a name: invalid UTF-8 is replaced, and past
 * PF_MAX_NAMES interned names it hands out no more ids.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_perfetto_int.h"

/* ---- strings ---- */

/* Length of the valid UTF-8 sequence at p (1-4), 0 when invalid. */
static size_t pf_utf8_len(const unsigned char *p)
{
	unsigned c = p[0];
	size_t n = c < 0x80		   ? 1
		   : c >= 0xc2 && c < 0xe0 ? 2
		   : c >= 0xe0 && c < 0xf0 ? 3
		   : c >= 0xf0 && c < 0xf5 ? 4
					   : 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if (n == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0)))
		return 0; /* overlong, or a surrogate */
	if (n == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90)))
		return 0;
	return n;
}

/* A string of a trace (names, command lines) as valid UTF-8 without control
 * characters: each invalid byte or control character becomes '?'. */
void an_pf_str(struct an_pb *pb, uint32_t field, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t len = strlen(s), i = 0;
	while (i < len) {
		size_t k = u[i] >= 0x20 && u[i] != 0x7f ? pf_utf8_len(u + i) : 0;
		if (!k)
			break;
		i += k;
	}
	if (i == len) {
		an_pb_bytes(pb, field, s, len);
		return;
	}
	char *c = malloc(len + 1);
	if (!c) {
		pb->oom = true;
		return;
	}
	for (i = 0; i < len;) {
		size_t k = u[i] >= 0x20 && u[i] != 0x7f ? pf_utf8_len(u + i) : 0;
		if (!k) {
			c[i++] = '?';
			continue;
		}
		memcpy(c + i, s + i, k);
		i += k;
	}
	an_pb_bytes(pb, field, c, len);
	free(c);
}

/* ---- names ---- */

static uint32_t pf_hash(const char *s)
{
	uint32_t h = 2166136261u;
	while (*s)
		h = (h ^ (uint8_t)*s++) * 16777619u;
	return h;
}

/* The id of name s (interned once for the whole output), 0 when full. */
uint32_t an_pf_name(struct an_pf *pf, const char *s)
{
	uint32_t k = 0;
	if (pf->hash_cap) {
		k = pf_hash(s) & (pf->hash_cap - 1);
		while (pf->hash[k]) {
			if (!strcmp(pf->names[pf->hash[k] - 1], s))
				return pf->hash[k];
			k = (k + 1) & (pf->hash_cap - 1);
		}
	}
	if (pf->n_names >= PF_MAX_NAMES)
		return 0;
	if ((pf->n_names + 1) * 2 > pf->hash_cap) {
		uint32_t cap = pf->hash_cap ? pf->hash_cap * 2 : 256;
		uint32_t *h = calloc(cap, sizeof(*h));
		if (!h)
			return 0;
		for (uint32_t i = 0; i < pf->n_names; i++) {
			uint32_t j = pf_hash(pf->names[i]) & (cap - 1);
			while (h[j])
				j = (j + 1) & (cap - 1);
			h[j] = i + 1;
		}
		free(pf->hash);
		pf->hash = h;
		pf->hash_cap = cap;
		k = pf_hash(s) & (cap - 1);
		while (h[k])
			k = (k + 1) & (cap - 1);
	}
	if (rbt_grow(&pf->names, &pf->cap_names, pf->n_names + 1, sizeof(*pf->names), 64,
		     0))
		return 0;
	char *c = an_strdup(s);
	if (!c)
		return 0;
	pf->names[pf->n_names++] = c;
	pf->hash[k] = pf->n_names;
	return pf->n_names;
}

static bool pf_defined(struct an_pf_seq *s, uint32_t id)
{
	return id / 8 < s->n_defined && (s->defined[id / 8] >> (id % 8) & 1);
}

static void pf_define(struct an_pf_seq *s, uint32_t id)
{
	if (id / 8 >= s->n_defined) {
		uint32_t n = s->n_defined ? s->n_defined : 16;
		while (n <= id / 8)
			n *= 2;
		uint8_t *d = realloc(s->defined, n);
		if (!d)
			return;
		memset(d + s->n_defined, 0, n - s->n_defined);
		s->defined = d;
		s->n_defined = n;
	}
	s->defined[id / 8] |= (uint8_t)(1u << (id % 8));
}

/* ---- packets ---- */

static void pf_flush(struct an_pf *pf)
{
	if (pf->pb.n < (1u << 16) && !pf->pb.oom)
		return;
	int e = an_pb_flush(&pf->pb, pf->f);
	if (e && !pf->err)
		pf->err = e;
}

/* Opens a packet of sequence s at ns (no timestamp when ns is UINT64_MAX). */
void an_pf_packet(struct an_pf *pf, struct an_pf_seq *s, uint64_t ns)
{
	struct an_pb *pb = &pf->pb;
	an_pb_begin(pb, F_TRACE_PACKET);
	if (ns != UINT64_MAX) {
		if (s->incremental && ns >= s->last_ns) {
			an_pb_varint(pb, F_TP_TIMESTAMP, ns - s->last_ns);
			s->last_ns = ns;
		} else {
			an_pb_varint(pb, F_TP_TIMESTAMP, ns);
			an_pb_varint(pb, F_TP_CLOCK_ID, CLOCK_BOOTTIME);
		}
	}
	an_pb_varint(pb, F_TP_SEQ_ID, s->id);
}

void an_pf_packet_end(struct an_pf *pf)
{
	an_pb_end(&pf->pb);
	pf_flush(pf);
}

/* The first packet of an incremental sequence: its state cleared, its defaults
 * (clock, track, counter tracks) and the clock's origin. */
void an_pf_seq_start(struct an_pf *pf, struct an_pf_seq *s, uint64_t ns, uint64_t track,
		     const uint64_t *ctrs, int n_ctrs)
{
	struct an_pb *pb = &pf->pb;
	s->id = pf->next_seq++;
	s->started = s->incremental = true;
	s->track = track;
	s->last_ns = ns;
	an_pb_begin(pb, F_TRACE_PACKET);
	an_pb_varint(pb, F_TP_SEQ_ID, s->id);
	an_pb_varint(pb, F_TP_SEQ_FLAGS, SEQ_CLEARED);
	an_pb_begin(pb, F_TP_DEFAULTS);
	an_pb_varint(pb, F_TPD_CLOCK_ID, CLOCK_SEQ);
	an_pb_begin(pb, F_TPD_TRACK_EVENT);
	an_pb_varint(pb, F_TE_TRACK, track);
	for (int i = 0; i < n_ctrs; i++)
		an_pb_varint(pb, F_TE_EXTRA_UUIDS, ctrs[i]);
	an_pb_end(pb);
	an_pb_end(pb);
	an_pb_begin(pb, F_TP_CLOCK_SNAPSHOT);
	an_pb_begin(pb, F_CS_CLOCK);
	an_pb_varint(pb, F_CK_ID, CLOCK_BOOTTIME);
	an_pb_varint(pb, F_CK_TS, ns);
	an_pb_end(pb);
	an_pb_begin(pb, F_CS_CLOCK);
	an_pb_varint(pb, F_CK_ID, CLOCK_SEQ);
	an_pb_varint(pb, F_CK_TS, ns);
	an_pb_varint(pb, F_CK_INCREMENTAL, 1);
	an_pb_end(pb);
	an_pb_varint(pb, F_CS_PRIMARY, CLOCK_BOOTTIME);
	an_pb_end(pb);
	an_pf_packet_end(pf);
}

static void pf_intern(struct an_pf *pf, struct an_pf_seq *s, const struct pf_ev *e)
{
	struct an_pb *pb = &pf->pb;
	uint32_t need[6];
	int field[6], n = 0;
	if (e->name && !pf_defined(s, e->name))
		need[n] = e->name, field[n++] = F_ID_EVENT_NAMES;
	if (e->cat && !pf_defined(s, e->cat))
		need[n] = e->cat, field[n++] = F_ID_CATEGORIES;
	for (int i = 0; i < e->n_args; i++)
		if (e->args[i].name && !pf_defined(s, e->args[i].name))
			need[n] = e->args[i].name, field[n++] = F_ID_ANNOTATION_NAMES;
	if (!n)
		return;
	an_pb_begin(pb, F_TP_INTERNED);
	for (int i = 0; i < n; i++) {
		an_pb_begin(pb, (uint32_t)field[i]);
		an_pb_varint(pb, F_IID, need[i]);
		an_pf_str(pb, F_IID_NAME, pf->names[need[i] - 1]);
		an_pb_end(pb);
		pf_define(s, need[i]);
	}
	an_pb_end(pb);
}

void an_pf_event(struct an_pf *pf, struct an_pf_seq *s, uint64_t ns,
		 const struct pf_ev *e)
{
	struct an_pb *pb = &pf->pb;
	an_pf_packet(pf, s, ns);
	pf_intern(pf, s, e);
	an_pb_begin(pb, F_TP_TRACK_EVENT);
	an_pb_varint(pb, F_TE_TYPE, (uint64_t)e->type);
	if (e->track && e->track != s->track)
		an_pb_varint(pb, F_TE_TRACK, e->track);
	if (e->cat)
		an_pb_varint(pb, F_TE_CATEGORY_IID, e->cat);
	if (e->name)
		an_pb_varint(pb, F_TE_NAME_IID, e->name);
	else if (e->name_s)
		an_pf_str(pb, F_TE_NAME, e->name_s);
	if (e->counter) {
		if (e->dbl)
			an_pb_double(pb, F_TE_DCOUNTER, e->dv);
		else
			an_pb_int(pb, F_TE_COUNTER, e->cv);
	}
	for (int i = 0; i < e->n_vals; i++)
		an_pb_int(pb, F_TE_EXTRA_VALUES, e->vals[i]);
	for (int i = 0; i < e->n_args; i++) {
		const struct pf_arg *a = &e->args[i];
		an_pb_begin(pb, F_TE_ANNOTATION);
		if (a->name)
			an_pb_varint(pb, F_DA_NAME_IID, a->name);
		else
			an_pf_str(pb, F_DA_NAME, a->name_s);
		if (a->s)
			an_pf_str(pb, F_DA_STRING, a->s);
		else
			an_pb_varint(pb, F_DA_UINT, a->u);
		an_pb_end(pb);
	}
	an_pb_end(pb);
	an_pf_packet_end(pf);
}

/* A track (on the global sequence, before its first event). */
uint64_t an_pf_track(struct an_pf *pf, uint64_t parent, const char *name,
		     int counter /* 0: slices, 1: a count, 2: a rate */)
{
	struct an_pb *pb = &pf->pb;
	uint64_t uuid = pf->next_uuid++;
	an_pf_packet(pf, &pf->global, UINT64_MAX);
	an_pb_begin(pb, F_TP_TRACK_DESC);
	an_pb_varint(pb, F_TD_UUID, uuid);
	if (parent)
		an_pb_varint(pb, F_TD_PARENT, parent);
	an_pf_str(pb, F_TD_NAME, name);
	if (counter) {
		an_pb_begin(pb, F_TD_COUNTER);
		if (counter == 1)
			an_pb_varint(pb, F_CD_UNIT, UNIT_COUNT);
		else
			an_pb_str(pb, F_CD_UNIT_NAME, "WR/s");
		an_pb_end(pb);
	}
	an_pb_end(pb);
	an_pf_packet_end(pf);
	return uuid;
}

/* A counter sample on the global sequence (absolute time). */
void an_pf_counter(struct an_pf *pf, struct an_pf_ctr *c, uint64_t ns)
{
	struct pf_ev e = {
		.type = T_COUNTER, .track = c->uuid, .counter = true, .cv = c->cur
	};
	an_pf_event(pf, &pf->global, ns, &e);
	c->sent = c->cur;
	c->any_sent = true;
}
