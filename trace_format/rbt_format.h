/* rbt_format.h - the one public interface to rbtrace trace files.
 *
 * Only trace_format/ knows the bytes of a trace (see FORMAT.md). Everything else
 * - the recorder in interpose/, the analyzer, the replayer, the CLI - speaks in the
 * decoded events declared here.
 *
 * Every event type, and every field of every event, is written once in the lists
 * below. They generate the C structs here and, inside trace_format/, the encoder,
 * the decoder, the names and the text/JSON printers. Adding an event is one line in
 * RBT_EVENT_LIST plus its field list; adding a field is one line at the END of a
 * field list (older readers skip it, see FORMAT.md "Versioning and compatibility").
 *
 * Conventions of the decoded form:
 * - every integer field is a uint64_t (or int64_t for kind I); handles are the
 *   recording process's pointer values, only meaningful as identities;
 * - timestamps (kind T) are raw ticks of the trace's clock (header.clock_hz);
 * - strings are NUL-terminated, blobs are (pointer, length), arrays are
 *   (pointer, count); all of them stay valid until the next rbt_reader_next().
 *
 * Errors are negative errno values; rbt_strerror() names them.
 */
#ifndef RBT_FORMAT_H
#define RBT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RBT_FORMAT_VERSION 2

/* ---- field kinds -------------------------------------------------------------
 * U  unsigned integer, uint64_t, LEB128 varint
 * I  signed integer (return codes), int64_t, zigzag varint
 * T  timestamp, uint64_t ticks, stored as a signed delta from the event's ts
 * H  handle (recorded pointer), uint64_t, stored as a delta from the previous
 *    handle of the same field in the chunk (zigzag varint)
 * D  unsigned integer, uint64_t, stored like H (zigzag delta from the previous
 *    value of the same field in the chunk) but a number like U to every reader:
 *    for addresses and clocks that repeat or advance in small steps
 * S  string, const char *, varint length + bytes
 * B  blob, struct rbt_blob, varint length + bytes
 * A  array of records of a sub-list, struct { uint32_t n; const T *v; }
 */
struct rbt_blob {
	const uint8_t *data;
	uint32_t len;
};

/* ---- sub-records (array elements) ------------------------------------------
 * F(kind, name) a scalar/string/blob field; A(subrecord, name) an array.
 */
/* The lists read best one field per line: clang-format leaves them alone. */
/* clang-format off */
#define RBT_REC_sge(F, A)               \
	F(D, addr)                      \
	F(U, length)                    \
	F(U, lkey)

/* One send work request, classic or built with the ibv_wr_* API. */
/* Fields by opcode: imm_data is the immediate (host order) of *_WITH_IMM and
 * the rkey to invalidate of SEND_WITH_INV and LOCAL_INV, else 0. remote_addr
 * and rkey: RDMA and atomics; BIND_MW: the address bound and the window's new
 * rkey. compare_add and swap: atomics (ATOMIC_WRITE: compare_add holds the 8
 * bytes); BIND_MW: the length bound and the access flags; TSO: hdr_sz and mss.
 * ah: UD's address handle; BIND_MW: the window. remote_qpn: UD's destination
 * QP, XRC's destination SRQ number. */
#define RBT_REC_send_wr(F, A)                                                 \
	F(U, wr_id)                                                           \
	F(U, opcode) /* enum ibv_wr_opcode */                                 \
	F(U, send_flags)                                                      \
	F(U, imm_data)                                                        \
	F(D, remote_addr)                                                     \
	F(U, rkey)                                                            \
	F(U, compare_add)                                                     \
	F(U, swap)                                                            \
	F(H, ah)                                                              \
	F(U, remote_qpn)                                                      \
	F(U, remote_qkey)                                                     \
	A(sge, sges)                                                          \
	F(B, payload) /* only with payload capture on */

#define RBT_REC_recv_wr(F, A)                                                \
	F(U, wr_id)                                                          \
	A(sge, sges)                                                         \
	F(B, payload) /* unused today: received bytes are captured in wcs */

/* One completion. hw_ts is the NIC clock (0 when the CQ has none). */
#define RBT_REC_wc(F, A)                                    \
	F(U, wr_id)                                         \
	F(U, status) /* enum ibv_wc_status */               \
	F(U, opcode) /* enum ibv_wc_opcode */               \
	F(U, vendor_err)                                    \
	F(U, byte_len)                                      \
	F(U, imm_data) /* host order; WITH_INV: the rkey */ \
	F(U, qp_num)                                        \
	F(U, src_qp)                                        \
	F(U, wc_flags)                                      \
	F(U, pkey_index)                                    \
	F(U, slid)                                          \
	F(U, sl)                                            \
	F(U, dlid_path_bits)                                \
	F(D, hw_ts) /* NIC clock ticks, 0 = none */         \
	F(B, payload) /* received bytes, capture only */

/* A stack frame: an instruction address; module_map events name the modules. */
#define RBT_REC_frame(F, A)             \
	F(U, ip)

/* Address vector, as in struct ibv_ah_attr (+ GRH). */
#define RBT_AH_FIELDS(F)                \
	F(U, ah_dlid)                   \
	F(U, ah_sl)                     \
	F(U, ah_src_path_bits)          \
	F(U, ah_static_rate)            \
	F(U, ah_is_global)              \
	F(B, ah_dgid)                   \
	F(U, ah_flow_label)             \
	F(U, ah_sgid_index)             \
	F(U, ah_hop_limit)              \
	F(U, ah_traffic_class)          \
	F(U, ah_port_num)

/* ---- events ---------------------------------------------------------------
 * Every event also has the common header of struct rbt_event: type, stream (the
 * recording thread's id) and ts (entry time). Calls carry ts_exit, ret (what the
 * verb returned: 0/-errno style or a count) and err (errno after the call, 0 when
 * the call succeeded).
 *
 * X(NAME, id, lname): id is on disk and never changes or gets reused.
 */
