/* replay_int.h - what the replayer's files share: a loaded trace (one "side" per
 * trace: the replay's state for each object of the trace's model, model/, and
 * the timeline of steps), the directory of published numbers that pairs the
 * sides, and the helpers between them. Internal: nothing outside replay/
 * includes this.
 */
#ifndef RBT_REPLAY_INT_H
#define RBT_REPLAY_INT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "model/rbt_model.h"
#include "replay/rbt_replay.h"
#include "trace_format/rbt_format.h"

#define RP_MAX_SIDES 8
#define RP_MAX_PEERS 7	/* replayer processes a listener serves (--peers) */
#define RP_MAX_HOSTS 32 /* hosts named by the WRITEs of a job */

/* ---- the recorded model ------------------------------------------------------ */
struct rp_mr {
	uint64_t h, pd;
	uint64_t addr, iova, length, access, lkey, rkey;
	uint8_t *buf;	/* replayed memory (length bytes, page aligned) */
	size_t map_len; /* a large MR's: mapped (munmap), else malloc'd */
	struct ibv_mr *mr;
	struct ibv_pd *npd;
	int dead; /* deregistered by now (while loading) */
	/* its life in the recording (abs mono ns; t_dead UINT64_MAX: never
	 * deregistered): a local buffer or remote key is looked up among the
	 * MRs alive when the post was made */
	uint64_t t_reg, t_dead;
	/* 1 + index of the entry an ibv_rereg_mr made of it (the same ibv_mr at
	 * its new place, with its new parameters); a successor (succ_of) gets
	 * its ibv_mr at the rereg step */
	int succ, succ_of;
	/* registered by its step of the timeline, not before the run: its keys
	 * are read when each post that names it is issued (struct rp_fix) */
	int dynamic;
	uint32_t rereg_flags;	     /* successor: the recorded ibv_rereg_mr flags */
	uint32_t new_lkey, new_rkey; /* the replay's keys when it was registered */
};

/* A key of a prepared work request that is known only once its MR is
 * registered: filled when the post is issued. */
struct rp_fix {
	uint32_t *dst;
	const struct rp_mr *m;
	int remote; /* the rkey, else the lkey */
};

/* A memory window, rebuilt by ibv_alloc_mw of its recorded type on its PD. A
 * window's keys differ from the recording's only in their upper 24 bits (the
 * window's index): type 2 keys are the program's own low byte on the
 * replayed window, type 1 keys move by one per bind on both (rp_mw_key). */
struct rp_mw {
	uint64_t h, pd;
	uint32_t type, rec_rkey; /* the recorded type, the rkey at alloc */
	uint32_t rkey0;		 /* the replayed window's rkey at alloc */
	struct ibv_mw *mw;
};

/* A BIND_MW work request's window and the MR it binds (1 + indexes, resolved
 * when read; mr 0: an unbind, or memory no live MR holds). */
struct rp_bindref {
	int mw, mr;
};

struct rp_cq {
	uint64_t h, channel;
	struct rbt_ev_cq_create rec;
	struct ibv_cq *cq;
	struct ibv_comp_channel *nch;
	/* completions taken off the CQ while waiting for an event, for the polls */
	struct ibv_wc *stash;
	uint32_t stash_head, stash_n, stash_cap;
	uint8_t count_live; /* a QP on it counts its replayed sends (ERR waits) */
	/* a QP whose send completions it delivers counts them as they come off
	 * the CQ (posts wait for them: rp_sq_waits) */
	uint8_t sq_track;
};

/* An XRC domain. One the program opened through a file may have been shared
 * with the other processes of the job that opened the same file (an XRC_SEND
 * then reaches their SRQs through any TGT QP of the domain, as
 * ibv_xsrq_pingpong -c 2 does): it is rebuilt through a file of the
 * replayer's shared by all sides recorded on the same host. One opened without
 * a file stays private. */
struct rp_xrcd {
	uint64_t h;
	int shared; /* recorded through a file */
	int fd;	    /* the descriptor it was opened through (closed since) */
	struct ibv_xrcd *xrcd;
};

struct rp_srq {
	uint64_t h, pd;
	struct rbt_ev_srq_create rec;
	int xrcdi, cqi; /* XRC SRQ: 1 + index of its XRCD and CQ, resolved at create */
	struct ibv_srq *srq;
	uint32_t new_srqn; /* XRC SRQ: its number on the replay device */
};

struct rp_ah {
	uint64_t h, pd;
	struct rbt_ev_ah_create rec;
	uint8_t dgid[16];
	struct ibv_ah *ah;
};

/* A completion of one queue of a QP: the recording's (as the model joined it)
 * or the replay's. */
struct rp_wcrec {
	uint64_t wr_id;
	uint32_t status, opcode, byte_len;
	uint8_t no_len;	  /* byte_len was not recorded */
	uint8_t unpolled; /* replay: taken off the CQ after the last poll step */
	uint64_t ts, seq; /* recorded: the poll step's ticks and the join's order */
	uint32_t imm;	  /* recorded: the immediate data (host order), with_imm */
	uint8_t with_imm;
	uint8_t src_rec; /* replay: src_qp is the sender's recorded number now */
	uint32_t src_qp; /* UD receives: the sender (the replay's: its new number) */
	uint32_t order;	 /* while matching: the position in its list */
};

struct rp_idset {
	uint64_t *v;
	uint32_t n, cap;
};

struct rp_wclist {
	struct rp_wcrec *v;
	uint32_t n, cap;
};

