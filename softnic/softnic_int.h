/*
 * softnic internal definitions: the objects behind the verbs handles and the
 * layouts of the shared-memory files that make up a fabric.
 *
 * Every struct named *_shm lives in a file of the fabric directory and is
 * read and written by several processes at once: only fixed-size fields,
 * no pointers meaningful outside their owner (cookies are opaque), and
 * atomics wherever two processes may touch the same word.
 * This header must never be installed or included outside softnic/.
 */
#ifndef SOFTNIC_INT_H
#define SOFTNIC_INT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "softnic_mem.h"

#define SN_EXPORT      __attribute__((visibility("default")))
#define SN_LIKELY(x)   __builtin_expect(!!(x), 1)
#define SN_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define SN_DEV_NAME	  "softnic0"
#define SN_VENDOR_ID	  0x02534e /* locally administered OUI: no real vendor */
#define SN_VENDOR_PART	  0x5301
#define SN_MAX_QP_WR	  16384
#define SN_MAX_SGE	  32
#define SN_MAX_INLINE	  1024
#define SN_MLX5_CLOCK_KHZ 156250 /* SOFTNIC_QUIRKS=mlx5: ConnectX-4's core clock */
#define SN_WQE_INLINE	  64	 /* inline sizes are granted in these steps */
#define SN_MAX_CQE	  (1 << 22)
#define SN_MAX_RD_ATOM	  16
#define SN_MAX_MR	  8192 /* per process */
#define SN_MAX_MW	  1024 /* per process; their key indices follow the MRs' */
#define SN_MAX_RUNS	  8
#define SN_GID_TBL	  2
#define SN_NAME		  96
#define SN_UD_GRH	  40
#define SN_MC_QPS	  64 /* QPs attached to one multicast group */
#define SN_QP_MCS	  16 /* groups one QP may join */
#define SN_MC_QPN	  0xffffff
#define SN_MTU_BYTES	  4096

/* ---------------- shared (file-backed) layouts ---------------- */

struct sn_counters {
	_Atomic uint64_t tx_pkts, tx_bytes, rx_pkts, rx_bytes;
	_Atomic uint64_t rnr_naks, retries, errors, flushes;
};

struct sn_fabric_shm {
	_Atomic uint64_t magic; /* SN_FAB_MAGIC ^ layout fingerprint */
	_Atomic uint32_t next_qpn;
	_Atomic uint32_t next_srqn;
	struct sn_counters port; /* port 1, whole host */
};

/* One completion as written into a CQ ring by whoever produced it. */
struct sn_cqe {
	_Atomic uint64_t seq; /* index + 1 once the entry is complete */
	uint64_t wr_id;
	uint64_t ts;	     /* NIC clock ticks (ns) */
	uint64_t visible_ns; /* host CLOCK_MONOTONIC ns; 0 = now */
	uint64_t local_qp;   /* poster's sn_qp cookie for send CQEs */
	uint32_t status, opcode, byte_len, imm;
	uint32_t qp_num, src_qp, wc_flags, vendor_err;
	uint32_t sq_idx;
	uint16_t slid, pkey_index;
	uint8_t sl, dlid_path_bits, solicited;
	_Atomic uint8_t dropped; /* QP destroyed/reset: skip */
};

struct sn_cq_shm {
	uint32_t magic;
	/* ring size and capacity: written only by a resize while it holds
	 * prod's gate, read by producers after a fetch_add on prod */
	_Atomic uint32_t ring, cap;
	uint32_t wall;
	_Atomic uint32_t armed; /* 0 no, 1 any, 2 solicited only */
	_Atomic uint32_t error;
	_Atomic uint32_t dnote;	   /* pid owing a delayed (latency model) event */
	_Atomic uint32_t sleepers; /* pollers waiting on wake_seq (futex) */
	_Atomic uint32_t wake_seq;
	/* CQ moderation (ibv_modify_cq): an armed CQ's event waits for
	 * mod_count completions or mod_period_us after the first, whichever
	 * comes first; mod_seen counts them since the arm */
	_Atomic uint32_t mod_seen;
	_Atomic uint32_t mod_count, mod_period_us;
	uint64_t cookie; /* owner's struct sn_cq* */
	uint64_t async_cookie;
	char chan_path[SN_NAME];
	char async_path[SN_NAME];
	pid_t owner;
	_Alignas(64) _Atomic uint64_t prod;
	_Alignas(64) _Atomic uint64_t cons;
	_Alignas(64) struct sn_cqe e[];
};

