/*
 * cm_failures.c - provokes each connection failure the kernel CM reports and
 * checks the event and status a program sees, over softnic's librdmacm:
 *
 *   noone    REJECTED 8 (nobody listens on the port)
 *   reject   REJECTED 28 with the peer's private data (rdma_reject)
 *   silent   UNREACHABLE -ETIMEDOUT (the peer listens but never answers)
 *   addr     ADDR_ERROR -ENODEV (an address on no RDMA device)
 *   death    DISCONNECTED (the peer is killed with SIGKILL)
 *   qperr    CONNECT_ERROR (the active QP cannot reach RTR), peer REJECTED
 *   unacked  rdma_destroy_id waits until the event it delivered is acked
 *   nonblock O_NONBLOCK on the channel fd gives EAGAIN, poll() wakes
 *   late     rdma_get_cm_event on a channel already destroyed parks (rping's
 *            event thread comes back in while main tears down and exits)
 *   sync     a NULL-channel id's rdma_connect fails with ECONNREFUSED
 *   attrs    what the two sides negotiate (the IB CM's swaps: responder
 *            resources for initiator depth, the REP's RNR retry count for the
 *            active QP) in the events and in the QPs (ibv_query_qp)
 *   enosys   what is not implemented (rsockets) fails with ENOSYS
 *   mcast    a UD id joins a group: MULTICAST_JOIN with the group's address
 *            vector, QPN 0xffffff and the UDP qkey; with a QP, attached when
 *            the device attaches (ibv_attach_mcast), else MULTICAST_ERROR
 *   mrpage   one thread takes and acks events while another registers and
 *            deregisters a heap buffer malloc put beside the id (softnic
 *            registers whole pages: copy, then map over them); no ack is
 *            lost, so rdma_destroy_id returns (rping -q's hang)
 *
 * usage: cm_failures [CASE...]   (no CASE: all of them). Each case prints one
 * "ok CASE: ..." line or "FAIL CASE: ..." and the exit code counts failures.
 * The passive side runs as this program re-executed ("serve MODE PORT FD"):
 * a process of its own, as on two hosts. It must never hang: every wait
 * has a bound.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char rej_msg[] = "softnic says no";
static int fails;

static void say(bool ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(bool ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("%s %s: ", ok ? "ok  " : "FAIL", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!ok)
		fails++;
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port) };

	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* the next event within ms, or NULL */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;
	int fl = fcntl(ch->fd, F_GETFL);
	struct timespec t0, t;

	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		long left;

		if (!rdma_get_cm_event(ch, &ev))
			break;
		ev = NULL;
		if (errno != EAGAIN)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		left = ms - ((t.tv_sec - t0.tv_sec) * 1000 +
			     (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0)
			break;
		poll(&p, 1, (int)left);
	}
	fcntl(ch->fd, F_SETFL, fl);
	return ev;
}

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC };

	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	return a;
}

/* ---------------- the passive side ---------------- */

