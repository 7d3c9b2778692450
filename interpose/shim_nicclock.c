/* shim_nicclock.c - NIC clock samples of contexts whose CQs carry completion
 * timestamps: one when such a CQ is made, then periodic ones from the writer
 * thread, and a last one before ibv_close_device frees the context.
 *
 * A clock read never overlaps the provider freeing the context (rbt_sample_lock)
 * and nothing is emitted while that lock is held.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "interpose/shim.h"
#include "interpose/shim_dp.h"

/* ---- NIC clock samples ------------------------------------------------------------
 * A context whose CQs carry completion timestamps (asked by the program or added by
 * RBTRACE_NIC_TS) gets (host ticks, NIC clock) samples: one when each such CQ is
 * created, then from the writer thread every RBT_NIC_DENSE_MS for its first
 * RBT_NIC_DENSE_FOR_MS (short programs still get several points for the fit),
 * every RBT_NIC_EVERY_MS after, and a last one at ibv_close_device or exit. */
#define RBT_NIC_DENSE_MS     10
#define RBT_NIC_DENSE_FOR_MS 100
#define RBT_NIC_EVERY_MS     100

static uint64_t rbt_clock_ns_of(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads the NIC clock through the provider's own op (not our wrapper, which would
 * record it again), between two TSC reads; 0, or -1 when the read failed or the
 * device does not give its raw clock. Leaves errno alone. */
static int rbt_nic_read(struct rbt_ctx_ent *c, struct rbt_nic_sample *s)
{
	uint64_t best = UINT64_MAX;
	int saved = errno;

	/* Three reads, keeping the one with the narrowest TSC window: a read the
	 * scheduler interrupted would put the midpoint microseconds off. */
	for (int i = 0; i < 3; i++) {
		struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
		uint64_t t0 = rbt_now();
		int ret = c->query_rt_values(c->ctx, &v);
		uint64_t t1 = rbt_now();
		if (ret || !(v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK))
			break;
		if (t1 - t0 < best) {
			best = t1 - t0;
			s->ts = t0 + (t1 - t0) / 2;
			s->nic_ts = (uint64_t)v.raw_clock.tv_sec * 1000000000ull +
				    (uint64_t)v.raw_clock.tv_nsec;
		}
	}
	errno = saved;
	if (best == UINT64_MAX)
		return -1;
	s->ctx = c->ctx;
	s->mono_ns = rbt_clock_ns_of(CLOCK_MONOTONIC);
	s->real_ns = rbt_clock_ns_of(CLOCK_REALTIME);
	errno = saved;
	s->nic_hz = c->nic_hz;
	return 0;
}

void rbt_dp_nic_event(const struct rbt_nic_sample *s, struct rbt_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = RBT_EV_CLOCK_SAMPLE;
	ev->ts = s->ts;
	ev->u.clock_sample.ctx = (uintptr_t)s->ctx;
	ev->u.clock_sample.mono_ns = s->mono_ns;
	ev->u.clock_sample.real_ns = s->real_ns;
	ev->u.clock_sample.nic_ts = s->nic_ts;
	ev->u.clock_sample.nic_hz = s->nic_hz;
}

/* A CQ with completion timestamps now exists on ctx: a sample right away, and the
 * writer samples the context from now on. Emitted into the calling thread's ring
 * after the lock is dropped. */
void rbt_dp_nic_cq_created(struct ibv_context *ctx)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);
	struct rbt_nic_sample s;
	int tried = 0, got = 0, started = 0;

	if (!c)
		return;
	pthread_mutex_lock(&rbt_sample_lock);
	if (c->ctx == ctx && c->query_rt_values && c->sampling != RBT_SAMPLING_CLOSING) {
		tried = 1;
		got = rbt_nic_read(c, &s) == 0;
		/* A device without a readable clock is not sampled again. */
		if (got && c->sampling == RBT_SAMPLING_OFF) {
			c->sampling = RBT_SAMPLING_ON;
			c->sample_since = c->sample_last = s.ts;
			started = 1;
		}
	}
	pthread_mutex_unlock(&rbt_sample_lock);
	if (got) {
		struct rbt_event ev;
		rbt_dp_nic_event(&s, &ev);
		rbt_emit(&ev);
	} else if (tried || !c->query_rt_values) {
		rbt_note(0, "completion timestamps without a readable NIC clock "
			    "(query_rt_values): no NIC clock samples");
	}
	if (started)
		rbt_wake_writer(); /* its dense first samples are due soon */
}

int rbt_dp_nic_samples(struct rbt_nic_sample *out, int max, uint64_t ms_ticks, int all,
		       uint64_t *next_due)
{
	int k = 0;

	*next_due = UINT64_MAX;
	pthread_mutex_lock(&rbt_sample_lock);
	int n = atomic_load(&rbt_nctx);
	for (int i = 0; i < n; i++) {
		struct rbt_ctx_ent *c = &rbt_ctxs[i];
		if (c->sampling != RBT_SAMPLING_ON)
			continue;
		uint64_t now = rbt_now();
		uint64_t dense = c->sample_since + RBT_NIC_DENSE_FOR_MS * ms_ticks;
		uint64_t ival =
			(now < dense ? RBT_NIC_DENSE_MS : RBT_NIC_EVERY_MS) * ms_ticks;
		/* Beyond max per pass the rest stay due and go in the next pass. */
		if ((all || now >= c->sample_last + ival) && k < max) {
			if (rbt_nic_read(c, &out[k]) == 0)
				k++;
			c->sample_last = now;
		}
		uint64_t due = c->sample_last + ival;
		if (due < *next_due)
			*next_due = due;
	}
	pthread_mutex_unlock(&rbt_sample_lock);
	return k;
}

int rbt_dp_close_begin(struct ibv_context *ctx, struct rbt_nic_sample *last)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);
	int got = 0;

	if (!c)
		return 0;
	pthread_mutex_lock(&rbt_sample_lock);
	if (c->ctx == ctx && c->sampling == RBT_SAMPLING_ON) {
		got = rbt_nic_read(c, last) == 0;
		c->sampling = RBT_SAMPLING_CLOSING;
	}
	pthread_mutex_unlock(&rbt_sample_lock);
	return got;
}

void rbt_dp_fork_child(void)
{
	/* Another thread of the parent may have held it at fork. */
	pthread_mutex_init(&rbt_sample_lock, NULL);
}

void rbt_dp_close_end(struct ibv_context *ctx, int ret)
{
	struct rbt_ctx_ent *c = rbt_ctx_find(ctx);

	if (!c)
		return;
	pthread_mutex_lock(&rbt_sample_lock);
	if (c->ctx == ctx && c->sampling == RBT_SAMPLING_CLOSING)
		c->sampling = ret ? RBT_SAMPLING_ON : RBT_SAMPLING_OFF;
	pthread_mutex_unlock(&rbt_sample_lock);
}
