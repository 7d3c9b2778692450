/*
 * rbt_softnic.h - what the rest of rbtrace may ask of softnic without
 * loading it as libibverbs: where the fabric is and what its counters say.
 * The `rbtrace softnic` subcommand uses this. Never include softnic_int.h
 * outside softnic/; this header is the only public one.
 */
#ifndef RBT_SOFTNIC_H
#define RBT_SOFTNIC_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The fabric directory softnic uses with the current environment
 * (SOFTNIC_FABRIC, else /dev/shm/softnic-<uid>, else /tmp/softnic-<uid>). */
void rbt_softnic_fabric_dir(char *buf, size_t n);

/* Prints the port counters of the fabric and one line per live QP (packets,
 * bytes, RNR NAKs, retries, errors, flushes, state). Returns 0 or -errno
 * (-ENOENT: no fabric there yet). */
int rbt_softnic_print_counters(FILE *out, const char *fabric_dir);

#ifdef __cplusplus
}
#endif

#endif
