/* shim_drain.c - the one background thread ("rbtrace-writer"): it drains the
 * rings, turns raw records into trace events, takes the clock and NIC clock
 * samples, and owns the writer (compression and I/O) from the header to the
 * trailer.
 *
 * Nothing else writes the file. It must never call a traced verb (it runs with
 * rbt_tls_inside = 2), never receive signals (all blocked), and never make an
 * application thread wait except through a full ring.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <linux/membarrier.h>

#include "interpose/rbt_interpose.h"
#include "interpose/shim.h"

#include "interpose/shim_rec.h"

pthread_mutex_t rbt_writer_lock = PTHREAD_MUTEX_INITIALIZER; /* drain passes */
pthread_t rbt_drainer;
int rbt_drainer_running;
_Atomic int rbt_stop_req;
_Atomic int rbt_closed;
_Atomic int rbt_drainer_tid;
int rbt_trace_fd = -1;
struct rbt_writer *rbt_writer;
int rbt_writer_failed;
uint64_t rbt_lost_total;

/* ---- draining: raw records to events ----------------------------------------------- */
struct rbt_scratch {
	void *p;
	size_t cap;
};

static void *rbt_scratch(struct rbt_scratch *s, size_t n)
{
	if (n > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		while (cap < n)
			cap *= 2;
		void *p = realloc(s->p, cap);
		if (!p)
			return NULL;
		s->p = p;
		s->cap = cap;
	}
	return s->p;
}

static struct rbt_scratch rbt_sc_wr, rbt_sc_sge, rbt_sc_wc;
static int rbt_flight_on; /* RBTRACE_FLIGHT or RBTRACE_ROTATE: shim_flight.c */
uint64_t rbt_events_appended;

static void rbt_append(struct rbt_event *ev, uint32_t stream)
{
	int err;

	if (!rbt_writer || rbt_writer_failed)
		return;
	ev->stream = stream;
	if (rbt_flight_on)
		rbt_flight_note(ev);
	err = rbt_writer_append(rbt_writer, ev);
	if (err < 0) {
		rbt_writer_failed = 1;
		rbt_warn("cannot write trace %s: %s; the program runs on untraced",
			 rbt_path, rbt_strerror(err));
		atomic_store(&rbt_state, 2);
		return;
	}
	rbt_events_appended++;
	if (ev->type == RBT_EV_LOSS)
		rbt_lost_total += ev->u.loss.events;
}