#define RBT_EVENT_LIST(X)                       \
	X(THREAD, 1, thread)                    \
	X(MODULE_MAP, 2, module_map)            \
	X(STACK, 3, stack)                      \
	X(CLOCK_SAMPLE, 4, clock_sample)        \
	X(LOSS, 5, loss)                        \
	X(NOTE, 6, note)                        \
	X(SNAPSHOT, 7, snapshot)                \
	X(DEVICE_LIST, 10, device_list)         \
	X(DEVICE_OPEN, 11, device_open)         \
	X(DEVICE_CLOSE, 12, device_close)       \
	X(DEVICE_ATTR, 13, device_attr)         \
	X(PORT_ATTR, 14, port_attr)             \
	X(PD_ALLOC, 20, pd_alloc)               \
	X(PD_DEALLOC, 21, pd_dealloc)           \
	X(MR_REG, 22, mr_reg)                   \
	X(MR_REREG, 23, mr_rereg)               \
	X(MR_DEREG, 24, mr_dereg)               \
	X(MW_ALLOC, 25, mw_alloc)               \
	X(MW_DEALLOC, 26, mw_dealloc)           \
	X(XRCD_OPEN, 27, xrcd_open)             \
	X(XRCD_CLOSE, 28, xrcd_close)           \
	X(CHANNEL_CREATE, 30, channel_create)   \
	X(CHANNEL_DESTROY, 31, channel_destroy) \
	X(CQ_CREATE, 32, cq_create)             \
	X(CQ_RESIZE, 33, cq_resize)             \
	X(CQ_DESTROY, 34, cq_destroy)           \
	X(SRQ_CREATE, 35, srq_create)           \
	X(SRQ_MODIFY, 36, srq_modify)           \
	X(SRQ_DESTROY, 37, srq_destroy)         \
	X(QP_CREATE, 40, qp_create)             \
	X(QP_MODIFY, 41, qp_modify)             \
	X(QP_QUERY, 42, qp_query)               \
	X(QP_DESTROY, 43, qp_destroy)           \
	X(AH_CREATE, 44, ah_create)             \
	X(AH_DESTROY, 45, ah_destroy)           \
	X(QP_FINAL_STATE, 46, qp_final_state)   \
	X(POST_SEND, 50, post_send)             \
	X(POST_RECV, 51, post_recv)             \
	X(POST_SRQ_RECV, 52, post_srq_recv)     \
	X(POLL_CQ, 53, poll_cq)                 \
	X(REQ_NOTIFY, 54, req_notify)           \
	X(GET_CQ_EVENT, 55, get_cq_event)       \
	X(ACK_CQ_EVENTS, 56, ack_cq_events)     \
	X(ASYNC_EVENT, 57, async_event)         \
	X(CM_CALL, 58, cm_call)                 \
	X(CM_EVENT, 59, cm_event)               \
	X(CM_ACK, 60, cm_ack)                   \
	X(CM_ID, 61, cm_id)

/* A thread of the recording process (stream ids are these tids). */
#define RBT_EV_thread(F, A)             \
	F(U, tid)                       \
	F(S, name)

/* The executable modules mapped at the time, for symbolising stacks. One event per
 * module; emitted before the first stack that needs it. The module's code is at
 * [base, base + size) in the recording process, and ip - base + offset is the
 * link-time virtual address of ip, the one the module's ELF symbol tables use
 * (from dl_iterate_phdr: base = dlpi_addr + the first PT_LOAD's p_vaddr, offset =
 * that p_vaddr). */
#define RBT_EV_module_map(F, A)         \
	F(U, base)                      \
	F(U, size)                      \
	F(U, offset)                    \
	F(S, path)                      \
	F(S, build_id)

/* A call stack, attached to the event just before it in the same stream whose type
 * is ref_type. */
#define RBT_EV_stack(F, A)              \
	F(U, ref_type)                  \
	A(frame, frames)

/* A pair of clock readings taken back to back: host ticks (the event ts), host
 * CLOCK_MONOTONIC and CLOCK_REALTIME in ns, and the NIC clock of a device when
 * one was read (ctx != 0, from ibv_query_rt_values_ex). */
#define RBT_EV_clock_sample(F, A)       \
	F(H, ctx)                       \
	F(U, mono_ns)                   \
	F(U, real_ns)                   \
	F(U, nic_ts)                    \
	F(U, nic_hz)

/* Events that the recorder could not keep (exact counts, per stream). */
#define RBT_EV_loss(F, A)               \
	F(U, lost_stream)               \
	F(U, events)                    \
	F(U, bytes)                     \
	F(T, first_ts)                  \
	F(T, last_ts)

/* Something the recorder wants a reader to know (e.g. "mlx5dv data path not
 * traced", "context layout not recognised"). level: 0 info, 1 warning. */
#define RBT_EV_note(F, A)               \
	F(U, level)                     \
	F(S, text)

/* A flight-recorder snapshot (docs/recording.md): which trigger fired (enum
 * rbt_trigger), when, and the window of time the file holds. Triggers that
 * fired while it was pending are counted in also_fired. qp, qp_num, wr_id and
 * detail say what fired it (a completion's status, an async event's type, the
 * stall's or the slow call's length in us). */
#define RBT_EV_snapshot(F, A)           \
	F(U, trigger)                   \
	F(T, trigger_ts)                \
	F(U, seq)                       \
	F(T, window_start)              \
	F(T, window_end)                \
	F(U, also_fired)                \
	F(H, qp)                        \
	F(U, qp_num)                    \
	F(U, wr_id)                     \
	F(U, detail)                    \
	F(U, dropped_chunks)

#define RBT_EV_device_list(F, A)        \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(S, names)

#define RBT_EV_device_open(F, A)        \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, ctx)                       \
	F(S, name)                      \
	F(U, node_guid)                 \
	F(U, transport)                 \
	F(U, node_type)                 \
	F(U, num_comp_vectors)          \
	F(U, async_fd)

#define RBT_EV_device_close(F, A)       \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, ctx)

/* From ibv_query_device(_ex), recorded once per context (and on each query). */
#define RBT_EV_device_attr(F, A)        \
	F(H, ctx)                       \
	F(S, fw_ver)                    \
	F(U, vendor_id)                 \
	F(U, vendor_part_id)            \
	F(U, max_mr_size)               \
	F(U, max_qp)                    \
	F(U, max_qp_wr)                 \
	F(U, max_sge)                   \
	F(U, max_cq)                    \
	F(U, max_cqe)                   \
	F(U, max_mr)                    \
	F(U, max_pd)                    \
	F(U, max_qp_rd_atom)            \
	F(U, max_qp_init_rd_atom)       \
	F(U, max_srq)                   \
	F(U, max_srq_wr)                \
	F(U, atomic_cap)                \
	F(U, phys_port_cnt)             \
	F(U, completion_timestamp_mask) \
	F(U, hca_core_clock)            \
	F(U, max_inline_data)