struct rp_qp {
	uint64_t h;
	struct rbt_ev_qp_create rec;
	int scq, rcq, srqi;    /* 1 + index of its CQs and SRQ, resolved at create */
	int xrcdi;	       /* XRC_RECV: 1 + index of its XRCD */
	uint32_t rec_dest_qpn; /* from the RTR modify, 0 if none */
	int has_dest;
	uint32_t rec_final_state; /* the model's last state, or later evidence */
	/* where rec_final_state came from: 0 the modifies and completions (or a
	 * query or async event after them), 1 the device at the QP's destroy, 2
	 * the device at the recorded process's exit (qp_final_state) */
	int rec_final_src;
	/* the latest query or async event that told the QP's state (ticks) */
	uint32_t evidence_state;
	uint64_t evidence_ts;
	int has_evidence;
	struct rbt_model_qp *mq; /* the model's QP (NULL: another process's) */
	uint32_t port;
	uint32_t rec_sq_psn, rec_rq_psn, rec_path_mtu, rec_max_rd_atomic;
	uint32_t sgid_index;
	int is_global;
	struct ibv_qp *qp;
	int rel_side; /* side index of the peer (directory side), -1 unpaired */
	int peer_dir; /* index into dir.qps, -1 */
	/* completions: [0] send queue, [1] receive queue */
	struct rp_wclist rec_wc[2], rep_wc[2];
	/* streamed: the next window's recorded completions, read while this
	 * window runs; onto rec_wc once this window is retired */
	struct rp_wclist rec_next[2];
	uint32_t rec_all[2];		    /* rec_wc[d].n before a stop cut the lists */
	struct rp_idset send_ids, recv_ids; /* wr_ids posted to each queue */
	uint32_t replay_state;
	/* created by its step of the timeline (QP_CREATE after the start), not
	 * before the run; gone: destroyed by its step (replay_state was taken
	 * right before); new_qpn: its number on the replay (0 until created);
	 * dir_idx: its entry in the directory */
	int dynamic, gone, dir_idx;
	int mid_run; /* streamed: created after the start (the first reading) */
	uint32_t new_qpn;
	/* in rp_side.xqp: another process's TGT QP, known only by number */
	uint32_t foreign_new_qpn;
	/* UD: the entry ticks of each receive posted to it in the recording
	 * (sorted), and how many the replay has posted (atomic): a UD send from
	 * this process waits for those the recording had posted before it */
	uint64_t *recv_ts;
	uint32_t nrecv_ts;
	uint32_t recv_base; /* streamed: the receives of the windows before */
	uint64_t recv_posted;
	struct rp_wpost *wpost; /* its tagged WRITEs' replayed posts, if any */
	/* ERR waits (replay_run.c): this QP's peer in this process and how many
	 * of the peer's sends succeeded in the recording (each was taken by this
	 * QP before its move to ERR); a peer's successful sends polled so far */
	struct rp_qp *err_peer;
	uint32_t err_peer_ok;
	uint32_t live_send_ok;
	uint8_t count_live;
	/* send completions of this QP the replay has taken off its CQ so far
	 * (their WRs' slots freed); counted when the CQ has sq_track */
	uint32_t sq_polled;
	/* the recorded successful sends (counted even when a streamed load
	 * keeps no list: the ERR waits use it) */
	uint32_t rec_send_ok;
	uint64_t rec_count[2]; /* every recorded completion, kept or not */
	/* a streamed replay (replay_stream.c) matches each window's completions
	 * and drops them: how many went (the next one's number), how many of
	 * those matched, how many mismatches were listed */
	uint64_t wc_base[2], wc_matched[2];
	uint32_t wc_shown[2];
};

/* A peer's WRITE that a post waits for: the last 8 bytes of where it lands in
 * the replayed MR must hold the writer's tag with at least this ordinal. */
struct rp_dep {
	const uint8_t *at;
	uint64_t tag;	    /* writer key << 32 | ordinal */
	uint32_t in_flight; /* its completion was polled after the post */
	struct rp_qp *wqp;  /* the writer's QP in this process, NULL: a peer's */
	uint64_t post_ns;   /* the WRITE's recorded post, absolute ns */
};

/* When a QP's latest tagged WRITEs were posted on the replay (by ordinal
 * modulo RP_WPOST): --timing=deps counts a waiter's think time from there. */
#define RP_WPOST 128
struct rp_wpost {
	uint32_t ord[RP_WPOST];
	uint64_t ns[RP_WPOST];
};

/* A post's memory dependencies (replay_deps.c): the WRITEs it carries that
 * have a tag (per WR: the tag, 0 none, and where it goes in the source); the
 * WRITEs it waits for, and when the last of them landed (recorded). */
struct rp_step_deps {
	uint64_t *tags;
	uint8_t **tag_at;
	struct rp_dep *deps;
	uint32_t ndeps;
	uint64_t dep_land_ns;
};