static void rbt_decode_post(const struct rbt_raw_hdr *h, uint32_t stream)
{
	const struct rbt_raw_post *p = (const void *)h;
	const uint8_t *q = (const uint8_t *)(p + 1);
	/* Not zeroed: every field of the member used below is set, and the
	 * encoder reads no other (zeroing the whole union cost more than the
	 * rest of this function). */
	struct rbt_event ev;
	ev.ts = p->ts;
	/* Every sge takes 16 bytes of the record: that bounds their number without
	 * a counting pass. */
	size_t nsge = h->len / sizeof(struct rbt_raw_sge);
	const uint8_t *s;
	struct rbt_sge *sges =
		rbt_scratch(&rbt_sc_sge, (nsge + 1) * sizeof(struct rbt_sge));
	size_t wsz = h->kind == RBT_RAW_POST_SEND ? sizeof(struct rbt_send_wr)
						  : sizeof(struct rbt_recv_wr);
	void *wrs = rbt_scratch(&rbt_sc_wr, (p->nwr + 1) * wsz);
	if (!sges || !wrs)
		return;
	size_t k = 0;
	s = q;
	for (uint32_t i = 0; i < p->nwr; i++) {
		const struct rbt_raw_sge *rs;
		uint32_t n;
		if (h->kind == RBT_RAW_POST_SEND && (h->flags & RBT_RAW_DENSE)) {
			const struct rbt_flat_dswr *w = (const void *)s;
			struct rbt_send_wr *o = (struct rbt_send_wr *)wrs + i;
			const uint8_t *t = (const uint8_t *)(w + 1);
			uint32_t pl = 0;
			*o = (struct rbt_send_wr){ .wr_id = w->wr_id,
						   .opcode = w->opcode,
						   .send_flags = w->send_flags,
						   .imm_data = w->imm };
			if (w->shape & RBT_DSWR_RDMA) {
				const struct rbt_flat_dswr_rdma *rd = (const void *)t;
				o->remote_addr = rd->remote_addr;
				o->rkey = rd->rkey;
				t += sizeof(*rd);
			}
			if (w->shape & RBT_DSWR_EXT) {
				const struct rbt_raw_swr_ext *s = (const void *)t;
				struct rbt_send_wr *d = o;
				RBT_SWR_EXT_FIELDS(RBT_FIELD_CP)
				t += sizeof(*s);
			}
			if (w->shape & RBT_DSWR_WIDE) {
				const struct rbt_flat_dswr_wide *wd = (const void *)t;
				o->send_flags = wd->send_flags;
				pl = wd->payload_len;
				t += sizeof(*wd);
			}
			rs = (const void *)t;
			n = w->nsge;
			o->n_sges = n;
			o->sges = sges + k;
			o->payload.len = pl;
			o->payload.data = pl ? (const uint8_t *)(rs + n) : NULL;
			s = (const uint8_t *)(rs + n) + RBT_ALIGN8(pl);
		} else if (h->kind == RBT_RAW_POST_SEND) {
			const struct rbt_raw_swr *w = (const void *)s;
			struct rbt_send_wr *o = (struct rbt_send_wr *)wrs + i;
			o->wr_id = w->wr_id;
			o->opcode = w->opcode;
			o->send_flags = w->send_flags;
			o->imm_data = w->imm;
			o->remote_addr = w->remote_addr;
			o->rkey = w->rkey;
			if (w->ext) {
				const struct rbt_raw_swr_ext *s = (const void *)(w + 1);
				struct rbt_send_wr *d = o;
				RBT_SWR_EXT_FIELDS(RBT_FIELD_CP)
				rs = (const void *)(s + 1);
			} else {
				o->compare_add = 0;
				o->swap = 0;
				o->ah = 0;
				o->remote_qpn = 0;
				o->remote_qkey = 0;
				rs = (const void *)(w + 1);
			}
			n = w->nsge;
			o->n_sges = n;
			o->sges = sges + k;
			o->payload.len = w->payload_len;
			o->payload.data =
				w->payload_len ? (const uint8_t *)(rs + n) : NULL;
			s = (const uint8_t *)(rs + n) + RBT_ALIGN8(w->payload_len);
		} else {
			const struct rbt_raw_rwr *w = (const void *)s;
			struct rbt_recv_wr *o = (struct rbt_recv_wr *)wrs + i;
			o->wr_id = w->wr_id;
			o->payload.data = NULL;
			o->payload.len = 0;
			n = w->nsge;
			rs = (const void *)(w + 1);
			o->n_sges = n;
			o->sges = sges + k;
			s = (const uint8_t *)(rs + n);
		}
		for (uint32_t j = 0; j < n; j++, k++) {
			sges[k].addr = rs[j].addr;
			sges[k].length = rs[j].length;
			sges[k].lkey = rs[j].lkey;
		}
	}
	/* The fields the three post events share, by their names in each. */
#define RBT_POST_EV(e, obj_field)         \
	do {                              \
		(e).ts_exit = p->ts_exit; \
		(e).ret = p->ret;         \
		(e).obj_field = p->obj;   \
		(e).bad_wr = p->bad_wr;   \
		(e).n_wrs = p->nwr;       \
		(e).wrs = wrs;            \
	} while (0)
	switch (h->kind) {
	case RBT_RAW_POST_SEND:
		ev.type = RBT_EV_POST_SEND;
		RBT_POST_EV(ev.u.post_send, qp);
		ev.u.post_send.qp_num = p->qp_num;
		ev.u.post_send.api = p->api;
		break;
	case RBT_RAW_POST_RECV:
		ev.type = RBT_EV_POST_RECV;
		RBT_POST_EV(ev.u.post_recv, qp);
		ev.u.post_recv.qp_num = p->qp_num;
		break;
	default:
		ev.type = RBT_EV_POST_SRQ_RECV;
		RBT_POST_EV(ev.u.post_srq_recv, srq);
		break;
	}
#undef RBT_POST_EV
	rbt_append(&ev, stream);
}

