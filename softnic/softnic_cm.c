/*
 * softnic_cm.c - softnic's librdmacm.so.1: a userspace RDMA connection manager.
 *
 * Debian's librdmacm reaches the kernel's rdma_cm through /dev/infiniband/
 * rdma_cm; softnic has no kernel part, so this library stands in for the
 * whole of it: the rdma_* API of rdma-core v44 (all exports, same version
 * nodes, same struct layouts) over a per-process connection manager.
 *
 * - Device: the first verbs device (softnic0), reached only through the
 *   public ibv_* API, so it runs over softnic's drop-in libibverbs and over
 *   Debian's libibverbs with softnic as a provider alike.
 * - Wire: AF_UNIX SOCK_SEQPACKET sockets with abstract names made of the
 *   fabric's identity, the port space and the port. Binding a name reserves
 *   the port; connect() to a name nobody listens on is a REQ to an invalid
 *   service id; EOF on a connection is the peer's death. One fixed-size
 *   message per packet (REQ/REP/RTU/REJ/DREQ/DREP/SIDR_REQ/SIDR_REP).
 * - Event channel: an epoll fd (the fd programs poll) over an eventfd that is
 *   readable while locally made events wait, the ids' sockets and their
 *   timers. No helper thread: messages are handled inside rdma_get_cm_event.
 * - One mutex guards every id and channel; nothing blocks while holding it.
 *
 * This file must never call its own exported functions through the PLT
 * (internal calls go to static functions, so a recorder that wraps rdma_*
 * sees only the program's calls), never print except the one-line ENOSYS
 * notes (and, when SOFTNIC_CM_EVENTS names a file, one line per event it
 * hands out there: tests count them apart from any recorder), and never use
 * anything of softnic but the public verbs API.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CM_EXPORT __attribute__((visibility("default")))

/* IB CM private-data sizes (rdma_cm's 36-byte header already taken off
 * for the IP port spaces), as the kernel reports them to the receiver */
#define CM_REQ_PD     92
#define CM_REP_PD     196
#define CM_REJ_PD     148
#define CM_SIDR_REQ   216
#define CM_SIDR_REP   136
#define CM_DREQ_PD    52
#define CM_IP_HDR     36
#define CM_PD_MAX     256
#define CM_WIRE_MAGIC 0x534e434du /* "SNCM" */

/* IB CM reject reasons and SIDR statuses the events carry */
#define CM_REJ_TIMEOUT	       4
#define CM_REJ_INVALID_SERVICE 8
#define CM_REJ_CONSUMER	       28
#define CM_REJ_VENDOR_OPTION   35
#define CM_SIDR_UNSUPPORTED    1
#define CM_SIDR_REJECT	       2

enum cm_msg_type {
	M_REQ = 1,
	M_REP,
	M_RTU,
	M_REJ,
	M_DREQ,
	M_DREP,
	M_SIDR_REQ,
	M_SIDR_REP
};

enum cm_state {
	S_IDLE,
	S_BOUND,
	S_ADDR,	 /* address resolved */
	S_ROUTE, /* route resolved */
	S_LISTEN,
	S_PENDING,    /* passive child: socket accepted, REQ not read yet */
	S_REQ_RCVD,   /* passive: CONNECT_REQUEST given, accept/reject next */
	S_CONNECTING, /* active: REQ (or SIDR_REQ) sent */
	S_REP_RCVD,   /* active without QP: CONNECT_RESPONSE given */
	S_REP_SENT,   /* passive: REP sent, waiting for RTU */
	S_ESTABLISHED,
	S_DREQ_SENT,
	S_DISCONNECTED,
	S_CLOSED, /* rejected, unreachable, or a finished SIDR exchange */
};

/* kinds of fd in a channel's epoll set (low two bits of the epoll data) */
enum { K_EVFD = 0, K_BIND = 1, K_CONN = 2, K_TIMER = 3 };

struct cm_wire {
	uint32_t magic;
	uint8_t type, pd_len, resp_res, init_depth;
	uint8_t retry, rnr_retry, srq, flow;
	uint32_t qpn, psn, qkey;
	int32_t status;
	struct sockaddr_storage src, dst; /* the active side's view */
	uint8_t pd[CM_PD_MAX];
};

struct cm_mc {
	struct cm_mc *next;
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	uint16_t mlid;
	bool sendonly, attached;
	void *context;
	uint64_t reported, completed;
};

struct cm_evt {
	struct rdma_cm_event ev; /* first: programs get &ev */
	struct cm_id *owner;	 /* the id whose destroy waits for the ack */
	struct cm_mc *mc;	 /* a multicast event's group */
	struct cm_evt *next;
	uint8_t pd[CM_PD_MAX];
};

struct cm_chan {
	struct rdma_event_channel ch; /* first: fd is the epoll fd */
	int evfd;
	struct cm_evt *head, *tail;
	int users; /* threads inside rdma_get_cm_event on it */
	bool dead; /* destroyed while a thread waited in it */
};

struct cm_id {
	struct rdma_cm_id id; /* first: programs get &id */
	uint32_t slot, gen;
	enum cm_state state;
	bool sync;
	int bfd, cfd, tfd;
	struct cm_chan *cfd_chan; /* whose epoll holds cfd */
	uint16_t port;		  /* host order */
	uint32_t psn;
	uint8_t resp_res, init_depth, retry, rnr_retry;
	bool remote; /* the peer's QP is known */
	uint32_t rqpn, rpsn, rqkey;
	uint64_t reported, completed;
	struct cm_id *listener; /* a pending or undelivered child's */
	struct ibv_qp_init_attr *ep_attr;
	uint8_t connect_pd[CM_PD_MAX];
	uint8_t connect_len;
	uint8_t ack_timeout;
	uint64_t deadline_ns;
	struct cm_wire *req; /* kept while connect() must be retried */
	struct ibv_sa_path_rec path;
	struct cm_mc *mcs; /* groups joined */
};

static pthread_mutex_t cm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cm_cv = PTHREAD_COND_INITIALIZER;
static struct cm_id **cm_tab;
static uint32_t cm_tab_n, *cm_tab_gen;

/* the one device, opened on first use and kept for the process */
static struct {
	bool inited;
	int err;
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_xrcd *xrcd;
	struct ibv_port_attr port;
	union ibv_gid gid;
	uint8_t max_init_depth, max_resp_res;
	uint64_t fabric; /* hash naming the fabric in socket names */
	uint64_t timeout_ms;
} cm_dev;

/* ---------------- small helpers ---------------- */

static int cm_err(int e)
{
	errno = e;
	return -1;
}

