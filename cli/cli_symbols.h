/* cli_symbols.h - symbolises recorded stack addresses from the trace's module_map
 * events: "module+0xoff (function+0xoff)", reading the module's ELF .symtab or
 * .dynsym from disk. Addresses belong to another process: never dereference
 * them, never dlopen anything.
 */
#ifndef CLI_SYMBOLS_H
#define CLI_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

struct rbt_symbolizer;

struct rbt_symbolizer *rbt_sym_new(void);
void rbt_sym_free(struct rbt_symbolizer *s);
/* A module as in a module_map event: [base, base + size) in the recorded
 * process, where ip - base + offset is the module's link-time address. */
void rbt_sym_add_module(struct rbt_symbolizer *s, uint64_t base, uint64_t size,
			uint64_t offset, const char *path);

struct rbt_sym {
	const char *module;   /* path, or NULL when no module covers ip */
	uint64_t module_off;  /* link-time address in module */
	const char *function; /* NULL when not found */
	uint64_t function_off;
};
/* return_address: ip is a return address (all frames but the innermost), so
 * the call instruction is looked up at ip - 1. */
void rbt_sym_lookup(struct rbt_symbolizer *s, uint64_t ip, int return_address,
		    struct rbt_sym *out);

#endif