/* One step of the timeline: a recorded event the replayer reissues in order. */
struct rp_step {
	struct rbt_event *ev; /* a deep copy in one block, owned by the side's arena */
	/* ev's type and stream, and what the sweeps over a window's steps pick
	 * steps by, in the first line: those sweeps (lanes, waits, deps, UD
	 * order, the report's) then read the steps in order and no event */
	uint32_t type, stream;
	int skipped;
	int obj; /* 1 + index of its QP/CQ/SRQ, resolved when read (handles get reused) */
	struct rp_qp *qp;
	struct rp_cq *cq;
	struct rp_srq *srq;
	uint64_t rec_ns; /* recorded entry time, absolute mono ns */
	uint64_t rec_exit_ns;
	/* what the lane needs of the event, so that running a post or a poll
	 * reads none (a cache miss per step, measured): the recorded return
	 * of a post or req_notify, a poll's recorded completion count, and
	 * whether a send carries payloads to copy in (rp_translate_send) */
	int64_t rec_ret;
	uint32_t nwc;
	int payloads;
	/* prepared before the run */
	struct ibv_send_wr *swr;
	struct ibv_recv_wr *rwr;
	struct ibv_sge *sges;
	uint32_t nwr;
	struct rp_bindref *binds; /* post_send with BIND_MW WRs: one per WR */
	struct rp_fix *fix;	  /* keys of MRs registered mid-run */
	uint32_t nfix;
	struct rp_mr *mr; /* MR_REG, MR_DEREG, MR_REREG: its MR */
	/* a type 1 window's bind: reissued by ibv_bind_mw, not posted */
	struct ibv_mw_bind *bind1;
	struct rp_mw *bind1_mw;
	/* results */
	int64_t ret;
	uint64_t t_issue, t_exit, deadline;
	uint64_t
		ready; /* when the previous step was done: lateness before it is waiting */
	struct ibv_wc *wcs; /* poll: room for the recorded count */
	uint32_t got;
	struct rp_step_deps *dx; /* memory dependencies, NULL: none */
	/* a UD send to a QP of this process: that QP, and how many receives it
	 * had posted when the recorded send began (NULL: no such wait) */
	struct rp_qp *ud_dest;
	uint32_t ud_need;
	/* a post: how many of its QP's send completions the recording had polled
	 * before it began (0: no such wait; rp_sq_waits) */
	uint32_t sq_need;
	/* a post or modify: the other threads' steps it waits for, on the CQs
	 * of its queues (s->xneed[xneed .. xneed + nxneed); rp_lanes_build) */
	int xneed, nxneed;
};

/* A step of another lane that a step waits for: done once that lane has
 * published done > pos (its lane-local index). */
struct rp_xneed {
	int lane, pos;
};

/* A recorded thread of a side (its stream): replayed by a thread of its own,
 * in its own order, with its own waits. Before a post or a modify it waits
 * until every other lane of the side has done the polls, completion-event
 * waits and modifies that had returned before it in the recording (gate). */
struct rp_lane {
	struct rp_side *s;
	uint32_t stream;
	/* the side's steps as they were when the lane was started (streamed,
	 * the run's thread reads the next window into s->step meanwhile) */
	struct rp_step *step;
	int nstep;
	int *idx;	   /* its steps, in order; NULL: the range [from, to) */
	int n, from, to;   /* how many; the range */
	uint64_t *gate_at; /* the earliest recorded return of its gating steps
			    * from idx[k] on (UINT64_MAX: none left) */
	uint64_t gate;	   /* published as it goes (atomic) */
	uint64_t done;	   /* published: its steps before this index ran (atomic) */
	int timeouts, stop_why, stop_at, ran;
	uint64_t wasted_ns, xwaits;
	uint64_t sq_waits; /* posts that waited for their QP's send completions */
	/* memory dependencies of its posts: inferred, waited and satisfied,
	 * timed out (replay_deps.c) */
	uint64_t deps_inferred, deps_in_flight, deps_kept, deps_timed_out;
	/* --timing=deps: the replayed and recorded times of its last wait, kept
	 * from one window to the next when streamed (anchored: set) */
	uint64_t anchor[2];
	int anchored;
	/* streamed: a recorded thread's lateness over the windows */
	struct rp_sample *smp;
	uint64_t ended_ns; /* when its run of its steps ended */
	pthread_t thr;
};

/* Memory owned as a list of blocks: freed together, or from a mark on (a
 * streamed window's); small pieces come from 64 kB chunks of it. */
struct rp_arena {
	void **allocs;
	size_t nallocs, capallocs;
	/* the chunk being handed out (bump_left bytes from bump) */
	char *bump;
	size_t bump_left;
};

/* replay_cm.c: the CM calls of a trace (the connection was made by rdma_cm) */
struct rp_cm_qp {
	uint64_t id;
	uint32_t qpn; /* recorded */
};
struct rp_cm_join {
	uint64_t id;
	uint8_t mgid[16];
	uint16_t mlid;
};
struct rp_cm_info {
	uint32_t calls, connects, accepts, qps;
	/* multicast: the ids' QPs (rdma_create_qp/ep) and the groups joined
	 * (MULTICAST_JOIN), attached to the replayed QPs at build */
	struct rp_cm_qp *idqp;
	struct rp_cm_join *join;
	uint32_t nidqp, capidqp, njoin, capjoin, attached, attach_failed;
};

