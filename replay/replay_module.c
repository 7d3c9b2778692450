/* replay_module.c - the one symbol librbtrace-replay.so exports: the table the
 * CLI finds with dlsym(RBT_REPLAY_MODULE_SYM) after dlopen()ing the module.
 *
 * Owns the module's ABI stamp only. Must never export anything else (the
 * module is built with -fvisibility=hidden) and never run code at load time:
 * loading it must cost nothing but resolving libibverbs.
 */
#include "replay/rbt_replay.h"

__attribute__((visibility("default")))
const struct rbt_replay_module rbt_replay_module = {
	.abi = RBT_REPLAY_ABI,
	.opts_size = sizeof(struct rbt_replay_opts),
	.summary_size = sizeof(struct rbt_replay_summary),
	.run = rbt_replay_run,
};