#define RBT_EV_port_attr(F, A)          \
	F(H, ctx)                       \
	F(U, port)                      \
	F(U, state)                     \
	F(U, max_mtu)                   \
	F(U, active_mtu)                \
	F(U, lid)                       \
	F(U, sm_lid)                    \
	F(U, link_layer)                \
	F(U, gid_tbl_len)               \
	F(U, active_speed)              \
	F(U, active_width)              \
	F(B, gid0)

#define RBT_EV_pd_alloc(F, A)           \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, ctx)                       \
	F(H, pd)
#define RBT_EV_pd_dealloc(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, pd)

/* api: 0 ibv_reg_mr, 1 _iova, 2 _iova2, 3 dmabuf, 4 reg_dm_mr */
#define RBT_EV_mr_reg(F, A)             \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, pd)                        \
	F(H, mr)                        \
	F(D, addr)                      \
	F(U, length)                    \
	F(D, iova)                      \
	F(U, access)                    \
	F(U, lkey)                      \
	F(U, rkey)                      \
	F(U, api)                       \
	F(U, dmabuf_fd)                 \
	F(U, dmabuf_offset)

#define RBT_EV_mr_rereg(F, A)           \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, mr)                        \
	F(U, flags)                     \
	F(H, pd)                        \
	F(D, addr)                      \
	F(U, length)                    \
	F(U, access)                    \
	F(U, lkey)                      \
	F(U, rkey)

#define RBT_EV_mr_dereg(F, A)           \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, mr)

#define RBT_EV_mw_alloc(F, A)           \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, pd)                        \
	F(H, mw)                        \
	F(U, mw_type)                   \
	F(U, rkey)
#define RBT_EV_mw_dealloc(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, mw)

#define RBT_EV_xrcd_open(F, A)          \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, ctx)                       \
	F(H, xrcd)                      \
	F(U, fd)                        \
	F(U, oflags)
#define RBT_EV_xrcd_close(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, xrcd)

#define RBT_EV_channel_create(F, A)     \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, ctx)                       \
	F(H, channel)                   \
	F(U, fd)
#define RBT_EV_channel_destroy(F, A)    \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, channel)

/* ex: created with ibv_create_cq_ex (wc_flags as asked). ts_source: how hw_ts
 * of this CQ's completions is obtained, 0 none, 1 the app asked for completion
 * timestamps, 2 the recorder added them (RBTRACE_NIC_TS). */
#define RBT_EV_cq_create(F, A)          \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, ctx)                       \
	F(H, cq)                        \
	F(U, cqe_asked)                 \
	F(U, cqe)                       \
	F(H, channel)                   \
	F(U, comp_vector)               \
	F(U, ex)                        \
	F(U, wc_flags)                  \
	F(U, flags)                     \
	F(U, ts_source)

#define RBT_EV_cq_resize(F, A)          \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, cq)                        \
	F(U, cqe)
#define RBT_EV_cq_destroy(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, cq)

/* srq_type: enum ibv_srq_type; srqn for XRC SRQs. */
#define RBT_EV_srq_create(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, pd)                        \
	F(H, srq)                       \
	F(U, max_wr)                    \
	F(U, max_sge)                   \
	F(U, srq_limit)                 \
	F(U, srq_type)                  \
	F(H, xrcd)                      \
	F(H, cq)                        \
	F(U, srqn)

#define RBT_EV_srq_modify(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, srq)                       \
	F(U, attr_mask)                 \
	F(U, max_wr)                    \
	F(U, srq_limit)
#define RBT_EV_srq_destroy(F, A)        \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, srq)

/* Caps are what the device granted (read back from the init attr). ex: made by
 * ibv_create_qp_ex; send_ops_flags when it uses the ibv_wr_* API. */
#define RBT_EV_qp_create(F, A)          \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, ctx)                       \
	F(H, pd)                        \
	F(H, qp)                        \
	F(U, qp_num)                    \
	F(U, qp_type)                   \
	F(H, send_cq)                   \
	F(H, recv_cq)                   \
	F(H, srq)                       \
	F(H, xrcd)                      \
	F(U, max_send_wr)               \
	F(U, max_recv_wr)               \
	F(U, max_send_sge)              \
	F(U, max_recv_sge)              \
	F(U, max_inline_data)           \
	F(U, sq_sig_all)                \
	F(U, ex)                        \
	F(U, create_flags)              \
	F(U, send_ops_flags)

/* Every ibv_modify_qp: the mask and all attributes (only those in the mask mean
 * anything). */
#define RBT_EV_qp_modify(F, A)          \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, qp)                        \
	F(U, attr_mask)                 \
	F(U, qp_state)                  \
	F(U, cur_qp_state)              \
	F(U, path_mtu)                  \
	F(U, qkey)                      \
	F(U, rq_psn)                    \
	F(U, sq_psn)                    \
	F(U, dest_qp_num)               \
	F(U, qp_access_flags)           \
	F(U, pkey_index)                \
	F(U, port_num)                  \
	F(U, max_rd_atomic)             \
	F(U, max_dest_rd_atomic)        \
	F(U, min_rnr_timer)             \
	F(U, timeout)                   \
	F(U, retry_cnt)                 \
	F(U, rnr_retry)                 \
	F(U, sq_draining)               \
	F(U, rate_limit)                \
	RBT_AH_FIELDS(F)

/* ibv_query_qp: state and caps as the device reports them. */
#define RBT_EV_qp_query(F, A)           \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, qp)                        \
	F(U, attr_mask)                 \
	F(U, qp_state)                  \
	F(U, max_inline_data)           \
	F(U, dest_qp_num)               \
	F(U, path_mtu)

#define RBT_EV_qp_destroy(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, qp)

/* A QP's state as the device reported it (ibv_query_qp with IBV_QP_STATE),
 * taken by the recorder itself: right before the program's ibv_destroy_qp
 * (why 0; the qp_destroy event follows) or, for a QP still alive, when the
 * program calls exit() (why 1). ret: the query's return (0, or an errno; then
 * qp_state means nothing). qp_num: the QP's number, for readers that do not
 * follow handles. */
#define RBT_EV_qp_final_state(F, A)     \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(H, qp)                        \
	F(U, qp_num)                    \
	F(U, qp_state)                  \
	F(U, why)

#define RBT_EV_ah_create(F, A)          \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, pd)                        \
	F(H, ah)                        \
	RBT_AH_FIELDS(F)