struct rp_side {
	int idx;
	const char *path;
	struct rbt_header hdr; /* strings point into arena copies */
	char host[128];
	struct rbt_reader_stats stats;
	/* recorded resources */
	char devname[64];
	struct rp_cm_info cm;
	uint64_t rec_lid;
	uint8_t rec_gid[16];
	uint32_t rec_active_mtu;
	uint64_t *pd_h;
	struct ibv_pd **pd;
	int npd;
	struct rp_mr *mr;
	int nmr;
	uint64_t *ch_h;
	struct ibv_comp_channel **ch;
	int nch;
	struct rp_cq *cq;
	int ncq;
	struct rp_xrcd *xrcd;
	int nxrcd;
	char xrcd_path[256]; /* the shared domain file this side opened, or "" */
	struct rp_srq *srq;
	int nsrq;
	struct rp_qp *qp;
	int nqp;
	/* TGT QPs of other processes through which this side's XRC SRQs received
	 * (they shared the XRC domain): the receive completions on this side's
	 * CQs that name them are matched per such QP, like those of our own */
	struct rp_qp *xqp;
	int nxqp;
	struct rp_ah *ah;
	int nah;
	/* the trace's model: resource tables and lifetimes, the clock, the join;
	 * each object's user is 1 + the index of its replay entry here */
	struct rbt_model *model;
	const struct rbt_model_trace *mtrace;
	uint64_t wc_seq;
	struct rp_step *step;
	int nstep, prefix; /* steps [0, prefix) run before the start barrier */
	struct rp_mw *mw;
	int nmw;
	uint64_t rec_epoch_ns; /* abs mono ns of the first step after the prefix */
	int uses_atomics, max_rd_atomic;
	uint64_t max_remote_len;
	/* replay state */
	struct ibv_context *ctx;
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	uint64_t mem_bytes;
	uint8_t *inline_pool; /* inline sends that point outside every MR */
	size_t inline_used, inline_cap;
	/* the step it stopped at and why (each lane's: see rp_lane) */
	int stop_at, stop_why; /* stop_at: nstep when it ran all (the earliest
				* of its lanes' stops) */
	int nran;	       /* steps run */
	/* one lane per recorded thread (the steps from the prefix on); the
	 * prefix and the drain at the end run as lane pre */
	struct rp_lane *lane, pre;
	int nlane;
	struct rp_xneed *xneed; /* the steps' cross-lane waits (in the arena) */
	uint64_t xwaits;	/* posts and modifies that waited for another lane */
	uint64_t sq_waits;	/* posts that waited for their QP's send completions */
	/* WRITEs into its MRs from a trace of another host: not inferred */
	uint64_t deps_ambiguous;
	uint64_t cq_events_missed;
	size_t late_from, late_to; /* report: this side's slice of the lateness */
	double late_p50, late_p99, late_max;
	double own_p50, own_p99, own_max; /* lateness past max(deadline, ready) */
	struct rp_arena ar;		  /* its copied arrays (rp_alloc, rp_keep) */
	/* streamed (replay_stream.c): the window's reader and what the run of
	 * the windows so far added up; NULL: the whole timeline is in step[] */
	struct rp_stream *sm;
};

/* ---- the directory: the numbers each side published after setup -------------- */
struct rp_dir_qp {
	int side;
	uint32_t rec_qpn, rec_dest, new_qpn, type, lid;
	uint32_t rec_lid;
	uint8_t gid[16];
};
struct rp_dir_mr {
	int side;
	uint64_t rec_addr, len, new_addr;
	uint32_t rec_rkey, new_rkey;
	/* an MR of this process registered mid-run: its rkey is read at post
	 * time (NULL: new_rkey holds; another process's, or a window's key) */
	const struct rp_mr *live;
};
/* An XRC SRQ: an XRC_SEND names the peer's SRQ by number in every send. */
struct rp_dir_srq {
	int side;
	uint32_t rec_srqn, new_srqn;
};
struct rp_dir {
	struct rp_dir_qp *qps;
	int nqp, capqp;
	struct rp_dir_mr *mrs;
	int nmr, capmr;
	struct rp_dir_srq *srqs;
	int nsrq, capsrq;
};

/* A recorded RDMA WRITE that may land in some side's MR (replay_deps.c):
 * side >= RP_MAX_SIDES: the peer replayer's (only the fields after wr). */
struct rp_write {
	int side, step, wr;
	int host;	 /* index into rp_job.hosts, -1: unknown */
	uint32_t clk;	 /* the trace's clock source: t_post, t_done are its ticks */
	uint32_t stream; /* the recorded thread that posted it (local only) */
	uint32_t rec_dest, rkey, key, ord;
	uint64_t raddr, len, t_post, t_done;
	uint8_t *at;	  /* while inferring: where it lands in the waiting side's view */
	struct rp_qp *qp; /* the writer's QP (local only) */
	uint64_t gid;	  /* its number among its side's WRITEs (streamed: all windows) */
};

struct rp_writes {
	struct rp_write *v;
	int n, cap;
};

/* ---- the divergence list --------------------------------------------------- */
/* One kind of divergence: the first message, and how many more alike (the same
 * message but for step numbers, completion indexes and waited times). */
struct rp_div {
	char *msg, *key;
	uint64_t count;
	long long last_step; /* of the last repeat, -1: none named */
};

struct rp_report {
	struct rp_div *div;
	int ndiv, capdiv;
	uint64_t total;
	pthread_mutex_t lock;
};

/* A streamed job's lane threads, kept from one window to the next (a thread
 * made and joined per lane per window: 8 x 251 of them, the 8-thread bench
 * trace's windows, take 71-74 ms here by themselves). Worker k runs the k-th
 * lane of each window it is given (gen); replay_job.c. */
struct rp_pool {
	pthread_t *thr;
	struct rp_pool_arg **args; /* each worker's own, freed with the pool */
	int nthr, inited, stop;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;
	struct rp_thread_arg *work;
	int nwork, ndone;
};
struct rp_pool_arg {
	struct rp_job *j;
	int k;
};

