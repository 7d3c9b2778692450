/*
 * IBVERBS_PRIVATE_34: the provider interface of libibverbs. libmlx5 and
 * libefa (loaded by perftest with BIND_NOW) import these, so they must
 * exist; they are only reachable for an mlx5/efa device, which softnic
 * never reports. Each fails cleanly; verbs_register_driver_34 does nothing.
 * Never implement behaviour here: this is a link-time shim only.
 */
#include <errno.h>
#include <stddef.h>

#define SN_EXPORT __attribute__((visibility("default")))
#define SN_FAIL(name)              \
	SN_EXPORT int name(void);  \
	SN_EXPORT int name(void)   \
	{                          \
		return EOPNOTSUPP; \
	}
#define SN_NULL(name)               \
	SN_EXPORT void *name(void); \
	SN_EXPORT void *name(void)  \
	{                           \
		errno = EOPNOTSUPP; \
		return NULL;        \
	}
#define SN_NOP(name)               \
	SN_EXPORT void name(void); \
	SN_EXPORT void name(void)  \
	{                          \
	}

SN_NOP(verbs_register_driver_34)
SN_NOP(verbs_set_ops)
SN_NOP(verbs_uninit_context)
SN_NOP(verbs_init_cq)
SN_NOP(__verbs_log)
SN_FAIL(verbs_allow_disassociate_destroy)
SN_NULL(_verbs_init_and_alloc_context)
SN_NULL(verbs_open_device)
SN_FAIL(execute_ioctl)
SN_FAIL(__ioctl_final_num_attrs)
SN_FAIL(ibv_cmd_advise_mr)
SN_FAIL(ibv_cmd_alloc_dm)
SN_FAIL(ibv_cmd_alloc_mw)
SN_FAIL(ibv_cmd_alloc_pd)
SN_FAIL(ibv_cmd_attach_mcast)
SN_FAIL(ibv_cmd_close_xrcd)
SN_FAIL(ibv_cmd_create_ah)
SN_FAIL(ibv_cmd_create_counters)
SN_FAIL(ibv_cmd_create_cq)
SN_FAIL(ibv_cmd_create_cq_ex)
SN_FAIL(ibv_cmd_create_flow)
SN_FAIL(ibv_cmd_create_flow_action_esp)
SN_FAIL(ibv_cmd_create_qp)
SN_FAIL(ibv_cmd_create_qp_ex)
SN_FAIL(ibv_cmd_create_qp_ex2)
SN_FAIL(ibv_cmd_create_rwq_ind_table)
SN_FAIL(ibv_cmd_create_srq)
SN_FAIL(ibv_cmd_create_srq_ex)
SN_FAIL(ibv_cmd_create_wq)
SN_FAIL(ibv_cmd_dealloc_mw)
SN_FAIL(ibv_cmd_dealloc_pd)
SN_FAIL(ibv_cmd_dereg_mr)
SN_FAIL(ibv_cmd_destroy_ah)
SN_FAIL(ibv_cmd_destroy_counters)
SN_FAIL(ibv_cmd_destroy_cq)
SN_FAIL(ibv_cmd_destroy_flow)
SN_FAIL(ibv_cmd_destroy_flow_action)
SN_FAIL(ibv_cmd_destroy_qp)
SN_FAIL(ibv_cmd_destroy_rwq_ind_table)
SN_FAIL(ibv_cmd_destroy_srq)
SN_FAIL(ibv_cmd_destroy_wq)
SN_FAIL(ibv_cmd_detach_mcast)
SN_FAIL(ibv_cmd_free_dm)
SN_FAIL(ibv_cmd_get_context)
SN_FAIL(ibv_cmd_modify_cq)
SN_FAIL(ibv_cmd_modify_flow_action_esp)
SN_FAIL(ibv_cmd_modify_qp)
SN_FAIL(ibv_cmd_modify_qp_ex)
SN_FAIL(ibv_cmd_modify_srq)
SN_FAIL(ibv_cmd_modify_wq)
SN_FAIL(ibv_cmd_open_qp)
SN_FAIL(ibv_cmd_open_xrcd)
SN_FAIL(ibv_cmd_poll_cq)
SN_FAIL(ibv_cmd_post_recv)
SN_FAIL(ibv_cmd_post_send)
SN_FAIL(ibv_cmd_post_srq_recv)
SN_FAIL(ibv_cmd_query_context)
SN_FAIL(ibv_cmd_query_device_any)
SN_FAIL(ibv_cmd_query_mr)
SN_FAIL(ibv_cmd_query_port)
SN_FAIL(ibv_cmd_query_qp)
SN_FAIL(ibv_cmd_query_srq)
SN_FAIL(ibv_cmd_read_counters)
SN_FAIL(ibv_cmd_reg_dm_mr)
SN_FAIL(ibv_cmd_reg_dmabuf_mr)
SN_FAIL(ibv_cmd_reg_mr)
SN_FAIL(ibv_cmd_req_notify_cq)
SN_FAIL(ibv_cmd_rereg_mr)
SN_FAIL(ibv_cmd_resize_cq)
