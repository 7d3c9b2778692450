/* shim_life.c - the recorder's life-cycle: the output file's name, the start on
 * the first verb, fork (the child writes its own trace), fatal and terminating
 * signals, exit and exec (the trace is finished first), exits from two threads
 * at once (one after the other).
 *
 * What runs in a signal handler here must stay async-signal-safe (atomics,
 * write, nanosleep); nothing here may change what the program sees of a signal
 * or of exit but the delay of finishing the trace.
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
#include <signal.h>
#include <stdarg.h>
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

#include "interpose/rbt_interpose.h"
#include "interpose/shim.h"

#include "interpose/shim_rec.h"

static pthread_mutex_t rbt_start_lock = PTHREAD_MUTEX_INITIALIZER;
pid_t rbt_owner_pid;
char rbt_path[PATH_MAX];
int rbt_fork_gen;

/* ---- the end ---------------------------------------------------------------------- */
uint32_t rbt_end_how;
int rbt_end_signal;
int rbt_exit_code;
struct rbt_ring *_Atomic rbt_finisher_ring;
static _Atomic int rbt_finishing;
static int rbt_exit_seen;
static _Atomic pid_t rbt_exit_tid; /* the thread whose exit() goes first */

/* Called by exit() with its status, before the destructors: noted here, with
 * the final state of every QP still alive (the provider is still whole: its
 * destructors have not run); the trace is finished by the destructor, after the
 * program's own atexit work. */
static void rbt_on_exit(int status, void *arg)
{
	(void)arg;
	rbt_exit_code = status;
	rbt_exit_seen = 1;
	if (rbt_owner_pid == getpid())
		rbt_final_states_at_exit();
}

/* Paths that do not fit are cut short, and then simply fail to open. */
#define RBT_PATHF(buf, ...)                                       \
	do {                                                      \
		int n_ = snprintf(buf, sizeof(buf), __VA_ARGS__); \
		if (n_ < 0 || n_ >= (int)sizeof(buf))             \
			buf[0] = 0;                               \
	} while (0)

/* ---- output file ------------------------------------------------------------------ */
static int rbt_is_dir(const char *p)
{
	struct stat st;
	size_t n = strlen(p);

	if (n && p[n - 1] == '/')
		return 1;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

#define RBT_ENV_CLAIMED "RBTRACE_OUTPUT_CLAIMED"

static int rbt_open_output(void)
{
	const char *out = rbt_cfg.output;
	int fd = -1, flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, claimed_file = 0;
	const char *prog = program_invocation_short_name;
	const char *claim = getenv(RBT_ENV_CLAIMED);

	if (!prog || !*prog)
		prog = "program";
	/* Under `rbtrace record` the name is free when the run starts ("excl"):
	 * whichever process of the run creates it first has it, also when that
	 * is not an ancestor of the others (sh -c 'a; b'). */
	if (*out && !rbt_fork_gen && claim && !strcmp(claim, "excl") &&
	    !rbt_is_dir(out)) {
		fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0) {
			RBT_PATHF(rbt_path, "%s", out);
			setenv(RBT_ENV_CLAIMED, "1", 1);
			claimed_file = 1;
		}
	}
	if (fd >= 0) {
		/* claimed above */
	} else if (!*out || rbt_is_dir(out)) {
		const char *dir = *out ? out : ".";
		size_t n = strlen(dir);
		RBT_PATHF(rbt_path, "%s%srbtrace-%s-%d.rbt", dir,
			  n && dir[n - 1] == '/' ? "" : "/", prog, (int)getpid());
	} else if (!rbt_fork_gen && !claim) {
		/* The first process of the tree takes the file name itself; forked
		 * children and exec'd programs that inherit the setting write beside
		 * it, so that no process overwrites another's trace. */
		RBT_PATHF(rbt_path, "%s", out);
		setenv(RBT_ENV_CLAIMED, "1", 1);
		claimed_file = 1;
	} else {
		size_t n = strlen(out);
		if (n > 4 && !strcmp(out + n - 4, ".rbt"))
			n -= 4;
		RBT_PATHF(rbt_path, "%.*s-%d.rbt", (int)n, out, (int)getpid());
	}
	if (fd >= 0) {
		/* created with O_EXCL above */
	} else if (!claimed_file) {
		/* Never overwrite another trace of this run: an exec'd program keeps
		 * the pid (and often the name) of the one before it. */
		size_t n = strlen(rbt_path);
		if (n > 4 && !strcmp(rbt_path + n - 4, ".rbt"))
			n -= 4;
		char base[PATH_MAX - 32];
		RBT_PATHF(base, "%.*s", (int)n, rbt_path);
		flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
		fd = open(rbt_path, flags, 0600);
		for (int i = 2; fd < 0 && errno == EEXIST && i < 1000; i++) {
			RBT_PATHF(rbt_path, "%s.%d.rbt", base, i);
			fd = open(rbt_path, flags, 0600);
		}
	} else {
		fd = open(rbt_path, flags, 0600);
	}
	if (fd < 0) {
		rbt_warn("cannot create trace %s: %s; the program runs on untraced",
			 rbt_path, strerror(errno));
		return -1;
	}
	/* An existing file keeps its mode through O_TRUNC: make it private too (but
	 * never change a device node such as /dev/null). */
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		fchmod(fd, 0600);
	rbt_manifest_add(rbt_path);
	return fd;
}