#define RBT_EV_ah_destroy(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, ah)

/* ret: what ibv_post_send returned (0 or an errno); bad_wr: index of *bad_wr in
 * wrs when ret != 0. api: 0 classic post_send, 1 ibv_wr_* (wr_start ..
 * wr_complete; ts is wr_start, ts_exit is wr_complete's return). */
#define RBT_EV_post_send(F, A)          \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(H, qp)                        \
	F(U, qp_num)                    \
	F(U, bad_wr)                    \
	F(U, api)                       \
	A(send_wr, wrs)

#define RBT_EV_post_recv(F, A)          \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(H, qp)                        \
	F(U, qp_num)                    \
	F(U, bad_wr)                    \
	A(recv_wr, wrs)

#define RBT_EV_post_srq_recv(F, A)      \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(H, srq)                       \
	F(U, bad_wr)                    \
	A(recv_wr, wrs)

/* One ibv_poll_cq (asked = num_entries, ret = its return), or one extended poll
 * session start_poll .. end_poll (api 1; asked 0; ret = completions or -errno).
 * Empty polls are recorded too (the analyzer bounds completion times with them);
 * consecutive empty polls of one CQ are folded into one event with count = N. */
#define RBT_EV_poll_cq(F, A)            \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(H, cq)                        \
	F(U, asked)                     \
	F(U, api)                       \
	F(U, count)                     \
	A(wc, wcs)

#define RBT_EV_req_notify(F, A)         \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(H, cq)                        \
	F(U, solicited_only)

#define RBT_EV_get_cq_event(F, A)       \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(H, channel)                   \
	F(H, cq)

#define RBT_EV_ack_cq_events(F, A)      \
	F(H, cq)                        \
	F(U, nevents)

/* ibv_get_async_event: event_type (enum ibv_event_type) and its element (a
 * QP/CQ/SRQ handle, or the port number). */
#define RBT_EV_async_event(F, A)        \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(H, ctx)                       \
	F(U, event_type)                \
	F(H, element)                   \
	F(U, port)

/* ---- librdmacm (connection manager) --------------------------------------------
 * The rdma_* calls a program makes, the events it gets and acks, and snapshots of
 * its ids. nested: 0 for a call the program made, N for one librdmacm made
 * from inside another of its calls (e.g. the rdma_get_cm_event of a synchronous
 * id's rdma_resolve_addr, the rdma_create_id of rdma_create_ep). Addresses are
 * text ("192.168.1.2:7471", "[fe80::1]:7471"). Private data bytes are kept only
 * with payload capture on (they often carry rkeys and addresses); their length
 * always.
 *
 * fn says which call (RBT_CM_FN_LIST, ids never change). Fields by fn: id is the
 * cm id (create_id, create_ep, get_request: the new one); channel the event
 * channel (create_id, create_event_channel, migrate_id: the new one); arg is
 * resolve_addr/route's timeout_ms, listen's backlog, create_id's port space,
 * set_option's optname, the QP's type for create_qp(_ex); arg2 create_id's QP
 * type, set_option's level; qp and qp_num the id's QP after the call; conn_*
 * the rdma_conn_param given to connect/accept (conn_given 0: none);
 * private_data_len and private_data: connect/accept/reject's. */
#define RBT_CM_FN_LIST(X)                                       \
	X(CREATE_EVENT_CHANNEL, 1, "create_event_channel")      \
	X(DESTROY_EVENT_CHANNEL, 2, "destroy_event_channel")    \
	X(CREATE_ID, 3, "create_id")                            \
	X(CREATE_EP, 4, "create_ep")                            \
	X(DESTROY_EP, 5, "destroy_ep")                          \
	X(DESTROY_ID, 6, "destroy_id")                          \
	X(BIND_ADDR, 7, "bind_addr")                            \
	X(RESOLVE_ADDR, 8, "resolve_addr")                      \
	X(RESOLVE_ROUTE, 9, "resolve_route")                    \
	X(CREATE_QP, 10, "create_qp")                           \
	X(CREATE_QP_EX, 11, "create_qp_ex")                     \
	X(DESTROY_QP, 12, "destroy_qp")                         \
	X(CONNECT, 13, "connect")                               \
	X(LISTEN, 14, "listen")                                 \
	X(GET_REQUEST, 15, "get_request")                       \
	X(ACCEPT, 16, "accept")                                 \
	X(REJECT, 17, "reject")                                 \
	X(DISCONNECT, 18, "disconnect")                         \
	X(SET_OPTION, 19, "set_option")                         \
	X(MIGRATE_ID, 20, "migrate_id")                         \
	X(JOIN_MULTICAST, 21, "join_multicast")                 \
	X(LEAVE_MULTICAST, 22, "leave_multicast")               \
	X(ESTABLISH, 23, "establish")                           \
	X(INIT_QP_ATTR, 24, "init_qp_attr")                     \
	X(DESTROY_ID_BEGIN, 25, "destroy_id_begin") /* entry of a destroy_id */

enum rbt_cm_fn {
#define RBT__CM_FN_ENUM(NAME, id, text) RBT_CM_##NAME = id,
	RBT_CM_FN_LIST(RBT__CM_FN_ENUM)
#undef RBT__CM_FN_ENUM
};

#define RBT_EV_cm_call(F, A)            \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(U, fn)                        \
	F(U, nested)                    \
	F(H, id)                        \
	F(H, channel)                   \
	F(H, listen_id)                 \
	F(S, src)                       \
	F(S, dst)                       \
	F(U, arg)                       \
	F(U, arg2)                      \
	F(H, qp)                        \
	F(U, qp_num)                    \
	F(U, conn_given)                \
	F(U, responder_resources)       \
	F(U, initiator_depth)           \
	F(U, flow_control)              \
	F(U, retry_count)               \
	F(U, rnr_retry_count)           \
	F(U, srq)                       \
	F(U, conn_qp_num)               \
	F(U, private_data_len)          \
	F(B, private_data)

/* One event rdma_get_cm_event returned (ret != 0: none, the call failed).
 * event: enum rdma_cm_event_type; status as the event carries it (a negative
 * errno, or the IB CM's reject reason for REJECTED). conn_*: param.conn; for UD
 * ids (and multicast events) ud_qp_num and qkey from param.ud. */
