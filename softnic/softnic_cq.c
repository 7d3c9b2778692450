/*
 * softnic completion queues: pushing a completion into a CQ ring (from any
 * process), ibv_poll_cq, arming and notification, the extended CQ's
 * start/next/end_poll and readers, and cleaning a dead QP's entries.
 * The push and poll paths must never allocate or take a lock other than a
 * CQ's own poll flag; the only syscalls are a FIFO write to an armed CQ's
 * channel and a bounded futex sleep on an empty CQ.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "softnic_data.h"

/* ---------------- completion queues ---------------- */

uint64_t sn_model_ns(uint64_t bytes)
{
	uint64_t t = sn_g.lat_ns + bytes * sn_g.ns_per_kib / 1024;

	if (sn_g.jitter_ns) {
		static __thread uint64_t x = 88172645463325252ull;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		t += x % (sn_g.jitter_ns + 1);
	}
	return t;
}

static void sn_cq_overflow(struct sn_cq_shm *cq)
{
	if (!atomic_exchange(&cq->error, 1))
		sn_async_event(cq->async_path, NULL, IBV_EVENT_CQ_ERR, cq->cookie);
}

/*
 * Resizing a CQ that producers in other processes write into.
 *
 * Every mapping of a CQ file spans SN_CQ_RESERVE bytes, so growing the file
 * (posix_fallocate) makes the new slots reachable through every producer's
 * existing mapping: nobody remaps. What changes is the ring's size, and with
 * it where index i lives (i & (ring - 1)), so the live entries move. The
 * owner takes the ring with one fetch_or of SN_CQ_GATE into prod, which
 * splits the producers in two: those whose fetch_add on prod came before it
 * hold a slot of the old ring and the owner waits until each has published
 * its entry (seq); those after it see the gate in the value they got back,
 * give that claim up and wait for the gate to clear, then claim again in
 * the new ring. The owner moves the live entries, publishes ring and cap,
 * then stores prod without the gate (which also drops the given-up claims).
 * The fast path pays nothing but a bit test on a value it already has.
 */
static bool sn_cq_gate_wait(struct sn_cq_shm *cq)
{
	uint64_t t0 = 0;

	for (uint32_t n = 0;
	     atomic_load_explicit(&cq->prod, memory_order_acquire) & SN_CQ_GATE; n++) {
		if (n & 63)
			continue;
		if (!t0)
			t0 = sn_now_ns();
		else if (sn_now_ns() - t0 > 2000000000ull) {
			/* the owner died in the middle of a resize */
			sn_cq_overflow(cq);
			return false;
		}
		sched_yield();
	}
	return true;
}

/* The owner (holding the CQ's poll flag): grow or shrink the ring to hold
 * cqe entries. EINVAL if more completions wait than the new size holds. */
int sn_cq_resize(struct sn_cq *cq, uint32_t cqe)
{
	struct sn_cq_shm *s = cq->shm;
	uint32_t ring = sn_pow2(cqe + 1), old = atomic_load(&s->ring);
	uint64_t cons, prod, t0, n;
	struct sn_cqe *tmp = NULL;
	int ret = 0;

	if (ring == old)
		return 0;
	if (ring > old) {
		ret = sn_shm_grow(cq->name, sizeof(struct sn_cq_shm) +
						    (size_t)ring * sizeof(struct sn_cqe));
		if (ret)
			return -ret;
	}
	prod = atomic_fetch_or(&s->prod, SN_CQ_GATE) & ~SN_CQ_GATE;
	cons = atomic_load(&s->cons);
	n = prod - cons;
	if (atomic_load(&s->error) || n > ring - 1) {
		ret = EINVAL;
		goto out;
	}
	/* the claims made before the gate: wait until each entry is written */
	t0 = sn_now_ns();
	for (uint64_t i = cons; i < prod; i++) {
		struct sn_cqe *e = &s->e[i & (old - 1)];

		while (atomic_load_explicit(&e->seq, memory_order_acquire) != i + 1) {
			if (atomic_load(&s->error) || sn_now_ns() - t0 > 2000000000ull) {
				ret = EAGAIN; /* a producer died mid-write */
				goto out;
			}
			sched_yield();
		}
	}
	tmp = n ? malloc(n * sizeof(*tmp)) : NULL;
	if (n && !tmp) {
		ret = ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < n; i++)
		memcpy(&tmp[i], &s->e[(cons + i) & (old - 1)], sizeof(*tmp));
	for (uint32_t i = 0; i < ring; i++)
		atomic_store_explicit(&s->e[i].seq, 0, memory_order_relaxed);
	for (uint64_t i = 0; i < n; i++)
		memcpy(&s->e[(cons + i) & (ring - 1)], &tmp[i], sizeof(*tmp));
	free(tmp);
	atomic_store_explicit(&s->ring, ring, memory_order_relaxed);
	atomic_store_explicit(&s->cap, ring - 1, memory_order_relaxed);
	cq->cq.cqe = (int)(ring - 1);
out:
	/* releases the ring and its new size together; claims made while
	 * gated are dropped with the gate */
	atomic_store_explicit(&s->prod, prod, memory_order_release);
	return ret;
}