struct rp_job {
	const struct rbt_replay_opts *o;
	FILE *log;
	struct rp_side side[RP_MAX_SIDES];
	int nside; /* local sides */
	int nremote_sides;
	struct rp_dir dir;
	struct rp_report rep;
	uint64_t t0;	    /* replay epoch, local ns */
	uint64_t paused_ns; /* streamed: between windows (t0 moved on by it) */
	uint64_t rec_epoch; /* recorded epoch, abs mono ns (same host) */
	int same_clock;	    /* all local traces from one host */
	int net_fd;	    /* TCP to the peer replayer / responder, -1 */
	int peer_is_responder;
	pthread_barrier_t bar;
	int poll_timeout_ms;
	/* more lanes running than CPUs: a waiting lane gives its CPU away at
	 * every empty turn (rp_wait_yield); for the report, the most lanes a
	 * crowded run (or window) had and the CPUs they shared */
	int crowded;
	int crowd_lanes;
	long crowd_cpus;
	_Atomic int diverged; /* some side of this process has diverged (read unlocked) */
	int deps_off;	      /* RBTRACE_REPLAY_NO_DEPS: inferred, not waited for */
	struct rp_writes writes; /* every side's WRITEs, the peer's too */
	struct rp_pool pool;	 /* streamed: the lanes' threads */
	char hosts[RP_MAX_HOSTS][128];
	int nhost;
	/* the listener's peers (--peers), or the connecting side's one */
	int peer_fd[RP_MAX_PEERS];
	int npeer;
	uint64_t end_ns; /* --max-time: the run ends here; 0: none */
	/* XRC domains opened through a file in the recording are rebuilt through
	 * one file per recorded host, PREFIX.<host hash>, shared by every side of
	 * the job (both replayer processes: the listener names it) */
	char xrcd_prefix[200];
	/* streaming: steps a window holds (0: never stream), and whether this
	 * job is streamed (rp_stream_decide) */
	int window, stream;
	int mark_every; /* steps per kept step time: RP_STREAM_MARK, less for
			 * a smaller window */
	/* a job of at most this many steps (all sides) longer than a window
	 * is replayed from memory all the same (rp_stream_decide) */
	uint64_t mem_steps;
};

/* Room for one more element of a growable array: doubles cap (zeroing the
 * new part) when n reached it; 0 when memory ran out. */
#define RP_GROW(arr, n, cap)                                                    \
	({                                                                      \
		int _ok = 1;                                                    \
		if ((n) == (cap)) {                                             \
			int _c = (cap) ? 2 * (cap) : 16;                        \
			void *_p = realloc((arr), (size_t)_c * sizeof(*(arr))); \
			if (_p) {                                               \
				(arr) = _p;                                     \
				memset((arr) + (cap), 0,                        \
				       (size_t)(_c - (cap)) * sizeof(*(arr)));  \
				(cap) = _c;                                     \
			} else {                                                \
				_ok = 0;                                        \
			}                                                       \
		}                                                               \
		_ok;                                                            \
	})

/* What loading one trace keeps besides the side (replay_load.c, replay_timeline.c). */
struct rp_loading {
	struct rp_job *j;
	struct rp_side *s;
	int cappd, capmr, capch, capcq, capxrcd, capsrq, capqp, capah, capstep, capmw;
	uint64_t seq; /* file order: the tie-break of steps recorded at one time */
	/* the poll being fed (NULL: another event), 1 + index of its CQ, and
	 * the first of its completions the model has not handed over yet */
	const struct rbt_event *cur_poll;
	int cur_cq;
	uint32_t wc_next;
	/* the event being fed when it already lies in memory the side keeps
	 * (a streamed window's batch): a step made of it takes it as it is */
	struct rbt_event *kept;
	int err; /* from a model callback: -ENOMEM */
	/* a send, a poll that returned completions or a completion-event wait
	 * was read: MR events from now on are steps (before it they fall in the
	 * prefix and are done before the run) */
	int started;
	/* streaming (replay_stream.c). Loading: past the window (over), steps
	 * and recorded completions are counted, not kept. again: the window's
	 * second reading of the trace: resources are only tied to the model
	 * (the k-th create to the k-th entry), steps from the start on kept */
	int over, again;
	/* the next window's reading, while the window before runs: recorded
	 * completions go to rec_next */
	int ahead;
	int again_npd, again_nmr, again_nch, again_ncq, again_nxrcd, again_nsrq,
		again_nqp, again_nah, again_nmw;
};

/* The phases, in the order replay_job.c runs them. Each returns 0 or a negative
 * errno after one line on j->log. */

/* replay_side.c: the side's tables */
int rp_arena_keep(struct rp_arena *a, void *p);
int rp_arena_room(struct rp_arena *a, size_t n);
/* n bytes aligned for any type, zeroed (their pages touched) or not */
void *rp_arena_get(struct rp_arena *a, size_t n, int zero);
void rp_arena_free(struct rp_arena *a);
int rp_keep(struct rp_side *s, void *p);
void *rp_alloc(struct rp_side *s, size_t n);
/* A streamed window's part of the arena: what is kept from the mark on (up
 * to the next window's mark, when that one was read while it ran) is given
 * back by rp_arena_release. */
size_t rp_arena_mark(struct rp_side *s);
void rp_arena_release(struct rp_side *s, size_t mark, size_t end);
/* Sorts an array that is nearly in order already (a few elements out of
 * place) cheaply, any other in qsort's time. */
void rp_sort_nearly(void *base, size_t n, size_t size,
		    int (*cmp)(const void *, const void *));
/* Sorts an array made of a few sorted runs (two lists sorted already, put
 * one after the other): the runs merged, stable; O(n log runs). */
void rp_sort_runs(void *base, size_t n, size_t size,
		  int (*cmp)(const void *, const void *));
void rp_side_free(struct rp_side *s);
uint64_t rp_abs_ns(const struct rp_side *s, uint64_t ticks);
/* The host's clock, on which events of traces of one host are compared: the
 * raw TSC when the trace has one (every process of a host reads the same
 * counter; each trace's conversion to CLOCK_MONOTONIC has its own calibration,
 * and two of them differ by microseconds - enough to put a send on the wrong
 * side of the poll that got it), else CLOCK_MONOTONIC (ns). */