void rbt_manifest_add(const char *path)
{
	if (!rbt_cfg.manifest[0])
		return;
	int mfd = open(rbt_cfg.manifest, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (mfd >= 0) {
		char line[3 * PATH_MAX], cwd[PATH_MAX] = "";
		int l;
		if (path[0] != '/' && getcwd(cwd, sizeof(cwd)))
			l = snprintf(line, sizeof(line), "%s/%s\n", cwd, path);
		else
			l = snprintf(line, sizeof(line), "%s\n", path);
		if (l < 0 || l >= (int)sizeof(line))
			l = 0;
		ssize_t w = write(mfd, line, l);
		(void)w;
		close(mfd);
	}
}

/* ---- start, fork, signals, exit ---------------------------------------------------- */
static void rbt_fork_prepare(void);
static void rbt_fork_parent(void);
static void rbt_fork_child(void);
static void rbt_install_signals(void);

static int rbt_start_recorder(void)
{
	pthread_attr_t attr;
	int err;

	atomic_store(&rbt_stop_req, 0);
	atomic_store(&rbt_closed, 0);
	rbt_writer = NULL;
	rbt_writer_failed = 0;
	rbt_events_appended = 0;
	rbt_lost_total = 0;
	rbt_owner_pid = getpid();
	rbt_trace_fd = rbt_open_output();
	if (rbt_trace_fd < 0)
		return -1;
	rbt_barrier_init();
	atomic_store(&rbt_drainer_tid, 0); /* the new thread says it is up */
	if (pipe2(rbt_wake_pipe, O_CLOEXEC | O_NONBLOCK)) {
		rbt_wake_pipe[0] = rbt_wake_pipe[1] = -1;
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	rbt_tls_inside++;
	err = pthread_create(&rbt_drainer, &attr, rbt_drainer_main, NULL);
	rbt_tls_inside--;
	pthread_attr_destroy(&attr);
	if (err) {
		rbt_warn("cannot start the trace writer thread: %s; the program runs on "
			 "untraced",
			 strerror(err));
		close(rbt_trace_fd);
		rbt_trace_fd = -1;
		return -1;
	}
	rbt_drainer_running = 1;
	return 0;
}

int rbt_start_slow(void)
{
	int saved = errno;

	pthread_mutex_lock(&rbt_start_lock);
	if (atomic_load(&rbt_state) == 0) {
		int state = 2;
		rbt_config_load();
		const char *dis = getenv(RBT_ENV_DISABLE);
		if (!(dis && *dis && strcmp(dis, "0"))) {
			rbt_clock_pair(&rbt_start_pair);
			pthread_key_create(&rbt_ring_key, rbt_ring_thread_exit);
			if (rbt_start_recorder() == 0) {
				static int atfork_done;
				if (!atfork_done++)
					pthread_atfork(rbt_fork_prepare, rbt_fork_parent,
						       rbt_fork_child);
				rbt_install_signals();
				rbt_flight_install_signal();
				static int on_exit_done;
				if (!on_exit_done++)
					on_exit(rbt_on_exit, NULL);
				state = 1;
			}
		}
		atomic_store(&rbt_state, state);
		rbt_log("recording %s to %s", state == 1 ? "on" : "off", rbt_path);
	}
	pthread_mutex_unlock(&rbt_start_lock);
	errno = saved;
	return atomic_load(&rbt_state) == 1;
}

/* A fork must not catch the writer thread while it is still starting: its start
 * (inside the C library and, under AddressSanitizer, inside the sanitizer's
 * allocator) runs outside our locks, and an allocator lock held at fork is held
 * forever in the child, whose own writer thread then never starts. Past its start
 * the writer allocates only under rbt_writer_lock, which we take. The wait is
 * bounded: a writer that is not scheduled for seconds is not worth hanging the
 * program's fork for. */
static void rbt_fork_wait_writer_up(void)
{
	for (int i = 0; i < 2000 && rbt_drainer_running && !atomic_load(&rbt_drainer_tid);
	     i++) {
		struct timespec ms = { 0, 1000000 };
		nanosleep(&ms, NULL);
	}
}

static void rbt_fork_prepare(void)
{
	pthread_mutex_lock(&rbt_start_lock);
	rbt_fork_wait_writer_up();
	pthread_mutex_lock(&rbt_writer_lock);
	pthread_mutex_lock(&rbt_reg_lock);
}

static void rbt_fork_parent(void)
{
	pthread_mutex_unlock(&rbt_reg_lock);
	pthread_mutex_unlock(&rbt_writer_lock);
	pthread_mutex_unlock(&rbt_start_lock);
}

/* The child writes its own trace: the parent's rings (including what this thread
 * recorded before fork) stay with the parent, whose writer still owns them. */
static void rbt_fork_child(void)
{
	struct rbt_ring *r, *next, *mine = rbt_tls_ring;

	pthread_mutex_init(&rbt_reg_lock, NULL);
	pthread_mutex_init(&rbt_writer_lock, NULL);
	pthread_mutex_init(&rbt_start_lock, NULL);
	pthread_mutex_init(&rbt_modules_lock, NULL);
	rbt_modules_adds = ~0ull;
	rbt_dp_fork_child();
	rbt_live_qps_forget();
	for (r = rbt_rings; r; r = next) {
		next = r->next;
		if (r != mine) {
			free(r->buf);
			free(r);
		}
	}
	rbt_rings = NULL;
	if (mine) {
		uint64_t h = atomic_load(&mine->head);
		atomic_store(&mine->tail, h);
		mine->cached_tail = h;
		mine->lost_events = mine->lost_bytes = 0;
		mine->nfold = 0;
		mine->dropping = 0;
		mine->tid = rbt_gettid();
		mine->next = NULL;
		atomic_store(&mine->busy, 0);
		mine->lost_calls = 0;
		rbt_rings = mine;
	}
	/* The parent's writer and descriptors belong to the parent. */
	rbt_writer = NULL;
	if (rbt_wake_pipe[0] >= 0) {
		close(rbt_wake_pipe[0]);
		close(rbt_wake_pipe[1]);
		rbt_wake_pipe[0] = rbt_wake_pipe[1] = -1;
	}
	if (rbt_trace_fd >= 0) {
		close(rbt_trace_fd);
		rbt_trace_fd = -1;
	}
	rbt_drainer_running = 0;
	atomic_store(&rbt_finishing, 0);
	atomic_store(&rbt_finisher_ring, NULL);
	rbt_exit_seen = 0;
	atomic_store(&rbt_exit_tid, 0);
	if (atomic_load(&rbt_state) != 1)
		return;
	rbt_fork_gen++;
	rbt_clock_pair(&rbt_start_pair);
	if (rbt_start_recorder() != 0) {
		atomic_store(&rbt_state, 2);
		return;
	}
	if (mine)
		rbt_emit_thread(mine);
}

/* Stops recording and finishes the trace file: the writer thread seals the rings
 * (other threads park at their next verb), waits for the calls under way, writes
 * the last records and the trailer saying how the process ended. From a signal
 * handler only the async-signal-safe part runs here: ask the writer thread and
 * wait, bounded. */
static void rbt_finish(int from_signal, uint32_t how, int sig)
{
	if (rbt_owner_pid != getpid() || !rbt_drainer_running ||
	    atomic_load(&rbt_drainer_tid) == rbt_gettid())
		return;
	int st = atomic_load(&rbt_state);
	if (st != 1 && st != RBT_STATE_SEALED)
		return;
	rbt_tls_finishing = 1;
	if (atomic_exchange(&rbt_finishing, 1)) {
		/* Another thread finishes: let the trailer be written first. */
		for (int i = 0; i < 5000 && !atomic_load(&rbt_closed); i++) {
			struct timespec d = { 0, 1000000 };
			nanosleep(&d, NULL);
		}
		return;
	}
	if (atomic_load(&rbt_state) != 1)
		return;
	rbt_end_how = how;
	rbt_end_signal = sig;
	/* A signal that interrupted this thread inside a data-path call: that call
	 * never completes; the writer thread does not wait for it. */
	if (from_signal && rbt_tls_ring && atomic_load(&rbt_tls_ring->busy))
		atomic_store(&rbt_finisher_ring, rbt_tls_ring);
	atomic_store(&rbt_stop_req, 1);
	rbt_wake_drainer();
	if (from_signal) {
		for (int i = 0; i < 5000 && !atomic_load(&rbt_closed); i++) {
			struct timespec d = { 0, 1000000 };
			nanosleep(&d, NULL);
		}
	} else {
		pthread_join(rbt_drainer, NULL);
		rbt_drainer_running = 0;
	}
	/* The state stays sealed: other threads that enter a verb park until the
	 * process ends (or a failed exec releases them). */
}

static const int rbt_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV,
				   SIGBUS, SIGILL,  SIGFPE, SIGABRT };

/* SIGINT, SIGTERM, SIGHUP, SIGQUIT that arrive while their thread is inside a
 * data-path call are held back until the call is recorded (rbt_dp_done raises
 * them again), so that the call is in the trace. Should the call not return
 * (a provider stuck), the writer thread ends the trace after RBT_DEFER_MS and
 * delivers the signal itself (rbt_deferred_overdue). */
#define RBT_DEFER_MS 200
_Atomic int rbt_deferred_sig;
_Atomic uint64_t rbt_deferred_at;

static int rbt_async_signal(int sig)
{
	return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

void rbt_dp_deferred(struct rbt_ring *r)
{
	int sig = atomic_exchange(&r->deferred, 0);

	if (sig) {
		rbt_log("signal %d held back until this thread's call was recorded", sig);
		raise(sig);
	}
}

/* Writer thread: a held-back signal whose call never came back. */
int rbt_deferred_overdue(uint64_t now)
{
	int sig = atomic_load(&rbt_deferred_sig);
	uint64_t hz = rbt_tsc_hz ? rbt_tsc_hz : 3000000000ull;

	if (!sig || now - atomic_load(&rbt_deferred_at) < hz / 1000 * RBT_DEFER_MS)
		return 0;
	if (atomic_exchange(&rbt_finishing, 1))
		return 0; /* someone finishes already */
	rbt_end_how = RBT_END_SIGNAL;
	rbt_end_signal = sig;
	return sig;
}

/* Writer thread, after the trailer: the held-back signal, with its default
 * action, to the process (this thread blocks it; the one it came to does not). */
void rbt_deliver_signal(int sig)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };

	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	kill(getpid(), sig);
}

