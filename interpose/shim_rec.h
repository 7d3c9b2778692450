/* shim_rec.h - what the recorder's own files share (shim_env.c, shim_ring.c,
 * shim_stack.c, shim_drain.c, shim_life.c): the recorder's state, its locks, and
 * the calls between ring, writer thread and life-cycle. The wrappers never need
 * this header; they use shim.h.
 *
 * Lock order: rbt_start_lock, then rbt_writer_lock, then rbt_reg_lock.
 */
#ifndef RBT_SHIM_REC_H
#define RBT_SHIM_REC_H

#include <limits.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "interpose/shim.h"

/* Declarations here are of hidden definitions: reached directly, never through
 * the GOT (the same code as when they were one file's statics). */
#pragma GCC visibility push(hidden)

/* ---- shim_env.c: settings and clock ---------------------------------------------- */
void rbt_config_load(void);
void rbt_clock_pair(struct rbt_clock_pair *p);
/* TSC rate measured against CLOCK_MONOTONIC over ms (sleeps: writer thread only). */
uint64_t rbt_calibrate(const struct rbt_clock_pair *from, unsigned ms);
extern uint64_t rbt_tsc_hz;		     /* 0 until the writer calibrated */
extern struct rbt_clock_pair rbt_start_pair; /* when recording (re)started */

/* ---- shim_ring.c: the rings ------------------------------------------------------ */
extern pthread_mutex_t rbt_reg_lock; /* the ring list */
extern struct rbt_ring *rbt_rings;   /* pushed at the head; only the writer unlinks */
extern pthread_key_t rbt_ring_key;   /* its destructor marks a thread's ring dead */
extern int rbt_wake_pipe[2];
extern _Atomic int rbt_nic_started; /* a context started NIC sampling: sample now */
void rbt_ring_thread_exit(void *arg);
/* Slow-path events that found the trace sealed (written into the trailer). */
extern _Atomic uint64_t rbt_late_lost;
/* Set in the thread that finishes the trace: it never parks. */
extern RBT_TLS int rbt_tls_finishing;
void rbt_emit_thread(struct rbt_ring *r);
void rbt_wake_drainer(void);
/* A slow-path event copied by rbt_emit, its pointers made pointers again. */
void rbt_event_unpack(struct rbt_event *ev, const uint8_t *base);

/* ---- shim_stack.c ---------------------------------------------------------------- */
extern unsigned long long rbt_modules_adds; /* dl_iterate_phdr's count last seen */
extern pthread_mutex_t rbt_modules_lock;

/* ---- shim_drain.c: the writer thread ---------------------------------------------- */
extern pthread_mutex_t rbt_writer_lock; /* drain passes and the writer */
extern pthread_t rbt_drainer;
extern int rbt_drainer_running;
extern _Atomic int rbt_stop_req; /* finish: final drain, trailer, exit */
extern _Atomic int rbt_closed;	 /* the trailer is written */
extern _Atomic int rbt_drainer_tid;
extern int rbt_trace_fd; /* the open trace until the writer takes it */
extern struct rbt_writer *rbt_writer;
extern int rbt_writer_failed;
extern uint64_t rbt_lost_total;
extern uint64_t rbt_events_appended;
void *rbt_drainer_main(void *arg);
/* membarrier registration, once per process (and again in a fork child). */
void rbt_barrier_init(void);

/* ---- shim_life.c ------------------------------------------------------------------ */
extern pid_t rbt_owner_pid; /* the process whose trace this is (not a fork child) */
extern char rbt_path[PATH_MAX];
extern int rbt_fork_gen;
/* How the recording ends, for the trailer (set by the thread that finishes). */
extern uint32_t rbt_end_how;
extern int rbt_end_signal;
extern int rbt_exit_code;
/* The ring of a thread that finishes from a signal handler while inside a call:
 * that call cannot complete before the trailer (counted as lost). */
extern struct rbt_ring *_Atomic rbt_finisher_ring;
/* A signal held back (rbt_dp_done raises it); writer thread's safety net: the
 * signal number when it is overdue (the trace is then this thread's to end),
 * and its delivery after the trailer. */
extern _Atomic int rbt_deferred_sig;
int rbt_deferred_overdue(uint64_t now);
void rbt_deliver_signal(int sig);

/* Adds a file the recorder wrote to RBTRACE_MANIFEST (snapshots, series). */
void rbt_manifest_add(const char *path);

/* ---- shim_flight.c: flight recorder and rotation (writer thread) ------------------ */
/* Their settings (shim_env.c): rbt_fcfg from the environment. */
void rbt_flight_config(void);
int rbt_flight_mode(void); /* 0 off, 1 flight, 2 rotation */
struct rbt_writer *rbt_flight_open(const struct rbt_header *hdr, int fd, int *err);
void rbt_flight_note(const struct rbt_event *ev);
void rbt_flight_tick(uint64_t now);
int rbt_flight_wait_ms(uint64_t now);
void rbt_flight_close(const struct rbt_trailer *tr);
void rbt_flight_install_signal(void);

static inline pid_t rbt_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

#pragma GCC visibility pop

#endif