static const char *cm_ev_name(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

/* SOFTNIC_CM_EVENTS=FILE: "RDMA_CM_EVENT_X status S" appended per event
 * rdma_get_cm_event returns (to the program or inside a synchronous call) */
static int cm_evlog_fd = -1;
static pthread_once_t cm_evlog_once = PTHREAD_ONCE_INIT;

static void cm_evlog_open(void)
{
	const char *v = getenv("SOFTNIC_CM_EVENTS");

	if (v && *v)
		cm_evlog_fd = open(v, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

static void cm_evlog(const struct rdma_cm_event *ev)
{
	char b[96];
	int n, e = errno;

	pthread_once(&cm_evlog_once, cm_evlog_open);
	if (cm_evlog_fd >= 0) {
		n = snprintf(b, sizeof(b), "%s status %d\n", cm_ev_name(ev->event),
			     ev->status);
		if (n > 0 && write(cm_evlog_fd, b, (size_t)n) < 0)
			n = 0;
	}
	errno = e;
}

static uint64_t cm_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cm_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static void cm_enosys_note(const char *fn, atomic_bool *said)
{
	if (!atomic_exchange(said, true)) {
		char b[160];
		int n = snprintf(b, sizeof(b),
				 "softnic librdmacm: %s is not implemented (ENOSYS)\n",
				 fn);

		if (n > 0 && write(2, b, (size_t)n) < 0)
			(void)0;
	}
}

#define CM_ENOSYS(ret)                            \
	do {                                      \
		static atomic_bool said_;         \
		cm_enosys_note(__func__, &said_); \
		errno = ENOSYS;                   \
		return ret;                       \
	} while (0)

static socklen_t cm_addrlen(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	default:
		return 0;
	}
}

static uint16_t cm_get_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

static void cm_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

static bool cm_addr_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
		       htonl(INADDR_ANY);
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(
			&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

/* Is this address on softnic's port? Loopback and every address of this
 * host's interfaces are; anything else is on no RDMA device here. */
static bool cm_addr_local(const struct sockaddr *sa)
{
	struct ifaddrs *ifs, *i;
	bool hit = false;

	if (cm_addr_any(sa))
		return true;
	if (sa->sa_family == AF_INET &&
	    (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127)
		return true;
	if (sa->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr))
		return true;
	if (getifaddrs(&ifs))
		return false;
	for (i = ifs; i && !hit; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family)
			continue;
		if (sa->sa_family == AF_INET)
			hit = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
			      ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
		else
			hit = !memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
				      &((const struct sockaddr_in6 *)sa)->sin6_addr,
				      sizeof(struct in6_addr));
	}
	freeifaddrs(ifs);
	return hit;
}

static bool cm_addr_mcast(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return IN_MULTICAST(
			ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_MULTICAST(
			&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

static bool cm_is_ud(const struct cm_id *c)
{
	return c->id.qp_type == IBV_QPT_UD;
}

/* the port space a socket name lives in: UD ids share one */
static unsigned cm_space(const struct cm_id *c)
{
	return c->id.ps == RDMA_PS_IPOIB ? RDMA_PS_UDP : (unsigned)c->id.ps;
}

static socklen_t cm_name(struct sockaddr_un *un, unsigned ps, uint16_t port)
{
	int n;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1,
		     "softnic-cm/%016llx/%x/%u", (unsigned long long)cm_dev.fabric, ps,
		     port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static uint8_t cm_pd_max(const struct cm_id *c, unsigned full)
{
	return (uint8_t)(c->id.ps == RDMA_PS_IB ? full : full - CM_IP_HDR);
}

/* ---------------- the device ---------------- */

static int cm_dev_init(void)
{
	struct ibv_device_attr da;
	struct stat st;
	const char *v;
	char key[600];

	if (cm_dev.inited)
		return cm_dev.err;
	cm_dev.inited = true;
	cm_dev.timeout_ms = 68000; /* the kernel's: 16 tries of a 4.3 s CM timeout */
	v = getenv("SOFTNIC_CM_TIMEOUT_MS");
	if (v && *v) {
		char *end;
		unsigned long long t = strtoull(v, &end, 10);

		if (*end || !t || t > 3600000)
			fprintf(stderr,
				"softnic librdmacm: SOFTNIC_CM_TIMEOUT_MS=%s: not a "
				"number "
				"from 1 to 3600000; using 68000\n",
				v);
		else
			cm_dev.timeout_ms = t;
	}
	cm_dev.list = ibv_get_device_list(NULL);
	if (!cm_dev.list || !cm_dev.list[0])
		return cm_dev.err = -ENODEV;
	cm_dev.ctx = ibv_open_device(cm_dev.list[0]);
	if (!cm_dev.ctx)
		return cm_dev.err = -ENODEV;
	if (ibv_query_device(cm_dev.ctx, &da) ||
	    ibv_query_port(cm_dev.ctx, 1, &cm_dev.port) ||
	    ibv_query_gid(cm_dev.ctx, 1, 0, &cm_dev.gid))
		return cm_dev.err = -ENODEV;
	cm_dev.max_init_depth =
		(uint8_t)(da.max_qp_init_rd_atom > 255 ? 255 : da.max_qp_init_rd_atom);
	cm_dev.max_resp_res =
		(uint8_t)(da.max_qp_rd_atom > 255 ? 255 : da.max_qp_rd_atom);
	/* the fabric's directory exists now (opening the device made it): its
	 * identity names our sockets, however its path is spelled */
	v = getenv("SOFTNIC_FABRIC");
	if (v && *v) {
		snprintf(key, sizeof(key), "%s", v);
	} else {
		snprintf(key, sizeof(key), "/dev/shm/softnic-%u", (unsigned)getuid());
		if (stat(key, &st))
			snprintf(key, sizeof(key), "/tmp/softnic-%u", (unsigned)getuid());
	}
	if (!stat(key, &st))
		snprintf(key, sizeof(key), "ino:%llx:%llx", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
	cm_dev.fabric = cm_hash(key);
	cm_dev.pd = ibv_alloc_pd(cm_dev.ctx);
	if (!cm_dev.pd)
		return cm_dev.err = -ENOMEM;
	return 0;
}

static void cm_attach_dev(struct cm_id *c)
{
	c->id.verbs = cm_dev.ctx;
	c->id.port_num = 1;
	if (!c->id.pd)
		c->id.pd = cm_dev.pd;
	c->id.route.addr.addr.ibaddr.sgid = cm_dev.gid;
	c->id.route.addr.addr.ibaddr.dgid = cm_dev.gid;
	c->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
}

static void cm_fill_path(struct cm_id *c)
{
	struct ibv_sa_path_rec *p = &c->path;
	bool eth = cm_dev.port.link_layer == IBV_LINK_LAYER_ETHERNET;

	memset(p, 0, sizeof(*p));
	p->dgid = cm_dev.gid;
	p->sgid = cm_dev.gid;
	p->dlid = htobe16(cm_dev.port.lid);
	p->slid = htobe16(cm_dev.port.lid);
	p->hop_limit = eth ? 64 : 0;
	p->reversible = 1;
	p->numb_path = 1;
	p->pkey = htobe16(0xffff);
	p->mtu_selector = 2;
	p->mtu = cm_dev.port.active_mtu;
	p->rate_selector = 2;
	p->rate = 7; /* 40 Gb/s */
	p->packet_life_time_selector = 2;
	p->packet_life_time = 13;
	c->id.route.path_rec = p;
	c->id.route.num_paths = 1;
}

static void cm_ah_attr(struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->port_num = 1;
	if (cm_dev.port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		ah->is_global = 1;
		ah->grh.dgid = cm_dev.gid;
		ah->grh.sgid_index = 0;
		ah->grh.hop_limit = 64;
	} else {
		ah->dlid = cm_dev.port.lid;
	}
}

/* ---------------- ids, channels, events ---------------- */

static struct cm_id *cm_lookup(uint64_t data)
{
	uint32_t slot = (uint32_t)(data & 0xffffffffu) >> 2, gen = (uint32_t)(data >> 32);

	if (slot >= cm_tab_n || !cm_tab[slot] || cm_tab_gen[slot] != gen)
		return NULL;
	return cm_tab[slot];
}

static int cm_insert(struct cm_id *c)
{
	uint32_t i;

	for (i = 0; i < cm_tab_n && cm_tab[i]; i++)
		;
	if (i == cm_tab_n) {
		uint32_t n = cm_tab_n ? cm_tab_n * 2 : 64;
		struct cm_id **t = realloc(cm_tab, n * sizeof(*t));
		uint32_t *g;

		if (!t)
			return -ENOMEM;
		cm_tab = t;
		g = realloc(cm_tab_gen, n * sizeof(*g));
		if (!g)
			return -ENOMEM;
		cm_tab_gen = g;
		memset(cm_tab + cm_tab_n, 0, (n - cm_tab_n) * sizeof(*t));
		memset(cm_tab_gen + cm_tab_n, 0, (n - cm_tab_n) * sizeof(*g));
		cm_tab_n = n;
	}
	cm_tab[i] = c;
	c->slot = i;
	c->gen = ++cm_tab_gen[i];
	return 0;
}

static uint64_t cm_data(const struct cm_id *c, int kind)
{
	return ((uint64_t)c->gen << 32) | ((uint64_t)c->slot << 2) | (uint64_t)kind;
}

static int cm_watch(struct cm_chan *ch, int fd, const struct cm_id *c, int kind)
{
	struct epoll_event e = { .events = EPOLLIN,
				 .data.u64 = c ? cm_data(c, kind) : 0 };

	return epoll_ctl(ch->ch.fd, EPOLL_CTL_ADD, fd, &e) ? -errno : 0;
}

static void cm_unwatch(struct cm_chan *ch, int fd)
{
	if (fd >= 0 && ch)
		epoll_ctl(ch->ch.fd, EPOLL_CTL_DEL, fd, NULL);
}

static struct cm_chan *cm_chan_of(const struct cm_id *c)
{
	return (struct cm_chan *)c->id.channel;
}

static struct cm_chan *cm_chan_new(void)
{
	struct cm_chan *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return NULL;
	ch->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	ch->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ch->ch.fd < 0 || ch->evfd < 0 || cm_watch(ch, ch->evfd, NULL, K_EVFD)) {
		if (ch->ch.fd >= 0)
			close(ch->ch.fd);
		if (ch->evfd >= 0)
			close(ch->evfd);
		free(ch);
		return NULL;
	}
	return ch;
}

static void cm_chan_free(struct cm_chan *ch)
{
	struct cm_evt *e, *n;

	if (!ch)
		return;
	for (e = ch->head; e; e = n) {
		n = e->next;
		free(e);
	}
	close(ch->ch.fd);
	close(ch->evfd);
	free(ch);
}

static void cm_chan_push(struct cm_chan *ch, struct cm_evt *e)
{
	uint64_t one = 1;

	e->next = NULL;
	if (ch->tail)
		ch->tail->next = e;
	else
		ch->head = e;
	ch->tail = e;
	if (ch->head == e && write(ch->evfd, &one, sizeof(one)) < 0)
		(void)0;
}

static struct cm_evt *cm_chan_pop(struct cm_chan *ch)
{
	struct cm_evt *e = ch->head;
	uint64_t v;

	if (!e)
		return NULL;
	ch->head = e->next;
	if (!ch->head) {
		ch->tail = NULL;
		if (read(ch->evfd, &v, sizeof(v)) < 0)
			(void)0;
	}
	return e;
}

/* Take out every queued event that belongs to c (for destroy and migrate). */
static struct cm_evt *cm_chan_take(struct cm_chan *ch, const struct cm_id *c)
{
	struct cm_evt *out = NULL, **otail = &out, **pp = &ch->head, *e;
	uint64_t v;

	ch->tail = NULL;
	while ((e = *pp)) {
		if (e->owner == c || e->ev.id == &c->id) {
			*pp = e->next;
			e->next = NULL;
			*otail = e;
			otail = &e->next;
		} else {
			ch->tail = e;
			pp = &e->next;
		}
	}
	if (!ch->head && read(ch->evfd, &v, sizeof(v)) < 0)
		(void)0;
	return out;
}

static struct cm_evt *cm_evt_new(struct cm_id *c, enum rdma_cm_event_type type,
				 int status)
{
	struct cm_evt *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->ev.id = &c->id;
	e->ev.event = type;
	e->ev.status = status;
	e->owner = c;
	return e;
}

/* queue an event on the channel of the id it is about (the listener's for
 * a CONNECT_REQUEST) */
static void cm_post(struct cm_id *c, enum rdma_cm_event_type type, int status)
{
	struct cm_evt *e = cm_evt_new(c, type, status);

	if (e)
		cm_chan_push(cm_chan_of(c), e);
}

static void cm_conn_pd(struct cm_evt *e, const struct cm_wire *w, unsigned full)
{
	memcpy(e->pd, w->pd, w->pd_len);
	e->ev.param.conn.private_data = e->pd;
	e->ev.param.conn.private_data_len = (uint8_t)full;
}

static struct cm_id *cm_id_new(struct cm_chan *ch, void *context, enum rdma_port_space ps,
			       enum ibv_qp_type qpt)
{
	struct cm_id *c = calloc(1, sizeof(*c));
	uint32_t r;

	if (!c)
		return NULL;
	if (!ch) {
		ch = cm_chan_new();
		if (!ch) {
			free(c);
			return NULL;
		}
		c->sync = true;
	}
	c->id.channel = &ch->ch;
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qpt;
	c->bfd = c->cfd = c->tfd = -1;
	c->ack_timeout = 14;
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint32_t)cm_now_ns() * 2654435761u;
	c->psn = r & 0xffffff; /* fixed for the id's life, like the kernel's */
	if (cm_insert(c)) {
		if (c->sync)
			cm_chan_free(ch);
		free(c);
		return NULL;
	}
	return c;
}

static void cm_close_conn(struct cm_id *c)
{
	if (c->cfd >= 0) {
		cm_unwatch(c->cfd_chan, c->cfd);
		close(c->cfd);
		c->cfd = -1;
		c->cfd_chan = NULL;
	}
}

static int cm_arm(struct cm_id *c, uint64_t ms)
{
	struct itimerspec it = { 0 };

	if (c->tfd < 0) {
		c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (c->tfd < 0)
			return -errno;
		if (cm_watch(cm_chan_of(c), c->tfd, c, K_TIMER)) {
			close(c->tfd);
			c->tfd = -1;
			return -errno;
		}
	}
	it.it_value.tv_sec = (time_t)(ms / 1000);
	it.it_value.tv_nsec = (long)(ms % 1000) * 1000000;
	return timerfd_settime(c->tfd, 0, &it, NULL) ? -errno : 0;
}

static void cm_disarm(struct cm_id *c)
{
	struct itimerspec it = { 0 };

	if (c->tfd >= 0)
		timerfd_settime(c->tfd, 0, &it, NULL);
}

static int cm_send(struct cm_id *c, struct cm_wire *w)
{
	w->magic = CM_WIRE_MAGIC;
	if (c->cfd < 0)
		return -ENOTCONN;
	return send(c->cfd, w, sizeof(*w), MSG_NOSIGNAL | MSG_DONTWAIT) ==
			       (ssize_t)sizeof(*w)
		       ? 0
		       : -errno;
}

static void cm_send_simple(struct cm_id *c, uint8_t type, int32_t status)
{
	struct cm_wire w;

	memset(&w, 0, sizeof(w));
	w.type = type;
	w.status = status;
	cm_send(c, &w);
}

static void cm_qp_err(struct cm_id *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (c->id.qp)
		ibv_modify_qp(c->id.qp, &a, IBV_QP_STATE);
}

/* ---------------- binding ---------------- */

static int cm_bind_port(struct cm_id *c, uint16_t want, uint16_t *got)
{
	struct sockaddr_un un;
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	uint32_t r;

	if (fd < 0)
		return -errno;
	if (want) {
		len = cm_name(&un, cm_space(c), want);
		if (bind(fd, (struct sockaddr *)&un, len)) {
			int e = errno;

			close(fd);
			return -e;
		}
		*got = want;
		c->bfd = fd;
		return 0;
	}
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint32_t)cm_now_ns();
	for (unsigned i = 0; i < 28232; i++) {
		uint16_t p = (uint16_t)(32768 + (r + i) % 28232);

		len = cm_name(&un, cm_space(c), p);
		if (!bind(fd, (struct sockaddr *)&un, len)) {
			*got = p;
			c->bfd = fd;
			return 0;
		}
		if (errno != EADDRINUSE)
			break;
	}
	close(fd);
	return -EADDRINUSE;
}

static int cm_bind(struct cm_id *c, const struct sockaddr *sa)
{
	socklen_t len = cm_addrlen(sa);
	uint16_t port = 0;
	int ret;

	if (!len)
		return sa && sa->sa_family == AF_IB ? -EAFNOSUPPORT : -EINVAL;
	if (c->state != S_IDLE)
		return -EINVAL;
	if (!cm_addr_local(sa))
		return -EADDRNOTAVAIL;
	ret = cm_bind_port(c, cm_get_port(sa), &port);
	if (ret)
		return ret;
	memset(&c->id.route.addr.src_storage, 0, sizeof(c->id.route.addr.src_storage));
	memcpy(&c->id.route.addr.src_addr, sa, len);
	cm_set_port(&c->id.route.addr.src_addr, port);
	c->port = port;
	if (!cm_addr_any(sa))
		cm_attach_dev(c);
	c->state = S_BOUND;
	return 0;
}

/* ---------------- QP attributes (the kernel CM's rules) ---------------- */

static int cm_qp_attr(struct cm_id *c, struct ibv_qp_attr *a, int *mask)
{
	enum ibv_qp_state st = a->qp_state;
	bool rc_like = c->id.qp_type == IBV_QPT_RC || c->id.qp_type == IBV_QPT_XRC_RECV;

	if (!c->id.verbs)
		return -EINVAL;
	memset(a, 0, sizeof(*a));
	a->qp_state = st;
	if (cm_is_ud(c)) {
		switch (st) {
		case IBV_QPS_INIT:
			a->pkey_index = 0;
			a->port_num = 1;
			a->qkey = RDMA_UDP_QKEY;
			*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				IBV_QP_QKEY;
			return 0;
		case IBV_QPS_RTR:
			*mask = IBV_QP_STATE;
			return 0;
		case IBV_QPS_RTS:
			a->sq_psn = 0;
			*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
			return 0;
		default:
			return -EINVAL;
		}
	}
	switch (st) {
	case IBV_QPS_INIT:
		a->pkey_index = 0;
		a->port_num = 1;
		if (c->remote)
			a->qp_access_flags =
				IBV_ACCESS_REMOTE_WRITE |
				(c->resp_res ? IBV_ACCESS_REMOTE_READ |
						       IBV_ACCESS_REMOTE_ATOMIC
					     : 0);
		*mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
			IBV_QP_PORT;
		return 0;
	case IBV_QPS_RTR:
		if (!c->remote)
			return -EINVAL;
		cm_ah_attr(&a->ah_attr);
		a->path_mtu = cm_dev.port.active_mtu;
		a->dest_qp_num = c->rqpn;
		a->rq_psn = c->rpsn;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
		if (rc_like) {
			a->max_dest_rd_atomic = c->resp_res;
			a->min_rnr_timer = 0; /* what the kernel CM sets */
			*mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
		return 0;
	case IBV_QPS_RTS:
		if (!c->remote)
			return -EINVAL;
		a->sq_psn = c->psn;
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (c->id.qp_type != IBV_QPT_XRC_RECV) {
			a->timeout = c->ack_timeout;
			a->retry_cnt = c->retry;
			a->rnr_retry = c->rnr_retry;
			a->max_rd_atomic = c->init_depth;
			*mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_MAX_QP_RD_ATOMIC;
		}
		return 0;
	default:
		return -EINVAL;
	}
}

static int cm_modify(struct cm_id *c, enum ibv_qp_state st)
{
	struct ibv_qp_attr a = { .qp_state = st };
	int mask, ret = cm_qp_attr(c, &a, &mask);

	if (ret)
		return ret;
	ret = ibv_modify_qp(c->id.qp, &a, mask);
	return ret > 0 ? -ret : ret < 0 ? -(errno ? errno : EINVAL) : 0;
}

/* INIT again with the real access flags, then RTR and RTS */
static int cm_qp_connect(struct cm_id *c)
{
	int ret;

	if (!c->id.qp)
		return 0;
	ret = cm_modify(c, IBV_QPS_INIT);
	if (!ret)
		ret = cm_modify(c, IBV_QPS_RTR);
	if (!ret)
		ret = cm_modify(c, IBV_QPS_RTS);
	return ret;
}

/* ---------------- message handling ---------------- */

static void cm_destroy_locked(struct cm_id *c);

static void cm_on_req(struct cm_id *c, const struct cm_wire *w)
{
	struct cm_id *l = c->listener;
	struct cm_chan *lch, *cch = cm_chan_of(c);
	struct cm_evt *e;
	socklen_t len;

	if (!l || l->state != S_LISTEN) {
		cm_destroy_locked(c);
		return;
	}
	lch = cm_chan_of(l);
	e = cm_evt_new(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e) {
		cm_destroy_locked(c);
		return;
	}
	len = cm_addrlen((const struct sockaddr *)&w->dst);
	if (len)
		memcpy(&c->id.route.addr.src_storage, &w->dst, len);
	len = cm_addrlen((const struct sockaddr *)&w->src);
	if (len)
		memcpy(&c->id.route.addr.dst_storage, &w->src, len);
	cm_attach_dev(c);
	cm_fill_path(c);
	c->id.pd = l->id.pd ? l->id.pd : cm_dev.pd;
	c->remote = true;
	c->rqpn = w->qpn;
	c->rpsn = w->psn;
	c->resp_res = w->init_depth; /* the two sides' values swap */
	c->init_depth = w->resp_res;
	c->retry = w->retry;
	c->rnr_retry = w->rnr_retry;
	c->state = S_REQ_RCVD;
	if (cch != lch && c->cfd >= 0) {
		cm_unwatch(lch, c->cfd);
		if (!cm_watch(cch, c->cfd, c, K_CONN))
			c->cfd_chan = cch;
		else
			c->cfd_chan = NULL;
	}
	e->ev.id = &c->id;
	e->ev.listen_id = &l->id;
	if (w->type == M_SIDR_REQ) {
		memcpy(e->pd, w->pd, w->pd_len);
		e->ev.param.ud.private_data = e->pd;
		e->ev.param.ud.private_data_len = cm_pd_max(c, CM_SIDR_REQ);
		cm_ah_attr(&e->ev.param.ud.ah_attr);
		e->ev.param.ud.qp_num = w->qpn;
		e->ev.param.ud.qkey = w->qkey;
	} else {
		cm_conn_pd(e, w, cm_pd_max(c, CM_REQ_PD));
		e->ev.param.conn.responder_resources = c->resp_res;
		e->ev.param.conn.initiator_depth = c->init_depth;
		e->ev.param.conn.flow_control = w->flow;
		e->ev.param.conn.retry_count = w->retry;
		e->ev.param.conn.rnr_retry_count = w->rnr_retry;
		e->ev.param.conn.srq = w->srq;
		e->ev.param.conn.qp_num = w->qpn;
	}
	cm_chan_push(lch, e);
}

static void cm_on_rep(struct cm_id *c, const struct cm_wire *w)
{
	struct cm_evt *e;
	int ret;

	cm_disarm(c);
	c->remote = true;
	c->rqpn = w->qpn;
	c->rpsn = w->psn;
	c->resp_res = w->init_depth;
	c->init_depth = w->resp_res;
	c->rnr_retry = w->rnr_retry;
	e = cm_evt_new(c, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
	if (!e)
		return;
	cm_conn_pd(e, w, CM_REP_PD);
	e->ev.param.conn.responder_resources = c->resp_res;
	e->ev.param.conn.initiator_depth = c->init_depth;
	e->ev.param.conn.flow_control = w->flow;
	e->ev.param.conn.rnr_retry_count = w->rnr_retry;
	e->ev.param.conn.srq = w->srq;
	e->ev.param.conn.qp_num = w->qpn;
	if (!c->id.qp) {
		c->state = S_REP_RCVD;
	} else if ((ret = cm_qp_connect(c))) {
		/* as librdmacm reports it: CONNECT_ERROR, status -1, and the
		 * passive side is told with a REJ */
		cm_qp_err(c);
		cm_send_simple(c, M_REJ, CM_REJ_CONSUMER);
		cm_close_conn(c);
		c->state = S_CLOSED;
		e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
		e->ev.status = -1;
	} else {
		cm_send_simple(c, M_RTU, 0);
		c->state = S_ESTABLISHED;
		e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
	}
	cm_chan_push(cm_chan_of(c), e);
}

static void cm_on_rej(struct cm_id *c, const struct cm_wire *w)
{
	struct cm_evt *e = cm_evt_new(c, RDMA_CM_EVENT_REJECTED, w->status);

	cm_disarm(c);
	cm_qp_err(c);
	cm_close_conn(c);
	c->state = S_CLOSED;
	if (!e)
		return;
	cm_conn_pd(e, w, CM_REJ_PD);
	cm_chan_push(cm_chan_of(c), e);
}

static void cm_on_sidr_rep(struct cm_id *c, const struct cm_wire *w)
{
	struct cm_evt *e;

	cm_disarm(c);
	cm_close_conn(c);
	if (w->status) {
		c->state = S_CLOSED;
		cm_post(c, RDMA_CM_EVENT_UNREACHABLE, w->status);
		return;
	}
	c->state = S_ESTABLISHED;
	e = cm_evt_new(c, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!e)
		return;
	memcpy(e->pd, w->pd, w->pd_len);
	e->ev.param.ud.private_data = e->pd;
	e->ev.param.ud.private_data_len = CM_SIDR_REP;
	cm_ah_attr(&e->ev.param.ud.ah_attr);
	e->ev.param.ud.qp_num = w->qpn;
	e->ev.param.ud.qkey = w->qkey;
	cm_chan_push(cm_chan_of(c), e);
}

/* the peer closed its end: what its kernel CM would have sent on its death */
static void cm_on_eof(struct cm_id *c)
{
	enum cm_state st = c->state;

	cm_disarm(c);
	cm_close_conn(c);
	switch (st) {
	case S_PENDING:
		cm_destroy_locked(c);
		return;
	case S_CONNECTING:
		c->state = S_CLOSED;
		cm_qp_err(c);
		if (cm_is_ud(c))
			cm_post(c, RDMA_CM_EVENT_UNREACHABLE, CM_SIDR_REJECT);
		else
			cm_post(c, RDMA_CM_EVENT_REJECTED, CM_REJ_CONSUMER);
		return;
	case S_REQ_RCVD:
	case S_REP_SENT:
	case S_REP_RCVD:
		if (cm_is_ud(c))
			return; /* a SIDR exchange needs no connection */
		c->state = S_CLOSED;
		cm_qp_err(c);
		cm_post(c, RDMA_CM_EVENT_REJECTED,
			st == S_REQ_RCVD ? CM_REJ_TIMEOUT : CM_REJ_CONSUMER);
		return;
	case S_ESTABLISHED:
	case S_DREQ_SENT:
		c->state = S_DISCONNECTED;
		cm_post(c, RDMA_CM_EVENT_DISCONNECTED, 0);
		return;
	default:
		return;
	}
}

static void cm_on_msg(struct cm_id *c, const struct cm_wire *w)
{
	switch (w->type) {
	case M_REQ:
	case M_SIDR_REQ:
		if (c->state == S_PENDING)
			cm_on_req(c, w);
		return;
	case M_REP:
		if (c->state == S_CONNECTING)
			cm_on_rep(c, w);
		return;
	case M_SIDR_REP:
		if (c->state == S_CONNECTING)
			cm_on_sidr_rep(c, w);
		return;
	case M_RTU:
		if (c->state == S_REP_SENT) {
			cm_disarm(c);
			c->state = S_ESTABLISHED;
			cm_post(c, RDMA_CM_EVENT_ESTABLISHED, 0);
		}
		return;
	case M_REJ:
		if (c->state == S_CONNECTING || c->state == S_REP_SENT ||
		    c->state == S_REP_RCVD || c->state == S_REQ_RCVD)
			cm_on_rej(c, w);
		return;
	case M_DREQ:
		if (c->state == S_ESTABLISHED || c->state == S_DREQ_SENT ||
		    c->state == S_REP_SENT || c->state == S_REP_RCVD) {
			cm_disarm(c);
			cm_send_simple(c, M_DREP, 0);
			c->state = S_DISCONNECTED;
			cm_post(c, RDMA_CM_EVENT_DISCONNECTED, 0);
		}
		return;
	case M_DREP:
		if (c->state == S_DREQ_SENT) {
			cm_disarm(c);
			c->state = S_DISCONNECTED;
			cm_post(c, RDMA_CM_EVENT_DISCONNECTED, 0);
		}
		return;
	default:
		return;
	}
}

static int cm_try_connect(struct cm_id *c);
static void cm_on_conn(struct cm_id *c);

static void cm_on_timer(struct cm_id *c)
{
	uint64_t v;

	if (read(c->tfd, &v, sizeof(v)) != sizeof(v))
		return;
	switch (c->state) {
	case S_CONNECTING:
		if (c->req && cm_now_ns() < c->deadline_ns) {
			cm_try_connect(c); /* the listener's backlog was full */
			return;
		}
		cm_close_conn(c);
		c->state = S_CLOSED;
		cm_post(c, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
		return;
	case S_REP_SENT:
		cm_close_conn(c);
		c->state = S_CLOSED;
		cm_post(c, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
		return;
	case S_DREQ_SENT:
		cm_close_conn(c);
		c->state = S_DISCONNECTED;
		cm_post(c, RDMA_CM_EVENT_DISCONNECTED, -ETIMEDOUT);
		return;
	default:
		return;
	}
}

static void cm_on_accept(struct cm_id *l)
{
	for (;;) {
		int fd = accept4(l->bfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct cm_id *c;

		if (fd < 0)
			return;
		c = cm_id_new(l->sync ? NULL : cm_chan_of(l), l->id.context, l->id.ps,
			      l->id.qp_type);
		if (!c) {
			close(fd);
			continue;
		}
		c->state = S_PENDING;
		c->listener = l;
		c->cfd = fd;
		if (cm_watch(cm_chan_of(l), fd, c, K_CONN)) {
			cm_destroy_locked(c);
			continue;
		}
		c->cfd_chan = cm_chan_of(l);
		cm_on_conn(c); /* the REQ is usually there already */
	}
}

static void cm_on_conn(struct cm_id *c)
{
	for (;;) {
		struct cm_wire w;
		ssize_t n = recv(c->cfd, &w, sizeof(w), MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			cm_on_eof(c);
			return;
		}
		if (n == (ssize_t)sizeof(w) && w.magic == CM_WIRE_MAGIC) {
			bool req = w.type == M_REQ || w.type == M_SIDR_REQ;

			cm_on_msg(c, &w);
			if (req)
				return; /* c may be gone; its next message comes anyway */
		}
		if (c->cfd < 0)
			return;
	}
}

static void cm_dispatch(uint64_t data)
{
	struct cm_id *c = cm_lookup(data);

	if (!c)
		return;
	switch (data & 3) {
	case K_BIND:
		if (c->state == S_LISTEN)
			cm_on_accept(c);
		return;
	case K_CONN:
		if (c->cfd >= 0)
			cm_on_conn(c);
		return;
	case K_TIMER:
		if (c->tfd >= 0)
			cm_on_timer(c);
		return;
	default:
		return;
	}
}

/* ---------------- getting and acking events ---------------- */

/* A join is given to the program with its QP attached to the group (as
 * librdmacm does when it reads the event); a failed attach turns it into
 * MULTICAST_ERROR with librdmacm's status, -1 and errno. */
static void cm_mc_deliver(struct cm_evt *e)
{
	struct cm_id *c = e->owner;
	int ret;

	e->mc->reported++;
	if (e->ev.event != RDMA_CM_EVENT_MULTICAST_JOIN || !c->id.qp || e->mc->sendonly ||
	    e->mc->attached)
		return;
	ret = ibv_attach_mcast(c->id.qp, &e->mc->mgid, e->mc->mlid);
	if (ret) {
		errno = ret > 0 ? ret : errno;
		e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
		e->ev.status = -1;
		return;
	}
	e->mc->attached = true;
}

static int cm_get_event(struct cm_chan *ch, struct rdma_cm_event **out)
{
	struct epoll_event evs[16];
	struct cm_evt *e;
	int n;

	pthread_mutex_lock(&cm_mu);
	ch->users++;
	for (;;) {
		bool nonblock;

		if (ch->dead) {
			/* the program destroyed the channel under this thread: with
			 * the kernel's fd the call would block until exit; so here */
			pthread_mutex_unlock(&cm_mu);
			for (;;)
				pause();
		}
		e = cm_chan_pop(ch);
		if (e) {
			e->owner->reported++;
			if (e->mc)
				cm_mc_deliver(e);
			ch->users--;
			pthread_mutex_unlock(&cm_mu);
			cm_evlog(&e->ev);
			*out = &e->ev;
			return 0;
		}
		nonblock = fcntl(ch->ch.fd, F_GETFL) & O_NONBLOCK;
		pthread_mutex_unlock(&cm_mu);
		n = epoll_wait(ch->ch.fd, evs, 16, nonblock ? 0 : -1);
		pthread_mutex_lock(&cm_mu);
		if (ch->dead)
			continue;
		if (n < 0 && errno != EINTR) {
			int err = errno;

			ch->users--;
			pthread_mutex_unlock(&cm_mu);
			return cm_err(err);
		}
		for (int i = 0; i < n; i++)
			if (evs[i].data.u64)
				cm_dispatch(evs[i].data.u64);
		if (n == 0 && nonblock && !ch->head) {
			ch->users--;
			pthread_mutex_unlock(&cm_mu);
			return cm_err(EAGAIN);
		}
	}
}

static void cm_ack_locked(struct rdma_cm_event *event)
{
	struct cm_evt *e = (struct cm_evt *)event;

	e->owner->completed++;
	if (e->mc)
		e->mc->completed++;
	pthread_cond_broadcast(&cm_cv);
	free(e);
}

/* a synchronous id's call waits for its own event, as librdmacm does: through
 * the exported rdma_get_cm_event / rdma_ack_cm_event (the PLT), as Debian's
 * library does, so that a preloaded tracer sees the events (nested in the call) */
static int cm_complete(struct cm_id *c)
{
	struct rdma_cm_event *ev;

	if (!c->sync)
		return 0;
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	if (rdma_get_cm_event(&cm_chan_of(c)->ch, &ev))
		return -1;
	c->id.event = ev;
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return cm_err(ECONNREFUSED);
		return cm_err(ev->status < 0 ? -ev->status : ev->status);
	}
	return 0;
}

/* ---------------- destroy ---------------- */

static void cm_destroy_locked(struct cm_id *c)
{
	struct cm_chan *ch = cm_chan_of(c);
	struct cm_evt *e, *n;

	if (c->sync && c->id.event) {
		cm_ack_locked(c->id.event);
		c->id.event = NULL;
	}
	cm_close_conn(c);
	if (c->bfd >= 0) {
		cm_unwatch(ch, c->bfd);
		close(c->bfd);
		c->bfd = -1;
	}
	if (c->tfd >= 0) {
		cm_unwatch(ch, c->tfd);
		close(c->tfd);
		c->tfd = -1;
	}
	c->state = S_CLOSED;
	/* events nobody was given yet go away; a CONNECT_REQUEST takes its
	 * never-seen child along */
	for (e = cm_chan_take(ch, c); e; e = n) {
		n = e->next;
		if (e->ev.id != &c->id && e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct cm_id *child = (struct cm_id *)e->ev.id;

			free(e);
			cm_destroy_locked(child);
			continue;
		}
		free(e);
	}
	for (uint32_t i = 0; i < cm_tab_n; i++) {
		struct cm_id *k = cm_tab[i];

		if (!k || k->listener != c)
			continue;
		if (k->state == S_PENDING)
			cm_destroy_locked(k);
		else
			k->listener = NULL;
	}
	while (c->completed < c->reported)
		pthread_cond_wait(&cm_cv, &cm_mu);
	cm_tab[c->slot] = NULL;
	if (c->sync)
		cm_chan_free(ch);
	while (c->mcs) {
		struct cm_mc *m = c->mcs;

		c->mcs = m->next;
		if (m->attached && c->id.qp)
			ibv_detach_mcast(c->id.qp, &m->mgid, m->mlid);
		free(m);
	}
	free(c->ep_attr);
	free(c->req);
	free(c);
}

/* ---------------- exported: channels and ids ---------------- */

CM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_chan *ch;

	pthread_mutex_lock(&cm_mu);
	cm_dev_init();
	pthread_mutex_unlock(&cm_mu);
	if (cm_dev.err) {
		errno = -cm_dev.err;
		return NULL;
	}
	ch = cm_chan_new();
	if (!ch)
		errno = ENOMEM;
	return ch ? &ch->ch : NULL;
}

CM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct cm_chan *ch = (struct cm_chan *)channel;
	uint64_t one = 1;

	pthread_mutex_lock(&cm_mu);
	if (ch->users) {
		/* a thread waits in it: wake it to park; the memory stays */
		ch->dead = true;
		if (write(ch->evfd, &one, sizeof(one)) < 0)
			(void)0;
	} else {
		cm_chan_free(ch);
	}
	pthread_mutex_unlock(&cm_mu);
}

static int cm_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			void *context, enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	struct cm_id *c;
	int ret;

	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	ret = cm_dev_init();
	if (ret) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(-ret);
	}
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB &&
	    ps != RDMA_PS_IB) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	c = cm_id_new((struct cm_chan *)channel, context, ps, qpt);
	pthread_mutex_unlock(&cm_mu);
	if (!c)
		return cm_err(ENOMEM);
	*id = &c->id;
	return 0;
}

CM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			     void *context, enum rdma_port_space ps)
{
	return cm_create_id(channel, id, context, ps,
			    ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP ? IBV_QPT_UD
								     : IBV_QPT_RC);
}

CM_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	cm_destroy_locked((struct cm_id *)id);
	pthread_mutex_unlock(&cm_mu);
	return 0;
}

