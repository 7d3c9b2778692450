/* analyzer_util.c - the analyzer's small containers: growable strings, the log-bucketed histogram and the rate series.
 *
 * These are on the per-event path: no allocation except when a container grows, and
 * nothing here may depend on the trace's length.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyzer_internal.h"

/* ---- strings ---- */

void an_str_printf(struct an_str *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int need = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (need < 0)
		return;
	if (b->len + need + 1 > b->cap) {
		size_t ncap = (b->len + need + 1) * 2;
		char *ns = realloc(b->s, ncap);
		if (!ns)
			return;
		b->s = ns;
		b->cap = ncap;
	}
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += need;
}

void an_str_free(struct an_str *b)
{
	free(b->s);
	memset(b, 0, sizeof(*b));
}

char *an_strdup(const char *s)
{
	return strdup(s ? s : "");
}

/* ---- histogram ----
 * Values below AN_HIST_SUB are exact (octave 0); above, each power of two is split
 * into AN_HIST_SUB equal buckets, so a bucket is at most 1/64 of its value wide. */

static inline void an_hist_index(uint64_t v, uint32_t *oct, uint32_t *sub)
{
	if (v < AN_HIST_SUB) {
		*oct = 0;
		*sub = (uint32_t)v;
		return;
	}
	uint32_t e = 63 - __builtin_clzll(v); /* >= SUB_BITS */
	*oct = e - AN_HIST_SUB_BITS + 1;
	*sub = (uint32_t)(v >> (e - AN_HIST_SUB_BITS)) - AN_HIST_SUB;
}

static void an_hist_range(uint32_t oct, uint32_t sub, double *lo, double *hi)
{
	if (oct == 0) {
		*lo = sub;
		*hi = sub + 1;
		return;
	}
	uint32_t shift = oct - 1;
	double w = (double)(1ULL << shift);
	*lo = (double)(AN_HIST_SUB + sub) * w;
	*hi = *lo + w;
}

/* an_hist_add_n() when the octave of v has no buckets yet. */
void an_hist_add_slow(struct an_hist *h, uint64_t v, uint64_t n)
{
	uint32_t o, s;
	an_hist_index(v, &o, &s);
	if (!h->oct[o]) {
		h->oct[o] = calloc(AN_HIST_SUB, sizeof(uint64_t));
		if (!h->oct[o])
			return;
	}
	h->oct[o][s] += n;
	if (!h->count || v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->count += n;
	h->sum += v * n;
}

void an_hist_merge(struct an_hist *dst, const struct an_hist *src)
{
	if (!src->count)
		return;
	for (uint32_t o = 0; o < AN_HIST_OCT; o++) {
		if (!src->oct[o])
			continue;
		if (!dst->oct[o]) {
			dst->oct[o] = calloc(AN_HIST_SUB, sizeof(uint64_t));
			if (!dst->oct[o])
				continue;
		}
		for (uint32_t s = 0; s < AN_HIST_SUB; s++)
			dst->oct[o][s] += src->oct[o][s];
	}
	if (!dst->count || src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
	dst->count += src->count;
	dst->sum += src->sum;
}

double an_hist_quantile(const struct an_hist *h, double q)
{
	if (!h->count)
		return 0;
	uint64_t rank = (uint64_t)(q * (double)h->count + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > h->count)
		rank = h->count;
	uint64_t cum = 0;
	for (uint32_t o = 0; o < AN_HIST_OCT; o++) {
		if (!h->oct[o])
			continue;
		for (uint32_t s = 0; s < AN_HIST_SUB; s++) {
			cum += h->oct[o][s];
			if (cum >= rank) {
				double lo, hi;
				an_hist_range(o, s, &lo, &hi);
				double mid = o == 0 ? lo : (lo + hi) / 2;
				if (mid < (double)h->min)
					mid = (double)h->min;
				if (mid > (double)h->max)
					mid = (double)h->max;
				return mid;
			}
		}
	}
	return (double)h->max;
}

bool an_hist_next_bucket(const struct an_hist *h, uint32_t *idx, double *lo, double *hi,
			 uint64_t *n)
{
	for (uint32_t i = *idx; i < AN_HIST_OCT * AN_HIST_SUB; i++) {
		uint32_t o = i / AN_HIST_SUB, s = i % AN_HIST_SUB;
		if (!h->oct[o]) {
			i = (o + 1) * AN_HIST_SUB - 1;
			continue;
		}
		if (!h->oct[o][s])
			continue;
		an_hist_range(o, s, lo, hi);
		*n = h->oct[o][s];
		*idx = i + 1;
		return true;
	}
	*idx = AN_HIST_OCT * AN_HIST_SUB;
	return false;
}

void an_hist_summary(const struct an_hist *h, struct rbt_phase_summary *s)
{
	s->count = h->count;
	s->p50 = an_hist_quantile(h, 0.50);
	s->p90 = an_hist_quantile(h, 0.90);
	s->p99 = an_hist_quantile(h, 0.99);
	s->p999 = an_hist_quantile(h, 0.999);
	s->max = (double)h->max;
	s->mean = h->count ? (double)h->sum / (double)h->count : 0;
}

void an_hist_free(struct an_hist *h)
{
	for (uint32_t o = 0; o < AN_HIST_OCT; o++)
		free(h->oct[o]);
	memset(h, 0, sizeof(*h));
}

/* ---- rate series ---- */

void an_rate_add(struct an_rate *r, uint64_t t, uint64_t wrs, uint64_t bytes)
{
	if (!r->started) {
		r->started = true;
		r->t0 = t;
		r->shift = 20; /* bins of 2^20 ns (about 1 ms), doubled as needed */
		r->width = 1ull << r->shift;
	}
	if (t < r->t0)
		t = r->t0; /* slight reordering across threads */
	uint64_t bin = (t - r->t0) >> r->shift;
	while (bin >= AN_RATE_BINS) {
		for (uint32_t i = 0; i < AN_RATE_BINS / 2; i++) {
			r->wrs[i] = r->wrs[2 * i] + r->wrs[2 * i + 1];
			r->bytes[i] = r->bytes[2 * i] + r->bytes[2 * i + 1];
		}
		memset(r->wrs + AN_RATE_BINS / 2, 0, sizeof(r->wrs) / 2);
		memset(r->bytes + AN_RATE_BINS / 2, 0, sizeof(r->bytes) / 2);
		r->shift++;
		r->width = 1ull << r->shift;
		bin = (t - r->t0) >> r->shift;
	}
	r->wrs[bin] += wrs;
	r->bytes[bin] += bytes;
}