static void rbt_decode_poll(const struct rbt_raw_hdr *h, uint32_t stream)
{
	const struct rbt_raw_poll *p = (const void *)h;
	struct rbt_event ev; /* not zeroed: see rbt_decode_post() */
	struct rbt_wc *wcs =
		rbt_scratch(&rbt_sc_wc, (p->nwc + 1) * sizeof(struct rbt_wc));

	if (!wcs)
		return;
	const uint8_t *dq = (const uint8_t *)(p + 1);
	for (uint32_t i = 0; i < p->nwc; i++) {
		const struct ibv_wc *w;
		uint64_t hw = 0;
		if (h->flags & RBT_RAW_DENSE) {
			dq += rbt_flat_dwc_get(&wcs[i], dq);
			continue;
		}
		if (h->flags & RBT_POLL_WCX) {
			const struct rbt_raw_wcx *x =
				(const struct rbt_raw_wcx *)(p + 1) + i;
			w = &x->wc;
			hw = x->hw_ts;
		} else {
			w = (const struct ibv_wc *)(p + 1) + i;
		}
		wcs[i].payload.data = NULL;
		wcs[i].payload.len = 0;
		wcs[i].wr_id = w->wr_id;
		wcs[i].status = w->status;
		wcs[i].opcode = w->opcode;
		wcs[i].vendor_err = w->vendor_err;
		wcs[i].byte_len = w->byte_len;
		wcs[i].imm_data = w->wc_flags & IBV_WC_WITH_INV ? w->invalidated_rkey
								: be32toh(w->imm_data);
		wcs[i].qp_num = w->qp_num;
		wcs[i].src_qp = w->src_qp;
		wcs[i].wc_flags = w->wc_flags;
		wcs[i].pkey_index = w->pkey_index;
		wcs[i].slid = w->slid;
		wcs[i].sl = w->sl;
		wcs[i].dlid_path_bits = w->dlid_path_bits;
		wcs[i].hw_ts = hw;
	}
	ev.type = RBT_EV_POLL_CQ;
	ev.ts = p->ts;
	ev.u.poll_cq.ts_exit = p->ts_exit;
	ev.u.poll_cq.ret = p->ret;
	ev.u.poll_cq.cq = p->cq;
	ev.u.poll_cq.asked = p->asked;
	ev.u.poll_cq.api = p->api;
	ev.u.poll_cq.count = p->count ? p->count : 1;
	ev.u.poll_cq.n_wcs = p->nwc;
	ev.u.poll_cq.wcs = wcs;
	rbt_append(&ev, stream);
}

/* The ring records are the writer's flat records behind a header: the writer
 * encodes them where they lie (rbt_writer_append_flat). */
#define RBT_SAME(a, b, f) (offsetof(a, f) - sizeof(struct rbt_raw_hdr) == offsetof(b, f))
_Static_assert(sizeof(struct rbt_raw_post) - sizeof(struct rbt_raw_hdr) ==
			       sizeof(struct rbt_flat_post) &&
		       RBT_SAME(struct rbt_raw_post, struct rbt_flat_post, ts) &&
		       RBT_SAME(struct rbt_raw_post, struct rbt_flat_post, ts_exit) &&
		       RBT_SAME(struct rbt_raw_post, struct rbt_flat_post, obj) &&
		       RBT_SAME(struct rbt_raw_post, struct rbt_flat_post, ret) &&
		       RBT_SAME(struct rbt_raw_post, struct rbt_flat_post, qp_num) &&
		       RBT_SAME(struct rbt_raw_post, struct rbt_flat_post, bad_wr) &&
		       RBT_SAME(struct rbt_raw_post, struct rbt_flat_post, api) &&
		       RBT_SAME(struct rbt_raw_post, struct rbt_flat_post, nwr),
	       "rbt_raw_post is rbt_flat_post behind a header");
_Static_assert(sizeof(struct rbt_raw_poll) - sizeof(struct rbt_raw_hdr) ==
			       sizeof(struct rbt_flat_poll) &&
		       RBT_SAME(struct rbt_raw_poll, struct rbt_flat_poll, ts) &&
		       RBT_SAME(struct rbt_raw_poll, struct rbt_flat_poll, ts_exit) &&
		       RBT_SAME(struct rbt_raw_poll, struct rbt_flat_poll, cq) &&
		       RBT_SAME(struct rbt_raw_poll, struct rbt_flat_poll, ret) &&
		       RBT_SAME(struct rbt_raw_poll, struct rbt_flat_poll, asked) &&
		       RBT_SAME(struct rbt_raw_poll, struct rbt_flat_poll, api) &&
		       RBT_SAME(struct rbt_raw_poll, struct rbt_flat_poll, count) &&
		       RBT_SAME(struct rbt_raw_poll, struct rbt_flat_poll, nwc),
	       "rbt_raw_poll is rbt_flat_poll behind a header");
#define RBT_SAMEF(a, b, f) (offsetof(a, f) == offsetof(b, f))
_Static_assert(sizeof(struct rbt_raw_swr) == sizeof(struct rbt_flat_swr) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, wr_id) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, remote_addr) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, rkey) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, imm) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, send_flags) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, payload_len) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, opcode) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, ext) &&
		       RBT_SAMEF(struct rbt_raw_swr, struct rbt_flat_swr, nsge),
	       "rbt_raw_swr is rbt_flat_swr");
_Static_assert(sizeof(struct rbt_raw_swr_ext) == sizeof(struct rbt_flat_swr_ext) &&
		       RBT_SAMEF(struct rbt_raw_swr_ext, struct rbt_flat_swr_ext, swap) &&
		       RBT_SAMEF(struct rbt_raw_swr_ext, struct rbt_flat_swr_ext, ah) &&
		       RBT_SAMEF(struct rbt_raw_swr_ext, struct rbt_flat_swr_ext,
				 remote_qpn) &&
		       RBT_SAMEF(struct rbt_raw_swr_ext, struct rbt_flat_swr_ext,
				 remote_qkey),
	       "rbt_raw_swr_ext is rbt_flat_swr_ext");
