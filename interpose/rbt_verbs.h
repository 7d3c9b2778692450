/* rbt_verbs.h - every function librbtrace.so defines in front of another library,
 * and every one it calls through the next definition, written once: name, symbol
 * version node, return type, parameters.
 *
 * From these lists come the resolvers (rbt_next_<name>(), dlvsym(RTLD_NEXT) with
 * the version given here), a prototype per entry that the compiler checks against
 * the library's own header, the preload's version script (librbtrace.lds, made at
 * build time by rbt_verbs_gen) and the fake device's (tests/), so that a wrapper
 * cannot be exported under one version and resolved under another.
 * tests/interpose_verbs_test.sh compares every entry with softnic's map and with
 * the versions the installed rdma-core and glibc export.
 *
 * Must never hold anything but the lists and what they generate: it is read by
 * the build-time generator as well as by the recorder.
 */
#ifndef RBT_VERBS_H
#define RBT_VERBS_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* verbs.h turns these into inline helpers; the recorder defines the functions. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

/* libibverbs functions wrapped and exported under libibverbs' own version nodes
 * (so that programs linked against libibverbs bind to them). */
#define RBT_VERBS_IBV(X)                                                               \
	X(ibv_get_device_list, "IBVERBS_1.1", struct ibv_device **, (int *num))        \
	X(ibv_open_device, "IBVERBS_1.1", struct ibv_context *, (struct ibv_device *)) \
	X(ibv_close_device, "IBVERBS_1.1", int, (struct ibv_context *))                \
	X(ibv_query_device, "IBVERBS_1.1", int,                                        \
	  (struct ibv_context *, struct ibv_device_attr *))                            \
	X(ibv_query_port, "IBVERBS_1.1", int,                                          \
	  (struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *))             \
	X(ibv_alloc_pd, "IBVERBS_1.1", struct ibv_pd *, (struct ibv_context *))        \
	X(ibv_dealloc_pd, "IBVERBS_1.1", int, (struct ibv_pd *))                       \
	X(ibv_reg_mr, "IBVERBS_1.1", struct ibv_mr *,                                  \
	  (struct ibv_pd *, void *, size_t, int))                                      \
	X(ibv_reg_mr_iova, "IBVERBS_1.7", struct ibv_mr *,                             \
	  (struct ibv_pd *, void *, size_t, uint64_t, int))                            \
	X(ibv_reg_mr_iova2, "IBVERBS_1.8", struct ibv_mr *,                            \
	  (struct ibv_pd *, void *, size_t, uint64_t, unsigned int))                   \
	X(ibv_reg_dmabuf_mr, "IBVERBS_1.12", struct ibv_mr *,                          \
	  (struct ibv_pd *, uint64_t, size_t, uint64_t, int, int))                     \
	X(ibv_rereg_mr, "IBVERBS_1.1", int,                                            \
	  (struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int))                \
	X(ibv_dereg_mr, "IBVERBS_1.1", int, (struct ibv_mr *))                         \
	X(ibv_create_comp_channel, "IBVERBS_1.0", struct ibv_comp_channel *,           \
	  (struct ibv_context *))                                                      \
	X(ibv_destroy_comp_channel, "IBVERBS_1.0", int, (struct ibv_comp_channel *))   \
	X(ibv_create_cq, "IBVERBS_1.1", struct ibv_cq *,                               \
	  (struct ibv_context *, int, void *, struct ibv_comp_channel *, int))         \
	X(ibv_resize_cq, "IBVERBS_1.1", int, (struct ibv_cq *, int))                   \
	X(ibv_destroy_cq, "IBVERBS_1.1", int, (struct ibv_cq *))                       \
	X(ibv_get_cq_event, "IBVERBS_1.1", int,                                        \
	  (struct ibv_comp_channel *, struct ibv_cq **, void **))                      \
	X(ibv_ack_cq_events, "IBVERBS_1.1", void, (struct ibv_cq *, unsigned int))     \
	X(ibv_create_srq, "IBVERBS_1.1", struct ibv_srq *,                             \
	  (struct ibv_pd *, struct ibv_srq_init_attr *))                               \
	X(ibv_modify_srq, "IBVERBS_1.1", int,                                          \
	  (struct ibv_srq *, struct ibv_srq_attr *, int))                              \
	X(ibv_destroy_srq, "IBVERBS_1.1", int, (struct ibv_srq *))                     \
	X(ibv_create_qp, "IBVERBS_1.1", struct ibv_qp *,                               \
	  (struct ibv_pd *, struct ibv_qp_init_attr *))                                \
	X(ibv_qp_to_qp_ex, "IBVERBS_1.6", struct ibv_qp_ex *, (struct ibv_qp *))       \
	X(ibv_modify_qp, "IBVERBS_1.1", int,                                           \
	  (struct ibv_qp *, struct ibv_qp_attr *, int))                                \
	X(ibv_query_qp, "IBVERBS_1.1", int,                                            \
	  (struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *))     \
	X(ibv_destroy_qp, "IBVERBS_1.1", int, (struct ibv_qp *))                       \
	X(ibv_create_ah, "IBVERBS_1.1", struct ibv_ah *,                               \
	  (struct ibv_pd *, struct ibv_ah_attr *))                                     \
	X(ibv_create_ah_from_wc, "IBVERBS_1.1", struct ibv_ah *,                       \
	  (struct ibv_pd *, struct ibv_wc *, struct ibv_grh *, uint8_t))               \
	X(ibv_destroy_ah, "IBVERBS_1.1", int, (struct ibv_ah *))                       \
	X(ibv_get_async_event, "IBVERBS_1.1", int,                                     \
	  (struct ibv_context *, struct ibv_async_event *))