/* CQ moderation: true when this completion's event is held back (fewer
 * than mod_count since the arm); the first one held starts the period,
 * after which the helper thread raises the event if the CQ is still armed.
 * Errors are never held back. */
static bool sn_cq_moderated(struct sn_cq_shm *cq, const struct sn_cqe *src)
{
	uint32_t count = atomic_load_explicit(&cq->mod_count, memory_order_relaxed);
	uint32_t period, n;

	if (SN_LIKELY(count <= 1) || src->status != IBV_WC_SUCCESS)
		return false;
	n = atomic_fetch_add(&cq->mod_seen, 1) + 1;
	if (n >= count)
		return false;
	period = atomic_load_explicit(&cq->mod_period_us, memory_order_relaxed);
	if (n == 1 && period)
		sn_delay_notify_armed(cq, sn_now_ns() + (uint64_t)period * 1000);
	return true;
}

/* ibv_modify_cq: moderation only (count and period as mlx5 bounds them). */
int sn_modify_cq(struct ibv_cq *ibcq, struct ibv_modify_cq_attr *attr)
{
	struct sn_cq_shm *s = sn_cq_of(ibcq)->shm;

	if (!attr || (attr->attr_mask & ~(uint32_t)IBV_CQ_ATTR_MODERATE))
		return EOPNOTSUPP;
	if (!(attr->attr_mask & IBV_CQ_ATTR_MODERATE))
		return EINVAL;
	if (attr->moderate.cq_period > SN_CQ_MOD_MAX_PERIOD_US)
		return EINVAL; /* cq_count is 16 bits: any count is in range */
	atomic_store(&s->mod_period_us, attr->moderate.cq_period);
	atomic_store(&s->mod_count, attr->moderate.cq_count);
	return 0;
}