static void rbt_on_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	struct rbt_ring *r = rbt_tls_ring;

	(void)uc;
	if (rbt_async_signal(sig) && r && atomic_load(&r->busy) &&
	    atomic_load(&rbt_state) == 1 && rbt_owner_pid == getpid() &&
	    !atomic_load(&rbt_finishing)) {
		atomic_store(&rbt_deferred_at, rbt_now());
		atomic_store(&rbt_deferred_sig, sig);
		atomic_store(&r->deferred, sig);
		rbt_wake_drainer();
		errno = saved;
		return;
	}
	rbt_finish(1, RBT_END_SIGNAL, sig);
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	/* A fault (SEGV, BUS, ILL, FPE raised by an instruction) fires again when
	 * the handler returns; a signal that was sent is raised again and
	 * delivered, with the default action, once this handler returns. */
	int fault = (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) &&
		    si && si->si_code > 0;
	if (!fault)
		raise(sig);
	errno = saved;
}

/* Only signals still at their default action get our handler: a program that
 * handles a signal itself keeps its behaviour (and exits through our exit
 * hook). */
static void rbt_install_signals(void)
{
	static int done;

	if (done++)
		return;
	for (size_t i = 0; i < sizeof(rbt_signals) / sizeof(rbt_signals[0]); i++) {
		struct sigaction old, sa = { .sa_sigaction = rbt_on_signal };
		if (sigaction(rbt_signals[i], NULL, &old))
			continue;
		if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
			continue;
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = SA_RESTART | SA_ONSTACK | SA_SIGINFO;
		sigaction(rbt_signals[i], &sa, NULL);
	}
}