static int serve(const char *mode, int port, int ready_fd)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *l;
	struct sockaddr_in a = addr_of("127.0.0.1", port);
	struct rdma_cm_event *ev;
	char c = 'r';

	if (!ch || rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(l, (struct sockaddr *)&a) || rdma_listen(l, 4))
		return 2;
	if (write(ready_fd, &c, 1) != 1)
		return 2;
	if (!strcmp(mode, "silent")) {
		sleep(30); /* alive, listening, never answering */
		return 0;
	}
	while (!rdma_get_cm_event(ch, &ev)) {
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type t = ev->event;
		int st = ev->status;
		unsigned ev_rr = ev->param.conn.responder_resources;
		unsigned ev_id = ev->param.conn.initiator_depth;

		rdma_ack_cm_event(ev);
		if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct ibv_qp_init_attr qa = qp_attr();
			struct rdma_conn_param p = { .responder_resources = 1,
						     .initiator_depth = 1,
						     .rnr_retry_count = 7 };

			if (!strcmp(mode, "attrs")) {
				char b[64];
				int n;

				p = (struct rdma_conn_param){ .responder_resources = 2,
							      .initiator_depth = 3,
							      .rnr_retry_count = 5 };
				if (rdma_create_qp(id, NULL, &qa) || rdma_accept(id, &p))
					return 3;
				n = snprintf(b, sizeof(b), "Q%u r%u i%u", id->qp->qp_num,
					     ev_rr, ev_id);
				if (write(ready_fd, b, (size_t)n) != n)
					return 2;
				continue;
			}
			if (!strcmp(mode, "reject")) {
				rdma_reject(id, rej_msg, sizeof(rej_msg));
				rdma_destroy_id(id);
				continue;
			}
			if (rdma_create_qp(id, NULL, &qa) || rdma_accept(id, &p))
				return 3;
		} else if (t == RDMA_CM_EVENT_ESTABLISHED) {
			if (!strcmp(mode, "death"))
				if (write(ready_fd, "e", 1) != 1)
					return 2;
		} else if (t == RDMA_CM_EVENT_REJECTED) {
			/* qperr: the active side's failed QP reaches us as a REJ */
			char b[64];
			int n = snprintf(b, sizeof(b), "R%d", st);

			if (write(ready_fd, b, (size_t)n) != n)
				return 2;
		}
	}
	return 0;
}

static pid_t start_server(const char *mode, int port, int *rfd)
{
	int p[2];
	char pb[16], fb[16], c;
	pid_t pid;

	if (pipe(p))
		return -1;
	snprintf(pb, sizeof(pb), "%d", port);
	snprintf(fb, sizeof(fb), "%d", p[1]);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		execl("/proc/self/exe", "cm_failures", "serve", mode, pb, fb,
		      (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	if (pid < 0 || read(p[0], &c, 1) != 1) {
		close(p[0]);
		return -1;
	}
	*rfd = p[0];
	return pid;
}

static void stop_server(pid_t pid, int rfd)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	if (rfd >= 0)
		close(rfd);
}

/* ---------------- the active side ---------------- */

struct conn {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
};

/* resolve address and route to 127.0.0.1:port, QP created unless noqp */
static int dial(struct conn *c, int port, bool qp)
{
	struct sockaddr_in a = addr_of("127.0.0.1", port);
	struct rdma_cm_event *ev;
	struct ibv_qp_init_attr qa = qp_attr();

	c->ch = rdma_create_event_channel();
	if (!c->ch || rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&a, 2000))
		return -1;
	ev = next_event(c->ch, 2000);
	if (!ev || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		return -1;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(c->id, 2000))
		return -1;
	ev = next_event(c->ch, 2000);
	if (!ev || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
		return -1;
	rdma_ack_cm_event(ev);
	return qp ? rdma_create_qp(c->id, NULL, &qa) : 0;
}

static void hangup(struct conn *c)
{
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->ch)
		rdma_destroy_event_channel(c->ch);
}

static struct rdma_conn_param conn_param(void)
{
	struct rdma_conn_param p = { .responder_resources = 1,
				     .initiator_depth = 1,
				     .retry_count = 7,
				     .rnr_retry_count = 7 };
	return p;
}

/* connect and return the first event that is not about resolution */
static struct rdma_cm_event *connect_event(struct conn *c, int ms)
{
	struct rdma_conn_param p = conn_param();

	if (rdma_connect(c->id, &p))
		return NULL;
	return next_event(c->ch, ms);
}

static int pick_port(void)
{
	return 20000 + (int)((getpid() * 7919u + (unsigned)time(NULL)) % 30000u);
}