/* Append one completion; false if the CQ overflowed (or already had). */
bool sn_cq_push(struct sn_cq_shm *cq, const struct sn_cqe *src, int *chan_fd)
{
	uint64_t idx, cons;
	struct sn_cqe *e;
	uint32_t armed;

	if (SN_UNLIKELY(atomic_load_explicit(&cq->error, memory_order_relaxed)))
		return false;
	idx = atomic_fetch_add_explicit(&cq->prod, 1, memory_order_acquire);
	if (SN_UNLIKELY(idx & SN_CQ_GATE)) {
		/* a resize holds the ring: this claim counts for nothing */
		if (!sn_cq_gate_wait(cq))
			return false;
		return sn_cq_push(cq, src, chan_fd);
	}
	cons = atomic_load_explicit(&cq->cons, memory_order_acquire);
	if (SN_UNLIKELY(idx - cons >=
			atomic_load_explicit(&cq->cap, memory_order_relaxed))) {
		sn_cq_overflow(cq);
		return false;
	}
	e = &cq->e[idx & (atomic_load_explicit(&cq->ring, memory_order_relaxed) - 1)];
	e->wr_id = src->wr_id;
	e->ts = src->ts;
	e->visible_ns = src->visible_ns;
	e->local_qp = src->local_qp;
	e->status = src->status;
	e->opcode = src->opcode;
	e->byte_len = src->byte_len;
	e->imm = src->imm;
	e->qp_num = src->qp_num;
	e->src_qp = src->src_qp;
	e->wc_flags = src->wc_flags;
	e->vendor_err = src->vendor_err;
	e->sq_idx = src->sq_idx;
	e->slid = src->slid;
	e->pkey_index = src->pkey_index;
	e->sl = src->sl;
	e->dlid_path_bits = src->dlid_path_bits;
	e->solicited = src->solicited;
	atomic_store_explicit(&e->dropped, 0, memory_order_relaxed);
	/* seq_cst store then load: pairs with req_notify's store of armed and
	 * load of the ring (Dekker), so an arm and a new completion never miss
	 * each other */
	atomic_store_explicit(&e->seq, idx + 1, memory_order_seq_cst);
	if (SN_UNLIKELY(atomic_load_explicit(&cq->sleepers, memory_order_seq_cst))) {
		atomic_fetch_add(&cq->wake_seq, 1);
		syscall(SYS_futex, &cq->wake_seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
	}
	armed = atomic_load_explicit(&cq->armed, memory_order_seq_cst);
	if (SN_UNLIKELY(armed) &&
	    (armed == 1 || src->solicited || src->status != IBV_WC_SUCCESS) &&
	    !sn_cq_moderated(cq, src) && atomic_exchange(&cq->armed, 0)) {
		/* with the latency model the event waits for the completion */
		if (SN_UNLIKELY(src->visible_ns) && src->visible_ns > sn_now_ns())
			sn_delay_notify(cq, src->visible_ns);
		else
			sn_notify_fd(chan_fd, cq->chan_path, cq->cookie);
	}
	return true;
}

/* A program spinning on an empty CQ keeps spinning for a few microseconds,
 * then sleeps on the CQ (a futex in the CQ file that every producer wakes)
 * for at most 200 us per poll call: on an oversubscribed host the peer it
 * waits for needs that core, and a wake-up hands it back at once. */
/* A wait ended with a completion: if spinning alone got it, allow more. */
static void sn_spin_done(struct sn_cq *cq)
{
	if (!cq->slept && cq->spin_budget < 4096)
		cq->spin_budget *= 2;
	cq->slept = false;
	cq->empty_polls = 0;
}

static void sn_empty_poll(struct sn_cq *cq)
{
	struct sn_cq_shm *s = cq->shm;
	uint32_t n = ++cq->empty_polls, seq;
	uint64_t cons, wait = 200000;
	struct sn_cqe *e;
	struct timespec ts;

	if (SN_LIKELY(n < cq->spin_budget)) {
		/* a peer runnable on our own core gets it at once */
		if (SN_UNLIKELY(!(n & 63)))
			sched_yield();
		return;
	}
	if (atomic_load_explicit(&sn_npending, memory_order_relaxed)) {
		/* our own WRs wait for a peer's receive: keep retrying them
		 * (each poll does), only stepping aside now and then */
		if (!(n & 15))
			sched_yield();
		return;
	}
	seq = atomic_load(&s->wake_seq);
	atomic_fetch_add(&s->sleepers, 1);
	cons = atomic_load_explicit(&s->cons, memory_order_relaxed);
	e = &s->e[cons & (s->ring - 1)];
	if (atomic_load(&e->seq) == cons + 1) {
		uint64_t now;

		/* there is one, not yet visible (latency model): sleep until it is */
		if (!e->visible_ns || e->visible_ns <= (now = sn_now_ns()))
			wait = 0;
		else if (e->visible_ns - now < wait)
			wait = e->visible_ns - now;
	}
	if (wait) {
		ts.tv_sec = 0;
		ts.tv_nsec = (long)wait;
		syscall(SYS_futex, &s->wake_seq, FUTEX_WAIT, seq, &ts, NULL, 0);
		/* spinning did not pay: spin less next time (the peer likely
		 * shares our core) */
		if (!cq->slept && cq->spin_budget > 1024)
			cq->spin_budget /= 2;
		cq->slept = true;
	}
	atomic_fetch_sub(&s->sleepers, 1);
}

static inline int sn_poll_cq_body(struct sn_cq *cq, int n, struct ibv_wc *wc)
{
	struct sn_cq_shm *s = cq->shm;
	uint64_t cons = atomic_load_explicit(&s->cons, memory_order_relaxed);
	uint64_t now = 0;
	int got = 0;

	if (SN_UNLIKELY(atomic_load_explicit(&sn_npending, memory_order_relaxed)))
		sn_progress_all();
	while (got < n) {
		struct sn_cqe *e = &s->e[cons & (s->ring - 1)];
		struct ibv_wc *w;

		if (atomic_load_explicit(&e->seq, memory_order_acquire) != cons + 1)
			break;
		if (SN_UNLIKELY(e->visible_ns)) {
			if (!now)
				now = sn_now_ns();
			if (e->visible_ns > now)
				break;
		}
		cons++;
		if (SN_UNLIKELY(atomic_load_explicit(&e->dropped, memory_order_relaxed)))
			continue;
		w = &wc[got++];
		w->wr_id = e->wr_id;
		w->status = e->status;
		w->opcode = e->opcode;
		w->vendor_err = e->vendor_err;
		w->byte_len = e->byte_len;
		w->imm_data = e->imm;
		w->qp_num = e->qp_num;
		w->src_qp = e->src_qp;
		w->wc_flags = e->wc_flags;
		w->pkey_index = e->pkey_index;
		w->slid = e->slid;
		w->sl = e->sl;
		w->dlid_path_bits = e->dlid_path_bits;
		if (e->local_qp)
			atomic_store_explicit(&((struct sn_qp *)e->local_qp)->sq_tail,
					      e->sq_idx + 1, memory_order_release);
	}
	atomic_store_explicit(&s->cons, cons, memory_order_release);
	return got;
}

int sn_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct sn_cq *cq = sn_cq_of(ibcq);
	int got;

	if (SN_LIKELY(cq->single_threaded)) {
		got = sn_poll_cq_body(cq, n, wc);
	} else {
		sn_spin_lock(&cq->poll_lock);
		got = sn_poll_cq_body(cq, n, wc);
		sn_spin_unlock(&cq->poll_lock);
	}
	/* outside the lock: this may sleep */
	if (SN_UNLIKELY(!got))
		sn_empty_poll(cq);
	else if (SN_UNLIKELY(cq->empty_polls))
		sn_spin_done(cq);
	return got;
}