#define RBT_EV_cm_event(F, A)           \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(U, nested)                    \
	F(H, channel)                   \
	F(H, ev)                        \
	F(H, id)                        \
	F(H, listen_id)                 \
	F(U, event)                     \
	F(I, status)                    \
	F(U, responder_resources)       \
	F(U, initiator_depth)           \
	F(U, flow_control)              \
	F(U, retry_count)               \
	F(U, rnr_retry_count)           \
	F(U, srq)                       \
	F(U, conn_qp_num)               \
	F(U, ud)                        \
	F(U, ud_qp_num)                 \
	F(U, qkey)                      \
	F(U, private_data_len)          \
	F(B, private_data)              \
	F(B, ud_dgid)                   \
	F(U, ud_dlid)

/* rdma_ack_cm_event of the event `ev` (as recorded by cm_event). */
#define RBT_EV_cm_ack(F, A)             \
	F(T, ts_exit)                   \
	F(I, ret)                       \
	F(U, err)                       \
	F(U, nested)                    \
	F(H, ev)                        \
	F(H, id)                        \
	F(U, event)

/* What an id holds, after a call (why = the call's fn) or an event (why = 100 +
 * the event type) changed it: its addresses, device port, GIDs, path and QP. */
#define RBT_EV_cm_id(F, A)              \
	F(U, why)                       \
	F(H, id)                        \
	F(H, channel)                   \
	F(H, ctx)                       \
	F(H, qp)                        \
	F(U, qp_num)                    \
	F(U, ps)                        \
	F(U, qp_type)                   \
	F(U, port_num)                  \
	F(S, src)                       \
	F(S, dst)                       \
	F(B, sgid)                      \
	F(B, dgid)                      \
	F(U, pkey)                      \
	F(U, num_paths)                 \
	F(U, path_mtu)                  \
	F(U, path_sl)                   \
	F(U, path_rate)                 \
	F(U, packet_life_time)          \
	F(U, hop_limit)                 \
	F(U, dlid)                      \
	F(U, slid)
/* clang-format on */

/* ---- generated structs ------------------------------------------------------ */
#define RBT__CTYPE_U	       uint64_t
#define RBT__CTYPE_I	       int64_t
#define RBT__CTYPE_T	       uint64_t
#define RBT__CTYPE_H	       uint64_t
#define RBT__CTYPE_D	       uint64_t
#define RBT__CTYPE_S	       const char *
#define RBT__CTYPE_B	       struct rbt_blob
#define RBT__FIELD(kind, name) RBT__CTYPE_##kind name;
#define RBT__ARRAY(rec, name) \
	uint32_t n_##name;    \
	const struct rbt_##rec *name;

struct rbt_sge {
	RBT_REC_sge(RBT__FIELD, RBT__ARRAY)
};
struct rbt_send_wr {
	RBT_REC_send_wr(RBT__FIELD, RBT__ARRAY)
};
struct rbt_recv_wr {
	RBT_REC_recv_wr(RBT__FIELD, RBT__ARRAY)
};
struct rbt_wc {
	RBT_REC_wc(RBT__FIELD, RBT__ARRAY)
};
struct rbt_frame {
	RBT_REC_frame(RBT__FIELD, RBT__ARRAY)
};

#define RBT__EV_STRUCT(NAME, id, lname)                \
	struct rbt_ev_##lname {                        \
		RBT_EV_##lname(RBT__FIELD, RBT__ARRAY) \
	};
RBT_EVENT_LIST(RBT__EV_STRUCT)
#undef RBT__EV_STRUCT

enum rbt_event_type {
	RBT_EV_NONE = 0,
#define RBT__EV_ENUM(NAME, id, lname) RBT_EV_##NAME = id,
	RBT_EVENT_LIST(RBT__EV_ENUM)
#undef RBT__EV_ENUM
		RBT_EV_MAX_ID = 63,
};

/* A decoded event. `type` selects the member of `u`. For an event type this
 * reader does not know, type is its on-disk id and `u` is zero. */
struct rbt_event {
	uint32_t type;
	uint32_t stream; /* recording thread id */
	uint64_t ts;	 /* entry time, clock ticks */
	union {
#define RBT__EV_MEMBER(NAME, id, lname) struct rbt_ev_##lname lname;
		RBT_EVENT_LIST(RBT__EV_MEMBER)
#undef RBT__EV_MEMBER
	} u;
};

/* "post_send" for RBT_EV_POST_SEND; NULL for an unknown id. */
const char *rbt_event_name(uint32_t type);
/* The id for a name as rbt_event_name() prints it, or 0. */
uint32_t rbt_event_type_from_name(const char *name);

/* ---- header ------------------------------------------------------------------ */

/* Back-to-back readings of the trace clock and the host clocks. */
struct rbt_clock_pair {
	uint64_t ticks;	  /* trace clock (TSC or CLOCK_MONOTONIC ns, see clock_source) */
	uint64_t mono_ns; /* CLOCK_MONOTONIC */
	uint64_t real_ns; /* CLOCK_REALTIME */
};

enum rbt_clock_source {
	RBT_CLOCK_TSC = 1,  /* x86 invariant TSC */
	RBT_CLOCK_MONO = 2, /* CLOCK_MONOTONIC in ns (clock_hz = 1e9) */
};

struct rbt_header {
	uint32_t version; /* filled in by the writer */
	uint32_t pid;
	uint32_t ppid;
	uint32_t clock_source; /* enum rbt_clock_source */
	uint64_t clock_hz;     /* ticks per second of the trace clock */
	struct rbt_clock_pair start;
	const char *host;
	const char *cmdline; /* argv joined by spaces */
	const char *tool;    /* "librbtrace 0.1" or the writing program */
	/* A rotated series (docs/recording.md): the first file's name (no
	 * directory) and this file's place in it; "" and 0 when not a series. */
	const char *series;
	uint64_t series_index;
};

/* The name of file `index` of the series whose first file is `first`: first
 * itself for 0, else first with "-partN" before its ".rbt" (or at its end).
 * Returns the length it needed (snprintf-like). */
size_t rbt_series_path(const char *first, uint32_t index, char *buf, size_t len);

/* What fired a flight-recorder snapshot (the snapshot event's trigger). */
#define RBT_TRIGGER_LIST(X)                                 \
	X(ERROR_WC, 1, "error_completion")                  \
	X(QP_ERR, 2, "qp_error")                            \
	X(ASYNC_EVENT, 3, "async_event")                    \
	X(STALL, 4, "stall")                                \
	X(SLOW_POST, 5, "slow_post")                        \
	X(SLOW_POLL, 6, "slow_poll")                        \
	X(SIGNAL, 7, "sigusr2")                             \
	X(REQUEST, 8, "request") /* rbtrace snapshot PID */ \
	X(END, 9, "end")	 /* the recording ended */