_Static_assert(sizeof(struct rbt_raw_rwr) == sizeof(struct rbt_flat_rwr) &&
		       RBT_SAMEF(struct rbt_raw_rwr, struct rbt_flat_rwr, nsge) &&
		       sizeof(struct rbt_raw_sge) == sizeof(struct rbt_flat_sge) &&
		       RBT_SAMEF(struct rbt_raw_sge, struct rbt_flat_sge, length) &&
		       RBT_SAMEF(struct rbt_raw_sge, struct rbt_flat_sge, lkey),
	       "rbt_raw_rwr and rbt_raw_sge are their flat twins");
_Static_assert(sizeof(struct ibv_wc) == sizeof(struct rbt_flat_wc) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, status) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, opcode) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, vendor_err) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, byte_len) &&
		       offsetof(struct ibv_wc, imm_data) ==
			       offsetof(struct rbt_flat_wc, imm) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, qp_num) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, src_qp) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, wc_flags) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, pkey_index) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, slid) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, sl) &&
		       RBT_SAMEF(struct ibv_wc, struct rbt_flat_wc, dlid_path_bits) &&
		       sizeof(struct rbt_raw_wcx) == sizeof(struct rbt_flat_wcx) &&
		       RBT_FLAT_WC_WITH_INV == IBV_WC_WITH_INV &&
		       RBT_FLAT_WCX == RBT_POLL_WCX && RBT_FLAT_DENSE == RBT_RAW_DENSE,
	       "ibv_wc is rbt_flat_wc");

/* Posts and polls straight from the ring into the chunk; in flight mode (which
 * follows every event) through rbt_decode_post/poll. */
static int rbt_append_flat(const struct rbt_raw_hdr *h)
{
	enum rbt_flat_kind k;

	switch (h->kind) {
	case RBT_RAW_POST_SEND:
		k = RBT_FLAT_POST_SEND;
		break;
	case RBT_RAW_POST_RECV:
		k = RBT_FLAT_POST_RECV;
		break;
	case RBT_RAW_POST_SRQ:
		k = RBT_FLAT_POST_SRQ;
		break;
	default:
		k = RBT_FLAT_POLL;
		break;
	}
	int err = rbt_writer_append_flat(rbt_writer, k, h->flags, h + 1,
					 h->len - sizeof(*h));
	if (err == -EBADMSG || err == -E2BIG)
		return 0; /* this record only (cannot happen: we wrote it) */
	if (err < 0) {
		rbt_writer_failed = 1;
		rbt_warn("cannot write trace %s: %s; the program runs on untraced",
			 rbt_path, rbt_strerror(err));
		atomic_store(&rbt_state, 2);
		return err;
	}
	rbt_events_appended++;
	return 0;
}

/* Every record but posts and polls outside flight mode (rbt_drain_ring()
 * hands those to rbt_append_flat() itself). */
static void rbt_decode(const struct rbt_raw_hdr *h, uint32_t stream)
{
	switch (h->kind) {
	case RBT_RAW_EVENT: {
		struct rbt_event ev;
		memcpy(&ev, h + 1, sizeof(ev));
		rbt_event_unpack(&ev, (const uint8_t *)h);
		rbt_append(&ev, stream);
		break;
	}
	case RBT_RAW_POST_SEND:
	case RBT_RAW_POST_RECV:
	case RBT_RAW_POST_SRQ:
		rbt_decode_post(h, stream);
		break;
	case RBT_RAW_POLL:
		rbt_decode_poll(h, stream);
		break;
	case RBT_RAW_NOTIFY: {
		const struct rbt_raw_notify *n = (const void *)h;
		struct rbt_event ev = { .type = RBT_EV_REQ_NOTIFY, .ts = n->ts };
		ev.u.req_notify.ts_exit = n->ts_exit;
		ev.u.req_notify.ret = n->ret;
		ev.u.req_notify.cq = n->cq;
		ev.u.req_notify.solicited_only = n->solicited;
		rbt_append(&ev, stream);
		break;
	}
	default:
		break;
	}
}

/* Moves what r held when called into one chunk of its stream, and returns its
 * size in bytes. It does not chase records published meanwhile: reading right
 * behind the producer would pull the lines it is writing away from its core.
 * Called with rbt_writer_lock held, on the background thread (or at exit). */