/* The event an arm owes for completions already in the ring, as hardware
 * that compares the arm's consumer index raises one: the time it is due (at
 * most now when one is visible, else the earliest time one becomes visible
 * with the latency model), 0 when none is owed. Any entry counts, not only
 * the oldest: one that is visible (and not polled yet) may sit behind one
 * that is not. A solicited-only arm counts solicited and failed ones only;
 * under moderation visible ones are left to the next completions. */
static uint64_t sn_cq_owed(struct sn_cq_shm *s, uint32_t armed)
{
	uint64_t i, cons = atomic_load_explicit(&s->cons, memory_order_relaxed);
	uint64_t prod =
		atomic_load_explicit(&s->prod, memory_order_acquire) & ~SN_CQ_GATE;
	bool moderated = atomic_load_explicit(&s->mod_count, memory_order_relaxed) > 1;
	uint64_t now = 0, best = 0;

	if (prod - cons > s->ring)
		prod = cons + s->ring;
	for (i = cons; i < prod; i++) {
		struct sn_cqe *e = &s->e[i & (s->ring - 1)];

		if (atomic_load_explicit(&e->seq, memory_order_seq_cst) != i + 1)
			break;
		if (atomic_load_explicit(&e->dropped, memory_order_relaxed) ||
		    (armed == 2 && !e->solicited && e->status == IBV_WC_SUCCESS))
			continue;
		if (e->visible_ns && !now)
			now = sn_now_ns();
		if (!e->visible_ns || e->visible_ns <= now) {
			if (!moderated)
				return now ? now : 1;
			continue;
		}
		if (!best || e->visible_ns < best)
			best = e->visible_ns;
	}
	return best;
}

