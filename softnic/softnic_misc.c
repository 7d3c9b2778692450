/*
 * softnic misc: the small exported helpers of libibverbs (strings, rates,
 * sysfs, fork controls, imports) and the verbs softnic does not implement,
 * which fail the way a device without the feature fails (EOPNOTSUPP/NULL).
 * Nothing here touches shared state.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "softnic_int.h"

SN_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const s[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};

	if ((unsigned)status < sizeof(s) / sizeof(s[0]) && s[status])
		return s[status];
	return "unknown";
}

SN_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = { "unknown",
					 "InfiniBand channel adapter",
					 "InfiniBand switch",
					 "InfiniBand router",
					 "iWARP",
					 "usNIC",
					 "usNIC UDP",
					 "unspecified" };

	if (t < 0 || (unsigned)t >= sizeof(s) / sizeof(s[0]))
		return "unknown";
	return s[t];
}

SN_EXPORT const char *ibv_port_state_str(enum ibv_port_state st)
{
	static const char *const s[] = {
		"PORT_NOP",   "PORT_DOWN",   "PORT_INIT",
		"PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"
	};

	if ((unsigned)st >= sizeof(s) / sizeof(s[0]))
		return "unknown";
	return s[st];
}

SN_EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const s[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};

	if ((unsigned)e < sizeof(s) / sizeof(s[0]) && s[e])
		return s[e];
	return "unknown";
}

/* the IB rates: enum ibv_rate, multiple of 2.5 Gb/s, Mb/s */
enum { SN_RATE, SN_MULT, SN_MBPS };
static const int sn_rates[][3] = {
	{ IBV_RATE_2_5_GBPS, 1, 2500 },	    { IBV_RATE_5_GBPS, 2, 5000 },
	{ IBV_RATE_10_GBPS, 4, 10000 },	    { IBV_RATE_20_GBPS, 8, 20000 },
	{ IBV_RATE_30_GBPS, 12, 30000 },    { IBV_RATE_40_GBPS, 16, 40000 },
	{ IBV_RATE_60_GBPS, 24, 60000 },    { IBV_RATE_80_GBPS, 32, 80000 },
	{ IBV_RATE_120_GBPS, 48, 120000 },  { IBV_RATE_14_GBPS, 5, 14062 },
	{ IBV_RATE_56_GBPS, 22, 56250 },    { IBV_RATE_112_GBPS, 45, 112500 },
	{ IBV_RATE_168_GBPS, 67, 168750 },  { IBV_RATE_25_GBPS, 10, 25781 },
	{ IBV_RATE_100_GBPS, 40, 103125 },  { IBV_RATE_200_GBPS, 80, 206250 },
	{ IBV_RATE_300_GBPS, 120, 309375 }, { IBV_RATE_28_GBPS, 11, 28125 },
	{ IBV_RATE_50_GBPS, 20, 53125 },    { IBV_RATE_400_GBPS, 160, 425000 },
	{ IBV_RATE_600_GBPS, 240, 637500 },
};

/* column `to` of the row whose column `from` is v, else `none` */
static int sn_rate_map(int from, int v, int to, int none)
{
	for (size_t i = 0; i < sizeof(sn_rates) / sizeof(sn_rates[0]); i++)
		if (sn_rates[i][from] == v)
			return sn_rates[i][to];
	return none;
}

SN_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	return sn_rate_map(SN_RATE, rate, SN_MULT, -1);
}

SN_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	return (enum ibv_rate)sn_rate_map(SN_MULT, mult, SN_RATE, IBV_RATE_MAX);
}

SN_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	return sn_rate_map(SN_RATE, rate, SN_MBPS, -1);
}

SN_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	return (enum ibv_rate)sn_rate_map(SN_MBPS, mbps, SN_RATE, IBV_RATE_MAX);
}

SN_EXPORT const char *ibv_get_sysfs_path(void)
{
	static char p[300];

	if (sn_init())
		return "/sys";
	snprintf(p, sizeof(p), "%s/sysfs", sn_g.dir);
	return p;
}

SN_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
				  size_t size)
{
	char path[1024];
	ssize_t len;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size);
	close(fd);
	if (len <= 0)
		return -1;
	if (buf[len - 1] == '\n')
		buf[--len] = '\0';
	else if ((size_t)len < size)
		buf[len] = '\0';
	else
		return -1;
	return (int)len;
}

SN_EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, const char *path_fmt, ...)
{
	return -1;
}

SN_EXPORT int ibv_fork_init(void)
{
	return 0;
}

SN_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

SN_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	return 0;
}

SN_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	return 0;
}

SN_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return sn_attach_mcast(qp, gid, lid);
}

SN_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return sn_detach_mcast(qp, gid, lid);
}

SN_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
					  struct ibv_ah_attr *attr, uint8_t eth_mac[6],
					  uint16_t *vid)
{
	return EOPNOTSUPP;
}

SN_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

SN_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

SN_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SN_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SN_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
}

SN_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SN_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
}

SN_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SN_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
}

SN_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
					   size_t length, uint64_t iova, int fd,
					   int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SN_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
					 uint32_t flags)
{
	return 0;
}

/* Kernel-ABI converters: only used by librdmacm against a kernel. */
SN_EXPORT void ibv_copy_qp_attr_from_kern(void *dst, const void *src)
{
}

SN_EXPORT void ibv_copy_ah_attr_from_kern(void *dst, const void *src)
{
}

SN_EXPORT void ibv_copy_path_rec_from_kern(void *dst, const void *src)
{
}

SN_EXPORT void ibv_copy_path_rec_to_kern(void *dst, const void *src)
{
}