enum rbt_trigger {
#define RBT__TRIG_ENUM(NAME, id, text) RBT_TRIGGER_##NAME = id,
	RBT_TRIGGER_LIST(RBT__TRIG_ENUM)
#undef RBT__TRIG_ENUM
};
/* "error_completion", ...; NULL for an unknown value. */
const char *rbt_trigger_name(uint64_t trigger);

/* How the recording ended (trailer end_how). 0: not said (older writers, or a
 * writer that is not a recorder). */
#define RBT_END_LIST(X)                                                        \
	X(UNKNOWN, 0, "not said")                                              \
	X(EXIT, 1, "exit")	   /* exit() or return from main: exit_code */ \
	X(SIGNAL, 2, "signal")	   /* killed by end_signal */                  \
	X(EXEC, 3, "exec")	   /* the image was replaced */                \
	X(UNLOAD, 4, "unload")	   /* recorder unloaded without exit */        \
	X(ROTATED, 5, "rotated")   /* continues in the series' next file */    \
	X(SNAPSHOT, 6, "snapshot") /* a flight snapshot; the process went on */

enum rbt_end {
#define RBT__END_ENUM(NAME, id, text) RBT_END_##NAME = id,
	RBT_END_LIST(RBT__END_ENUM)
#undef RBT__END_ENUM
};
/* "exit", "signal", ...; NULL for an unknown value. */
const char *rbt_end_name(uint32_t how);

/* Written by rbt_writer_close(): a file that has one was finished cleanly. */
struct rbt_trailer {
	struct rbt_clock_pair end;
	uint64_t events;      /* events written, all streams */
	uint64_t lost_events; /* the sum of the file's loss events */
	uint32_t end_how;     /* enum rbt_end */
	uint32_t end_signal;  /* RBT_END_SIGNAL: the signal number */
	int32_t exit_code;    /* RBT_END_EXIT: the status given to exit() */
};

/* ---- writer -------------------------------------------------------------------
 * Not thread-safe: one thread (the recorder's background thread) owns a writer.
 * Events go into the open chunk of the stream named at rbt_writer_begin_chunk()
 * (an append with no chunk open opens one for ev->stream; a decoded event's stream
 * is always its chunk's); a chunk is compressed and written at
 * rbt_writer_end_chunk(), at a begin_chunk() for another stream, or when it
 * reaches the chunk size. Bigger chunks compress better: end a chunk when a batch
 * must be on disk, not after every few events. The header is written at open, so
 * a killed writer leaves a readable file. Files are created with mode 0600.
 * Strings may be NULL (read back as ""); arrays with a NULL pointer are empty.
 * append() refuses unknown types (-EINVAL) and events over 32 MiB (-E2BIG).
 * Nothing here is async-signal-safe (malloc, zstd): never call it from a signal
 * handler that may have interrupted the writer's owner.
 */
struct rbt_writer;

struct rbt_writer_opts {
	size_t chunk_bytes; /* raw bytes per chunk before compression; 0 = 256 KiB */
	int zstd_level;	    /* 0 = 3 */
	/* With a sink (rbt_writer_open_sink): each finished chunk (its header and
	 * frame, as the file would hold it) goes to sink instead of a file; no file
	 * header, no trailer. A negative return is the writer's error. */
	int (*sink)(void *arg, const void *chunk, size_t len, uint64_t first_ts,
		    uint64_t last_ts);
	void *sink_arg;
	/* Chunk flags: RBT_CHUNK_CARRIED marks events a file repeats from before
	 * it began (a series' later files, a snapshot's resources). */
	uint32_t chunk_flags;
	/* 1: the timestamp column (FORMAT.md): each chunk's ts deltas and the
	 * ts_exit of its posts and polls are written after its events rather
	 * than in them, which zstd compresses faster and smaller; the file then
	 * needs a reader of format version 2. The recorder's default. */
	int ts_column;
};
#define RBT_CHUNK_CARRIED 1u
#define RBT_CHUNK_TSCOL	  2u /* the chunk has a timestamp column (set by the writer) */

/* A writer whose chunks go to opts->sink (required). */
int rbt_writer_open_sink(const struct rbt_header *hdr, const struct rbt_writer_opts *opts,
			 struct rbt_writer **out);
/* Writes a chunk a sink received, unchanged, after the open one (which it
 * ends); its events count in the trailer. -EBADMSG when it is not one chunk,
 * -EINVAL when it has a timestamp column and w was opened without one. */
int rbt_writer_copy_chunk(struct rbt_writer *w, const void *chunk, size_t len);

int rbt_writer_open(const char *path, const struct rbt_header *hdr,
		    const struct rbt_writer_opts *opts, struct rbt_writer **out);
/* Same, on an open descriptor (the writer owns fd and closes it). */
int rbt_writer_open_fd(int fd, const struct rbt_header *hdr,
		       const struct rbt_writer_opts *opts, struct rbt_writer **out);
int rbt_writer_begin_chunk(struct rbt_writer *w, uint32_t stream);
int rbt_writer_append(struct rbt_writer *w, const struct rbt_event *ev);
int rbt_writer_end_chunk(struct rbt_writer *w);

/* ---- writer: flat records -------------------------------------------------------
 * The recorder's hot events as its per-thread rings hold them (fixed layouts,
 * 8-byte aligned, no pointers), encoded straight into the open chunk: the same
 * bytes rbt_writer_append() writes for the equivalent event, at a fraction of
 * the cost (no struct rbt_event to build, fields known to be zero never
 * tested). rec points at the flat post or poll and len covers it and all that
 * follows it. Returns 0, a negative errno (sticky, as append()), or -EBADMSG
 * when the record does not fit len (nothing written).
 *
 *   RBT_FLAT_POST_SEND:  rbt_flat_post, then per WR an rbt_flat_swr, its
 *                        rbt_flat_swr_ext when ext, nsge rbt_flat_sge, and
 *                        payload_len bytes padded to 8.
 *   RBT_FLAT_POST_RECV, RBT_FLAT_POST_SRQ: rbt_flat_post, then per WR an
 *                        rbt_flat_rwr and its nsge rbt_flat_sge.
 *   RBT_FLAT_POLL:       rbt_flat_poll, then nwc rbt_flat_wc, or nwc
 *                        rbt_flat_wcx with RBT_FLAT_WCX in flags, or, with
 *                        RBT_FLAT_DENSE, nwc rbt_flat_dwc each followed by its
 *                        rbt_flat_dwc_ext when it says so.
 *   RBT_FLAT_POST_SEND with RBT_FLAT_DENSE: rbt_flat_post, then per WR an
 *                        rbt_flat_dswr, the parts its shape names (in the order
 *                        of the RBT_DSWR_ bits), nsge rbt_flat_sge and the
 *                        payload padded to 8.
 * The dense layouts are what the recorder writes on its hot path: a WR or a
 * completion in the bytes that commonly differ (32 for a one-sge send, 24 for a
 * completion), the rest only when it is not zero. They encode to the same bytes
 * as the full layouts (format_test).
 */