static void case_noone(int port)
{
	struct conn c = { 0 };
	struct rdma_cm_event *ev;

	if (dial(&c, port, true)) {
		say(false, "noone", "setup failed: %s", strerror(errno));
		return;
	}
	ev = connect_event(&c, 3000);
	say(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 8, "noone",
	    "%s status %d", ev ? rdma_event_str(ev->event) : "no event",
	    ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	hangup(&c);
}

static void case_reject(int port)
{
	struct conn c = { 0 };
	struct rdma_cm_event *ev;
	int rfd = -1;
	pid_t pid = start_server("reject", port, &rfd);
	bool ok;

	if (pid < 0 || dial(&c, port, true)) {
		say(false, "reject", "setup failed");
		stop_server(pid, rfd);
		return;
	}
	ev = connect_event(&c, 5000);
	ok = ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 28 &&
	     ev->param.conn.private_data_len >= sizeof(rej_msg) &&
	     !memcmp(ev->param.conn.private_data, rej_msg, sizeof(rej_msg));
	say(ok, "reject", "%s status %d private data %u bytes \"%.*s\"",
	    ev ? rdma_event_str(ev->event) : "no event", ev ? ev->status : 0,
	    ev ? ev->param.conn.private_data_len : 0, (int)sizeof(rej_msg) - 1,
	    ev && ev->param.conn.private_data ? (const char *)ev->param.conn.private_data
					      : "");
	if (ev)
		rdma_ack_cm_event(ev);
	hangup(&c);
	stop_server(pid, rfd);
}

static void case_silent(int port)
{
	struct conn c = { 0 };
	struct rdma_cm_event *ev;
	int rfd = -1;
	pid_t pid = start_server("silent", port, &rfd);

	if (pid < 0 || dial(&c, port, true)) {
		say(false, "silent", "setup failed");
		stop_server(pid, rfd);
		return;
	}
	ev = connect_event(&c, 10000);
	say(ev && ev->event == RDMA_CM_EVENT_UNREACHABLE && ev->status == -ETIMEDOUT,
	    "silent", "%s status %d", ev ? rdma_event_str(ev->event) : "no event",
	    ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	hangup(&c);
	stop_server(pid, rfd);
}

/* a documentation address that is none of this host's (hosts do use them) */
static const char *foreign_addr(void)
{
	static const char *const cand[] = { "203.0.113.77", "198.51.100.77",
					    "192.0.2.77" };
	struct ifaddrs *ifs = NULL, *i;

	getifaddrs(&ifs);
	for (size_t k = 0; k < sizeof(cand) / sizeof(cand[0]); k++) {
		struct sockaddr_in a = addr_of(cand[k], 0);
		bool mine = false;

		for (i = ifs; i; i = i->ifa_next)
			mine |= i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
				((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
					a.sin_addr.s_addr;
		if (!mine) {
			freeifaddrs(ifs);
			return cand[k];
		}
	}
	freeifaddrs(ifs);
	return "203.0.113.78";
}

static void case_addr(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in a = addr_of(foreign_addr(), 4791);
	struct rdma_cm_event *ev = NULL;

	if (ch && !rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) &&
	    !rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000))
		ev = next_event(ch, 2000);
	say(ev && ev->event == RDMA_CM_EVENT_ADDR_ERROR && ev->status == -ENODEV, "addr",
	    "%s status %d", ev ? rdma_event_str(ev->event) : "no event",
	    ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	if (id)
		rdma_destroy_id(id);
	if (ch)
		rdma_destroy_event_channel(ch);
}

static void case_death(int port)
{
	struct conn c = { 0 };
	struct rdma_cm_event *ev;
	int rfd = -1;
	pid_t pid = start_server("death", port, &rfd);
	char b;

	if (pid < 0 || dial(&c, port, true)) {
		say(false, "death", "setup failed");
		stop_server(pid, rfd);
		return;
	}
	ev = connect_event(&c, 5000);
	if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED) {
		say(false, "death", "not established: %s",
		    ev ? rdma_event_str(ev->event) : "no event");
		goto out;
	}
	rdma_ack_cm_event(ev);
	if (read(rfd, &b, 1) != 1) /* the peer saw ESTABLISHED too */
		b = 0;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	pid = -1;
	ev = next_event(c.ch, 5000);
	say(ev && ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->status == 0, "death",
	    "after kill -9 of the peer: %s status %d",
	    ev ? rdma_event_str(ev->event) : "no event", ev ? ev->status : 0);
out:
	if (ev)
		rdma_ack_cm_event(ev);
	hangup(&c);
	stop_server(pid, rfd);
}

static void case_qperr(int port)
{
	struct conn c = { 0 };
	struct rdma_cm_event *ev;
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	int rfd = -1, n;
	pid_t pid = start_server("qperr", port, &rfd);
	char b[32] = "";
	struct pollfd p;

	if (pid < 0 || dial(&c, port, true) ||
	    ibv_modify_qp(c.id->qp, &qa, IBV_QP_STATE)) {
		say(false, "qperr", "setup failed");
		stop_server(pid, rfd);
		return;
	}
	/* a QP in ERR cannot go to INIT and RTR when the REP comes */
	ev = connect_event(&c, 5000);
	p = (struct pollfd){ .fd = rfd, .events = POLLIN };
	n = poll(&p, 1, 5000) == 1 ? (int)read(rfd, b, sizeof(b) - 1) : 0;
	b[n > 0 ? n : 0] = 0;
	say(ev && ev->event == RDMA_CM_EVENT_CONNECT_ERROR && ev->status != 0 &&
		    b[0] == 'R',
	    "qperr", "%s status %d; the passive side: %s",
	    ev ? rdma_event_str(ev->event) : "no event", ev ? ev->status : 0,
	    b[0] == 'R' ? "REJECTED" : "nothing");
	if (ev)
		rdma_ack_cm_event(ev);
	hangup(&c);
	stop_server(pid, rfd);
}

static void *destroy_thread(void *arg)
{
	rdma_destroy_id(arg);
	return NULL;
}

static void case_unacked(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in a = addr_of("127.0.0.1", 9);
	struct rdma_cm_event *ev = NULL;
	pthread_t t;
	struct timespec ts;
	bool waited, joined;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) ||
	    !(ev = next_event(ch, 2000))) {
		say(false, "unacked", "setup failed");
		return;
	}
	pthread_create(&t, NULL, destroy_thread, id);
	usleep(300000);
	clock_gettime(CLOCK_REALTIME, &ts);
	waited = pthread_tryjoin_np(t, NULL) == EBUSY; /* still blocked */
	rdma_ack_cm_event(ev);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 3;
	joined = pthread_timedjoin_np(t, NULL, &ts) == 0;
	say(waited && joined, "unacked",
	    "rdma_destroy_id %s while an event was unacked, %s after the ack",
	    waited ? "blocked" : "returned", joined ? "returned" : "still blocked");
	rdma_destroy_event_channel(ch);
}