static int cm_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	int ret;

	if (!id || !addr)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	ret = cm_bind((struct cm_id *)id, addr);
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

CM_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	return cm_bind_addr(id, addr);
}

static int cm_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
			   struct sockaddr *dst_addr, int timeout_ms)
{
	struct cm_id *c = (struct cm_id *)id;
	socklen_t dlen = cm_addrlen(dst_addr);
	int ret = 0;

	(void)timeout_ms;
	if (!id || !dlen || (src_addr && !cm_addrlen(src_addr)))
		return cm_err(dst_addr && dst_addr->sa_family == AF_IB ? EAFNOSUPPORT
								       : EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_IDLE && c->state != S_BOUND && c->state != S_ADDR) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	memset(&c->id.route.addr.dst_storage, 0, sizeof(c->id.route.addr.dst_storage));
	memcpy(&c->id.route.addr.dst_addr, dst_addr, dlen);
	if (!cm_addr_local(dst_addr) && !cm_addr_mcast(dst_addr)) {
		/* an address on no RDMA device: the event says so */
		cm_post(c, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV);
		pthread_mutex_unlock(&cm_mu);
		return cm_complete(c);
	}
	if (c->state == S_IDLE) {
		struct sockaddr_storage src;

		memset(&src, 0, sizeof(src));
		if (src_addr)
			memcpy(&src, src_addr, cm_addrlen(src_addr));
		else if ((cm_addr_any(dst_addr) || cm_addr_mcast(dst_addr)) &&
			 dst_addr->sa_family == AF_INET)
			((struct sockaddr_in *)&src)->sin_family = AF_INET,
					     ((struct sockaddr_in *)&src)
						     ->sin_addr.s_addr =
						     htonl(INADDR_LOOPBACK);
		else {
			memcpy(&src, dst_addr, dlen);
			cm_set_port((struct sockaddr *)&src, 0);
		}
		ret = cm_bind(c, (struct sockaddr *)&src);
		if (ret) {
			pthread_mutex_unlock(&cm_mu);
			return cm_err(-ret);
		}
	}
	cm_attach_dev(c);
	c->state = S_ADDR;
	cm_post(c, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

CM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
				struct sockaddr *dst_addr, int timeout_ms)
{
	return cm_resolve_addr(id, src_addr, dst_addr, timeout_ms);
}

static int cm_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cm_id *c = (struct cm_id *)id;

