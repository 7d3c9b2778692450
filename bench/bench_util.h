/* bench_util.h - what the benchmarks that run over softnic share: finding the
 * softnic libraries built with them and re-executing themselves on those, and
 * one way to die.
 *
 * Benchmarks print numbers and ratios, never pass/fail: nothing here may judge a
 * measurement.
 */
#ifndef RBT_BENCH_UTIL_H
#define RBT_BENCH_UTIL_H

#include <stddef.h>

/* Prints "PROGRAM: " and the message on stderr and exits 1 (exit(3): stdout is
 * flushed). */
void bench_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* The directory of softnic's lib (such as "libibverbs.so.1") into dir: first the
 * softnic built beside this program (bazel-bin/bench -> bazel-bin/softnic), then
 * the runfiles', then softnic/, ../softnic and bazel-bin/softnic from here. 0, or
 * -1 when none has it. */
int bench_softnic_dir(const char *lib, char *dir, size_t len);

/* Runs this program again with LD_LIBRARY_PATH=dir and the variable once set
 * (the re-executed program sees it and goes on); dies when exec fails. */
void bench_reexec(char **argv, const char *dir, const char *once)
	__attribute__((noreturn));

#endif
