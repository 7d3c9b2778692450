/* rbt_interpose.h - the public face of librbtrace.so (the LD_PRELOAD recorder).
 *
 * The library itself has no C API: it is driven by environment variables, which
 * are named here so that `rbtrace record` and the tests agree with the library.
 * docs/recording.md describes each setting. Nothing here may pull in libibverbs.
 */
#ifndef RBT_INTERPOSE_H
#define RBT_INTERPOSE_H

#include "build_defs/rbt_version.h"
#include "trace_format/rbt_format.h"

/* File, or directory (existing, or ending in '/'), where traces go. */
#define RBT_ENV_OUTPUT "RBTRACE_OUTPUT"
/* Per-thread ring size in KiB (default 2048). */
#define RBT_ENV_BUFFER_KB "RBTRACE_BUFFER_KB"
/* Longest time (ms) between a record and its arrival in the file (default 100). */
#define RBT_ENV_FLUSH_MS "RBTRACE_FLUSH_MS"
/* Longest time (ms) a thread waits for room in its full ring before it drops
 * records (counted in LOSS events); default 1000, 0 = never wait. */
#define RBT_ENV_BLOCK_MS "RBTRACE_BLOCK_MS"
/* Call stacks at resource creation and modify_qp: 1 (default) or 0. */
#define RBT_ENV_STACKS "RBTRACE_STACKS"
/* NIC completion timestamps on every CQ: 0 (default) or 1. */
#define RBT_ENV_NIC_TS "RBTRACE_NIC_TS"
/* Payload bytes captured per send WR: 0/off (default), on (= 256), or a number. */
#define RBT_ENV_PAYLOAD "RBTRACE_PAYLOAD"
/* A CPU number: the writer thread runs only there (default: wherever the
 * scheduler puts it). */
#define RBT_ENV_WRITER_CPU "RBTRACE_WRITER_CPU"
/* Diagnostics on stderr: 0 (default) or 1. */
#define RBT_ENV_DEBUG "RBTRACE_DEBUG"
/* 1: light mode (docs/recording.md "Light mode"): posts and polls take one
 * timestamp (their entry), not two; stacks off unless RBTRACE_STACKS=1. */
#define RBT_ENV_LIGHT "RBTRACE_LIGHT"
/* The NOTE a light trace begins with. */
#define RBT_LIGHT_NOTE                                                              \
	"light mode (RBTRACE_LIGHT=1): posts and polls carry one timestamp, their " \
	"entry; the post phase and call durations were not recorded"
/* Set by `rbtrace record`: a file to which every traced process appends the path
 * of each trace it writes, one per line. */
#define RBT_ENV_MANIFEST "RBTRACE_MANIFEST"
/* 1: do not trace at all (the library forwards every call untouched). */
#define RBT_ENV_DISABLE "RBTRACE_DISABLE"

/* Flight recorder: SIZE (64M, 1G) of compressed trace kept in memory; files
 * are written only on triggers (and the last window at the end). */
#define RBT_ENV_FLIGHT "RBTRACE_FLIGHT"
/* ms of the window before a trigger (default 0: the whole ring) and after it
 * (default 100). */
#define RBT_ENV_FLIGHT_BEFORE_MS "RBTRACE_FLIGHT_BEFORE_MS"
#define RBT_ENV_FLIGHT_AFTER_MS	 "RBTRACE_FLIGHT_AFTER_MS"
/* Rate limit: least ms between snapshots (default 1000), most per process (32). */
#define RBT_ENV_FLIGHT_GAP_MS "RBTRACE_FLIGHT_GAP_MS"
#define RBT_ENV_FLIGHT_MAX    "RBTRACE_FLIGHT_MAX"
/* Stall trigger: signaled send WRs outstanding and no completion for this many
 * ms (default 1000, 0 = off). */
#define RBT_ENV_FLIGHT_STALL_MS "RBTRACE_FLIGHT_STALL_MS"
/* Slow-call triggers: a post / a poll taking at least this many us (0 = off). */
#define RBT_ENV_FLIGHT_SLOW_POST_US "RBTRACE_FLIGHT_SLOW_POST_US"
#define RBT_ENV_FLIGHT_SLOW_POLL_US "RBTRACE_FLIGHT_SLOW_POLL_US"
/* Rotation: SIZE (50M) or DURATION (500ms, 10s, 5min, 1h) per file. */
#define RBT_ENV_ROTATE "RBTRACE_ROTATE"
/* `rbtrace snapshot PID` queues SIGUSR2 with this value (a plain SIGUSR2 is
 * the "sigusr2" trigger). */
#define RBT_SNAPSHOT_SIGVAL 0x52425453 /* "RBTS" */

/* The header's tool field: the release and the format it writes, as
 * `rbtrace --version` says them. */
#define RBT_TOOL_NAME \
	"librbtrace " RBT_VERSION " (format " RBT_STR(RBT_FORMAT_VERSION) ")"

#endif