/* A receive queue (of a QP or an SRQ): one producer (the owner), many
 * consumers (senders in any process) that claim entries with a CAS. */
struct sn_rq_shm {
	uint32_t ring, max_wr, max_sge, stride;
	_Atomic uint32_t limit; /* SRQ limit, 0 = disarmed */
	uint32_t pad;
	_Alignas(64) _Atomic uint64_t prod;
	_Alignas(64) _Atomic uint64_t cons;
	_Alignas(64) unsigned char slots[];
};

struct sn_rwqe {
	uint64_t wr_id;
	uint32_t num_sge, pad;
	struct ibv_sge sge[];
};

struct sn_srq_shm {
	uint32_t magic, srqn;
	uint32_t pd_id;
	pid_t pid;
	char procid[32];
	char async_path[SN_NAME];
	uint64_t cookie;
	uint64_t xrcd_id;      /* XRC SRQ: its domain, 0 for a basic SRQ */
	char cq_name[SN_NAME]; /* XRC SRQ: where its completions go */
	struct sn_rq_shm rq;   /* must be last */
};

struct sn_qp_shm {
	uint32_t magic, qpn;
	pid_t pid;
	char procid[32];
	uint32_t qp_type;
	_Atomic uint32_t state;
	_Atomic uint32_t destroyed;
	uint32_t qkey, access, pd_id, port, dest_qpn, path_mtu;
	uint32_t min_rnr_timer, has_srq, rq_psn, sq_psn;
	_Atomic uint32_t exp_psn;  /* responder: PSN of the next expected request */
	_Atomic uint32_t comm_est; /* IBV_EVENT_COMM_EST raised (first packet in RTR) */
	uint64_t cookie;	   /* owner's struct sn_qp* (async events) */
	uint64_t xrcd_id;	   /* XRC_RECV: its domain */
	char rcq_name[SN_NAME];
	char srq_name[SN_NAME];
	char async_path[SN_NAME];
	struct sn_counters cnt;
	struct sn_rq_shm rq; /* must be last */
};

struct sn_mr_run {
	uint64_t va, len;
	uint32_t file_id, pad;
	struct sn_mem_src src; /* shared memory: how a peer maps it */
};

struct sn_mrt_ent {
	_Atomic uint32_t key; /* 0 = free */
	uint32_t access, pd_id, nruns;
	uint64_t addr, len; /* in the MR's own address space (iova) */
	int64_t delta;	    /* process VA = iova + delta */
	struct sn_mr_run runs[SN_MAX_RUNS];
};

/* A memory window. Written by its owner (bind, local invalidate, dealloc)
 * and by any requester whose SEND_WITH_INV invalidates it, read by every
 * requester that accesses memory through it: writers take `seq` from even
 * to odd with a CAS, readers retry when `seq` moved under them. */
struct sn_mw_ent {
	_Atomic uint32_t seq;
	_Atomic uint32_t type; /* 0 = free slot, else IBV_MW_TYPE_1 or _2 */
	uint32_t key;	       /* current rkey: index << 8 | tag */
	uint32_t bound;	       /* a window onto mr_key's memory */
	uint32_t pd_id, qpn;   /* qpn: the QP a type 2 window is bound to */
	uint32_t access, mr_key;
	uint64_t addr, len; /* in the MR's address space (iova) */
};

struct sn_mrt_shm {
	uint64_t magic;
	struct sn_mrt_ent ent[SN_MAX_MR];
	struct sn_mw_ent mw[SN_MAX_MW];
};

/* ---------------- process-local objects ---------------- */

struct sn_rproc; /* a peer process: its MR table and memory files */