int sn_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct sn_cq *cq = sn_cq_of(ibcq);
	struct sn_cq_shm *s = cq->shm;
	uint32_t armed = solicited_only ? 2 : 1;
	uint64_t when;

	if (!cq->cq.channel)
		return EINVAL;
	atomic_store(&s->mod_seen, 0);
	/* seq_cst store then loads of the ring: pairs with sn_cq_push (Dekker),
	 * so a completion pushed now is seen here or sees the arm */
	atomic_store(&s->armed, armed);
	/* A completion already in the ring and not polled owes this arm its
	 * event: at once when it is visible (else a program that arms after
	 * its peer's completion landed waits forever), when it becomes visible
	 * with the latency model (on hardware it would arrive after the arm). */
	when = sn_cq_owed(s, armed);
	if (when && atomic_exchange(&s->armed, 0)) {
		if (when > sn_now_ns())
			sn_delay_notify(s, when);
		else
			sn_notify_fd(&cq->chan_wfd, s->chan_path, s->cookie);
	}
	return 0;
}

/* Mark the completions of a QP that is going away so polls skip them. */
void sn_cq_clean(struct sn_cq *cq, uint64_t local_qp, uint32_t qpn)
{
	struct sn_cq_shm *s = cq->shm;
	uint64_t i, prod = atomic_load(&s->prod) & ~SN_CQ_GATE,
		    cons = atomic_load(&s->cons);

	if (prod - cons > s->ring)
		prod = cons + s->ring;
	for (i = cons; i < prod; i++) {
		struct sn_cqe *e = &s->e[i & (s->ring - 1)];

		if (atomic_load(&e->seq) != i + 1)
			continue;
		if ((local_qp && e->local_qp == local_qp) ||
		    (!e->local_qp && e->qp_num == qpn))
			atomic_store(&e->dropped, 1);
	}
}

/* ---------------- extended CQ ---------------- */

static bool sn_cq_pull(struct sn_cq *cq, struct sn_cqe *out)
{
	struct sn_cq_shm *s = cq->shm;
	uint64_t cons = atomic_load_explicit(&s->cons, memory_order_relaxed);

	for (;;) {
		struct sn_cqe *e = &s->e[cons & (s->ring - 1)];

		if (atomic_load_explicit(&e->seq, memory_order_acquire) != cons + 1)
			return false;
		if (e->visible_ns && e->visible_ns > sn_now_ns())
			return false;
		cons++;
		if (atomic_load(&e->dropped)) {
			atomic_store_explicit(&s->cons, cons, memory_order_release);
			continue;
		}
		memcpy(out, e, sizeof(*out));
		if (e->local_qp)
			atomic_store(&((struct sn_qp *)e->local_qp)->sq_tail,
				     e->sq_idx + 1);
		atomic_store_explicit(&s->cons, cons, memory_order_release);
		return true;
	}
}

static int sn_next_poll(struct ibv_cq_ex *cx)
{
	struct sn_cq *cq = (struct sn_cq *)cx;

	if (!sn_cq_pull(cq, &cq->cur))
		return ENOENT;
	cx->wr_id = cq->cur.wr_id;
	cx->status = cq->cur.status;
	return 0;
}