	(void)timeout_ms;
	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_ADDR && c->state != S_ROUTE) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	cm_fill_path(c);
	c->state = S_ROUTE;
	cm_post(c, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

CM_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	return cm_resolve_route(id, timeout_ms);
}

CM_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct cm_id *c = (struct cm_id *)id;
	int ret = 0;

	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state == S_IDLE) {
		struct sockaddr_in any = { .sin_family = AF_INET };

		ret = cm_bind(c, (struct sockaddr *)&any);
	}
	if (!ret && c->state == S_LISTEN)
		goto out;
	if (!ret && c->state != S_BOUND)
		ret = -EINVAL;
	if (!ret && listen(c->bfd, backlog > 128 ? backlog : 128))
		ret = -errno;
	if (!ret)
		ret = cm_watch(cm_chan_of(c), c->bfd, c, K_BIND);
	if (!ret)
		c->state = S_LISTEN;
out:
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

/* (re)try the connect() of a REQ: the listener may be absent or full */
static int cm_try_connect(struct cm_id *c)
{
	struct sockaddr_un un;
	socklen_t len =
		cm_name(&un, cm_space(c), cm_get_port(&c->id.route.addr.dst_addr));
	int ret;

	if (c->cfd < 0) {
		c->cfd =
			socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c->cfd < 0)
			return -errno;
	}
	if (connect(c->cfd, (struct sockaddr *)&un, len)) {
		ret = errno;
		if (ret == EAGAIN) {
			uint64_t left = (c->deadline_ns - cm_now_ns()) / 1000000;

			return cm_arm(c, left < 10 ? (left ? left : 1) : 10);
		}
		close(c->cfd);
		c->cfd = -1;
		free(c->req);
		c->req = NULL;
		if (ret != ECONNREFUSED && ret != ENOENT)
			return -ret;
		/* nobody listens there: an invalid service id */
		c->state = S_CLOSED;
		cm_qp_err(c);
		if (cm_is_ud(c)) {
			cm_post(c, RDMA_CM_EVENT_UNREACHABLE, CM_SIDR_UNSUPPORTED);
		} else {
			struct cm_evt *e = cm_evt_new(c, RDMA_CM_EVENT_REJECTED,
						      CM_REJ_INVALID_SERVICE);

			if (e) {
				e->ev.param.conn.private_data = e->pd;
				e->ev.param.conn.private_data_len = CM_REJ_PD;
				cm_chan_push(cm_chan_of(c), e);
			}
		}
		return 0;
	}
	ret = cm_watch(cm_chan_of(c), c->cfd, c, K_CONN);
	if (ret)
		return ret;
	c->cfd_chan = cm_chan_of(c);
	ret = cm_send(c, c->req);
	free(c->req);
	c->req = NULL;
	if (ret)
		return ret;
	return cm_arm(c, (c->deadline_ns - cm_now_ns()) / 1000000 + 1);
}