uint64_t rp_host_clock(const struct rp_side *s, uint64_t ticks);
int rp_qp_index(const struct rp_side *s, uint64_t h);
int rp_cq_index(const struct rp_side *s, uint64_t h);
int rp_srq_index(const struct rp_side *s, uint64_t h);
int rp_xrcd_index(const struct rp_side *s, uint64_t h);
struct rp_qp *rp_qp_by_rec_qpn(struct rp_side *s, uint32_t qpn);
struct rp_ah *rp_ah_by_h(struct rp_side *s, uint64_t h);
int rp_mr_index(const struct rp_side *s, uint64_t h);
int rp_mw_index(const struct rp_side *s, uint64_t h);
/* The replayed key of a recorded key of window w (after rp_build_side). */
uint32_t rp_mw_key(const struct rp_mw *w, uint32_t rec_key);
struct ibv_pd *rp_pd_by_h(struct rp_side *s, uint64_t h);
void rp_wclist_push(struct rp_wclist *l, const struct rp_wcrec *w);
int rp_is_xrc(uint64_t qp_type);
int rp_qp_recv_on_cq(const struct rp_side *s, const struct rp_qp *q, int cq);
int rp_cmp_u64(const void *a, const void *b);
const char *rp_qpt_name(uint64_t qp_type);
void rp_pattern(uint8_t *p, size_t n, uint64_t seed);

/* replay_load.c, replay_timeline.c, replay_join.c: one trace into a side */
int rp_side_load(struct rp_job *j, struct rp_side *s, const char *path);
int rp_timeline_add(struct rp_loading *ld, const struct rbt_event *ev);

/* replay_cm.c */
struct rbt_json;
int rp_load_cm(struct rp_loading *ld, const struct rbt_event *ev);
int rp_load_cm_event(struct rp_loading *ld, const struct rbt_event *ev);
int rp_cm_build_mcast(struct rp_job *j, struct rp_side *s);
void rp_cm_free(struct rp_side *s);
void rp_cm_text(struct rp_job *j, FILE *f);
void rp_cm_json(const struct rp_side *s, struct rbt_json *w);
void rp_timeline_finish(struct rp_side *s);
extern const struct rbt_model_ops rp_join_ops; /* arg: struct rp_loading * */
void rp_join_finish(struct rp_side *s);
void *rp_res_user(int idx);
int rp_res_idx(const struct rbt_model_res *r);
int rp_wc_is_recv(const struct rp_qp *q, uint32_t status, uint32_t opcode,
		  uint64_t wr_id);

/* replay_stream.c: a timeline of any length, window by window */
/* Steps of all sides a window holds: the per-WRITE and per-step sweeps
 * between windows stay in the caches (rdma_bench's streamed traces, 2048
 * against 16384: ww-echo 26.9 -> 17.1 s, ss-sequencer 13.2 -> 10.1 s,
 * rw-allsig 50.1 -> 36.1 s asap; 1024 made the 8-thread bench's lanes wait
 * for each other at every window's end) */
#define RP_STREAM_WINDOW 2048
#define RP_STREAM_MARK	 4096 /* one step time kept per this many steps */
/* RBTRACE_REPLAY_MEMORY_STEPS by default: steps replayed from memory, at
 * about RP_STEP_BYTES each in at most an eighth of the machine's memory */
#define RP_MEMORY_STEPS	 1000000
#define RP_STEP_BYTES	 2048
#define RP_STREAM_WRKEYS 64    /* distinct rkeys of a side's WRITEs kept */
#define RP_STREAM_SAMPLE 65536 /* lateness samples a side keeps */
#define RP_THREAD_SAMPLE 4096  /* and each of its recorded threads */
/* A uniform sample of timed posts' lateness (every post has the same chance
 * to be in it; replay_report.c), with the exact maxima: a streamed side's, or
 * one of its recorded threads'. own: NULL when not kept. */
struct rp_sample {
	uint64_t timed, late_max, own_max, rng;
	uint64_t *late, *own;
	size_t nsample, cap;
};

/* Resource steps run (MR reg/dereg/rereg, QP create/destroy), their time
 * inside the verbs (ns), replayed and recorded (replay_report.c). */
struct rp_res_count {
	uint64_t n, reg, dereg, rereg, qcreate, qdestroy, verb_rep, verb_rec;
};