enum rbt_flat_kind {
	RBT_FLAT_POST_SEND = 1,
	RBT_FLAT_POST_RECV,
	RBT_FLAT_POST_SRQ,
	RBT_FLAT_POLL,
};
#define RBT_FLAT_WCX   1u
#define RBT_FLAT_DENSE 2u

struct rbt_flat_post {
	uint64_t ts, ts_exit, obj; /* obj: the QP, or the SRQ */
	int32_t ret;
	uint32_t qp_num;
	uint32_t bad_wr;
	uint16_t api;
	uint16_t nwr;
};

struct rbt_flat_sge {
	uint64_t addr;
	uint32_t length, lkey;
};

struct rbt_flat_swr {
	uint64_t wr_id, remote_addr;
	uint32_t rkey, imm, send_flags;
	uint32_t payload_len;
	uint8_t opcode;
	uint8_t ext; /* an rbt_flat_swr_ext follows */
	uint16_t nsge;
	uint32_t pad;
};

struct rbt_flat_swr_ext {
	uint64_t compare_add, swap, ah;
	uint32_t remote_qpn, remote_qkey;
};

struct rbt_flat_rwr {
	uint64_t wr_id;
	uint32_t nsge, pad;
};

struct rbt_flat_poll {
	uint64_t ts, ts_exit, cq;
	int32_t ret;
	uint32_t asked;
	uint32_t api;
	uint32_t count; /* polls folded into this one; 0 counts as 1 */
	uint32_t nwc, pad;
};

/* struct ibv_wc's layout (the recorder copies the array the provider filled):
 * imm is as the wc holds it, big-endian, or the invalidated rkey when
 * wc_flags has RBT_FLAT_WC_WITH_INV (IBV_WC_WITH_INV). */
#define RBT_FLAT_WC_WITH_INV (1u << 3)
struct rbt_flat_wc {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len;
	uint32_t imm, qp_num, src_qp, wc_flags;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
	uint8_t pad[2];
};

struct rbt_flat_wcx {
	struct rbt_flat_wc wc;
	uint64_t hw_ts;
};

/* The fields of rbt_flat_swr_ext, and those of rbt_flat_dwc_ext, by the names
 * they have in rbt_send_wr and rbt_wc too: X(name) each, for the copies between
 * the layouts. */
#define RBT_SWR_EXT_FIELDS(X) X(compare_add) X(swap) X(ah) X(remote_qpn) X(remote_qkey)
#define RBT_DWC_EXT_FIELDS(X) \
	X(status)             \
	X(opcode)             \
	X(wc_flags) X(vendor_err) X(src_qp) X(pkey_index) X(slid) X(sl) X(dlid_path_bits)
/* A copy of one field between two of those structs: d->name = s->name. */
#define RBT_FIELD_CP(name) d->name = s->name;

/* A send WR in its dense form: 16 bytes, then what shape names. */
#define RBT_DSWR_RDMA 1u /* rbt_flat_dswr_rdma: remote_addr and rkey (not both 0) */
#define RBT_DSWR_EXT  2u /* rbt_flat_swr_ext */
#define RBT_DSWR_WIDE 4u /* rbt_flat_dswr_wide: send_flags > 255, or a payload */
struct rbt_flat_dswr {
	uint64_t wr_id;
	uint32_t imm; /* the trace's imm_data (see RBT_REC_send_wr) */
	uint8_t opcode;
	uint8_t send_flags; /* its low 8 bits; all 32 in the wide part */
	uint8_t shape;
	uint8_t nsge;
};

struct rbt_flat_dswr_rdma {
	uint64_t remote_addr;
	uint32_t rkey, pad;
};

struct rbt_flat_dswr_wide {
	uint32_t send_flags, payload_len;
};

/* A completion in 24 bytes: what every completion has. wr_id, byte_len, qp_num
 * and imm (as rbt_flat_wc's) are whole; status, opcode and wc_flags are whole
 * unless ext says an rbt_flat_dwc_ext follows, which holds them whole and the
 * fields of ibv_wc that are commonly zero. */
struct rbt_flat_dwc {
	uint64_t wr_id;
	uint32_t byte_len, qp_num, imm;
	uint8_t status, opcode, wc_flags, ext;
};

struct rbt_flat_dwc_ext {
	uint32_t status, opcode, wc_flags, vendor_err, src_qp;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
	uint8_t pad[6];
};

/* The completion at q in the dense layout (and its extension); returns its
 * bytes. imm_data as the trace has it: host order, or the invalidated rkey. */
#define RBT_DWC_FIELDS(X) X(wr_id) X(byte_len) X(qp_num) X(status) X(opcode) X(wc_flags)
static inline size_t rbt_flat_dwc_get(struct rbt_wc *v, const void *q)
{
	const struct rbt_flat_dwc *x = (const struct rbt_flat_dwc *)q;
	size_t n = sizeof(*x);
	{
		struct rbt_wc *d = v;
		const struct rbt_flat_dwc *s = x;
		struct rbt_wc zero = { 0 };
		*v = zero;
		RBT_DWC_FIELDS(RBT_FIELD_CP)
	}
	if (__builtin_expect(x->ext, 0)) {
		struct rbt_wc *d = v;
		const struct rbt_flat_dwc_ext *s =
			(const struct rbt_flat_dwc_ext *)(x + 1);
		RBT_DWC_EXT_FIELDS(RBT_FIELD_CP)
		n += sizeof(*s);
	}
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint32_t host = __builtin_bswap32(x->imm); /* imm is big-endian */
#else
	uint32_t host = x->imm;
#endif
	v->imm_data = v->wc_flags & RBT_FLAT_WC_WITH_INV ? x->imm : host;
	return n;
}

