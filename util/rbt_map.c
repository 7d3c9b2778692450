/* rbt_map.c - the uint64 -> pointer map (util/rbt_map.h).
 *
 * No allocation except when the map grows; never trusts a key (0 and ~0 are keys
 * like any other).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/rbt_map.h"

static inline uint32_t rbt_map_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (uint32_t)k;
}

/* The slot holding key, or the empty slot where it would go (m->cap > 0). */
static inline uint32_t rbt_map_slot(const struct rbt_map *m, uint64_t key)
{
	uint32_t mask = m->cap - 1;
	uint32_t i = rbt_map_hash(key) & mask;
	while (m->vals[i] && m->keys[i] != key)
		i = (i + 1) & mask;
	return i;
}

void *rbt_map_get(const struct rbt_map *m, uint64_t key)
{
	return m->cap ? m->vals[rbt_map_slot(m, key)] : NULL;
}

static int rbt_map_grow(struct rbt_map *m)
{
	if (m->cap >= (1u << 31))
		return -ENOMEM;
	uint32_t ncap = m->cap ? m->cap * 2 : 16;
	uint64_t *nk = calloc(ncap, sizeof(*nk));
	void **nv = calloc(ncap, sizeof(*nv));
	if (!nk || !nv) {
		free(nk);
		free(nv);
		return -ENOMEM;
	}
	struct rbt_map g = { nk, nv, ncap, m->n };
	for (uint32_t i = 0; i < m->cap; i++) {
		if (!m->vals[i])
			continue;
		uint32_t j = rbt_map_slot(&g, m->keys[i]);
		nk[j] = m->keys[i];
		nv[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	*m = g;
	return 0;
}

/* Replaces the value of an existing key (a handle reused). */
int rbt_map_put(struct rbt_map *m, uint64_t key, void *val)
{
	if ((m->n + 1) * 4 > m->cap * 3) {
		int r = rbt_map_grow(m);
		if (r)
			return r;
	}
	uint32_t i = rbt_map_slot(m, key);
	if (!m->vals[i])
		m->n++;
	m->keys[i] = key;
	m->vals[i] = val;
	return 0;
}

/* Backward-shift deletion keeps probing chains intact without tombstones. */
void *rbt_map_del(struct rbt_map *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	uint32_t mask = m->cap - 1;
	uint32_t i = rbt_map_slot(m, key);
	if (!m->vals[i])
		return NULL;
	void *old = m->vals[i];
	m->vals[i] = NULL;
	m->n--;
	uint32_t j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (!m->vals[j])
			break;
		uint32_t home = rbt_map_hash(m->keys[j]) & mask;
		/* move j back to i when its home is not in (i, j] cyclically */
		bool move = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
		if (move) {
			m->keys[i] = m->keys[j];
			m->vals[i] = m->vals[j];
			m->vals[j] = NULL;
			i = j;
		}
	}
	return old;
}

void rbt_map_free(struct rbt_map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}
