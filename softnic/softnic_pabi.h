/*
 * The rdma-core provider ABI that softnic's provider front end speaks:
 * IBVERBS_PRIVATE_34, the private interface between libibverbs.so.1 and its
 * lib<name>-rdmav34.so providers. libibverbs-dev installs no driver.h, so
 * the part we use is declared here, in our own words, from the layouts of
 * rdma-core's libibverbs/driver.h. They are the same in every release
 * from v36 to v56 (private ABI 34 from v34; v34 and v35 had fewer context
 * ops); the provider refuses any other libibverbs at load time.
 *
 * Only the fields softnic sets or reads have their real types; every other
 * slot is an opaque pointer of the same size. The asserts below pin the
 * sizes and offsets of v44 on LP64: a change here that moves one fails the
 * build, never a program. Include only from softnic_provider.c.
 */
#ifndef SOFTNIC_PABI_H
#define SOFTNIC_PABI_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* How libibverbs finds a provider's device: by an ibdev name prefix (a
 * "rdma_device:*N<prefix>*" modalias pattern), among others. */
enum { SN_PABI_MATCH_END = 0, SN_PABI_MATCH_MODALIAS = 2 };

struct sn_pabi_match {
	void *driver_data;
	const char *modalias; /* a union with a u64 driver id */
	uint16_t vendor, device;
	uint8_t kind;
};

struct sn_pabi_sysfs_dev; /* libibverbs' own; never looked into */

struct sn_pabi_device {
	struct ibv_device device; /* first */
	const void *ops;	  /* set by libibverbs */
	atomic_int refcount;
	void *entry_next, *entry_prev;
	struct sn_pabi_sysfs_dev *sysfs;
	uint64_t core_support;
};

struct sn_pabi_device_ops {
	const char *name;
	uint32_t match_min_abi_version, match_max_abi_version;
	const struct sn_pabi_match *match_table;
	const void *static_providers;
	void *match_device;
	struct verbs_context *(*alloc_context)(struct ibv_device *device, int cmd_fd,
					       void *private_data);
	void *import_context;
	struct sn_pabi_device *(*alloc_device)(struct sn_pabi_sysfs_dev *sysfs_dev);
	void (*uninit_device)(struct sn_pabi_device *device);
};

/* The context ops, in rdma-core's (alphabetical) order. */
struct sn_pabi_ops {
	void *advise_mr, *alloc_dm;
	struct ibv_mw *(*alloc_mw)(struct ibv_pd *pd, enum ibv_mw_type type);
	void *alloc_null_mr, *alloc_parent_domain;
	struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
	void *alloc_td;
	void (*async_event)(struct ibv_context *context, struct ibv_async_event *event);
	void *attach_counters_point_flow, *attach_mcast;
	int (*bind_mw)(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
	int (*close_xrcd)(struct ibv_xrcd *xrcd);
	void (*cq_event)(struct ibv_cq *cq);
	struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
	void *create_counters;
	struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe,
				    struct ibv_comp_channel *channel, int comp_vector);
	struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *context,
					  struct ibv_cq_init_attr_ex *attr);
	void *create_flow, *create_flow_action_esp;
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	struct ibv_qp *(*create_qp_ex)(struct ibv_context *context,
				       struct ibv_qp_init_attr_ex *attr);
	void *create_rwq_ind_table;
	struct ibv_srq *(*create_srq)(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
	struct ibv_srq *(*create_srq_ex)(struct ibv_context *context,
					 struct ibv_srq_init_attr_ex *attr);
	void *create_wq;
	int (*dealloc_mw)(struct ibv_mw *mw);
	int (*dealloc_pd)(struct ibv_pd *pd);
	void *dealloc_td;
	int (*dereg_mr)(void *verbs_mr); /* struct verbs_mr: our sn_mr */
	int (*destroy_ah)(struct ibv_ah *ah);
	void *destroy_counters;
	int (*destroy_cq)(struct ibv_cq *cq);
	void *destroy_flow, *destroy_flow_action;
	int (*destroy_qp)(struct ibv_qp *qp);
	void *destroy_rwq_ind_table;
	int (*destroy_srq)(struct ibv_srq *srq);
	void *destroy_wq, *detach_mcast;
	void (*free_context)(struct ibv_context *context);
	void *free_dm;
	int (*get_srq_num)(struct ibv_srq *srq, uint32_t *srq_num);
	void *import_dm, *import_mr, *import_pd;
	void *modify_cq, *modify_flow_action_esp;
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	void *modify_qp_rate_limit;
	int (*modify_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
	void *modify_wq, *open_qp;
	struct ibv_xrcd *(*open_xrcd)(struct ibv_context *context,
				      struct ibv_xrcd_init_attr *attr);
	int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
	int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr,
			 struct ibv_recv_wr **bad);
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr,
			 struct ibv_send_wr **bad);
	void *post_srq_ops;
	int (*post_srq_recv)(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			     struct ibv_recv_wr **bad);
	int (*query_device_ex)(struct ibv_context *context,
			       const struct ibv_query_device_ex_input *input,
			       struct ibv_device_attr_ex *attr, size_t attr_size);
	void *query_ece;
	int (*query_port)(struct ibv_context *context, uint8_t port,
			  struct ibv_port_attr *attr);
	int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
			struct ibv_qp_init_attr *init);
	void *query_qp_data_in_order;
	int (*query_rt_values)(struct ibv_context *context, struct ibv_values_ex *v);
	int (*query_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr);
	void *read_counters, *reg_dm_mr, *reg_dmabuf_mr;
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
				 uint64_t hca_va, int access);
	int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
	void *rereg_mr;
	int (*resize_cq)(struct ibv_cq *cq, int cqe);
	void *set_ece, *unimport_dm, *unimport_mr, *unimport_pd;
};

