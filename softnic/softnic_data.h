/*
 * softnic data path internals shared by its files (post, execute, CQ, MW,
 * retry): the hand-offs between them. Never included by a front end: they
 * reach the data path through softnic_int.h's sn_* entry points.
 */
#ifndef SOFTNIC_DATA_H
#define SOFTNIC_DATA_H

#include "softnic_int.h"

enum { SN_DONE = 0, SN_RETRY_RNR = 1, SN_RETRY_PEER = 2 };

struct sn_seg {
	char *p;
	size_t len;
};

#define SN_MAX_SEGS (SN_MAX_SGE * SN_MAX_RUNS + 2)

extern _Atomic int sn_npending;

static inline uint64_t sn_cqe_time(struct sn_cq_shm *cq, uint64_t *now, uint64_t visible)
{
	if (visible)
		return visible;
	if (!cq->wall)
		return 0;
	if (!*now)
		*now = sn_now_ns();
	return *now;
}

/* softnic_cq.c */
uint64_t sn_model_ns(uint64_t bytes);
bool sn_cq_push(struct sn_cq_shm *cq, const struct sn_cqe *src, int *chan_fd);

/* softnic_post.c */
bool sn_rq_take(struct sn_rq_shm *rq, struct sn_rwqe *out);
int sn_check_op(uint32_t type, uint32_t op);

/* softnic_mw.c */
int sn_xlate(struct sn_rproc *p, uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
	     uint32_t pd_id, uint32_t qpn, struct sn_seg *segs, int *nseg);
int sn_mw_invalidate(struct sn_mrt_shm *t, uint32_t key, uint32_t pd_id, uint32_t qpn);
uint32_t sn_mw_bind_exec(struct sn_qp *qp, struct sn_swr *w);

/* softnic_exec.c */
uint32_t sn_send_wc_opcode(uint32_t op);
int sn_exec(struct sn_qp *qp, struct sn_swr *w, uint32_t *st);

/* softnic_pending.c */
bool sn_submit(struct sn_qp *qp, struct sn_swr *w);
void sn_delay_notify(struct sn_cq_shm *cq, uint64_t when);
void sn_delay_notify_armed(struct sn_cq_shm *cq, uint64_t when);
void sn_progress_all(void);

#endif
