/* cli_symbols.c - ELF64 symbol tables of the recorded process's modules, read
 * lazily from disk with pread (bounded by the sections' sizes), for `dump`.
 *
 * The files are untrusted input: every offset and size is checked against the
 * file size; a module that cannot be read just has no function names.
 */
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_symbols.h"
#include "util/rbt_grow.h"

struct fsym {
	uint64_t addr, size;
	uint32_t name; /* offset in strtab */
};

struct module {
	uint64_t base, size, offset;
	char *path;
	int loaded; /* symbols read (or tried) */
	struct fsym *syms;
	size_t nsyms;
	char *strtab;
	size_t strtab_len;
};

struct rbt_symbolizer {
	struct module *m;
	uint32_t n, cap;
};

struct rbt_symbolizer *rbt_sym_new(void)
{
	return calloc(1, sizeof(struct rbt_symbolizer));
}

void rbt_sym_free(struct rbt_symbolizer *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->m[i].path);
		free(s->m[i].syms);
		free(s->m[i].strtab);
	}
	free(s->m);
	free(s);
}

void rbt_sym_add_module(struct rbt_symbolizer *s, uint64_t base, uint64_t size,
			uint64_t offset, const char *path)
{
	if (!s || !size)
		return;
	if (rbt_grow(&s->m, &s->cap, s->n + 1, sizeof(*s->m), 16, 0))
		return;
	struct module *m = &s->m[s->n];
	memset(m, 0, sizeof(*m));
	m->base = base;
	m->size = size;
	m->offset = offset;
	m->path = strdup(path ? path : "");
	if (m->path)
		s->n++;
}

static int read_at(int fd, uint64_t fsize, uint64_t off, void *buf, size_t n)
{
	if (off > fsize || n > fsize - off)
		return -1;
	return pread(fd, buf, n, (off_t)off) == (ssize_t)n ? 0 : -1;
}

static int cmp_sym(const void *a, const void *b)
{
	const struct fsym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Reads one symbol table section (and its string table) into m, replacing
 * nothing: called for .symtab first, .dynsym only when .symtab is missing. */
static int load_symtab(struct module *m, int fd, uint64_t fsize, const Elf64_Shdr *sh,
		       const Elf64_Shdr *shs, uint16_t shnum)
{
	if (sh->sh_entsize != sizeof(Elf64_Sym) || sh->sh_link >= shnum)
		return -1;
	const Elf64_Shdr *str = &shs[sh->sh_link];
	if (str->sh_size > (64u << 20) || sh->sh_size > (256u << 20))
		return -1;
	m->strtab = malloc(str->sh_size + 1);
	if (!m->strtab || read_at(fd, fsize, str->sh_offset, m->strtab, str->sh_size))
		return -1;
	m->strtab[str->sh_size] = 0;
	m->strtab_len = str->sh_size;
	size_t n = sh->sh_size / sizeof(Elf64_Sym);
	Elf64_Sym *syms = malloc(n ? n * sizeof(*syms) : 1);
	m->syms = malloc(n ? n * sizeof(*m->syms) : 1);
	if (!syms || !m->syms ||
	    read_at(fd, fsize, sh->sh_offset, syms, n * sizeof(*syms))) {
		free(syms);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (ELF64_ST_TYPE(syms[i].st_info) != STT_FUNC || !syms[i].st_value ||
		    syms[i].st_name >= m->strtab_len)
			continue;
		m->syms[m->nsyms++] = (struct fsym){ syms[i].st_value, syms[i].st_size,
						     syms[i].st_name };
	}
	free(syms);
	qsort(m->syms, m->nsyms, sizeof(*m->syms), cmp_sym);
	return 0;
}

static void load_module(struct module *m)
{
	m->loaded = 1;
	/* The path comes from the trace: O_NONBLOCK so that a FIFO there cannot
	 * block us forever (it is then refused as not a regular file). */
	int fd = open(m->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return;
	struct stat st;
	Elf64_Ehdr eh;
	Elf64_Shdr *shs = NULL;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode))
		goto out;
	uint64_t fsize = (uint64_t)st.st_size;
	if (read_at(fd, fsize, 0, &eh, sizeof(eh)) ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB)
		goto out;
	if (eh.e_shentsize != sizeof(Elf64_Shdr) || !eh.e_shnum)
		goto out;
	shs = malloc((size_t)eh.e_shnum * sizeof(*shs));
	if (!shs ||
	    read_at(fd, fsize, eh.e_shoff, shs, (size_t)eh.e_shnum * sizeof(*shs)))
		goto out;
	for (int pass = 0; pass < 2 && !m->nsyms; pass++) {
		uint32_t want = pass ? SHT_DYNSYM : SHT_SYMTAB;
		for (uint16_t i = 0; i < eh.e_shnum; i++) {
			if (shs[i].sh_type != want)
				continue;
			free(m->syms);
			free(m->strtab);
			m->syms = NULL;
			m->strtab = NULL;
			m->nsyms = 0;
			if (load_symtab(m, fd, fsize, &shs[i], shs, eh.e_shnum) == 0)
				break;
		}
	}
out:
	free(shs);
	close(fd);
}

void rbt_sym_lookup(struct rbt_symbolizer *s, uint64_t ip, int return_address,
		    struct rbt_sym *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t look = return_address && ip ? ip - 1 : ip;
	struct module *m = NULL;
	for (size_t i = 0; s && i < s->n; i++)
		if (look >= s->m[i].base && look - s->m[i].base < s->m[i].size)
			m = &s->m[i];
	if (!m)
		return;
	out->module = m->path;
	uint64_t vaddr = look - m->base + m->offset;
	out->module_off = ip - m->base + m->offset;
	if (!m->loaded)
		load_module(m);
	size_t lo = 0, hi = m->nsyms;
	while (lo < hi) { /* the last symbol starting at or before vaddr */
		size_t mid = (lo + hi) / 2;
		if (m->syms[mid].addr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return;
	const struct fsym *f = &m->syms[lo - 1];
	if (f->size && vaddr - f->addr >= f->size)
		return;
	out->function = m->strtab + f->name;
	out->function_off = vaddr - f->addr + (look != ip);
}
