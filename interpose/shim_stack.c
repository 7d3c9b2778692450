/* shim_stack.c - call stacks at resource creation (RBTRACE_STACKS) and the
 * MODULE events that let the report turn their addresses into names: the loaded
 * objects with their build ids, emitted again when a dlopen adds one.
 *
 * Only on the slow path (resource creation): it may walk the stack and the
 * module list, never on a post or poll.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "interpose/rbt_interpose.h"
#include "interpose/shim.h"

#include "interpose/shim_rec.h"

unsigned long long rbt_modules_adds = ~0ull;
pthread_mutex_t rbt_modules_lock = PTHREAD_MUTEX_INITIALIZER;

static void rbt_build_id(const struct dl_phdr_info *info, char *out, size_t outlen)
{
	out[0] = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		const uint8_t *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const void *)p;
			const uint8_t *name = p + sizeof(*n);
			const uint8_t *desc = name + ((n->n_namesz + 3u) & ~3u);
			if (desc + n->n_descsz > end)
				break;
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
			    !memcmp(name, "GNU", 4)) {
				size_t k = 0;
				for (uint32_t j = 0; j < n->n_descsz && k + 3 < outlen;
				     j++)
					k += snprintf(out + k, outlen - k, "%02x",
						      desc[j]);
				return;
			}
			p = desc + ((n->n_descsz + 3u) & ~3u);
		}
	}
}

static int rbt_module_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t lo = UINTPTR_MAX, hi = 0, lo_off = 0;
	char path[PATH_MAX], bid[80];
	struct rbt_event ev = { .type = RBT_EV_MODULE_MAP, .ts = rbt_now() };

	(void)size;
	(void)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		if (ph->p_vaddr < lo) {
			lo = ph->p_vaddr;
			lo_off = ph->p_vaddr;
		}
		if (ph->p_vaddr + ph->p_memsz > hi)
			hi = ph->p_vaddr + ph->p_memsz;
	}
	if (lo == UINTPTR_MAX)
		return 0;
	if (info->dlpi_name && info->dlpi_name[0]) {
		snprintf(path, sizeof(path), "%s", info->dlpi_name);
	} else {
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
		path[n > 0 ? n : 0] = 0;
	}
	rbt_build_id(info, bid, sizeof(bid));
	/* offset is the link-time address of base: ip - base + offset is the
	 * address to look up in the module's symbol table. */
	ev.u.module_map.base = info->dlpi_addr + lo;
	ev.u.module_map.size = hi - lo;
	ev.u.module_map.offset = lo_off;
	ev.u.module_map.path = path;
	ev.u.module_map.build_id = bid;
	rbt_emit(&ev);
	return 0;
}

static int rbt_adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
		*(unsigned long long *)arg =
			info->dlpi_adds + info->dlpi_subs * 1000003ull;
	return 1;
}

/* Module maps go into the stream of the thread that needs them, before its stack;
 * they are emitted again whenever the set of loaded objects changed. */
static void rbt_emit_modules(void)
{
	unsigned long long adds = 0;

	dl_iterate_phdr(rbt_adds_cb, &adds);
	pthread_mutex_lock(&rbt_modules_lock);
	if (adds != rbt_modules_adds) {
		rbt_modules_adds = adds;
		dl_iterate_phdr(rbt_module_cb, NULL);
	}
	pthread_mutex_unlock(&rbt_modules_lock);
}

static uintptr_t rbt_self_lo, rbt_self_hi;

static int rbt_self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t me = (uintptr_t)arg;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && me >= lo &&
		    me < lo + ph->p_memsz) {
			rbt_self_lo = lo;
			rbt_self_hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

static int rbt_self_contains(const void *ip)
{
	if (!rbt_self_hi)
		dl_iterate_phdr(rbt_self_cb, (void *)(uintptr_t)rbt_self_contains);
	return (uintptr_t)ip >= rbt_self_lo && (uintptr_t)ip < rbt_self_hi;
}

void rbt_emit_stack(uint32_t ref_type)
{
	void *ips[48];
	struct rbt_frame frames[48];
	struct rbt_event ev = { .type = RBT_EV_STACK, .ts = rbt_now() };
	int n, saved = errno;

	if (!rbt_cfg.stacks)
		return;
	n = unw_backtrace(ips, 48);
	/* The stack starts at the program's call into the verb: our own frames
	 * (this function, record helpers, the wrapper) are left out. */
	int skip = 0;
	while (skip < n && rbt_self_contains(ips[skip]))
		skip++;
	if (skip == n)
		skip = 0;
	for (int i = skip; i < n; i++)
		frames[i - skip].ip = (uintptr_t)ips[i];
	rbt_emit_modules();
	ev.u.stack.ref_type = ref_type;
	ev.u.stack.n_frames = n - skip;
	ev.u.stack.frames = frames;
	rbt_emit(&ev);
	errno = saved;
}