static uint64_t rbt_drain_ring(struct rbt_ring *r)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t start = tail;
	int chunk = 0;

	while (tail != head) {
		const struct rbt_raw_hdr *h = (const void *)(r->buf + (tail & r->mask));
		/* The lines ahead are on the producer's core: ask for them early. */
		__builtin_prefetch(r->buf + ((tail + 512) & r->mask));
		if (h->len < sizeof(*h) || (h->len & 7) || h->len > r->size) {
			/* Cannot happen unless memory was trampled: drop the rest. */
			rbt_log("ring of thread %u damaged; dropping %llu bytes", r->tid,
				(unsigned long long)(head - tail));
			tail = head;
			break;
		}
		if (h->kind != RBT_RAW_PAD && rbt_writer && !rbt_writer_failed) {
			if (!chunk) {
				if (rbt_writer_begin_chunk(rbt_writer, r->tid) == 0)
					chunk = 1;
			}
			if (!rbt_flight_on && h->kind >= RBT_RAW_POST_SEND &&
			    h->kind <= RBT_RAW_POLL)
				rbt_append_flat(h);
			else
				rbt_decode(h, r->tid);
		}
		tail += h->len;
		atomic_store_explicit(&r->tail, tail, memory_order_release);
	}
	atomic_store_explicit(&r->tail, tail, memory_order_release);
	if (chunk && rbt_writer && !rbt_writer_failed) {
		int err = rbt_writer_end_chunk(rbt_writer);
		if (err < 0) {
			rbt_writer_failed = 1;
			rbt_warn(
				"cannot write trace %s: %s; the program runs on untraced",
				rbt_path, rbt_strerror(err));
			atomic_store(&rbt_state, 2);
		}
	}
	return tail - start;
}

static void rbt_clock_sample_into(uint32_t stream)
{
	struct rbt_event ev = { .type = RBT_EV_CLOCK_SAMPLE };
	struct rbt_clock_pair p;

	rbt_clock_pair(&p);
	ev.ts = p.ticks;
	ev.u.clock_sample.mono_ns = p.mono_ns;
	ev.u.clock_sample.real_ns = p.real_ns;
	rbt_append(&ev, stream);
}

/* NIC clock samples of the contexts with timestamped CQs that are due (all: of
 * every one, at the end). Returns when the next is due (UINT64_MAX: none). With
 * rbt_writer_lock held. */
static uint64_t rbt_nic_sample_pass(uint32_t stream, int all)
{
	struct rbt_nic_sample s[16];
	struct rbt_event ev;
	uint64_t next;
	int n = rbt_dp_nic_samples(s, 16, rbt_tsc_hz / 1000 + 1, all, &next);

	if (!n || !rbt_writer || rbt_writer_failed)
		return next;
	if (rbt_writer_begin_chunk(rbt_writer, stream) < 0)
		return next;
	for (int i = 0; i < n; i++) {
		rbt_dp_nic_event(&s[i], &ev);
		rbt_append(&ev, stream);
	}
	rbt_writer_end_chunk(rbt_writer);
	return next;
}

/* What a light trace cannot say, in the trace itself (rbtrace dump/info). */
static void rbt_light_note(uint32_t stream)
{
	struct rbt_event ev = { .type = RBT_EV_NOTE, .ts = rbt_now() };

	if (!rbt_writer || rbt_writer_failed ||
	    rbt_writer_begin_chunk(rbt_writer, stream) < 0)
		return;
	ev.u.note.text = RBT_LIGHT_NOTE;
	rbt_append(&ev, stream);
	rbt_writer_end_chunk(rbt_writer);
}

static void rbt_clock_sample(uint32_t stream)
{
	if (!rbt_writer || rbt_writer_failed)
		return;
	if (rbt_writer_begin_chunk(rbt_writer, stream) < 0)
		return;
	rbt_clock_sample_into(stream);
	rbt_writer_end_chunk(rbt_writer);
}

/* Losses a producer counted but could not yet write (its ring stayed full, or the
 * thread ended first): written by the background thread. Only for rings whose
 * producer is gone or stopped. */
static void rbt_write_pending_loss(struct rbt_ring *r)
{
	if (!r->lost_events || !rbt_writer || rbt_writer_failed)
		return;
	struct rbt_event ev = { .type = RBT_EV_LOSS, .ts = r->lost_last };
	ev.u.loss.lost_stream = r->tid;
	ev.u.loss.events = r->lost_events;
	ev.u.loss.bytes = r->lost_bytes;
	ev.u.loss.first_ts = r->lost_first;
	ev.u.loss.last_ts = r->lost_last;
	if (rbt_writer_begin_chunk(rbt_writer, r->tid) == 0) {
		rbt_append(&ev, r->tid);
		rbt_writer_end_chunk(rbt_writer);
	}
	r->lost_events = 0;
	r->lost_bytes = 0;
}

/* One pass over all rings. all: drain every ring with data (flush time); else only
 * those at least a quarter full or whose thread is gone. */
