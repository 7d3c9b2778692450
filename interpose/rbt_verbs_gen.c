/* rbt_verbs_gen.c - a build-time tool: prints, from the lists in rbt_verbs.h, the
 * version script of librbtrace.so (lds), that of the tests' stand-in
 * libibverbs.so.1 (fake-lds), or one line per entry for the cross-check test
 * (list: "<group> <name> <version>").
 *
 * It must never be linked into the recorder, and never spell a name or a version
 * itself: everything it prints comes from the lists.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interpose/rbt_verbs.h"

struct ent {
	const char *group, *name, *ver;
};

/* The signatures are the compiler's business (rbt_verbs.h's prototypes). */
#define E_IBV(name, ver, ret, params)	 { "wrapped", #name, ver },
#define E_MLX5(name, ver, ret, params)	 { "mlx5", #name, ver },
#define E_LIBC(name, ver, ret, params)	 { "libc", #name, ver },
#define E_CM(name, ver, ret, params)	 { "rdmacm", #name, ver },
#define E_CALLED(name, ver, ret, params) { "called", #name, ver },
#define E_COMP(name, ver, ret, params)	 { "companion", #name, ver },

static const struct ent ents[] = { RBT_VERBS_IBV(E_IBV) RBT_VERBS_MLX5(E_MLX5)
					   RBT_VERBS_LIBC(E_LIBC) RBT_VERBS_RDMACM(E_CM)
						   RBT_VERBS_CALLED(E_CALLED)
							   RBT_VERBS_COMPANIONS(E_COMP) };
#define NENTS (sizeof(ents) / sizeof(ents[0]))

static int in_set(const struct ent *e, const char *const *groups)
{
	for (; *groups; groups++)
		if (!strcmp(e->group, *groups))
			return 1;
	return 0;
}

/* "IBVERBS_1.12" -> prefix length 7, 1, 12; nodes sort by prefix, then number. */
static int ver_split(const char *v, size_t *plen, unsigned *maj, unsigned *min)
{
	const char *u = strrchr(v, '_');

	if (!u || sscanf(u + 1, "%u.%u", maj, min) != 2)
		return -1;
	*plen = (size_t)(u - v);
	return 0;
}

static int ver_cmp(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	size_t lx = 0, ly = 0;
	unsigned ax = 0, ix = 0, ay = 0, iy = 0;

	ver_split(x, &lx, &ax, &ix);
	ver_split(y, &ly, &ay, &iy);
	int c = strncmp(x, y, lx < ly ? lx : ly);
	if (c || lx != ly)
		return c ? c : (lx < ly ? -1 : 1);
	if (ax != ay)
		return ax < ay ? -1 : 1;
	return ix < iy ? -1 : ix > iy;
}

static int print_script(const char *const *groups, const char *title)
{
	const char *vers[NENTS];
	size_t nv = 0;

	for (size_t i = 0; i < NENTS; i++) {
		size_t pl;
		unsigned a = 0, b = 0;
		if (!in_set(&ents[i], groups))
			continue;
		if (ver_split(ents[i].ver, &pl, &a, &b)) {
			fprintf(stderr, "rbt_verbs_gen: %s: bad version node '%s'\n",
				ents[i].name, ents[i].ver);
			return 1;
		}
		size_t k = 0;
		while (k < nv && strcmp(vers[k], ents[i].ver))
			k++;
		if (k == nv)
			vers[nv++] = ents[i].ver;
	}
	qsort(vers, nv, sizeof(vers[0]), ver_cmp);
	printf("/* %s: generated from interpose/rbt_verbs.h by rbt_verbs_gen; edit "
	       "the list, not this file. */\n",
	       title);
	for (size_t k = 0; k < nv; k++) {
		size_t pl = 0, ppl = 0;
		unsigned a = 0, b = 0;
		ver_split(vers[k], &pl, &a, &b);
		printf("%s {\n\tglobal:\n", vers[k]);
		for (size_t i = 0; i < NENTS; i++)
			if (in_set(&ents[i], groups) && !strcmp(ents[i].ver, vers[k]))
				printf("\t\t%s;\n", ents[i].name);
		if (!k)
			printf("\tlocal: *;\n");
		/* Each node inherits from the one before it of the same library. */
		if (k)
			ver_split(vers[k - 1], &ppl, &a, &b);
		if (k && ppl == pl && !strncmp(vers[k - 1], vers[k], pl))
			printf("} %s;\n\n", vers[k - 1]);
		else
			printf("};\n\n");
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const preload[] = { "wrapped", "mlx5", "libc", "rdmacm",
					       NULL };
	static const char *const fake[] = { "wrapped", "called", "companion", NULL };

	if (argc == 2 && !strcmp(argv[1], "lds"))
		return print_script(preload, "librbtrace.lds");
	if (argc == 2 && !strcmp(argv[1], "fake-lds"))
		return print_script(fake, "interpose_fakeverbs.lds");
	if (argc == 2 && !strcmp(argv[1], "list")) {
		for (size_t i = 0; i < NENTS; i++)
			printf("%s %s %s\n", ents[i].group, ents[i].name, ents[i].ver);
		return 0;
	}
	fprintf(stderr, "usage: rbt_verbs_gen lds|fake-lds|list\n");
	return 2;
}
