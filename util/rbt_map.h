/* rbt_map.h - the one uint64 -> pointer map of rbtrace (the model's tables by
 * handle and by number, the analyzer's CM ids and QPs): open addressing with
 * linear probing, a NULL value marks an empty slot. Iteration follows the slots
 * (keys[i], vals[i] for i < cap, vals[i] != NULL), so the order is stable for one
 * sequence of puts.
 *
 * Depends on nothing but libc. Allocates only when it grows; lookups stay O(1)
 * however many keys a (hostile) trace holds. Never stores a NULL value.
 */
#ifndef RBT_MAP_H
#define RBT_MAP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rbt_map {
	uint64_t *keys;
	void **vals;
	uint32_t cap; /* power of two, 0 when empty */
	uint32_t n;
};

/* The value of key, or NULL. */
void *rbt_map_get(const struct rbt_map *m, uint64_t key);
/* Sets key to val (replacing the value of an existing key; val must not be NULL).
 * Returns 0 or -ENOMEM (the map unchanged). */
int rbt_map_put(struct rbt_map *m, uint64_t key, void *val);
/* Removes key; returns its value or NULL. */
void *rbt_map_del(struct rbt_map *m, uint64_t key);
/* Frees the slots; the map is empty and usable again. */
void rbt_map_free(struct rbt_map *m);

#ifdef __cplusplus
}
#endif

#endif