/* mlx5 direct verbs: exported only to say, once, that the data path they drive
 * is not traced. Their types are opaque here (no mlx5dv.h needed). */
#define RBT_VERBS_MLX5(X)                                                 \
	X(mlx5dv_create_cq, "MLX5_1.1", void *, (void *, void *, void *)) \
	X(mlx5dv_init_obj, "MLX5_1.2", int, (void *, uint64_t))           \
	X(mlx5dv_create_qp, "MLX5_1.3", void *, (void *, void *, void *)) \
	X(mlx5dv_open_device, "MLX5_1.7", void *, (void *, void *))

/* The exec family: the trace is finished before the image is replaced; exit()
 * and the start of main (whose return is an exit): exits from two threads at
 * once are put one after the other. Resolved by name (glibc's default version);
 * the version is the one exported. */
#define RBT_VERBS_LIBC(X)                                                                \
	X(execve, "GLIBC_2.2.5", int, (const char *, char *const[], char *const[]))      \
	X(execv, "GLIBC_2.2.5", int, (const char *, char *const[]))                      \
	X(execvp, "GLIBC_2.2.5", int, (const char *, char *const[]))                     \
	X(execvpe, "GLIBC_2.11", int, (const char *, char *const[], char *const[]))      \
	X(exit, "GLIBC_2.2.5", void, (int))                                              \
	X(__libc_start_main, "GLIBC_2.34", int,                                          \
	  (int (*)(int, char **, char **), int, char **, void (*)(void), void (*)(void), \
	   void (*)(void), void *))

/* libibverbs functions the recorder calls (the next definition, untraced) but
 * does not export. */
#define RBT_VERBS_CALLED(X)                                                  \
	X(ibv_query_gid, "IBVERBS_1.1", int,                                 \
	  (struct ibv_context *, uint8_t, int, union ibv_gid *))             \
	X(ibv_get_device_guid, "IBVERBS_1.1", __be64, (struct ibv_device *)) \
	X(ibv_init_ah_from_wc, "IBVERBS_1.1", int,                           \
	  (struct ibv_context *, uint8_t, struct ibv_wc *, struct ibv_grh *, \
	   struct ibv_ah_attr *))

/* libibverbs functions the recorder neither wraps nor calls that a stand-in
 * libibverbs.so.1 for its tests (tests/progs/interpose_fakeverbs.c) must still
 * export for the test programs to link and run. */
#define RBT_VERBS_COMPANIONS(X)                                                    \
	X(ibv_free_device_list, "IBVERBS_1.1", void, (struct ibv_device **))       \
	X(ibv_get_device_name, "IBVERBS_1.1", const char *, (struct ibv_device *)) \
	X(ibv_ack_async_event, "IBVERBS_1.1", void, (struct ibv_async_event *))    \
	X(ibv_wc_status_str, "IBVERBS_1.1", const char *, (enum ibv_wc_status))

/* librdmacm functions wrapped (shim_cm.c) and exported under librdmacm's own
 * version nodes: Debian's library on hardware, softnic's on softnic. The rest of
 * librdmacm (getaddrinfo, event_str, devices, rsockets ...) is not wrapped: a
 * program binds those straight to the library. */
