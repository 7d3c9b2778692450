/* replay_clock.c - the replayer's clock and what ends its waits: the TSC when
 * there is one, calibrated against CLOCK_MONOTONIC (same-host traces line up);
 * SIGINT/SIGTERM and --max-time; the bound of every wait once a side has
 * diverged (RBT_REPLAY_DIVERGED_WAIT_MS in all); sleeping until a deadline.
 *
 * Must never block without a bound: a sleep notices a stop within 10 ms.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "replay/replay_int.h"

/* ---- clock: TSC when it is there, calibrated against CLOCK_MONOTONIC ---------- */
static double rp_ns_per_tick;
static uint64_t rp_tsc0, rp_mono0;

static uint64_t rp_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rp_clock_init(void)
{
#if defined(__x86_64__)
	uint64_t m0, m1, t0, t1;

	if (rp_ns_per_tick > 0)
		return;
	m0 = rp_mono_ns();
	t0 = __rdtsc();
	do {
		m1 = rp_mono_ns();
	} while (m1 - m0 < 20000000ull);
	t1 = __rdtsc();
	rp_tsc0 = t0;
	rp_mono0 = m0;
	rp_ns_per_tick = t1 > t0 ? (double)(m1 - m0) / (double)(t1 - t0) : 0;
#endif
}

/* Monotonic ns, on the CLOCK_MONOTONIC scale (so same-host traces line up). */
uint64_t rp_now_ns(void)
{
#if defined(__x86_64__)
	if (rp_ns_per_tick > 0)
		return rp_mono0 +
		       (uint64_t)((double)(__rdtsc() - rp_tsc0) * rp_ns_per_tick);
#endif
	return rp_mono_ns();
}

/* ---- stopping: signals, --max-time, the wait budget after a divergence ---- */
/* lock-free, so the handler may store it; the lanes read it unlocked */
static _Atomic int rp_sig;
static struct sigaction rp_old_int, rp_old_term;
static int rp_caught_int, rp_caught_term;

static void rp_on_signal(int sig)
{
	rp_sig = sig;
}

/* A signal the caller ignores stays ignored (nohup, a shell's background job).
 * SA_RESETHAND: a second Ctrl-C ends the process at once. */
void rp_signals_catch(int on)
{
	struct sigaction sa;

	if (!on) {
		if (rp_caught_int)
			sigaction(SIGINT, &rp_old_int, NULL);
		if (rp_caught_term)
			sigaction(SIGTERM, &rp_old_term, NULL);
		rp_caught_int = rp_caught_term = 0;
		return;
	}
	rp_sig = 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = rp_on_signal;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	if (!sigaction(SIGINT, NULL, &rp_old_int) && rp_old_int.sa_handler != SIG_IGN)
		rp_caught_int = !sigaction(SIGINT, &sa, NULL);
	if (!sigaction(SIGTERM, NULL, &rp_old_term) && rp_old_term.sa_handler != SIG_IGN)
		rp_caught_term = !sigaction(SIGTERM, &sa, NULL);
}

int rp_signal_caught(void)
{
	return rp_sig;
}

/* Whether the lane must stop now (a signal, --max-time); says why in it. */
int rp_must_stop(struct rp_job *j, struct rp_lane *s)
{
	if (rp_sig)
		s->stop_why = RBT_REPLAY_STOP_SIGNAL;
	else if (j->end_ns && rp_now_ns() >= j->end_ns)
		s->stop_why = RBT_REPLAY_STOP_MAX_TIME;
	return s->stop_why != 0;
}

/* How long a wait may take: normal_ns until something in this process has
 * diverged; after that at most what is left of the side's budget for waits
 * that find nothing. 0: the budget is spent, the side stops. */
uint64_t rp_wait_limit(struct rp_job *j, struct rp_lane *s, uint64_t normal_ns)
{
	uint64_t budget = (uint64_t)RBT_REPLAY_DIVERGED_WAIT_MS * 1000000ull;

	if (!j->diverged)
		return normal_ns;
	if (s->wasted_ns >= budget) {
		s->stop_why = RBT_REPLAY_STOP_DIVERGED;
		return 0;
	}
	return budget - s->wasted_ns < normal_ns ? budget - s->wasted_ns : normal_ns;
}

/* A wait from t_start that ended without what it waited for. */
void rp_wasted(struct rp_job *j, struct rp_lane *s, uint64_t t_start)
{
	if (j->diverged)
		s->wasted_ns += rp_now_ns() - t_start;
}

/* 1 when the side must stop instead. Sleeps at most 10 ms at a time. */
int rp_wait_until(struct rp_job *j, struct rp_lane *s, uint64_t deadline)
{
	for (unsigned spins = 0;; spins++) {
		uint64_t now = rp_now_ns();

		if (now >= deadline)
			return 0;
		/* Sleep when far, spin the last stretch: a sleep wakes up late. */
		if (deadline - now > 300000) {
			uint64_t d = deadline - now - 200000;
			struct timespec ts = { 0, (long)(d < 10000000 ? d : 10000000) };

			if (rp_must_stop(j, s))
				return 1;
			nanosleep(&ts, NULL);
		} else {
			if ((spins & 255) == 0 && rp_must_stop(j, s))
				return 1;
			/* Several recorded threads: the one whose step this
			 * lane's next one follows may be waiting for this CPU
			 * (8 threads on 2 CPUs: posts late by milliseconds at
			 * p50 without it, microseconds with it); the last
			 * 10 us are spun, as a yield may come back late. */
			if (s && s->s->nlane > 1 && (spins & 15) == 15 &&
			    deadline - now > 10000)
				sched_yield();
#if defined(__x86_64__)
			_mm_pause();
#endif
		}
	}
}