static uint64_t rbt_drain_pass(int all, uint64_t *drained)
{
	struct rbt_ring *r, **pp;
	uint64_t seen = 0;

	*drained = 0;

	pthread_mutex_lock(&rbt_writer_lock);
	pthread_mutex_lock(&rbt_reg_lock);
	r = rbt_rings;
	pthread_mutex_unlock(&rbt_reg_lock);
	/* New rings are pushed at the list head, so walking from a snapshot of the
	 * head is safe without the lock; only this thread unlinks and frees. */
	for (; r; r = r->next) {
		uint64_t used = atomic_load_explicit(&r->head, memory_order_acquire) -
				atomic_load_explicit(&r->tail, memory_order_relaxed);
		seen += used;
		if (used && (all || used >= r->size / 4 || atomic_load(&r->dead)))
			*drained += rbt_drain_ring(r);
	}
	pthread_mutex_lock(&rbt_reg_lock);
	for (pp = &rbt_rings; (r = *pp);) {
		/* A ring whose thread exited after the seal may still hold folded
		 * polls: the end writes them (rbt_seal_rings). */
		if (atomic_load(&r->dead) &&
		    atomic_load(&r->head) == atomic_load(&r->tail) && !r->nfold) {
			rbt_write_pending_loss(r);
			*pp = r->next;
			free(r->buf);
			free(r);
		} else {
			pp = &r->next;
		}
	}
	pthread_mutex_unlock(&rbt_reg_lock);
	pthread_mutex_unlock(&rbt_writer_lock);
	return seen;
}

static void rbt_read_cmdline(char *buf, size_t len)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n = 0;

	buf[0] = 0;
	if (fd < 0)
		return;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0) {
		buf[0] = 0;
		return;
	}
	while (n > 0 && buf[n - 1] == 0)
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	buf[n] = 0;
}

static int rbt_open_writer(void)
{
	struct rbt_header hdr = { 0 };
	char host[256] = "", cmd[4096];
	int err;

	gethostname(host, sizeof(host) - 1);
	rbt_read_cmdline(cmd, sizeof(cmd));
	hdr.pid = getpid();
	hdr.ppid = getppid();
	hdr.clock_source = RBT_CLOCK_TSC;
	hdr.clock_hz = rbt_tsc_hz;
	hdr.start = rbt_start_pair;
	hdr.host = host;
	hdr.cmdline = cmd;
	hdr.tool = RBT_TOOL_NAME;
	/* The timestamp column (FORMAT.md): with the ts deltas and exits apart,
	 * the rest of each post or poll mostly repeats the one before, and zstd
	 * then spends less time and fewer bytes on it; with the column, level 1
	 * is both faster than level 3 and smaller than the plain layout at 3
	 * (docs/recording.md, "Cost"). Flight mode and rotation keep the plain
	 * layout at level 3. */
	rbt_flight_on = rbt_flight_mode();
	if (rbt_flight_on)
		rbt_writer = rbt_flight_open(&hdr, rbt_trace_fd, &err);
	else
		err = rbt_writer_open_fd(
			rbt_trace_fd, &hdr,
			&(struct rbt_writer_opts){ .ts_column = 1, .zstd_level = 1 },
			&rbt_writer);
	rbt_trace_fd = -1; /* the writer owns it now, even on failure */
	if (err < 0) {
		rbt_writer = NULL;
		rbt_writer_failed = 1;
		rbt_warn("cannot write trace %s: %s; the program runs on untraced",
			 rbt_path, rbt_strerror(err));
		atomic_store(&rbt_state, 2);
		return err;
	}
	return 0;
}

static void rbt_close_writer(void)
{
	struct rbt_trailer tr = { 0 };

	if (!rbt_writer)
		return;
	rbt_clock_pair(&tr.end);
	tr.events = rbt_events_appended;
	tr.lost_events = rbt_lost_total;
	tr.end_how = rbt_end_how;
	tr.end_signal = (uint32_t)rbt_end_signal;
	tr.exit_code = rbt_end_how == RBT_END_EXIT ? rbt_exit_code : 0;
	int err = 0;
	if (rbt_flight_on)
		rbt_flight_close(&tr);
	else
		err = rbt_writer_close(rbt_writer, &tr);
	if (err < 0 && !rbt_writer_failed)
		rbt_warn("cannot finish trace %s: %s", rbt_path, rbt_strerror(err));
	rbt_writer = NULL;
	rbt_log("trace %s: %llu events, %llu lost", rbt_path,
		(unsigned long long)rbt_events_appended,
		(unsigned long long)rbt_lost_total);
}