/* libibverbs' exports at IBVERBS_PRIVATE_34 that the provider calls. */
void verbs_register_driver_34(const struct sn_pabi_device_ops *ops);
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
				    size_t alloc_size,
				    struct verbs_context *context_offset,
				    uint32_t driver_id);
void verbs_uninit_context(struct verbs_context *context);
void verbs_set_ops(struct verbs_context *vctx, const struct sn_pabi_ops *ops);

#define SN_PABI_OFF(t, f, v) _Static_assert(offsetof(t, f) == (v), #t "." #f)

/* 76 ops from v36 to v56 */
_Static_assert(sizeof(struct sn_pabi_ops) == 76 * sizeof(void *), "verbs_context_ops");
SN_PABI_OFF(struct sn_pabi_ops, alloc_pd, 5 * 8);
SN_PABI_OFF(struct sn_pabi_ops, create_cq, 15 * 8);
SN_PABI_OFF(struct sn_pabi_ops, dereg_mr, 28 * 8);
SN_PABI_OFF(struct sn_pabi_ops, free_context, 39 * 8);
SN_PABI_OFF(struct sn_pabi_ops, poll_cq, 53 * 8);
SN_PABI_OFF(struct sn_pabi_ops, query_device_ex, 58 * 8);
SN_PABI_OFF(struct sn_pabi_ops, reg_mr, 68 * 8);
SN_PABI_OFF(struct sn_pabi_ops, resize_cq, 71 * 8);
SN_PABI_OFF(struct sn_pabi_ops, unimport_pd, 75 * 8);
_Static_assert(sizeof(struct sn_pabi_device_ops) == 72, "verbs_device_ops");
SN_PABI_OFF(struct sn_pabi_device_ops, alloc_context, 40);
SN_PABI_OFF(struct sn_pabi_device_ops, alloc_device, 56);
SN_PABI_OFF(struct sn_pabi_device_ops, uninit_device, 64);
_Static_assert(sizeof(struct sn_pabi_match) == 24, "verbs_match_ent");
SN_PABI_OFF(struct sn_pabi_match, kind, 20);
SN_PABI_OFF(struct sn_pabi_device, ops, sizeof(struct ibv_device));
SN_PABI_OFF(struct sn_pabi_device, sysfs, sizeof(struct ibv_device) + 32);
_Static_assert(sizeof(struct sn_pabi_device) == sizeof(struct ibv_device) + 48,
	       "verbs_device");

#endif