static int sn_start_poll(struct ibv_cq_ex *cx, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	struct sn_cq *cq = (struct sn_cq *)cx;
	int ret;

	if (SN_UNLIKELY(atomic_load_explicit(&sn_npending, memory_order_relaxed)))
		sn_progress_all();
	/* the CQ is ours from start_poll to end_poll (not after ENOENT) */
	if (!cq->single_threaded)
		sn_spin_lock(&cq->poll_lock);
	ret = sn_next_poll(cx);
	if (ret) {
		if (!cq->single_threaded)
			sn_spin_unlock(&cq->poll_lock);
		sn_empty_poll(cq); /* outside the lock: this may sleep */
	} else if (SN_UNLIKELY(cq->empty_polls)) {
		sn_spin_done(cq);
	}
	return ret;
}

static void sn_end_poll(struct ibv_cq_ex *cx)
{
	struct sn_cq *cq = (struct sn_cq *)cx;

	if (!cq->single_threaded)
		sn_spin_unlock(&cq->poll_lock);
}

#define SN_CUR(cx) (((struct sn_cq *)(cx))->cur)

/* the extended CQ's readers that return a field of the current completion:
 * X(ibv_cq_ex's read_ member, type, field of struct sn_cqe) */
#define SN_CQ_FIELD_READERS(X)                \
	X(opcode, enum ibv_wc_opcode, opcode) \
	X(vendor_err, uint32_t, vendor_err)   \
	X(byte_len, uint32_t, byte_len)       \
	X(imm_data, __be32, imm)              \
	X(qp_num, uint32_t, qp_num)           \
	X(src_qp, uint32_t, src_qp)           \
	X(wc_flags, unsigned int, wc_flags)   \
	X(slid, uint32_t, slid)               \
	X(sl, uint8_t, sl)                    \
	X(dlid_path_bits, uint8_t, dlid_path_bits)

#define SN_CQ_READER(member, type, field)                  \
	static type sn_read_##member(struct ibv_cq_ex *cx) \
	{                                                  \
		return (type)SN_CUR(cx).field;             \
	}
SN_CQ_FIELD_READERS(SN_CQ_READER)
#undef SN_CQ_READER

static uint64_t sn_read_ts(struct ibv_cq_ex *cx)
{
	return sn_nic_ticks(SN_CUR(cx).ts);
}
static uint64_t sn_read_wallclock(struct ibv_cq_ex *cx)
{
	struct timespec rt;
	uint64_t mono = sn_now_ns(), real;

	clock_gettime(CLOCK_REALTIME, &rt);
	real = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
	return SN_CUR(cx).ts + (real - mono);
}
static uint16_t sn_read_cvlan(struct ibv_cq_ex *cx)
{
	return 0;
}
static uint32_t sn_read_flow_tag(struct ibv_cq_ex *cx)
{
	return 0;
}
static void sn_read_tm_info(struct ibv_cq_ex *cx, struct ibv_wc_tm_info *ti)
{
	memset(ti, 0, sizeof(*ti));
}

void sn_cq_ex_init(struct sn_cq *cq)
{
	struct ibv_cq_ex *x = &cq->cq;

	x->start_poll = sn_start_poll;
	x->next_poll = sn_next_poll;
	x->end_poll = sn_end_poll;
#define SN_CQ_SET_READER(member, type, field) x->read_##member = sn_read_##member;
	SN_CQ_FIELD_READERS(SN_CQ_SET_READER)
#undef SN_CQ_SET_READER
	x->read_completion_ts = sn_read_ts;
	x->read_cvlan = sn_read_cvlan;
	x->read_flow_tag = sn_read_flow_tag;
	x->read_tm_info = sn_read_tm_info;
	x->read_completion_wallclock_ns = sn_read_wallclock;
}

const struct ibv_context_ops sn_ops_template = {
	.poll_cq = sn_poll_cq,
	.req_notify_cq = sn_req_notify_cq,
	.post_srq_recv = sn_post_srq_recv,
	.post_send = sn_post_send,
	.post_recv = sn_post_recv,
	.alloc_mw = sn_alloc_mw,
	.dealloc_mw = sn_dealloc_mw,
	.bind_mw = sn_bind_mw,
};