#define RBT_VERBS_RDMACM(X)                                                              \
	X(rdma_create_event_channel, "RDMACM_1.0", struct rdma_event_channel *, (void))  \
	X(rdma_destroy_event_channel, "RDMACM_1.0", void, (struct rdma_event_channel *)) \
	X(rdma_create_id, "RDMACM_1.0", int,                                             \
	  (struct rdma_event_channel *, struct rdma_cm_id **, void *,                    \
	   enum rdma_port_space))                                                        \
	X(rdma_create_ep, "RDMACM_1.0", int,                                             \
	  (struct rdma_cm_id **, struct rdma_addrinfo *, struct ibv_pd *,                \
	   struct ibv_qp_init_attr *))                                                   \
	X(rdma_destroy_ep, "RDMACM_1.0", void, (struct rdma_cm_id *))                    \
	X(rdma_destroy_id, "RDMACM_1.0", int, (struct rdma_cm_id *))                     \
	X(rdma_bind_addr, "RDMACM_1.0", int, (struct rdma_cm_id *, struct sockaddr *))   \
	X(rdma_resolve_addr, "RDMACM_1.0", int,                                          \
	  (struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int))              \
	X(rdma_resolve_route, "RDMACM_1.0", int, (struct rdma_cm_id *, int))             \
	X(rdma_create_qp, "RDMACM_1.0", int,                                             \
	  (struct rdma_cm_id *, struct ibv_pd *, struct ibv_qp_init_attr *))             \
	X(rdma_create_qp_ex, "RDMACM_1.0", int,                                          \
	  (struct rdma_cm_id *, struct ibv_qp_init_attr_ex *))                           \
	X(rdma_destroy_qp, "RDMACM_1.0", void, (struct rdma_cm_id *))                    \
	X(rdma_connect, "RDMACM_1.0", int,                                               \
	  (struct rdma_cm_id *, struct rdma_conn_param *))                               \
	X(rdma_listen, "RDMACM_1.0", int, (struct rdma_cm_id *, int))                    \
	X(rdma_get_request, "RDMACM_1.0", int,                                           \
	  (struct rdma_cm_id *, struct rdma_cm_id **))                                   \
	X(rdma_accept, "RDMACM_1.0", int,                                                \
	  (struct rdma_cm_id *, struct rdma_conn_param *))                               \
	X(rdma_reject, "RDMACM_1.0", int, (struct rdma_cm_id *, const void *, uint8_t))  \
	X(rdma_disconnect, "RDMACM_1.0", int, (struct rdma_cm_id *))                     \
	X(rdma_get_cm_event, "RDMACM_1.0", int,                                          \
	  (struct rdma_event_channel *, struct rdma_cm_event **))                        \
	X(rdma_ack_cm_event, "RDMACM_1.0", int, (struct rdma_cm_event *))                \
	X(rdma_set_option, "RDMACM_1.0", int,                                            \
	  (struct rdma_cm_id *, int, int, void *, size_t))                               \
	X(rdma_migrate_id, "RDMACM_1.0", int,                                            \
	  (struct rdma_cm_id *, struct rdma_event_channel *))                            \
	X(rdma_join_multicast, "RDMACM_1.0", int,                                        \
	  (struct rdma_cm_id *, struct sockaddr *, void *))                              \
	X(rdma_leave_multicast, "RDMACM_1.0", int,                                       \
	  (struct rdma_cm_id *, struct sockaddr *))                                      \
	X(rdma_join_multicast_ex, "RDMACM_1.1", int,                                     \
	  (struct rdma_cm_id *, struct rdma_cm_join_mc_attr_ex *, void *))               \
	X(rdma_establish, "RDMACM_1.2", int, (struct rdma_cm_id *))                      \
	X(rdma_init_qp_attr, "RDMACM_1.2", int,                                          \
	  (struct rdma_cm_id *, struct ibv_qp_attr *, int *))                            \
	X(rdma_reject_ece, "RDMACM_1.3", int,                                            \
	  (struct rdma_cm_id *, const void *, uint8_t))

/* Every exported wrapper. */
#define RBT_VERBS_EXPORTED(X) \
	RBT_VERBS_IBV(X) RBT_VERBS_MLX5(X) RBT_VERBS_LIBC(X) RBT_VERBS_RDMACM(X)

/* One prototype per entry: a signature here that differs from the library's
 * header (or from the wrapper's definition) does not compile. */
#define RBT_VERB_PROTO(name, ver, ret, params) ret name params;
RBT_VERBS_IBV(RBT_VERB_PROTO)
RBT_VERBS_MLX5(RBT_VERB_PROTO)
RBT_VERBS_LIBC(RBT_VERB_PROTO)
RBT_VERBS_RDMACM(RBT_VERB_PROTO)
RBT_VERBS_CALLED(RBT_VERB_PROTO)
RBT_VERBS_COMPANIONS(RBT_VERB_PROTO)
#undef RBT_VERB_PROTO

#endif
