/* prog_util.c - the shared setup of the verbs test programs (prog_util.h). It issues
 * only the verbs a program asks for, so a recording of a program is the same as if
 * the program had written them out. */
#define _GNU_SOURCE
#include "tests/progs/prog_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void prog_die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what,
		strerror(errno));
	exit(1);
}

const char *prog_role;

void prog_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog_role ? prog_role : program_invocation_short_name);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

uint64_t prog_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct ibv_context *prog_open_first(uint16_t *lid)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_port_attr pa;

	if (!l || !l[0])
		prog_die("no RDMA device");
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!ctx)
		prog_die("ibv_open_device");
	if (lid) {
		if (ibv_query_port(ctx, 1, &pa))
			prog_die("ibv_query_port");
		*lid = pa.lid;
	}
	return ctx;
}

struct ibv_qp *prog_rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t send_wr,
			  uint32_t recv_wr, uint32_t max_inline,
			  struct ibv_qp_cap *granted)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp *qp;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = send_wr;
	ia.cap.max_recv_wr = recv_wr;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = max_inline;
	qp = ibv_create_qp(pd, &ia);
	if (qp && granted)
		*granted = ia.cap;
	return qp;
}

struct prog_rc prog_rc_quick(uint16_t dlid, uint32_t dest_qpn)
{
	return (struct prog_rc){ .dlid = dlid,
				 .dest_qpn = dest_qpn,
				 .min_rnr_timer = 1,
				 .timeout = 10,
				 .retry_cnt = 2,
				 .rnr_retry = 7 };
}

struct prog_rc prog_rc_patient(uint16_t dlid, uint32_t dest_qpn)
{
	return (struct prog_rc){ .dlid = dlid,
				 .dest_qpn = dest_qpn,
				 .min_rnr_timer = 12,
				 .timeout = 14,
				 .retry_cnt = 7,
				 .rnr_retry = 7 };
}

int prog_rc_init(struct ibv_qp *qp, const struct prog_rc *rc)
{
	struct ibv_qp_attr at;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	at.qp_access_flags = rc->access;
	return ibv_modify_qp(qp, &at,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS)
		       ? -1
		       : 0;
}

int prog_rc_rtr(struct ibv_qp *qp, const struct prog_rc *rc)
{
	struct ibv_qp_attr at;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = rc->mtu ? rc->mtu : IBV_MTU_1024;
	at.dest_qp_num = rc->dest_qpn;
	at.rq_psn = rc->rq_psn;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = rc->min_rnr_timer;
	at.ah_attr.dlid = rc->dlid;
	at.ah_attr.port_num = 1;
	return ibv_modify_qp(qp, &at,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
		       ? -1
		       : 0;
}

int prog_rc_rts(struct ibv_qp *qp, const struct prog_rc *rc)
{
	struct ibv_qp_attr at;

	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = rc->timeout;
	at.retry_cnt = rc->retry_cnt;
	at.rnr_retry = rc->rnr_retry;
	at.sq_psn = rc->sq_psn;
	at.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &at,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC)
		       ? -1
		       : 0;
}

int prog_rc_connect(struct ibv_qp *qp, const struct prog_rc *rc, const char **step)
{
	const char *s = NULL;

	if (prog_rc_init(qp, rc))
		s = "modify INIT";
	else if (prog_rc_rtr(qp, rc))
		s = "modify RTR";
	else if (prog_rc_rts(qp, rc))
		s = "modify RTS";
	if (step)
		*step = s;
	return s ? -1 : 0;
}

int prog_rc_connect_patient(struct ibv_qp *qp, uint16_t dlid, uint32_t dest_qpn,
			    unsigned access, uint32_t sq_psn, uint32_t rq_psn,
			    uint8_t rnr_retry)
{
	struct prog_rc rc = prog_rc_patient(dlid, dest_qpn);

	rc.access = access;
	rc.sq_psn = sq_psn;
	rc.rq_psn = rq_psn;
	rc.rnr_retry = rnr_retry;
	return prog_rc_connect(qp, &rc, NULL);
}

void prog_rc_connect_or_die(struct ibv_qp *qp, const struct prog_rc *rc)
{
	const char *step;

	if (prog_rc_connect(qp, rc, &step))
		prog_die(step);
}

int prog_post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len,
		   uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

int prog_post_send(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode opcode,
		   unsigned flags, void *addr, uint32_t len, uint32_t lkey,
		   uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = opcode;
	wr.send_flags = flags;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

void prog_xfer(int fd, void *p, size_t n, int out)
{
	char *c = p;

	while (n) {
		ssize_t k = out ? write(fd, c, n) : read(fd, c, n);

		if (k <= 0)
			prog_die(out ? "write" : "read");
		c += k;
		n -= (size_t)k;
	}
}