struct mrpage {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	atomic_bool stop;
	int events;
	bool err;
};

static void *mrpage_thread(void *arg)
{
	struct mrpage *m = arg;
	struct rdma_cm_event *ev;

	while (!atomic_load(&m->stop)) {
		if (rdma_resolve_route(m->id, 2000) || !(ev = next_event(m->ch, 5000))) {
			m->err = true;
			break;
		}
		rdma_ack_cm_event(ev);
		m->events++;
	}
	return NULL;
}

/* The race is as likely as its windows overlap: 2000 registrations (each
 * copies and maps a page twice) against a thread that acks without pause; a
 * lost ack makes the destroy block, given 5 s here before it counts as a hang
 * (it returns at once when every ack counted). */
static void case_mrpage(void)
{
	struct mrpage m = { 0 };
	struct sockaddr_in a = addr_of("127.0.0.1", 9);
	struct rdma_cm_event *ev = NULL;
	struct ibv_pd *pd = NULL;
	struct timespec ts;
	char *buf = NULL;
	pthread_t t;
	int regs = 0;
	bool joined;

	m.ch = rdma_create_event_channel();
	if (!m.ch || rdma_create_id(m.ch, &m.id, NULL, RDMA_PS_TCP) ||
	    !(buf = malloc(64)) ||
	    rdma_resolve_addr(m.id, NULL, (struct sockaddr *)&a, 2000) ||
	    !(ev = next_event(m.ch, 2000)) || !(pd = ibv_alloc_pd(m.id->verbs))) {
		say(false, "mrpage", "setup failed");
		free(buf);
		return;
	}
	rdma_ack_cm_event(ev);
	if (pthread_create(&t, NULL, mrpage_thread, &m)) {
		say(false, "mrpage", "pthread_create failed");
		return;
	}
	for (; regs < 2000 && !m.err; regs++) {
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);

		if (!mr)
			break;
		buf[regs % 64] = (char)regs; /* the program's own writes stay too */
		ibv_dereg_mr(mr);
		if (buf[regs % 64] != (char)regs)
			break;
	}
	atomic_store(&m.stop, true);
	pthread_join(t, NULL);
	pthread_create(&t, NULL, destroy_thread, m.id);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	joined = pthread_timedjoin_np(t, NULL, &ts) == 0;
	say(regs == 2000 && !m.err && joined, "mrpage",
	    "%d registrations beside the id while %d events were acked%s; "
	    "rdma_destroy_id %s",
	    regs, m.events, m.err ? " (an event failed)" : "",
	    joined ? "returned" : "blocked: an ack was lost");
	if (joined) {
		ibv_dealloc_pd(pd);
		rdma_destroy_event_channel(m.ch);
	}
	free(buf);
}