CM_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct cm_id *c = (struct cm_id *)id;
	struct cm_wire *w;
	unsigned max;
	int ret;

	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_ROUTE) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	if (!cm_is_ud(c) && c->id.ps == RDMA_PS_TCP &&
	    ((!c->id.qp && !p) ||
	     (p && p->responder_resources != RDMA_MAX_RESP_RES &&
	      p->responder_resources > cm_dev.max_resp_res) ||
	     (p && p->initiator_depth != RDMA_MAX_INIT_DEPTH &&
	      p->initiator_depth > cm_dev.max_init_depth))) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	max = cm_pd_max(c, cm_is_ud(c) ? CM_SIDR_REQ : CM_REQ_PD);
	if (p && p->private_data_len && c->connect_len + p->private_data_len > max) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(ENOMEM);
	}
	c->init_depth = p && p->initiator_depth != RDMA_MAX_INIT_DEPTH
				? p->initiator_depth
				: cm_dev.max_init_depth;
	c->resp_res = p && p->responder_resources != RDMA_MAX_RESP_RES
			      ? p->responder_resources
			      : cm_dev.max_resp_res;
	c->retry = p ? p->retry_count & 7 : 7;
	c->rnr_retry = p ? p->rnr_retry_count & 7 : 7;
	w->type = cm_is_ud(c) ? M_SIDR_REQ : M_REQ;
	w->resp_res = c->resp_res;
	w->init_depth = c->init_depth;
	w->retry = c->retry;
	w->rnr_retry = c->rnr_retry;
	w->flow = p ? p->flow_control : 0;
	w->qpn = c->id.qp ? c->id.qp->qp_num : p ? p->qp_num : 0;
	w->srq = c->id.qp ? !!c->id.qp->srq : p ? p->srq : 0;
	w->psn = c->psn;
	w->qkey = RDMA_UDP_QKEY;
	memcpy(&w->src, &c->id.route.addr.src_storage, sizeof(w->src));
	memcpy(&w->dst, &c->id.route.addr.dst_storage, sizeof(w->dst));
	memcpy(w->pd, c->connect_pd, c->connect_len);
	w->pd_len = c->connect_len;
	if (p && p->private_data && p->private_data_len) {
		memcpy(w->pd + w->pd_len, p->private_data, p->private_data_len);
		w->pd_len = (uint8_t)(w->pd_len + p->private_data_len);
	}
	c->connect_len = 0;
	c->req = w;
	c->state = S_CONNECTING;
	c->deadline_ns = cm_now_ns() + cm_dev.timeout_ms * 1000000ull;
	ret = cm_try_connect(c);
	if (ret) {
		free(c->req);
		c->req = NULL;
		cm_close_conn(c);
		c->state = S_ROUTE;
		pthread_mutex_unlock(&cm_mu);
		return cm_err(-ret);
	}
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