__attribute__((destructor)) static void rbt_fini(void)
{
	rbt_finish(0, rbt_exit_seen ? RBT_END_EXIT : RBT_END_UNLOAD, 0);
}

/* ---- exits from two threads at once ------------------------------------------- */
/* glibc (2.36) lets two threads run exit() together: the exit handlers and the
 * destructors run in whichever thread takes them first, and the thread that
 * finds none left calls _exit() at once, ending the process in the middle of
 * the other's finishing of the trace (and with its own status, while the
 * handlers saw the other's). rping does it: its event thread calls exit() while
 * main returns. So the first exit() (main's return included, see
 * __libc_start_main below) goes on alone, and one from another thread waits for
 * it to end the process, as if it had come later. The wait is bounded, for the
 * program whose exit handlers wait for the thread that is waiting here: until
 * the trace is finished, then a little more for the first exit to end the
 * process (10 s, then 5 s); past that the second exit goes on as glibc's
 * would. */
#define RBT_EXIT_WAIT_MS  10000
#define RBT_EXIT_AFTER_MS 5000

static _Noreturn void rbt_exit_now(int status)
{
	pid_t me = rbt_gettid(), first = 0;
	int st = atomic_load(&rbt_state);

	if ((st == 1 || st == RBT_STATE_SEALED) && rbt_owner_pid == getpid() &&
	    !atomic_compare_exchange_strong(&rbt_exit_tid, &first, me) && first != me) {
		rbt_log("exit(%d) waits for thread %d's exit to finish the trace", status,
			(int)first);
		struct timespec d = { 0, 1000000 };
		for (int i = 0; i < RBT_EXIT_WAIT_MS && !atomic_load(&rbt_closed); i++)
			nanosleep(&d, NULL);
		for (int i = 0; i < RBT_EXIT_AFTER_MS && atomic_load(&rbt_closed); i++)
			nanosleep(&d, NULL);
	}
	/* (the same thread again, from an exit handler: glibc's own business) */
	rbt_next_exit()(status);
	__builtin_unreachable();
}