/* A LOSS event for n records of stream that never reached a ring. */
static void rbt_write_lost_calls(uint32_t stream, uint64_t n, uint32_t me)
{
	struct rbt_event ev = { .type = RBT_EV_LOSS, .ts = rbt_now() };

	if (!n || !rbt_writer || rbt_writer_failed)
		return;
	ev.u.loss.lost_stream = stream;
	ev.u.loss.events = n;
	ev.u.loss.first_ts = ev.u.loss.last_ts = ev.ts;
	if (rbt_writer_begin_chunk(rbt_writer, me) == 0) {
		rbt_append(&ev, me);
		rbt_writer_end_chunk(rbt_writer);
	}
}

/* Losses still pending in producers when recording ends are written by the
 * background thread (the producers are parked, gone, or outside any verb), and
 * so are the calls that were under way and never committed their record. */
static void rbt_final_losses(uint32_t me)
{
	for (struct rbt_ring *r = rbt_rings; r; r = r->next) {
		rbt_write_pending_loss(r);
		rbt_write_lost_calls(r->tid, r->lost_calls, me);
		r->lost_calls = 0;
	}
	rbt_write_lost_calls(0, atomic_exchange(&rbt_late_lost, 0), me);
}

/* ---- the end: seal, wait for the calls under way, their last records -------------
 * Ordering (FORMAT: "no post or poll that executed is missing"): the seal is
 * stored, then every thread of the process is made to pass a full barrier
 * (membarrier), then each ring's busy flag is read. A data-path call stores busy
 * before it reads the state: either it saw the seal (and parks before calling the
 * provider) or its busy store is visible here and it is waited for. */
static int rbt_membarrier_ok;