CM_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	struct cm_id *c = (struct cm_id *)id;
	int ret = 0;

	if (!id || id->qp)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_REP_RCVD)
		ret = -EINVAL;
	else {
		cm_send_simple(c, M_RTU, 0);
		c->state = S_ESTABLISHED;
	}
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

CM_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct cm_id *c = (struct cm_id *)id;
	struct cm_wire w;
	int ret;

	if (!id || (!id->qp && !p))
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if (c->state != S_REQ_RCVD) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	if (p && p->private_data_len > (cm_is_ud(c) ? CM_SIDR_REP : CM_REP_PD)) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	memset(&w, 0, sizeof(w));
	if (p && p->private_data && p->private_data_len) {
		memcpy(w.pd, p->private_data, p->private_data_len);
		w.pd_len = p->private_data_len;
	}
	if (cm_is_ud(c)) {
		w.type = M_SIDR_REP;
		w.qpn = id->qp ? id->qp->qp_num : p->qp_num;
		w.qkey = RDMA_UDP_QKEY;
		ret = cm_send(c, &w);
		cm_close_conn(c);
		c->state = S_CLOSED;
		pthread_mutex_unlock(&cm_mu);
		return ret ? cm_err(-ret) : 0;
	}
	if (!p || p->initiator_depth == RDMA_MAX_INIT_DEPTH) {
		if (c->init_depth > cm_dev.max_init_depth)
			c->init_depth = cm_dev.max_init_depth;
	} else {
		c->init_depth = p->initiator_depth;
	}
	if (!p || p->responder_resources == RDMA_MAX_RESP_RES) {
		if (c->resp_res > cm_dev.max_resp_res)
			c->resp_res = cm_dev.max_resp_res;
	} else {
		c->resp_res = p->responder_resources;
	}
	ret = cm_qp_connect(c);
	if (ret) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(-ret);
	}
	w.type = M_REP;
	w.qpn = id->qp ? id->qp->qp_num : p->qp_num;
	w.srq = id->qp ? !!id->qp->srq : p->srq;
	w.psn = c->psn;
	w.resp_res = c->resp_res;
	w.init_depth = c->init_depth;
	/* the REP's RNR retry count is for the active side's QP (IB CM) */
	w.rnr_retry = p ? p->rnr_retry_count & 7 : 7;
	w.flow = p ? p->flow_control : 0;
	ret = cm_send(c, &w);
	if (ret) {
		cm_qp_err(c);
		pthread_mutex_unlock(&cm_mu);
		return cm_err(-ret);
	}
	c->state = S_REP_SENT;
	cm_arm(c, cm_dev.timeout_ms);
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

static int cm_reject(struct rdma_cm_id *id, const void *pd, uint8_t len, int reason)
{
	struct cm_id *c = (struct cm_id *)id;
	struct cm_wire w;
	int ret = 0;

	if (!id)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if ((c->state != S_REQ_RCVD && c->state != S_REP_RCVD) ||
	    len > (cm_is_ud(c) ? CM_SIDR_REP : CM_REJ_PD)) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	memset(&w, 0, sizeof(w));
	if (pd && len) {
		memcpy(w.pd, pd, len);
		w.pd_len = len;
	}
	if (cm_is_ud(c)) {
		w.type = M_SIDR_REP;
		w.status = CM_SIDR_REJECT;
	} else {
		w.type = M_REJ;
		w.status = reason;
	}
	ret = cm_send(c, &w);
	cm_close_conn(c);
	c->state = S_CLOSED;
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

CM_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data,
			  uint8_t private_data_len)
{
	return cm_reject(id, private_data, private_data_len, CM_REJ_CONSUMER);
}

CM_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			      uint8_t private_data_len)
{
	return cm_reject(id, private_data, private_data_len, CM_REJ_VENDOR_OPTION);
}

CM_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	return id ? 0 : cm_err(EINVAL);
}

CM_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cm_id *c = (struct cm_id *)id;
	bool wait = false;
	int ret = 0;

	if (!id || !id->verbs)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	cm_qp_err(c);
	switch (c->state) {
	case S_ESTABLISHED:
	case S_REP_SENT:
	case S_REP_RCVD:
		if (cm_is_ud(c)) {
			ret = -EINVAL;
			break;
		}
		cm_send_simple(c, M_DREQ, 0);
		c->state = S_DREQ_SENT;
		cm_arm(c, cm_dev.timeout_ms);
		wait = true;
		break;
	case S_DISCONNECTED:
		/* the DREQ came first: its DREP is gone already */
		wait = cm_chan_of(c)->head != NULL;
		break;
	case S_DREQ_SENT:
		break;
	default:
		ret = -EINVAL;
	}
	pthread_mutex_unlock(&cm_mu);
	if (ret)
		return cm_err(-ret);
	return wait ? cm_complete(c) : 0;
}

CM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel,
				struct rdma_cm_event **event)
{
	if (!channel || !event)
		return cm_err(EINVAL);
	return cm_get_event((struct cm_chan *)channel, event);
}

CM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	cm_ack_locked(event);
	pthread_mutex_unlock(&cm_mu);
	return 0;
}

CM_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cm_id *c = (struct cm_id *)id;
	struct cm_chan *old, *nu;
	struct cm_evt *e, *n;
	bool sync = !channel;

	if (!id || (c->sync && !channel))
		return cm_err(EINVAL);
	nu = channel ? (struct cm_chan *)channel : cm_chan_new();
	if (!nu)
		return cm_err(ENOMEM);
	pthread_mutex_lock(&cm_mu);
	old = cm_chan_of(c);
	if (old == nu) {
		pthread_mutex_unlock(&cm_mu);
		return 0;
	}
	if (c->bfd >= 0 && c->state == S_LISTEN) {
		cm_unwatch(old, c->bfd);
		cm_watch(nu, c->bfd, c, K_BIND);
	}
	if (c->cfd >= 0 && c->cfd_chan == old) {
		cm_unwatch(old, c->cfd);
		c->cfd_chan = cm_watch(nu, c->cfd, c, K_CONN) ? NULL : nu;
	}
	if (c->tfd >= 0) {
		cm_unwatch(old, c->tfd);
		cm_watch(nu, c->tfd, c, K_TIMER);
	}
	for (uint32_t i = 0; i < cm_tab_n; i++) {
		struct cm_id *k = cm_tab[i];

		if (k && k->listener == c && k->state == S_PENDING &&
		    k->cfd_chan == old) {
			cm_unwatch(old, k->cfd);
			k->cfd_chan = cm_watch(nu, k->cfd, k, K_CONN) ? NULL : nu;
		}
	}
	for (e = cm_chan_take(old, c); e; e = n) {
		n = e->next;
		cm_chan_push(nu, e);
	}
	if (c->sync) {
		if (c->id.event) {
			cm_ack_locked(c->id.event);
			c->id.event = NULL;
		}
	}
	c->id.channel = &nu->ch;
	if (c->sync)
		cm_chan_free(old);
	c->sync = sync;
	while (c->completed < c->reported)
		pthread_cond_wait(&cm_cv, &cm_mu);
	pthread_mutex_unlock(&cm_mu);
	return 0;
}

CM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				int *qp_attr_mask)
{
	int ret;

	if (!id || !qp_attr || !qp_attr_mask)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	ret = cm_qp_attr((struct cm_id *)id, qp_attr, qp_attr_mask);
	pthread_mutex_unlock(&cm_mu);
	return ret ? cm_err(-ret) : 0;
}

CM_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
			      size_t optlen)
{
	struct cm_id *c = (struct cm_id *)id;

	if (!id || !optval)
		return cm_err(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			return optlen == sizeof(uint8_t) ? 0 : cm_err(EINVAL);
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			return optlen == sizeof(int) ? 0 : cm_err(EINVAL);
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				return cm_err(EINVAL);
			c->ack_timeout = *(uint8_t *)optval & 31;
			return 0;
		default:
			return cm_err(ENOSYS);
		}
	}
	if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH)
		return optlen >= sizeof(struct ibv_path_data) ? 0 : cm_err(EINVAL);
	return cm_err(ENOSYS);
}

CM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return htons(cm_get_port(&id->route.addr.src_addr));
}

CM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return htons(cm_get_port(&id->route.addr.dst_addr));
}