struct sn_rqp { /* our view of a remote (or local) QP */
	uint32_t qpn;
	struct sn_qp_shm *shm;
	size_t shm_len;
	struct sn_rq_shm *rq; /* its RQ or its SRQ's */
	struct sn_srq_shm *srq;
	struct sn_cq_shm *rcq;
	struct sn_rproc *proc;
	int chan_fd, async_fd;
	uint32_t pd_id; /* PD the responder checks keys against */
	uint32_t xsrqn; /* XRC: this view targets that SRQ through the TGT QP */
	uint64_t next_alive_ns;
	bool dead;
	struct sn_rqp *hnext;
};

struct sn_ctx {
	int async_rfd;
	char async_path[SN_NAME];
	pthread_mutex_t lock;
	struct verbs_context vctx; /* must be last: context is its last field */
};

struct sn_pd {
	struct ibv_pd pd;
	uint32_t id; /* a parent domain's is its protection domain's */
	/* a parent domain (ibv_alloc_parent_domain): its allocators, used for
	 * the process-local buffers of its QPs (the shared rings are fabric
	 * files, which no allocator can provide) */
	bool parent;
	void *(*alloc)(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		       uint64_t resource_type);
	void (*free)(struct ibv_pd *pd, void *pd_context, void *ptr,
		     uint64_t resource_type);
	void *pd_context;
};
/* resource_type softnic passes to a parent domain's allocator (types are
 * per provider, as mlx5dv's MLX5DV_RES_TYPE_*): a QP's ibv_wr_* buffer */
#define SN_RES_TYPE_QP (((uint64_t)0x534e << 32) + 1)
struct ibv_pd *sn_alloc_parent_domain(struct ibv_context *c,
				      struct ibv_parent_domain_init_attr *a);

struct sn_run; /* locally backed page range */

struct sn_mr {
	struct ibv_mr mr;
	/* rdma-core's struct verbs_mr continues here (provider mode reads it) */
	uint32_t vmr_type; /* IBV_MR_TYPE_MR */
	int vmr_access;
	uint32_t idx;
	int nruns;
	struct sn_run *runs[SN_MAX_RUNS];
};

struct sn_mw {
	struct ibv_mw mw;
	uint32_t slot; /* index into the process's sn_mrt_shm.mw */
};

struct sn_chan {
	struct ibv_comp_channel ch;
	char path[SN_NAME];
};

struct sn_cq {
	struct ibv_cq_ex cq; /* first: ibv_cq is a prefix of it */
	struct sn_cq_shm *shm;
	size_t shm_len;
	char name[SN_NAME];
	uint64_t wc_flags;
	struct sn_cqe cur; /* entry being read through start/next_poll */
	bool polling;
	int chan_wfd; /* our own write end for self-notification */
	/* empty_polls, spin_budget and slept are updated outside poll_lock by
	 * every thread polling the CQ: atomics (a lost update only retunes the
	 * spinning), the paths that write them spin or sleep anyway */
	_Atomic uint32_t empty_polls;
	_Atomic int poll_lock;	      /* consumers of one CQ take turns, as in mlx5 */
	bool single_threaded;	      /* IBV_CREATE_CQ_ATTR_SINGLE_THREADED: no lock */
	_Atomic uint32_t spin_budget; /* adaptive: empty polls before sleeping */
	_Atomic bool slept;
	struct sn_cq *next_live;
};

struct sn_swr { /* one send WR in our own words */
	uint64_t wr_id;
	uint32_t opcode, flags, num_sge;
	uint32_t imm;
	uint64_t raddr;
	uint32_t rkey;
	uint64_t cmp_add, swap;
	struct ibv_ah *ah;
	uint32_t rqpn, rqkey;
	uint32_t xsrqn; /* XRC_SEND: the remote SRQ */
	struct ibv_sge *sge;
	struct sn_mw *mw; /* BIND_MW: the window, rkey its new key */
	uint32_t mr_key, mw_access;
	uint64_t mw_len; /* BIND_MW: raddr is the window's start */
	void *inl;	 /* owned copy of inline data (pending WRs) */
	uint32_t inl_len;
	uint32_t sq_idx;
	uint32_t byte_len; /* set by execution */
	uint32_t npk;	   /* packets (PSNs) of this request */
	uint64_t post_ns;
	uint64_t vis_ns; /* latency model: completion visible from */
};

