/* rbt_grow.h - the one way rbtrace grows an array: doubling capacity, never
 * freeing what is there when the memory is not, and a bound on the capacity.
 *
 * Header only, depends on nothing but libc. Never shrinks, never moves on success
 * unless realloc does.
 */
#ifndef RBT_GROW_H
#define RBT_GROW_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Makes room for at least need elements of elem bytes in *v (capacity *cap):
 * doubles from first (at least need), at most max elements (0: no bound).
 * Returns 0, or -ENOMEM (nothing changed) when it cannot. */
static inline int rbt_grow(void *v, uint32_t *cap, uint32_t need, size_t elem,
			   uint32_t first, uint32_t max)
{
	void **pv = (void **)v;
	if (need <= *cap)
		return 0;
	uint64_t nc = *cap ? (uint64_t)*cap * 2 : first;
	while (nc < need)
		nc *= 2;
	if (max && nc > max)
		nc = max;
	if (nc < need)
		return -ENOMEM;
	void *n = realloc(*pv, (size_t)nc * elem);
	if (!n)
		return -ENOMEM;
	*pv = n;
	*cap = (uint32_t)nc;
	return 0;
}

#endif