struct rp_stream {
	/* loading: why the side cannot be streamed (NULL: it can), the steps
	 * past the first window, the time of every RP_STREAM_MARK-th step */
	const char *why_not;
	uint64_t nstep_all;
	struct rp_mark {
		uint64_t ns, host; /* abs ns; the host's clock (rp_host_clock) */
	} * mark;
	size_t nmark, capmark;
	uint64_t last_work_ns;
	uint32_t nstreams;
	/* memory dependencies over the whole trace (replay_deps.c): whether it
	 * posts sends at all, the rkeys its WRITEs name (all: more than fit) */
	int posts_send, wrkey_all, nwrkey;
	/* its posts from the start on (first reading), and those of the windows
	 * read so far: a side with none left never waits for a WRITE
	 * (can_wait, for the window being read) */
	uint64_t nposts_all, posts_seen;
	int can_wait;
	uint32_t wrkey[RP_STREAM_WRKEYS];
	/* what inferring them carries from one window to the next */
	struct rp_deps_carry *dc;
	/* the second reading (replay_load.c) */
	struct rp_loading *ld;
	struct rbt_model *model;
	const struct rbt_model_trace *mtrace;
	struct rp_ahead *ahead; /* its reader, one window ahead of the run */
	int model_done;
	/* the events read after the window of their time was read (replayed
	 * in the next window) */
	uint64_t late_events;
	int host_cut;	  /* windows end on the host's clock, not in ns */
	size_t mark_next; /* planning: the next mark not yet in a window */
	/* the run so far: steps before this window; each recorded thread's
	 * steps, runs and budget over the windows (the report's lanes after) */
	uint64_t base, windows, max_window, stop_at_all;
	int cut;
	size_t arena_mark;
	/* the next window, read while this one runs (rp_stream_feed): its
	 * steps, their room, where its part of the arena begins, the rc of
	 * its reading; fed: that reading happened */
	struct rp_step *next_step;
	int next_nstep, next_cap, next_rc, fed;
	size_t next_mark;
	struct rp_lane *thr;
	int nthr, capthr;
	/* timing of the posts, as replay_report.c's tally keeps it for one
	 * window: counts, spans and a sample of the lateness */
	uint64_t posts, first, last, rfirst, rlast;
	struct rp_sample smp;
	/* and its resource steps' (a sample of their lateness) */
	struct rp_res_count res;
	struct rp_sample res_late;
};
/* Loading (pass 1): whether the job may stream at all, the window's step cap. */
int rp_stream_wanted(const struct rp_job *j);
void rp_stream_note(struct rp_loading *ld, const struct rbt_event *ev, uint64_t rec_ns);
/* After every side loaded: 1 when the job is streamed (sides trimmed to
 * their prefix), 0 when it replays from memory (sides must be reloaded
 * whole when any went over: *reload), or a negative errno. */
int rp_stream_decide(struct rp_job *j, int *reload);
/* The run of a streamed job, in place of the one of every lane. */
void rp_stream_run(struct rp_job *j);
void rp_stream_free(struct rp_side *s);
/* A step's number in the whole timeline (a streamed window's index + its base). */
static inline int rp_step_no(const struct rp_side *s, int i)
{
	return s->sm ? (int)s->sm->base + i : i;
}
/* For the report: a side's steps and where it stopped, over every window. */
uint64_t rp_steps_of(const struct rp_side *s);
uint64_t rp_stop_of(const struct rp_side *s);
uint64_t rp_timed_of(const struct rp_side *s);
/* replay_load.c: the second reading, window by window: window w up to
 * recorded time lim[w] (abs ns, or the host's clock: rp_stream.host_cut;
 * UINT64_MAX: the rest). rp_again_load reads the next window: 1 when the
 * trace has more, 0 at its end, or a negative errno. */
int rp_again_open(struct rp_job *j, struct rp_side *s, const uint64_t *lim, size_t nlim);
int rp_again_load(struct rp_job *j, struct rp_side *s);
/* A retired window's part of the arena (from mark up to end, SIZE_MAX: on)
 * given back. */
void rp_again_discard(struct rp_side *s, size_t mark, size_t end);
void rp_again_close(struct rp_side *s);
/* replay_timeline.c, replay_join.c: the window's steps in order and wired */
void rp_timeline_window(struct rp_side *s);
void rp_join_window(struct rp_side *s);
/* replay_job.c: every lane of every side, each on a thread of its own;
 * rp_lanes_start and rp_lanes_join the two halves (others: a thread for a
 * lone lane too, so that the caller can do something else meanwhile) */
struct rp_thread_arg {
	struct rp_job *j;
	struct rp_lane *L;
};
struct rp_lanes_run {
	struct rp_thread_arg *args;
	uint8_t *own;
	int pooled; /* the lanes owned ran on the job's pool (streamed) */
};

void rp_run_lanes(struct rp_job *j);
int rp_lanes_start(struct rp_job *j, struct rp_lanes_run *r, int others);
/* The CPUs this process may run on. */
long rp_ncpu(void);
/* A lane's turn number spins of a wait that found nothing: whether to yield
 * the CPU now. Several lanes and CPUs enough for them: every 16th turn (the
 * lane waited for runs elsewhere; spinning sees its step sooner). More lanes
 * than CPUs: every turn, as the lane waited for may need this CPU (8 lanes of
 * ping-pongs on 2 CPUs: 6-8 % faster than every 16th). */
static inline int rp_wait_yield(const struct rp_job *j, unsigned spins)
{
	return j->crowded || (spins & 15) == 0;
}
void rp_lanes_join(struct rp_job *j, struct rp_lanes_run *r);
/* replay_run.c, replay_report.c: what a window leaves behind */
void rp_collect_completions(struct rp_job *j, struct rp_side *s);
void rp_match_trim(struct rp_job *j, struct rp_side *s);
void rp_report_window(struct rp_job *j, struct rp_side *s);
/* replay_translate.c: the steps only (the pairing is done once) */
int rp_prepare_steps(struct rp_job *j, struct rp_side *s);

/* replay_check.c: refusals */
int rp_check_pairs(struct rp_job *j);
int rp_check_side(struct rp_job *j, struct rp_side *s);

/* replay_build.c: the replayed resources */
int rp_open_device(struct rp_job *j, struct rp_side *s, struct ibv_context **ctxp);
int rp_build_side(struct rp_job *j, struct rp_side *s);
int rp_publish_side(struct rp_job *j, struct rp_side *s);
void rp_teardown_side(struct rp_side *s);
/* A QP created mid-run (RC, UC or UD) by its step: 0 or a negative errno. */
int rp_qp_create_now(struct rp_side *s, struct rp_qp *q);
int rp_modify_to(struct ibv_qp *qp, const struct rbt_ev_qp_modify *m, uint32_t dest_qpn,
		 uint32_t dlid, const uint8_t *dgid);