static void case_nonblock(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in a = addr_of("127.0.0.1", 9);
	struct rdma_cm_event *ev = NULL;
	struct pollfd p;
	int r0, e0, pr, r1;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		say(false, "nonblock", "setup failed");
		return;
	}
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	r0 = rdma_get_cm_event(ch, &ev);
	e0 = errno;
	rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000);
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	pr = poll(&p, 1, 2000);
	r1 = rdma_get_cm_event(ch, &ev);
	say(r0 == -1 && e0 == EAGAIN && pr == 1 && r1 == 0 &&
		    ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	    "nonblock", "empty channel: %s; poll() %d; then %s", strerror(e0), pr,
	    r1 == 0 ? rdma_event_str(ev->event) : strerror(errno));
	if (r1 == 0)
		rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

struct late {
	struct rdma_event_channel *ch;
	atomic_int returned;
};

static void *late_thread(void *arg)
{
	struct late *l = arg;
	struct rdma_cm_event *ev;

	rdma_get_cm_event(l->ch, &ev);
	atomic_store(&l->returned, 1);
	return NULL;
}

/* The thread's call comes after the destroy: it must neither return (an
 * error there makes rping's event thread exit(-1) while main exits 0) nor
 * touch freed memory. It stays parked until the process exits. */
static void case_late(void)
{
	static struct late l;
	struct rdma_cm_id *id = NULL;
	pthread_t t;

	l.ch = rdma_create_event_channel();
	if (!l.ch || rdma_create_id(l.ch, &id, NULL, RDMA_PS_TCP)) {
		say(false, "late", "setup failed");
		return;
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(l.ch);
	if (pthread_create(&t, NULL, late_thread, &l)) {
		say(false, "late", "pthread_create failed");
		return;
	}
	pthread_detach(t);
	usleep(300 * 1000);
	say(!atomic_load(&l.returned), "late",
	    "rdma_get_cm_event after rdma_destroy_event_channel %s",
	    atomic_load(&l.returned) ? "returned" : "parks");
}

static void case_sync(int port)
{
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in a = addr_of("127.0.0.1", port);
	struct rdma_conn_param p = conn_param();
	struct ibv_qp_init_attr qa = qp_attr();
	int r = -1, e = 0;

	if (!rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) &&
	    !rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) &&
	    !rdma_resolve_route(id, 2000) && !rdma_create_qp(id, NULL, &qa)) {
		r = rdma_connect(id, &p);
		e = errno;
	}
	say(r == -1 && e == ECONNREFUSED && id && id->event &&
		    id->event->event == RDMA_CM_EVENT_REJECTED,
	    "sync", "rdma_connect on a NULL-channel id: %d (%s)", r, strerror(e));
	if (id) {
		if (id->qp)
			rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
}

