/*
 * softnic provider front end: softnic as an rdma-core provider
 * (libsoftnic-rdmav34.so) under the system's own libibverbs.so.1, the way
 * rxe plugs in. libibverbs finds softnic0 in the fake sysfs, loads this
 * library through RDMAV_DRIVERS, and calls the ops below; it keeps for
 * itself the device list, open/close, GID and P_Key queries (from sysfs),
 * CQ and async events (it reads our FIFOs: the records are the kernel's),
 * and the inline data path through ctx->ops.
 *
 * Thin on purpose: every op is a core sn_* function, at most adapted to the
 * op's signature. What a provider cannot do (completion channels are a raw
 * kernel command) is served through the preload, which this library hands
 * its entry points to. Never issue a kernel command: cmd_fd is /dev/null.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "softnic_int.h"
#include "softnic_pabi.h"
#include "softnic_preload.h"

_Static_assert(offsetof(struct sn_qp, vqp_comp_mask) == sizeof(struct ibv_qp_ex),
	       "struct verbs_qp: comp_mask follows the ibv_qp_ex");
_Static_assert(offsetof(struct sn_mr, vmr_type) == sizeof(struct ibv_mr),
	       "struct verbs_mr: mr_type follows the ibv_mr");
_Static_assert(offsetof(struct sn_mr, vmr_access) == sizeof(struct ibv_mr) + 4,
	       "struct verbs_mr: access");
_Static_assert(offsetof(struct sn_cq, cq) == 0, "the ibv_cq an event names");
_Static_assert(offsetof(struct sn_qp, qpx.qp_base) == 0, "the ibv_qp an event names");
_Static_assert(offsetof(struct sn_srq, srq) == 0, "the ibv_srq an event names");

/* ---------------- ops whose signature differs from the core's ---------------- */

static struct ibv_cq *sn_p_create_cq(struct ibv_context *c, int cqe,
				     struct ibv_comp_channel *ch, int vec)
{
	/* libibverbs sets cq_context (verbs_init_cq) once we return */
	return sn_create_cq(c, cqe, NULL, ch, vec);
}

static int sn_p_dereg_mr(void *vmr)
{
	return sn_dereg_mr((struct ibv_mr *)vmr);
}

static int sn_p_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
	return sn_query_port_full(c, port, a, sizeof(*a));
}

static struct ibv_mr *sn_p_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
				  uint64_t iova, int access)
{
	return sn_reg_mr_iova2(pd, addr, len, iova, (unsigned)access);
}

static void sn_p_free_context(struct ibv_context *c)
{
	struct sn_ctx *ctx = sn_ctx_of(c);

	/* verbs_uninit_context closes cmd_fd and async_fd (our FIFO) */
	sn_unlink(ctx->async_path);
	verbs_uninit_context(&ctx->vctx);
	free(ctx);
}

static const struct sn_pabi_ops sn_pops = {
	.alloc_mw = sn_alloc_mw,
	.alloc_pd = sn_alloc_pd,
	.bind_mw = sn_bind_mw,
	.close_xrcd = sn_close_xrcd,
	.create_ah = sn_create_ah,
	.create_cq = sn_p_create_cq,
	.create_cq_ex = sn_create_cq_ex,
	.alloc_parent_domain = sn_alloc_parent_domain,
	.attach_mcast = sn_attach_mcast,
	.detach_mcast = sn_detach_mcast,
	.modify_cq = sn_modify_cq,
	.create_qp = sn_create_qp,
	.create_qp_ex = sn_create_qp_ex,
	.create_srq = sn_create_srq,
	.create_srq_ex = sn_create_srq_ex,
	.dealloc_mw = sn_dealloc_mw,
	.dealloc_pd = sn_dealloc_pd,
	.dereg_mr = sn_p_dereg_mr,
	.destroy_ah = sn_destroy_ah,
	.destroy_cq = sn_destroy_cq,
	.destroy_qp = sn_destroy_qp,
	.destroy_srq = sn_destroy_srq,
	.free_context = sn_p_free_context,
	.get_srq_num = sn_get_srq_num,
	.modify_qp = sn_modify_qp,
	.modify_srq = sn_modify_srq,
	.open_xrcd = sn_open_xrcd,
	.poll_cq = sn_poll_cq,
	.post_recv = sn_post_recv,
	.post_send = sn_post_send,
	.post_srq_recv = sn_post_srq_recv,
	.query_device_ex = sn_query_device_ex,
	.query_port = sn_p_query_port,
	.query_qp = sn_query_qp,
	.query_rt_values = sn_query_rt_values,
	.query_srq = sn_query_srq,
	.reg_mr = sn_p_reg_mr,
	.req_notify_cq = sn_req_notify_cq,
	.resize_cq = sn_resize_cq,
	.rereg_mr = sn_rereg_mr,
};

