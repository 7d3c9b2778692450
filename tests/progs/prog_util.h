/* prog_util.h - what the verbs test programs under tests/progs share: the loopback
 * device opened once, an RC QP created and walked INIT -> RTR -> RTS with the
 * parameters a program names, a clock, and one way to die.
 *
 * These programs are fixtures for tests over softnic; the verbs they issue are what
 * the tests record, so the helpers issue exactly the calls a program would write
 * itself (the same attribute masks every time) and nothing more.
 */
#ifndef RBT_PROG_UTIL_H
#define RBT_PROG_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* How an RC QP is connected. Zero fields take the defaults said here. */
struct prog_rc {
	unsigned access;   /* INIT's qp_access_flags (0 is 0) */
	enum ibv_mtu mtu;  /* 0: IBV_MTU_1024 */
	uint16_t dlid;	   /* the peer's LID */
	uint32_t dest_qpn; /* the peer's QP number */
	uint32_t rq_psn, sq_psn;
	uint8_t min_rnr_timer; /* RTR (0 is 0) */
	uint8_t timeout;       /* RTS (0 is 0) */
	uint8_t retry_cnt;     /* RTS */
	uint8_t rnr_retry;     /* RTS (7: for ever) */
};

/* The two ways our programs connect (access 0, MTU 1024, PSNs 0: set what differs):
 * quick - min_rnr_timer 1, timeout 10, retry_cnt 2, rnr_retry 7 (loopback pairs);
 * patient - min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7 (as perftest). */
struct prog_rc prog_rc_quick(uint16_t dlid, uint32_t dest_qpn);
struct prog_rc prog_rc_patient(uint16_t dlid, uint32_t dest_qpn);

/* Prints "PROGRAM: what: strerror(errno)" on stderr and exits 1. */
void prog_die(const char *what) __attribute__((noreturn));

/* The name prog_fail puts first: the program's, until the program names its role. */
extern const char *prog_role;

/* Prints "ROLE: message" on stderr and exits 1. */
void prog_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t prog_now_ns(void);

/* The first device, opened, and its port 1's LID (lid may be NULL); dies on failure. */
struct ibv_context *prog_open_first(uint16_t *lid);

/* An RC QP on one CQ for both queues, one SGE each way; what the device granted in
 * *granted when not NULL. NULL (errno set) on failure. */
struct ibv_qp *prog_rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t send_wr,
			  uint32_t recv_wr, uint32_t max_inline,
			  struct ibv_qp_cap *granted);

/* One step each, port 1, max_(dest_)rd_atomic 1; 0 or -1 with errno. */
int prog_rc_init(struct ibv_qp *qp, const struct prog_rc *rc);
int prog_rc_rtr(struct ibv_qp *qp, const struct prog_rc *rc);
int prog_rc_rts(struct ibv_qp *qp, const struct prog_rc *rc);

/* INIT, RTR and RTS; 0, or -1 with errno and the failed step's name in *step. */
int prog_rc_connect(struct ibv_qp *qp, const struct prog_rc *rc, const char **step);

/* prog_rc_connect of prog_rc_patient(dlid, dest_qpn) with access, the PSNs and
 * rnr_retry set. */
int prog_rc_connect_patient(struct ibv_qp *qp, uint16_t dlid, uint32_t dest_qpn,
			    unsigned access, uint32_t sq_psn, uint32_t rq_psn,
			    uint8_t rnr_retry);

/* prog_rc_connect, dying with "modify STEP" when a step fails. */
void prog_rc_connect_or_die(struct ibv_qp *qp, const struct prog_rc *rc);

/* One WR of one SGE (addr, len, lkey): a receive; a send of opcode with flags, to
 * (raddr, rkey) for RDMA opcodes. What ibv_post_* returned. */
int prog_post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len,
		   uint32_t lkey);
int prog_post_send(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode opcode,
		   unsigned flags, void *addr, uint32_t len, uint32_t lkey,
		   uint64_t raddr, uint32_t rkey);

/* All of n bytes read from (out = 0) or written to fd; dies on EOF or an error. */
void prog_xfer(int fd, void *p, size_t n, int out);

#endif