struct sn_pend {
	struct sn_pend *next;
	struct sn_swr w;
	struct ibv_sge sges[];
};

struct sn_qp {
	struct ibv_qp_ex qpx; /* first: ibv_qp is its prefix */
	/* rdma-core's struct verbs_qp continues here: its ibv_qp_to_qp_ex
	 * answers from vqp_comp_mask (VERBS_QP_EX) */
	uint32_t vqp_comp_mask;
	void *vqp_xrcd;
	struct sn_qp_shm *shm;
	size_t shm_len;
	char name[SN_NAME];
	struct sn_ctx *ctx;
	struct sn_cq *scq, *rcq;
	struct sn_srq *srq;
	uint32_t pd_id;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge;
	uint32_t max_inline;
	bool sig_all, has_ex;
	_Atomic int lock;
	_Atomic int rq_lock; /* posters of receives take turns */
	uint32_t sq_head;
	_Atomic uint32_t sq_tail;
	uint32_t next_psn;	 /* requester: PSN of our next request */
	struct ibv_qp_attr attr; /* what modify_qp was told */
	struct sn_rqp *peer;	 /* RC/UC destination, resolved lazily */
	bool path_bad;		 /* the AV names no port of this fabric */
	/* pending send queue (RNR, peer not ready): progressed by posts,
	 * polls and the helper thread */
	struct sn_pend *pend_head, *pend_tail;
	uint64_t pend_deadline_ns, pend_next_try_ns;
	int pend_kind;
	bool on_helper;
	struct sn_qp *helper_next;
	/* ibv_wr_* builder state */
	int wr_err;
	uint32_t wr_nwr, wr_stride, wr_inl_used, wr_inl_cap;
	unsigned char *wr_buf, *wr_inl;
	struct sn_pd *wr_buf_pd;     /* wr_buf came from this parent domain's allocator */
	union ibv_gid mc[SN_QP_MCS]; /* multicast groups joined */
	int nmc;
	struct sn_qp *next_live;
};

struct sn_srq {
	struct ibv_srq srq;
	_Atomic int lock;
	struct sn_srq_shm *shm;
	size_t shm_len;
	char name[SN_NAME];
	uint32_t pd_id;
	struct sn_srq *next_live;
};

struct sn_ah {
	struct ibv_ah ah;
	struct ibv_ah_attr attr;
	bool path_bad;
};

/* multicast (softnic_mcast.c) */
int sn_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int sn_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
void sn_mc_detach_all(struct sn_qp *qp);
int sn_mc_members(const union ibv_gid *gid, uint32_t *qpn, int max);
bool sn_gid_is_mcast(const union ibv_gid *gid);

/* Does an address vector reach this fabric's port (LID, or a GID of it)? */
bool sn_av_reaches(const struct ibv_ah_attr *ah);

/* ---------------- globals and helpers ---------------- */

struct sn_global {
	pthread_mutex_t lock;
	bool inited;
	bool said_init_error; /* the fabric failure was told on stderr */
	pid_t pid;
	int alive_fd;
	char dir[200];
	char procid[32];
	struct sn_fabric_shm *fab;
	struct sn_mrt_shm *mrt;
	uint32_t next_pd, next_obj, next_file;
	bool eth;
	uint16_t lid;
	union ibv_gid gid[SN_GID_TBL];
	int ngid;
	uint64_t guid;
	/* NIC clock: nic = (host - base) * (1 + ppm) + offset */
	int64_t clk_offset;
	double clk_rate;
	/* latency model (ns) */
	uint64_t lat_ns, ns_per_kib, jitter_ns;
	bool model;
	/* SOFTNIC_QUIRKS=mlx5: behave like mlx5 where the recorder has
	 * defences (qp_ex pointers rewritten on RTS/RESET, a 156.25 MHz clock) */
	bool quirk_mlx5;
	struct sn_cq *cqs;
	struct sn_qp *qps;
	struct sn_srq *srqs;
};

extern struct sn_global sn_g;

