/*
 * Between softnic's provider and its preload (libsoftnic-preload.so): the
 * provider, once loaded by libibverbs, hands the preload the entry points
 * the preload needs for what no provider op covers (completion channels).
 */
#ifndef SOFTNIC_PRELOAD_H
#define SOFTNIC_PRELOAD_H

#include <infiniband/verbs.h>

#define SN_PRELOAD_MAGIC  0x736e706c31ull /* "snpl1" */
#define SN_PRELOAD_ATTACH "softnic_preload_attach"

struct sn_preload_hooks {
	unsigned long long magic;
	const void *dev_ops; /* the verbs_device_ops of softnic's devices */
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
	int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
};

#endif