RBT_EXPORT void exit(int status)
{
	rbt_exit_now(status);
}

/* main's return is an exit() inside glibc that the wrapper above never sees:
 * main is started through this trampoline, which passes its return to it. */
static int (*rbt_real_main)(int, char **, char **);

static int rbt_main(int argc, char **argv, char **envp)
{
	rbt_exit_now(rbt_real_main(argc, argv, envp));
}

RBT_EXPORT int __libc_start_main(int (*main)(int, char **, char **), int argc,
				 char **argv, void (*init)(void), void (*fini)(void),
				 void (*rtld_fini)(void), void *stack_end)
{
	rbt_real_main = main;
	return rbt_next___libc_start_main()(rbt_main, argc, argv, init, fini, rtld_fini,
					    stack_end);
}

/* exec replaces the image without running destructors: finish the trace first.
 * If exec fails, recording is over for this process (said once on stderr). */
static void rbt_before_exec(void)
{
	if (atomic_load(&rbt_state) == 1 && rbt_owner_pid == getpid()) {
		rbt_finish(0, RBT_END_EXEC, 0);
		rbt_log("trace finished before exec");
	}
}

/* exec returned: it failed, and this process goes on untraced; threads parked
 * at the seal go on too. */
static void rbt_after_exec(void)
{
	int saved = errno;

	if (atomic_load(&rbt_state) == RBT_STATE_SEALED && rbt_owner_pid == getpid())
		atomic_store(&rbt_state, 2);
	errno = saved;
}

/* The exec family: the trace is finished before the image is replaced (when
 * the exec fails, the program goes on untraced: rbt_after_exec). */
#define RBT_EXEC_WRAPPER(name, params, args)                \
	RBT_EXPORT int name params                          \
	{                                                   \
		__typeof__(&name) real = rbt_next_##name(); \
                                                            \
		rbt_before_exec();                          \
		int ret = real args;                        \
		rbt_after_exec();                           \
		return ret;                                 \
	}

RBT_EXEC_WRAPPER(execve, (const char *path, char *const argv[], char *const envp[]),
		 (path, argv, envp))
RBT_EXEC_WRAPPER(execv, (const char *path, char *const argv[]), (path, argv))
RBT_EXEC_WRAPPER(execvp, (const char *file, char *const argv[]), (file, argv))
RBT_EXEC_WRAPPER(execvpe, (const char *file, char *const argv[], char *const envp[]),
		 (file, argv, envp))
