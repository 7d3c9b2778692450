/* meet.h - what the HERD-shaped test programs (replay_herd, shm_prog) share:
 * processes that meet through files in a directory, each holding one
 * "lid qpn qpn2 rkey addr" line written whole with a rename; the first device with one PD and one CQ; UC and UD QPs
 * (RC too) walked to RTS; an MR the peer may WRITE into.
 *
 * These are fixtures for tests over softnic: the verbs they issue are what the
 * tests record and replay, so each helper issues exactly the calls and masks a
 * program would write itself. Every wait is bounded (MEET_TIMEOUT_S); a failure
 * prints one line and exits 1, never a hang.
 */
#ifndef RBT_MEET_H
#define RBT_MEET_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define MEET_TIMEOUT_S 30

/* The meeting directory. Failures are prog_fail's (prog_util.h): "ROLE: ...". */
extern const char *meet_dir;

/* CLOCK_MONOTONIC in seconds. */
double meet_now_s(void);

struct meet_info {
	unsigned lid, qpn, qpn2, rkey;
	unsigned long long addr;
};

/* DIR/NAME written whole; read back, waiting for it (MEET_TIMEOUT_S). */
void meet_publish(const char *name, const struct meet_info *i);
struct meet_info meet_lookup(const char *name);

struct meet_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	unsigned lid;
};

/* The first device, its port 1's LID, a PD and one CQ of cqe entries. */
void meet_dev_open(struct meet_dev *d, int cqe);

/* A QP of type on the device's CQ (wr WRs each way, one SGE), moved to INIT:
 * a UD QP with qkey, the others with REMOTE_WRITE access. */
struct ibv_qp *meet_qp_new(struct meet_dev *d, enum ibv_qp_type type, uint32_t wr,
			   uint32_t qkey);

/* INIT -> RTR -> RTS, MTU 4096, PSNs 0; a UD QP needs no peer, an RC QP gets
 * perftest's timers and retries. */
void meet_qp_up(struct ibv_qp *qp, unsigned dlid, unsigned dqpn);

/* A client's side of the meeting: publish client-C (mine), look up PEER-C,
 * move qp to RTS towards it, wait for PEER-C-ready; PEER-C's line. */
struct meet_info meet_client(struct ibv_qp *qp, unsigned c, const struct meet_info *mine,
			     const char *peer);

/* One completion of the device's CQ by deadline (meet_now_s()), spinning
 * politely (tests run beside each other on few cores): 1, or 0 when none came;
 * an error completion is fatal. */
int meet_poll(struct meet_dev *d, struct ibv_wc *wc, double deadline);

/* A signaled UD SEND of len bytes at addr (lkey) to (ah, qpn, qkey); what
 * ibv_post_send returned. */
int meet_ud_send(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey,
		 struct ibv_ah *ah, uint32_t qpn, uint32_t qkey);

/* len bytes at buf registered for LOCAL_WRITE and REMOTE_WRITE. */
struct ibv_mr *meet_reg(struct meet_dev *d, void *buf, size_t len);

#endif