int sn_init(void);
void sn_fabric_atfork_child(void);
uint64_t sn_now_ns(void);
uint64_t sn_nic_ticks(uint64_t host_ns);
int sn_shm_create(const char *name, size_t len, void **out);
int sn_shm_map(const char *name, void **out, size_t *len);
int sn_shm_create_reserve(const char *name, size_t len, size_t reserve, void **out);
int sn_shm_map_reserve(const char *name, size_t reserve, void **out, size_t *len);
int sn_shm_grow(const char *name, size_t len);
/* Every mapping of a CQ file spans the largest ring a CQ may grow to
 * (address space only: the file holds the current ring's pages). */
#define SN_CQ_RESERVE \
	(sizeof(struct sn_cq_shm) + (size_t)2 * SN_MAX_CQE * sizeof(struct sn_cqe))
/* prod's top bit: a resize holds the ring (softnic_cq.c) */
#define SN_CQ_GATE (1ull << 63)
void sn_path(char *buf, size_t n, const char *name);
void sn_unlink(const char *name);
/* a fabric file built under a hidden name (".qp-7") published under the
 * name without its dot, which name becomes; on failure it is removed */
int sn_shm_publish(char *name);
/* a zeroed object; NULL with errno ENOMEM (softnic_fabric.c) */
void *sn_zalloc(size_t size);

/* A run's pages into the fabric file fd (fd >= 0) or back into private
 * memory (fd < 0), the same bytes at the same addresses, write-protected
 * against other threads' stores meanwhile where the kernel lets us;
 * alone: a fork() child's, with no other thread (softnic_move.c). 0 or
 * -errno; on failure the range is as it was. */
int sn_pages_move(uint64_t va, uint64_t len, int fd, bool alone);

/* MR registry */
int sn_mr_register(struct sn_mr *mr, void *addr, size_t len, uint64_t iova,
		   uint32_t access, uint32_t pd_id);
int sn_mr_unregister(struct sn_mr *mr);
int sn_mr_reregister(struct sn_mr *mr, void *addr, size_t len, uint64_t iova,
		     uint32_t access, uint32_t pd_id);
int sn_mw_alloc(struct sn_mw *mw, uint32_t type, uint32_t pd_id);
void sn_mw_free(struct sn_mw *mw);
bool sn_mw_wlock(struct sn_mw_ent *m);
void sn_mw_wunlock(struct sn_mw_ent *m);
void *sn_remote_ptr(struct sn_rproc *p, const struct sn_mrt_ent *e, uint64_t va,
		    size_t *contig);
struct sn_rproc *sn_rproc_get(const char *procid);
struct sn_mrt_shm *sn_rproc_mrt(struct sn_rproc *p);

/* remote QPs */
struct sn_rqp *sn_rqp_get(uint32_t qpn);
struct sn_rqp *sn_rqp_xrc(struct sn_rqp *tgt, uint32_t srqn);

struct sn_xrcd {
	struct ibv_xrcd xrcd;
	uint64_t id;
};
void sn_rqp_put(struct sn_rqp *r);
bool sn_rqp_alive(struct sn_rqp *r);
bool sn_proc_alive(const char *procid);
uint64_t sn_coarse_ns(void);
void sn_notify_fd(int *fdp, const char *path, uint64_t cookie);
struct sn_async_rec {
	uint64_t element;
	uint32_t type, reserved;
};
_Static_assert(sizeof(struct sn_async_rec) == 16, "the kernel's async event record");
void sn_async_event(const char *path, int *fdp, uint32_t type, uint64_t cookie);

/* memory windows (softnic_verbs.c; binding in softnic_mw.c) */
struct ibv_mw *sn_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int sn_dealloc_mw(struct ibv_mw *mw);
int sn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);