CM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **l = calloc(2, sizeof(*l));

	pthread_mutex_lock(&cm_mu);
	cm_dev_init();
	pthread_mutex_unlock(&cm_mu);
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = cm_dev.ctx;
	if (num_devices)
		*num_devices = cm_dev.ctx ? 1 : 0;
	return l;
}

CM_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

CM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	return cm_ev_name(event);
}

/* ---------------- QPs, CQs, SRQs ---------------- */

static void cm_destroy_cqs(struct rdma_cm_id *id)
{
	if (id->qp_type == IBV_QPT_XRC_RECV && id->srq)
		return;
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq)
			ibv_destroy_cq(id->send_cq);
		id->recv_cq = id->send_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
		id->recv_cq_channel = id->send_cq_channel = NULL;
	}
}

static int cm_create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id,
					    id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id,
					    id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	cm_destroy_cqs(id);
	return -1;
}

static struct ibv_xrcd *cm_xrcd(void)
{
	pthread_mutex_lock(&cm_mu);
	if (!cm_dev.xrcd) {
		struct ibv_xrcd_init_attr a = {
			.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
			.fd = -1,
			.oflags = O_CREAT,
		};

		cm_dev.xrcd = ibv_open_xrcd(cm_dev.ctx, &a);
	}
	pthread_mutex_unlock(&cm_mu);
	return cm_dev.xrcd;
}

static int cm_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cm_id *c = (struct cm_id *)id;
	struct ibv_qp *qp;
	int ret;

	if (!id || !attr || id->qp || !id->verbs)
		return cm_err(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (id->verbs != attr->pd->context) {
		return cm_err(EINVAL);
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return cm_err(EINVAL);
	if (id->qp_type == IBV_QPT_XRC_RECV &&
	    (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)) {
		attr->xrcd = cm_xrcd();
		if (!attr->xrcd)
			return -1;
		attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
	}
	if (cm_create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
			  attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		cm_destroy_cqs(id);
		return -1;
	}
	pthread_mutex_lock(&cm_mu);
	id->qp = qp;
	if (cm_is_ud(c)) {
		ret = cm_modify(c, IBV_QPS_INIT);
		if (!ret)
			ret = cm_modify(c, IBV_QPS_RTR);
		if (!ret)
			ret = cm_modify(c, IBV_QPS_RTS);
	} else {
		/* access 0 until the connection says more, as the kernel does */
		bool remote = c->remote;

		c->remote = false;
		ret = cm_modify(c, IBV_QPS_INIT);
		c->remote = remote;
	}
	if (ret)
		id->qp = NULL;
	pthread_mutex_unlock(&cm_mu);
	if (ret) {
		ibv_destroy_qp(qp);
		cm_destroy_cqs(id);
		return cm_err(-ret);
	}
	id->pd = qp->pd;
	return 0;
}

CM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id,
				struct ibv_qp_init_attr_ex *qp_init_attr)
{
	return cm_create_qp_ex(id, qp_init_attr);
}

static int cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ax;
	int ret;

	if (!id || !qp_init_attr)
		return cm_err(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, qp_init_attr, sizeof(*qp_init_attr));
	ax.comp_mask = IBV_QP_INIT_ATTR_PD;
	ax.pd = pd ? pd : id->pd;
	ret = cm_create_qp_ex(id, &ax);
	memcpy(qp_init_attr, &ax, sizeof(*qp_init_attr));
	return ret;
}

CM_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			     struct ibv_qp_init_attr *qp_init_attr)
{
	return cm_create_qp(id, pd, qp_init_attr);
}

static void cm_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	cm_destroy_cqs(id);
}

CM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id)
		cm_destroy_qp(id);
}

static int cm_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;

	if (!id || !attr || !id->verbs || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return cm_err(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (attr->srq_type == IBV_SRQT_XRC) {
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) {
			attr->xrcd = cm_xrcd();
			if (!attr->xrcd)
				return -1;
		}
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
			if (cm_create_cqs(id, 0, attr->attr.max_wr))
				return -1;
			attr->cq = id->recv_cq;
		}
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	}
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq) {
		cm_destroy_cqs(id);
		return -1;
	}
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

CM_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	return cm_create_srq_ex(id, attr);
}

CM_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ax;
	int ret;

	if (!id || !attr)
		return cm_err(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, attr, sizeof(*attr));
	ax.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ax.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	ax.pd = pd;
	ret = cm_create_srq_ex(id, &ax);
	memcpy(attr, &ax, sizeof(*attr));
	return ret;
}

static void cm_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
	cm_destroy_cqs(id);
}

CM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id)
		cm_destroy_srq(id);
}

/* ---------------- the endpoint API ---------------- */

static int cm_copy_addr(struct sockaddr **dst, socklen_t *dlen,
			const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return -ENOMEM;
	memcpy(*dst, src, len);
	*dlen = len;
	return 0;
}

static void cm_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;

		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = n;
	}
}

CM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	cm_freeaddrinfo(res);
}

CM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			       const struct rdma_addrinfo *hints,
			       struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	struct rdma_addrinfo *rai;
	int ret = 0;

	if ((!service && !node && !hints) || !res)
		return cm_err(EINVAL);
	if (!hints)
		hints = &nohints;
	rai = calloc(1, sizeof(*rai));
	if (!rai)
		return cm_err(ENOMEM);
	if (node || service) {
		struct addrinfo ah, *ai;

		memset(&ah, 0, sizeof(ah));
		if (hints->ai_flags & RAI_PASSIVE)
			ah.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			ah.ai_flags |= AI_NUMERICHOST;
		if (hints->ai_family != AF_IB)
			ah.ai_family = hints->ai_family;
		switch (hints->ai_qp_type) {
		case IBV_QPT_RC:
		case IBV_QPT_UC:
		case IBV_QPT_XRC_SEND:
		case IBV_QPT_XRC_RECV:
			ah.ai_socktype = SOCK_STREAM;
			break;
		case IBV_QPT_UD:
			ah.ai_socktype = SOCK_DGRAM;
			break;
		default:
			break;
		}
		switch (hints->ai_port_space) {
		case RDMA_PS_TCP:
			ah.ai_protocol = IPPROTO_TCP;
			break;
		case RDMA_PS_IB:
			ah.ai_protocol = hints->ai_qp_type == IBV_QPT_UD ? IPPROTO_UDP
									 : IPPROTO_TCP;
			break;
		case RDMA_PS_IPOIB:
		case RDMA_PS_UDP:
			ah.ai_protocol = IPPROTO_UDP;
			break;
		default:
			break;
		}
		if (hints == &nohints)
			ret = getaddrinfo(node, service, NULL, &ai);
		else
			ret = getaddrinfo(node, service, &ah, &ai);
		if (ret) {
			free(rai);
			return ret;
		}
		rai->ai_qp_type = hints->ai_qp_type		  ? hints->ai_qp_type
				  : ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD
								  : IBV_QPT_RC;
		rai->ai_port_space = hints->ai_port_space ? hints->ai_port_space
				     : ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP
								      : RDMA_PS_TCP;
		rai->ai_family = ai->ai_family;
		if (ai->ai_flags & AI_PASSIVE) {
			rai->ai_flags = RAI_PASSIVE;
			if (ai->ai_canonname)
				rai->ai_src_canonname = strdup(ai->ai_canonname);
			ret = cm_copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
					   ai->ai_addr, ai->ai_addrlen);
		} else {
			if (ai->ai_canonname)
				rai->ai_dst_canonname = strdup(ai->ai_canonname);
			ret = cm_copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
					   ai->ai_addr, ai->ai_addrlen);
		}
		freeaddrinfo(ai);
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = hints->ai_qp_type;
		rai->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len)
			ret = cm_copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
					   hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!ret && !rai->ai_src_len && hints->ai_src_len)
		ret = cm_copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
				   hints->ai_src_addr, hints->ai_src_len);
	if (ret) {
		cm_freeaddrinfo(rai);
		return cm_err(-ret);
	}
	*res = rai;
	return 0;
}

static void cm_destroy_ep(struct rdma_cm_id *id)
{
	struct cm_id *c = (struct cm_id *)id;

	if (id->qp)
		cm_destroy_qp(id);
	if (id->srq)
		cm_destroy_srq(id);
	pthread_mutex_lock(&cm_mu);
	cm_destroy_locked(c);
	pthread_mutex_unlock(&cm_mu);
}

CM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id)
		cm_destroy_ep(id);
}

CM_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
			     struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	struct cm_id *c;
	int ret;

	if (!id || !res)
		return cm_err(EINVAL);
	ret = cm_create_id(NULL, &cid, NULL, (enum rdma_port_space)res->ai_port_space,
			   (enum ibv_qp_type)res->ai_qp_type);
	if (ret)
		return ret;
	c = (struct cm_id *)cid;
	if (res->ai_flags & RAI_PASSIVE) {
		ret = cm_bind_addr(cid, res->ai_src_addr);
		if (ret)
			goto err;
		if (pd)
			cid->pd = pd;
		if (qp_init_attr) {
			c->ep_attr = malloc(sizeof(*c->ep_attr));
			if (!c->ep_attr) {
				ret = cm_err(ENOMEM);
				goto err;
			}
			*c->ep_attr = *qp_init_attr;
			c->ep_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		}
		*id = cid;
		return 0;
	}
	ret = cm_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (!ret)
		ret = cm_resolve_route(cid, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		ret = cm_create_qp(cid, pd, qp_init_attr);
		if (ret)
			goto err;
	}
	if (res->ai_connect_len) {
		if (res->ai_connect_len > sizeof(c->connect_pd)) {
			ret = cm_err(EINVAL);
			goto err;
		}
		memcpy(c->connect_pd, res->ai_connect, res->ai_connect_len);
		c->connect_len = (uint8_t)res->ai_connect_len;
	}
	*id = cid;
	return 0;
err : {
	int e = errno;

	cm_destroy_ep(cid);
	errno = e;
	return ret;
}
}