void rbt_barrier_init(void)
{
	rbt_membarrier_ok = syscall(SYS_membarrier,
				    MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

static void rbt_barrier_all(void)
{
	if (rbt_membarrier_ok &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return;
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
		return;
	/* No membarrier (an old kernel, a seccomp filter): a thread that read the
	 * state before the seal is almost surely seen busy after a scheduling
	 * quantum. */
	struct timespec d = { 0, 20000000 };
	nanosleep(&d, NULL);
}

#define RBT_SEAL_WAIT_MS 1000

static int rbt_ring_busy(struct rbt_ring *r)
{
	return atomic_load_explicit(&r->busy, memory_order_acquire) &&
	       !atomic_load(&r->dead);
}

static void rbt_seal_rings(void)
{
	struct rbt_ring *fin = rbt_finisher_ring, *r;
	uint64_t drained, t0 = rbt_now();
	uint64_t hz = __atomic_load_n(&rbt_tsc_hz, __ATOMIC_RELAXED); /* any thread */
	uint64_t limit = (hz ? hz : 3000000000ull) / 1000 * RBT_SEAL_WAIT_MS;
	int busy;

	atomic_store(&rbt_state, RBT_STATE_SEALED);
	rbt_barrier_all();
	do {
		/* Drain as we wait: a waited-for thread may need ring space. */
		rbt_drain_pass(1, &drained);
		busy = 0;
		pthread_mutex_lock(&rbt_reg_lock);
		for (r = rbt_rings; r; r = r->next)
			busy += r != fin && rbt_ring_busy(r);
		pthread_mutex_unlock(&rbt_reg_lock);
		if (busy) {
			struct timespec d = { 0, 50000 };
			nanosleep(&d, NULL);
		}
	} while (busy && rbt_now() - t0 < limit);
	rbt_drain_pass(1, &drained);
	/* Every thread is parked, outside the verbs, or (counted) still inside one
	 * past the limit or interrupted by the signal being handled: the quiet
	 * rings' folded polls are written by this thread now. */
	pthread_mutex_lock(&rbt_reg_lock);
	for (r = rbt_rings; r; r = r->next) {
		if (rbt_ring_busy(r)) {
			r->lost_calls++;
			continue;
		}
		if (r->nfold)
			rbt_fold_flush(r);
	}
	pthread_mutex_unlock(&rbt_reg_lock);
	rbt_drain_pass(1, &drained);
}

void *rbt_drainer_main(void *arg)
{
	uint32_t me = rbt_gettid();
	uint64_t next_flush, next_sample, next_nic = 0;
	unsigned tick = rbt_cfg.flush_ms < 20 ? rbt_cfg.flush_ms : 5;
	int kill_sig = 0;
	sigset_t all;

	(void)arg;
	rbt_tls_inside = 2; /* nothing this thread does is traced */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_NAME, "rbtrace-writer", 0, 0, 0);
	if (rbt_cfg.writer_cpu >= 0) {
		/* RBTRACE_WRITER_CPU: keep compression off the program's cores. */
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(rbt_cfg.writer_cpu, &set);
		int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
		if (e)
			rbt_warn("%s=%d: %s; the writer thread runs unpinned",
				 RBT_ENV_WRITER_CPU, rbt_cfg.writer_cpu, strerror(e));
		else
			rbt_log("writer thread on CPU %d", rbt_cfg.writer_cpu);
	}
	atomic_store(&rbt_drainer_tid, me);
	if (!rbt_tsc_hz) {
		/* the traced threads read both (atomically) while we set them */
		uint64_t hz = rbt_calibrate(&rbt_start_pair, 20);
		if (!hz)
			hz = 1000000000ull;
		__atomic_store_n(&rbt_tsc_hz, hz, __ATOMIC_RELAXED);
		__atomic_store_n(&rbt_cfg.flush_ticks, hz / 1000 * rbt_cfg.flush_ms,
				 __ATOMIC_RELAXED);
	}
	pthread_mutex_lock(&rbt_writer_lock);
	rbt_open_writer();
	rbt_clock_sample(me);
	if (rbt_cfg.light)
		rbt_light_note(me);
	pthread_mutex_unlock(&rbt_writer_lock);
	next_flush = rbt_now() + rbt_cfg.flush_ticks;
	next_sample = rbt_now() + rbt_tsc_hz;
	int wait_ms = tick;
	while (!atomic_load(&rbt_stop_req)) {
		struct pollfd pfd = { .fd = rbt_wake_pipe[0], .events = POLLIN };
		char junk[64];
		if (poll(&pfd, 1, wait_ms) > 0) {
			ssize_t n = read(rbt_wake_pipe[0], junk, sizeof(junk));
			(void)n;
		}
		uint64_t now = rbt_now();
		if (atomic_load(&rbt_deferred_sig) &&
		    (kill_sig = rbt_deferred_overdue(now)))
			break;
		int all = now >= next_flush;
		uint64_t drained;
		uint64_t seen = rbt_drain_pass(all, &drained);
		if (all)
			next_flush = now + rbt_cfg.flush_ticks;
		if (rbt_flight_on) {
			pthread_mutex_lock(&rbt_writer_lock);
			rbt_flight_tick(now);
			pthread_mutex_unlock(&rbt_writer_lock);
		}
		if (now >= next_sample) {
			pthread_mutex_lock(&rbt_writer_lock);
			rbt_clock_sample(me);
			pthread_mutex_unlock(&rbt_writer_lock);
			next_sample = now + rbt_tsc_hz;
		}
		/* NIC clock samples feed the analyzer's clock model. Checked every
		 * wake-up: a context that just got a timestamped CQ wakes us. */
		if (now >= next_nic || atomic_exchange(&rbt_nic_started, 0)) {
			pthread_mutex_lock(&rbt_writer_lock);
			next_nic = rbt_nic_sample_pass(me, 0);
			pthread_mutex_unlock(&rbt_writer_lock);
		}
		/* Drained a ring that was a quarter full: data comes at least that
		 * fast, look again at once. Busy: look again soon, before a ring
		 * fills (sooner when it fills fast). Idle: sleep until the next flush or sample (a producer with
		 * a full ring wakes us early). */
		if (drained) {
			wait_ms = 0;
		} else if (seen >= (64 << 10)) {
			wait_ms = 1;
		} else if (seen) {
			wait_ms = tick;
		} else {
			uint64_t next =
				next_flush < next_sample ? next_flush : next_sample;
			if (next_nic < next)
				next = next_nic;
			uint64_t t = rbt_now();
			uint64_t ms =
				next > t ? (next - t) / (rbt_tsc_hz / 1000 + 1) + 1 : 1;
			wait_ms = ms > 1000 ? 1000 : (int)ms;
		}
		if (rbt_flight_on) {
			int f = rbt_flight_wait_ms(rbt_now());
			if (f < wait_ms)
				wait_ms = f;
		}
		if (atomic_load(&rbt_deferred_sig) && wait_ms > 20)
			wait_ms = 20;
	}
	rbt_seal_rings();
	pthread_mutex_lock(&rbt_writer_lock);
	rbt_final_losses(me);
	rbt_nic_sample_pass(me, 1);
	rbt_clock_sample(me);
	rbt_close_writer();
	pthread_mutex_unlock(&rbt_writer_lock);
	if (rbt_cfg.debug) {
		/* What the recording cost this thread, for tuning (bench/). */
		struct timespec cpu;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
		double ns = (double)cpu.tv_sec * 1e9 + (double)cpu.tv_nsec;
		rbt_log("writer thread: %.1f ms CPU for %llu events, %.0f ns/event, "
			"last on CPU %d",
			ns / 1e6, (unsigned long long)rbt_events_appended,
			rbt_events_appended ? ns / (double)rbt_events_appended : 0.0,
			sched_getcpu());
	}
	atomic_store(&rbt_closed, 1);
	if (kill_sig)
		rbt_deliver_signal(kill_sig);
	return NULL;
}