/* replay_translate.c: recorded work onto the replayed resources */
int rp_prepare_side(struct rp_job *j, struct rp_side *s);
/* The receive-queue order of UD sends between sides of this process (after every
 * side is prepared; streamed, after each window is): rp_step.ud_dest/ud_need,
 * rp_qp.recv_ts. */
int rp_ud_order_setup(struct rp_job *j);

/* replay_clock.c, replay_run.c, replay_finish.c: the clock, running a
 * timeline, and after it */
void rp_clock_init(void);
uint64_t rp_now_ns(void);
void rp_go_realtime(struct rp_job *j, int on);
/* A lane's stop (signal, --max-time), the bound of a wait, a wait's waste. */
int rp_must_stop(struct rp_job *j, struct rp_lane *s);
uint64_t rp_wait_limit(struct rp_job *j, struct rp_lane *s, uint64_t normal_ns);
void rp_wasted(struct rp_job *j, struct rp_lane *s, uint64_t t_start);
/* Sleeps (spins the last stretch) until deadline; 1 when the lane must stop. */
int rp_wait_until(struct rp_job *j, struct rp_lane *s, uint64_t deadline);
struct rp_qp *rp_qp_by_new_qpn(struct rp_side *s, uint32_t qpn);
void rp_run_lane(struct rp_job *j, struct rp_lane *L);
void rp_err_waits(struct rp_job *j, struct rp_side *s);
/* Posts that wait for the send completions that freed their slots in the
 * recording (QPs on a CQ shared with other queues): rp_step.sq_need. */
int rp_sq_waits(struct rp_side *s);
/* The lanes of a side (replay_timeline.c, after the prefix is known). */
int rp_lanes_build(const struct rp_job *j, struct rp_side *s);
/* Whether QP q takes the receives of SRQ srqi (1 + index). */
int rp_qp_takes_srq(const struct rp_side *s, const struct rp_qp *q, int srqi);
/* replay_build.c: which QP create/destroy steps run (the others are skipped),
 * which QPs their step creates (again for each streamed window). */
void rp_qp_life_steps(struct rp_job *j, struct rp_side *s);
/* The lanes' outcome into the side (after every lane's thread ended). */
void rp_lanes_done(struct rp_side *s);
void rp_side_finish(struct rp_job *j, struct rp_side *s);
void rp_final_states(struct rp_side *s);
/* SIGINT/SIGTERM during the run: each side stops at its next step. */
void rp_signals_catch(int on);
int rp_signal_caught(void);
/* A stopped side's recorded completions cut to those it reached. */
void rp_side_cut(struct rp_side *s);

/* replay_deps.c: causality through memory (peers' WRITEs into polled MRs) */
int rp_deps_collect(struct rp_job *j);
int rp_deps_setup(struct rp_job *j);
void rp_deps_tag(struct rp_step *st);
int rp_deps_posted(const struct rp_step *st, uint64_t *rec_ns, uint64_t *rep_ns);
uint64_t rp_deps_wait(struct rp_job *j, struct rp_lane *L, struct rp_step *st, int i,
		      uint64_t lim_ns, int *timed_out);
/* Streamed: a WRITE seen by the first reading; the carry's memory. */
void rp_deps_note(struct rp_stream *sm, const struct rbt_event *ev);
void rp_deps_carry_free(struct rp_stream *sm);
/* pending WRITEs over what a thread carries (not waited for) */
uint64_t rp_deps_dropped(const struct rp_stream *sm);
/* replay_report.c: a window lane's timed posts into its thread's sample. */
void rp_report_lane_window(const struct rp_lane *L, struct rp_lane *T);
void rp_deps_totals(const struct rp_side *s, uint64_t *inferred, uint64_t *in_flight,
		    uint64_t *kept, uint64_t *timed_out);

/* replay_report.c: the fidelity report */
void rp_diverge(struct rp_job *j, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void rp_report_print(struct rp_job *j, struct rbt_replay_summary *sum);
const char *rp_state_name(uint32_t s);
const char *rp_final_src_text(const struct rp_qp *q);
/* replay_match.c: completions matched (adds divergences) */
void rp_report_match(struct rp_job *j, struct rbt_replay_summary *sum);
/* One line "rbtrace replay: <fmt>" on j->log; returns err (a negative errno). */
int rp_fail(struct rp_job *j, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* replay_record.c: -o */
int rp_record_side(struct rp_job *j, struct rp_side *s, const char *path);

/* replay_net.c: the peer replayer, the directory exchange */
#define RP_NET_TIMEOUT_MS 30000
int rp_net_open(struct rp_job *j);
int rp_net_exchange(struct rp_job *j);
int rp_net_barrier(struct rp_job *j, const char *word);
void rp_net_close(struct rp_job *j);
int rp_net_agree_t0(struct rp_job *j, uint64_t *t0);
int rp_dir_add_qp(struct rp_dir *d, const struct rp_dir_qp *q);
int rp_dir_add_mr(struct rp_dir *d, const struct rp_dir_mr *m);
int rp_dir_add_srq(struct rp_dir *d, const struct rp_dir_srq *r);
int rp_sendf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rp_readline(int fd, char *buf, size_t n, int timeout_ms);
void rp_hex(char *out, const uint8_t *g);
void rp_unhex(uint8_t *g, const char *s);
int rp_listen_accept(FILE *log, const char *port);
int rp_listen_accept_n(FILE *log, const char *port, int n, int *fds);
int rp_host_id(struct rp_job *j, const char *host);
int rp_connect(FILE *log, const char *hostport);

/* replay_responder.c: rbtrace replay --responder */
int rp_responder_run(const struct rbt_replay_opts *o);

#endif