/* data path (softnic_post.c, softnic_cq.c, softnic_wr.c, softnic_pending.c) */
extern const struct ibv_context_ops sn_ops_template;
int sn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sn_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int sn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		     struct ibv_recv_wr **bad);
int sn_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sn_req_notify_cq(struct ibv_cq *cq, int solicited_only);
void sn_cq_ex_init(struct sn_cq *cq);
void sn_qp_ex_init(struct sn_qp *qp);
int sn_qp_wr_buf_alloc(struct sn_qp *qp);
void sn_qp_wr_buf_free(struct sn_qp *qp);
void sn_qp_ex_rewrite(struct sn_qp *qp, uint32_t state);
void sn_qp_flush(struct sn_qp *qp);
void sn_rq_flush(struct sn_rq_shm *rq, struct sn_cq_shm *cq, uint32_t qpn, int *chan_fd);
void sn_cq_clean(struct sn_cq *cq, uint64_t local_qp, uint32_t qpn);
void sn_helper_kick(struct sn_qp *qp);
void sn_helper_forget(struct sn_qp *qp);
void sn_dnotes_forget(struct sn_cq_shm *cq);
void sn_qp_lock(struct sn_qp *qp);
void sn_spin_lock(_Atomic int *l);
static inline void sn_spin_unlock(_Atomic int *l)
{
	atomic_store_explicit(l, 0, memory_order_release);
}
void sn_qp_unlock(struct sn_qp *qp);
void sn_pend_free_all(struct sn_qp *qp);

/* single-writer counters: no locked instruction on the fast path */
#define SN_ADD1(x, v)                                                                 \
	atomic_store_explicit(&(x),                                                   \
			      atomic_load_explicit(&(x), memory_order_relaxed) + (v), \
			      memory_order_relaxed)

static inline struct sn_ctx *sn_ctx_of(struct ibv_context *c)
{
	return (struct sn_ctx *)((char *)c - offsetof(struct sn_ctx, vctx.context));
}

#define sn_qp_of(q) ((struct sn_qp *)(q))
#define sn_cq_of(c) ((struct sn_cq *)(c))

/* ---------------- core verbs (softnic_verbs.c) ---------------- */

int sn_query_device(struct ibv_context *context, struct ibv_device_attr *attr);
struct ibv_pd *sn_alloc_pd(struct ibv_context *context);
int sn_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *sn_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t iova, unsigned int access);
struct ibv_mr *sn_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
struct ibv_mr *sn_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
			      int access);
int sn_dereg_mr(struct ibv_mr *ibmr);
int sn_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
		size_t length, int access);
struct ibv_cq *sn_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			    struct ibv_comp_channel *channel, int comp_vector);
int sn_resize_cq(struct ibv_cq *cq, int cqe);
int sn_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr);
#define SN_CQ_MOD_MAX_COUNT	65535 /* as mlx5 */
#define SN_CQ_MOD_MAX_PERIOD_US 4095
int sn_cq_resize(struct sn_cq *cq, uint32_t cqe); /* softnic_cq.c */
int sn_destroy_cq(struct ibv_cq *ibcq);
struct ibv_srq *sn_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *init);
int sn_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask);
int sn_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr);
int sn_destroy_srq(struct ibv_srq *ibsrq);
struct ibv_qp *sn_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init);
struct ibv_qp_ex *sn_qp_to_qp_ex(struct ibv_qp *ibqp);
int sn_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask);
int sn_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
		struct ibv_qp_init_attr *init);
int sn_destroy_qp(struct ibv_qp *ibqp);
struct ibv_ah *sn_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int sn_destroy_ah(struct ibv_ah *ah);
int sn_query_port_full(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a,
		       size_t len);
int sn_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t len);
struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *a);
struct ibv_qp *sn_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a);
int sn_query_rt_values(struct ibv_context *c, struct ibv_values_ex *v);
struct ibv_srq *sn_create_srq_ex(struct ibv_context *c, struct ibv_srq_init_attr_ex *a);
int sn_get_srq_num(struct ibv_srq *srq, uint32_t *num);
struct ibv_xrcd *sn_open_xrcd(struct ibv_context *c, struct ibv_xrcd_init_attr *a);
int sn_close_xrcd(struct ibv_xrcd *x);
uint32_t sn_next_id(void);
int sn_mkfifo(char *name, size_t n, const char *kind);
struct ibv_comp_channel *sn_create_comp_channel(struct ibv_context *context);
int sn_destroy_comp_channel(struct ibv_comp_channel *channel);
uint32_t sn_pow2(uint32_t v);
int sn_check_av(const struct ibv_ah_attr *ah);

#endif