static void case_attrs(int port)
{
	struct conn c = { 0 };
	struct rdma_cm_event *ev = NULL;
	struct rdma_conn_param p = { .responder_resources = 4,
				     .initiator_depth = 2,
				     .retry_count = 6,
				     .rnr_retry_count = 7 };
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rfd = -1, n = 0;
	unsigned sqpn = 0, srr = 0, sid = 0;
	pid_t pid = start_server("attrs", port, &rfd);
	char b[64] = "";
	bool ok;

	if (pid < 0 || dial(&c, port, true) || rdma_connect(c.id, &p) ||
	    !(ev = next_event(c.ch, 5000))) {
		say(false, "attrs", "setup failed");
		goto out;
	}
	struct pollfd pf = { .fd = rfd, .events = POLLIN };

	if (poll(&pf, 1, 5000) == 1)
		n = (int)read(rfd, b, sizeof(b) - 1);
	b[n > 0 ? n : 0] = 0;
	if (sscanf(b, "Q%u r%u i%u", &sqpn, &srr, &sid) != 3 ||
	    ibv_query_qp(c.id->qp, &a,
			 IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_MAX_QP_RD_ATOMIC |
				 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_RNR_RETRY |
				 IBV_QP_RETRY_CNT | IBV_QP_ACCESS_FLAGS,
			 &ia)) {
		say(false, "attrs", "the server said \"%s\"", b);
		goto out;
	}
	/* passive accepted with responder resources 2, initiator depth 3, RNR 5 */
	ok = ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->param.conn.qp_num == sqpn &&
	     ev->param.conn.responder_resources == 3 &&
	     ev->param.conn.initiator_depth == 2 && srr == 2 && sid == 4 &&
	     a.qp_state == IBV_QPS_RTS && a.dest_qp_num == sqpn && a.max_rd_atomic == 2 &&
	     a.max_dest_rd_atomic == 3 && a.rnr_retry == 5 && a.retry_cnt == 6 &&
	     (a.qp_access_flags & IBV_ACCESS_REMOTE_READ);
	say(ok, "attrs",
	    "%s: peer QPN %u (QP dest %u), event rr %u id %u, peer saw rr %u id %u; "
	    "QP rd_atomic %u dest %u rnr %u retry %u",
	    rdma_event_str(ev->event), sqpn, a.dest_qp_num,
	    ev->param.conn.responder_resources, ev->param.conn.initiator_depth, srr, sid,
	    a.max_rd_atomic, a.max_dest_rd_atomic, a.rnr_retry, a.retry_cnt);
out:
	if (ev)
		rdma_ack_cm_event(ev);
	hangup(&c);
	stop_server(pid, rfd);
}

static void case_enosys(void)
{
	int r = rsocket(AF_INET, SOCK_STREAM, 0), e = errno;

	say(r == -1 && e == ENOSYS, "enosys", "rsocket: %d (%s)", r, strerror(e));
}

/* join group g on a UD id (with a QP when qp); the event, checked */
static bool mc_join(const char *g, bool qp, enum rdma_cm_event_type want, char *out,
		    size_t outlen)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in a = addr_of(g, 0);
	struct rdma_cm_event *ev = NULL;
	struct ibv_qp_init_attr qa = qp_attr();
	int ctx = 0;
	bool ok = false;

	qa.qp_type = IBV_QPT_UD;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) ||
	    !(ev = next_event(ch, 2000)) || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
		snprintf(out, outlen, "resolving %s failed", g);
		goto out;
	}
	rdma_ack_cm_event(ev);
	ev = NULL;
	if ((qp && rdma_create_qp(id, NULL, &qa)) ||
	    rdma_join_multicast(id, (struct sockaddr *)&a, &ctx) ||
	    !(ev = next_event(ch, 2000))) {
		snprintf(out, outlen, "join failed: %s", strerror(errno));
		goto out;
	}
	ok = ev->event == want && ev->param.ud.private_data == &ctx;
	if (want == RDMA_CM_EVENT_MULTICAST_JOIN)
		ok = ok && ev->status == 0 && ev->param.ud.ah_attr.is_global &&
		     ev->param.ud.qp_num == 0xffffff &&
		     ev->param.ud.qkey == RDMA_UDP_QKEY;
	snprintf(out, outlen, "%s%s status %d qpn %#x", qp ? "with a QP " : "",
		 rdma_event_str(ev->event), ev->status, ev->param.ud.qp_num);
	rdma_ack_cm_event(ev);
	ev = NULL;
	ok = ok && !rdma_leave_multicast(id, (struct sockaddr *)&a) &&
	     rdma_leave_multicast(id, (struct sockaddr *)&a) == -1 &&
	     errno == EADDRNOTAVAIL;