int rbt_writer_append_flat(struct rbt_writer *w, enum rbt_flat_kind kind, uint32_t flags,
			   const void *rec, size_t len);
/* Ends the open chunk, writes the trailer, fsyncs nothing, closes. NULL is fine.
 * trailer may be NULL (the writer fills events; end clock pair left zero). */
int rbt_writer_close(struct rbt_writer *w, const struct rbt_trailer *trailer);
/* Bytes written to the file so far. */
uint64_t rbt_writer_bytes(const struct rbt_writer *w);

/* ---- reader -------------------------------------------------------------------
 * Streams events merged by time across the file's streams (FORMAT.md "Order of
 * events"): each stream's events in their order (chunk by chunk; within a chunk,
 * in append order), the smallest next ts first (ties: the earlier chunk).
 * Damage never stops the reader early when intact chunks follow: a bad chunk is
 * skipped (resynchronising on the next chunk magic), counted and remembered.
 * A file that ends "rotated" (a series' file, rbt_reader_open only) goes on into
 * the next file of its series, found beside it by rbt_series_path(): the series
 * reads as one trace (the first file's header; a trailer whose counts cover the
 * series, without the later files' carried-over events, which are skipped). A
 * missing next file is damage, and the series does not read as finished.
 */
struct rbt_reader;

struct rbt_reader_stats {
	uint64_t chunks; /* intact chunks read so far */
	uint64_t events;
	uint64_t events_by_type[RBT_EV_MAX_ID + 1]; /* ids above go to [0] */
	uint64_t bad_chunks;			    /* damaged chunks skipped */
	uint64_t bad_bytes;			    /* bytes skipped as damaged */
	uint64_t lost_events_in_bad_chunks; /* from their headers, when readable */
	uint64_t first_damage_offset;	    /* valid when bad_chunks or truncated */
	int truncated;			    /* the file ends inside a chunk */
	int finished;			    /* a trailer was found */
	uint64_t unknown_events; /* events of types this reader does not know */
	/* damaged regions whose chunk header was unreadable: the events they held
	 * are lost but not counted in lost_events_in_bad_chunks */
	uint64_t unreadable_regions;
	/* a rotated series read as one: files read after the first, and the
	 * carried-over events of those files that were skipped */
	uint32_t series_files;
	uint64_t carried_skipped;
};

/* Errors: -ENOENT etc. from open(2); -EISDIR (a directory), -EINVAL (not a
 * regular file), -ENODATA (empty file), -EILSEQ (not a trace: bad magic), -ENOMSG
 * (cut inside the file header), -EPROTONOSUPPORT (needs a newer reader). Damage
 * after the header never fails the open: see rbt_reader_stats(). */
int rbt_reader_open(const char *path, struct rbt_reader **out);
/* From memory (fuzzers, tests); the buffer must outlive the reader. */
int rbt_reader_open_mem(const void *buf, size_t len, struct rbt_reader **out);
/* Set once, at open; zero is the default. */
struct rbt_reader_opts {
	/* Threads decoding chunks ahead of rbt_reader_next() (about 128 KiB of
	 * compressed chunks each at a time); 0 or 1: none, every event is decoded when it is asked
	 * for, on the caller's thread. The events, their order, the stats and the
	 * damage said are the same whatever the number. */
	unsigned threads;
};
int rbt_reader_open_opts(const char *path, const struct rbt_reader_opts *opts,
			 struct rbt_reader **out);
int rbt_reader_open_mem_opts(const void *buf, size_t len,
			     const struct rbt_reader_opts *opts, struct rbt_reader **out);
void rbt_reader_close(struct rbt_reader *r);
const struct rbt_header *rbt_reader_header(const struct rbt_reader *r);
/* 1 and *ev set: an event; 0: end of file; < 0: an error that ends reading. The
 * event and everything it points to stay valid until the next call. */
int rbt_reader_next(struct rbt_reader *r, const struct rbt_event **ev);
/* Valid after rbt_reader_next() returned 0: the trailer, or NULL when the file
 * was not finished cleanly. */
const struct rbt_trailer *rbt_reader_trailer(const struct rbt_reader *r);
const struct rbt_reader_stats *rbt_reader_stats(const struct rbt_reader *r);
/* Describes the last damage or error seen, with its byte offset: "chunk at byte
 * 1234: checksum mismatch". Empty string when none. */
const char *rbt_reader_error(const struct rbt_reader *r);

/* ---- helpers ------------------------------------------------------------------ */
const char *rbt_strerror(int err);
/* Ticks to ns since the header's start pair, using clock_hz. */
double rbt_ticks_to_ns(const struct rbt_header *h, uint64_t ticks);
/* 1 when two intact headers name one recording (same host, pid and start
 * pair): a file given twice, or a copy. A damaged header reads as zeros and
 * matches nothing. */
int rbt_header_same_recording(const struct rbt_header *a, const struct rbt_header *b);

/* The libibverbs names of the verbs enums a trace stores as numbers ("SEND",
 * "WR_FLUSH_ERR", "RTS", "RC"): NULL for a value the enum does not name. The
 * values are libibverbs ABI and never change. */
enum rbt_verbs_enum {
	RBT_NAMES_WR_OPCODE, /* enum ibv_wr_opcode */
	RBT_NAMES_WC_OPCODE, /* enum ibv_wc_opcode */
	RBT_NAMES_WC_STATUS, /* enum ibv_wc_status */
	RBT_NAMES_QP_STATE,  /* enum ibv_qp_state */
	RBT_NAMES_QP_TYPE,   /* enum ibv_qp_type */
	RBT_NAMES_CM_FN,     /* enum rbt_cm_fn: "resolve_addr" */
	RBT_NAMES_CM_EVENT,  /* enum rdma_cm_event_type: "ESTABLISHED" */
};
const char *rbt_verbs_name(enum rbt_verbs_enum which, uint64_t v);

/* Printers, generated from the lists: one line of text (no newline) or one JSON
 * object, into buf; return the length they needed (snprintf-like). */
size_t rbt_event_format_text(const struct rbt_header *h, const struct rbt_event *ev,
			     char *buf, size_t len);
size_t rbt_event_format_json(const struct rbt_header *h, const struct rbt_event *ev,
			     char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