/* ---------------- the device ---------------- */

static struct verbs_context *sn_p_alloc_context(struct ibv_device *dev, int cmd_fd,
						void *private_data)
{
	struct sn_ctx *ctx;
	struct ibv_context *c;

	(void)private_data;
	if (sn_init()) {
		close(cmd_fd);
		errno = ENODEV;
		return NULL;
	}
	ctx = _verbs_init_and_alloc_context(dev, cmd_fd, sizeof(*ctx),
					    &((struct sn_ctx *)NULL)->vctx, 0);
	if (!ctx)
		return NULL;
	c = &ctx->vctx.context;
	ctx->async_rfd = sn_mkfifo(ctx->async_path, sizeof(ctx->async_path), "as");
	if (ctx->async_rfd < 0) {
		verbs_uninit_context(&ctx->vctx);
		free(ctx);
		errno = EIO;
		return NULL;
	}
	pthread_mutex_init(&ctx->lock, NULL);
	/* libibverbs would otherwise ask the kernel for an async fd */
	c->async_fd = ctx->async_rfd;
	c->num_comp_vectors = 1;
	verbs_set_ops(&ctx->vctx, &sn_pops);
	return &ctx->vctx;
}

static struct sn_pabi_device *sn_p_alloc_device(struct sn_pabi_sysfs_dev *sysfs_dev)
{
	struct sn_pabi_device *d;

	(void)sysfs_dev;
	/* start softnic now: it writes the GUID and GIDs into the fake sysfs,
	 * which ibv_get_device_guid reads before any open; a fabric it cannot
	 * use was told in one line, and then there is no device */
	if (sn_init())
		return NULL;
	return calloc(1, sizeof(*d));
}

static void sn_p_uninit_device(struct sn_pabi_device *d)
{
	free(d);
}

static const struct sn_pabi_match sn_p_match[] = {
	{ .modalias = "rdma_device:*N" SN_DEV_NAME "*", .kind = SN_PABI_MATCH_MODALIAS },
	{ .kind = SN_PABI_MATCH_END },
};

static const struct sn_pabi_device_ops sn_p_dev_ops = {
	.name = "softnic",
	.match_min_abi_version = 0,
	.match_max_abi_version = INT_MAX,
	.match_table = sn_p_match,
	.alloc_context = sn_p_alloc_context,
	.alloc_device = sn_p_alloc_device,
	.uninit_device = sn_p_uninit_device,
};

/* The rdma-core release of the libibverbs that defines verbs_set_ops, from
 * its file name (libibverbs.so.1.<n>.<release>.0); 0 when unknown. */
static int sn_p_rdma_core_release(char *path, size_t n)
{
	Dl_info info;
	char real[PATH_MAX];
	const char *p;
	int a, b, rel, z;

	if (!dladdr((void *)verbs_set_ops, &info) || !info.dli_fname)
		return 0;
	snprintf(path, n, "%s", info.dli_fname);
	if (!realpath(info.dli_fname, real))
		return 0;
	p = strstr(real, ".so.");
	if (!p || sscanf(p, ".so.%d.%d.%d.%d", &a, &b, &rel, &z) != 4)
		return 0;
	return rel;
}

static const struct sn_preload_hooks sn_p_hooks = {
	.magic = SN_PRELOAD_MAGIC,
	.dev_ops = &sn_p_dev_ops,
	.create_comp_channel = sn_create_comp_channel,
	.destroy_comp_channel = sn_destroy_comp_channel,
};

__attribute__((constructor)) static void sn_p_register(void)
{
	void (*attach)(const struct sn_preload_hooks *);
	char path[PATH_MAX] = "libibverbs.so.1";
	int rel = sn_p_rdma_core_release(path, sizeof(path));

	/* verbs_context_ops has this layout from v36 to v56 only */
	if (rel < 36 || rel > 56) {
		fprintf(stderr,
			"softnic: %s is not rdma-core v36..v56 (private ABI 34 with "
			"this provider layout): softnic's provider stays out; use "
			"the drop-in (rbtrace softnic --softnic=dropin)\n",
			path);
		return;
	}
	attach = (void (*)(const struct sn_preload_hooks *))dlsym(RTLD_DEFAULT,
								  SN_PRELOAD_ATTACH);
	if (attach)
		attach(&sn_p_hooks);
	verbs_register_driver_34(&sn_p_dev_ops);
}