out:
	if (ev)
		rdma_ack_cm_event(ev);
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (id)
		rdma_destroy_id(id);
	if (ch)
		rdma_destroy_event_channel(ch);
	return ok;
}

static void case_mcast(void)
{
	/* what the device does with a group, asked of it directly */
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *ctx = l && l[0] ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = qp_attr();
	struct ibv_qp *qp;
	union ibv_gid g = { .raw = { 0xff, 0x12, 0x40, 0x01, 0xff, 0xff } };
	bool attaches = false, ok1, ok2;
	char a[128], b[128];

	qa.qp_type = IBV_QPT_UD;
	qa.send_cq = qa.recv_cq = cq;
	qp = pd && cq ? ibv_create_qp(pd, &qa) : NULL;
	if (qp) {
		attaches = ibv_attach_mcast(qp, &g, 0xc001) == 0;
		if (attaches)
			ibv_detach_mcast(qp, &g, 0xc001);
		ibv_destroy_qp(qp);
	}
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	if (ctx)
		ibv_close_device(ctx);
	if (l)
		ibv_free_device_list(l);
	ok1 = mc_join("239.1.2.3", false, RDMA_CM_EVENT_MULTICAST_JOIN, a, sizeof(a));
	ok2 = mc_join("239.1.2.4", true,
		      attaches ? RDMA_CM_EVENT_MULTICAST_JOIN
			       : RDMA_CM_EVENT_MULTICAST_ERROR,
		      b, sizeof(b));
	say(ok1 && ok2, "mcast", "%s; %s (the device %s)", a, b,
	    attaches ? "attaches QPs to groups" : "has no multicast");
}

int main(int argc, char **argv)
{
	static const char *const all[] = { "noone", "reject", "silent",	 "addr",
					   "death", "qperr",  "unacked", "nonblock",
					   "late",  "sync",   "attrs",	 "enosys",
					   "mcast", "mrpage" };
	int port = pick_port();

	if (argc == 5 && !strcmp(argv[1], "serve"))
		return serve(argv[2], atoi(argv[3]), atoi(argv[4]));
	signal(SIGPIPE, SIG_IGN);
	for (int i = 0; i < (int)(sizeof(all) / sizeof(all[0])); i++) {
		const char *n = all[i];
		bool want = argc < 2;

		for (int j = 1; j < argc; j++)
			want |= !strcmp(argv[j], n);
		if (!want)
			continue;
		port++;
		if (!strcmp(n, "noone"))
			case_noone(port);
		else if (!strcmp(n, "reject"))
			case_reject(port);
		else if (!strcmp(n, "silent"))
			case_silent(port);
		else if (!strcmp(n, "addr"))
			case_addr();
		else if (!strcmp(n, "death"))
			case_death(port);
		else if (!strcmp(n, "qperr"))
			case_qperr(port);
		else if (!strcmp(n, "unacked"))
			case_unacked();
		else if (!strcmp(n, "nonblock"))
			case_nonblock();
		else if (!strcmp(n, "late"))
			case_late();
		else if (!strcmp(n, "sync"))
			case_sync(port);
		else if (!strcmp(n, "attrs"))
			case_attrs(port);
		else if (!strcmp(n, "enosys"))
			case_enosys();
		else if (!strcmp(n, "mcast"))
			case_mcast();
		else if (!strcmp(n, "mrpage"))
			case_mrpage();
	}
	return fails;
}