CM_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cm_id *l = (struct cm_id *)listen;
	struct rdma_cm_event *ev;
	int ret;

	if (!listen || !id || !l->sync)
		return cm_err(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event); /* the PLT, as cm_complete */
		listen->event = NULL;
	}
	ret = rdma_get_cm_event(&cm_chan_of(l)->ch, &ev);
	if (ret)
		return ret;
	if (ev->event == RDMA_CM_EVENT_REJECTED) {
		ret = cm_err(ECONNREFUSED);
		goto err;
	}
	if (ev->status) {
		ret = cm_err(ev->status < 0 ? -ev->status : ev->status);
		goto err;
	}
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		ret = cm_err(EINVAL);
		goto err;
	}
	if (l->ep_attr) {
		struct ibv_qp_init_attr a = *l->ep_attr;

		ret = cm_create_qp(ev->id, listen->pd, &a);
		if (ret)
			goto err;
	}
	*id = ev->id;
	(*id)->event = ev;
	return 0;
err:
	listen->event = ev;
	return ret;
}

/* ---------------- ECE: softnic has no vendor options ---------------- */

CM_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece || ece->comp_mask)
		return cm_err(EINVAL);
	return 0;
}

CM_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece)
		return cm_err(EINVAL);
	memset(ece, 0, sizeof(*ece));
	return 0;
}

/* ---------------- not implemented: one line on first use ---------------- */

/* ---------------- multicast ---------------- */

/* The group's MGID as the kernel CM makes it: an IPv4 group in the IB
 * IPv4 multicast prefix (with rdma_cm's signature for the UDP port space),
 * IPv4-mapped on RoCE, an IPv6 group as itself. */
static void cm_mgid(const struct cm_id *c, const struct sockaddr *sa, union ibv_gid *g)
{
	bool eth = cm_dev.port.link_layer == IBV_LINK_LAYER_ETHERNET;

	memset(g, 0, sizeof(*g));
	if (sa->sa_family == AF_INET6) {
		memcpy(g->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return;
	}
	memcpy(g->raw + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	if (eth) {
		g->raw[10] = g->raw[11] = 0xff;
		return;
	}
	g->raw[0] = 0xff;
	g->raw[1] = 0x12;
	g->raw[2] = 0x40;
	g->raw[3] = c->id.ps == RDMA_PS_UDP ? 0x01 : 0x1b;
	g->raw[4] = g->raw[5] = 0xff; /* the default pkey */
	g->raw[12] &= 0x0f;
}

static int cm_join(struct rdma_cm_id *id, const struct sockaddr *addr, void *context,
		   bool sendonly)
{
	struct cm_id *c = (struct cm_id *)id;
	socklen_t len = cm_addrlen(addr);
	struct cm_mc *m;
	struct cm_evt *e;
	uint64_t h;

	if (!id || !len || !cm_addr_mcast(addr) || !cm_is_ud(c))
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	if ((c->state != S_BOUND && c->state != S_ADDR && c->state != S_ROUTE) ||
	    !c->id.verbs) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EINVAL);
	}
	for (m = c->mcs; m; m = m->next)
		if (!memcmp(&m->addr, addr, len)) {
			pthread_mutex_unlock(&cm_mu);
			return cm_err(EADDRINUSE);
		}
	m = calloc(1, sizeof(*m));
	e = cm_evt_new(c, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
	if (!m || !e) {
		free(m);
		free(e);
		pthread_mutex_unlock(&cm_mu);
		return cm_err(ENOMEM);
	}
	memcpy(&m->addr, addr, len);
	cm_mgid(c, addr, &m->mgid);
	h = 1469598103934665603ull;
	for (int i = 0; i < 16; i++)
		h = (h ^ m->mgid.raw[i]) * 1099511628211ull;
	/* the SA would hand out a multicast LID; one derived from the MGID
	 * gives every process of the fabric the same */
	m->mlid = cm_dev.port.link_layer == IBV_LINK_LAYER_ETHERNET
			  ? 0
			  : (uint16_t)(0xc001 + h % 0x3ffe);
	m->sendonly = sendonly;
	m->context = context;
	m->next = c->mcs;
	c->mcs = m;
	e->mc = m;
	e->ev.param.ud.private_data = context;
	e->ev.param.ud.ah_attr.is_global = 1;
	e->ev.param.ud.ah_attr.grh.dgid = m->mgid;
	e->ev.param.ud.ah_attr.grh.hop_limit =
		cm_dev.port.link_layer == IBV_LINK_LAYER_ETHERNET ? 64 : 0;
	e->ev.param.ud.ah_attr.dlid = m->mlid;
	e->ev.param.ud.ah_attr.port_num = 1;
	e->ev.param.ud.qp_num = 0xffffff;
	e->ev.param.ud.qkey = RDMA_UDP_QKEY;
	cm_chan_push(cm_chan_of(c), e);
	pthread_mutex_unlock(&cm_mu);
	return cm_complete(c);
}

CM_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr,
				  void *context)
{
	return cm_join(id, addr, context, false);
}

CM_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id,
				     struct rdma_cm_join_mc_attr_ex *mc_join_attr,
				     void *context)
{
	struct rdma_cm_join_mc_attr_ex *a = mc_join_attr;

	if (!a || !(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
	    !(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    a->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED ||
	    a->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED || !a->addr)
		return cm_err(EINVAL);
	return cm_join(id, a->addr, context,
		       a->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
}

CM_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cm_id *c = (struct cm_id *)id;
	socklen_t len = cm_addrlen(addr);
	struct cm_mc **pp, *m;
	struct cm_chan *ch;

	if (!id || !len)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_mu);
	for (pp = &c->mcs; (m = *pp); pp = &m->next)
		if (!memcmp(&m->addr, addr, len))
			break;
	if (!m) {
		pthread_mutex_unlock(&cm_mu);
		return cm_err(EADDRNOTAVAIL);
	}
	*pp = m->next;
	if (c->sync && c->id.event && ((struct cm_evt *)c->id.event)->mc == m) {
		cm_ack_locked(c->id.event);
		c->id.event = NULL;
	}
	if (m->attached && c->id.qp)
		ibv_detach_mcast(c->id.qp, &m->mgid, m->mlid);
	/* its events nobody was given go; the given ones must be acked */
	ch = cm_chan_of(c);
	{
		struct cm_evt **ep = &ch->head, *e;
		uint64_t v;

		ch->tail = NULL;
		while ((e = *ep)) {
			if (e->mc == m) {
				*ep = e->next;
				free(e);
			} else {
				ch->tail = e;
				ep = &e->next;
			}
		}
		if (!ch->head && read(ch->evfd, &v, sizeof(v)) < 0)
			(void)0;
	}
	while (m->completed < m->reported)
		pthread_cond_wait(&cm_cv, &cm_mu);
	free(m);
	pthread_mutex_unlock(&cm_mu);
	return 0;
}

/* rsockets are not part of softnic's CM */
CM_EXPORT int rsocket(int domain, int type, int protocol)
{
	(void)domain, (void)type, (void)protocol;
	CM_ENOSYS(-1);
}

CM_EXPORT int rbind(int s, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)s, (void)addr, (void)addrlen;
	CM_ENOSYS(-1);
}

CM_EXPORT int rlisten(int s, int backlog)
{
	(void)s, (void)backlog;
	CM_ENOSYS(-1);
}

CM_EXPORT int raccept(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)s, (void)addr, (void)addrlen;
	CM_ENOSYS(-1);
}

CM_EXPORT int rconnect(int s, const struct sockaddr *addr, socklen_t addrlen)
{
	(void)s, (void)addr, (void)addrlen;
	CM_ENOSYS(-1);
}

CM_EXPORT int rshutdown(int s, int how)
{
	(void)s, (void)how;
	CM_ENOSYS(-1);
}

CM_EXPORT int rclose(int s)
{
	(void)s;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	(void)s, (void)buf, (void)len, (void)flags;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rrecvfrom(int s, void *buf, size_t len, int flags,
			    struct sockaddr *src_addr, socklen_t *addrlen)
{
	(void)s, (void)buf, (void)len, (void)flags, (void)src_addr, (void)addrlen;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	(void)s, (void)msg, (void)flags;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	(void)s, (void)buf, (void)len, (void)flags;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rsendto(int s, const void *buf, size_t len, int flags,
			  const struct sockaddr *dest_addr, socklen_t addrlen)
{
	(void)s, (void)buf, (void)len, (void)flags, (void)dest_addr, (void)addrlen;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	(void)s, (void)msg, (void)flags;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rread(int s, void *buf, size_t count)
{
	(void)s, (void)buf, (void)count;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rreadv(int s, const struct iovec *iov, int iovcnt)
{
	(void)s, (void)iov, (void)iovcnt;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rwrite(int s, const void *buf, size_t count)
{
	(void)s, (void)buf, (void)count;
	CM_ENOSYS(-1);
}

CM_EXPORT ssize_t rwritev(int s, const struct iovec *iov, int iovcnt)
{
	(void)s, (void)iov, (void)iovcnt;
	CM_ENOSYS(-1);
}

CM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	(void)fds, (void)nfds, (void)timeout;
	CM_ENOSYS(-1);
}

CM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		      struct timeval *timeout)
{
	(void)nfds, (void)readfds, (void)writefds, (void)exceptfds, (void)timeout;
	CM_ENOSYS(-1);
}

CM_EXPORT int rgetpeername(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)s, (void)addr, (void)addrlen;
	CM_ENOSYS(-1);
}

CM_EXPORT int rgetsockname(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	(void)s, (void)addr, (void)addrlen;
	CM_ENOSYS(-1);
}

CM_EXPORT int rsetsockopt(int s, int level, int optname, const void *optval,
			  socklen_t optlen)
{
	(void)s, (void)level, (void)optname, (void)optval, (void)optlen;
	CM_ENOSYS(-1);
}

CM_EXPORT int rgetsockopt(int s, int level, int optname, void *optval, socklen_t *optlen)
{
	(void)s, (void)level, (void)optname, (void)optval, (void)optlen;
	CM_ENOSYS(-1);
}

CM_EXPORT int rfcntl(int s, int cmd, ...)
{
	(void)s, (void)cmd;
	CM_ENOSYS(-1);
}

CM_EXPORT off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)s, (void)buf, (void)len, (void)prot, (void)flags, (void)offset;
	CM_ENOSYS(-1);
}

CM_EXPORT int riounmap(int s, void *buf, size_t len)
{
	(void)s, (void)buf, (void)len;
	CM_ENOSYS(-1);
}

CM_EXPORT size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	(void)s, (void)buf, (void)count, (void)offset, (void)flags;
	CM_ENOSYS(0);
}
