/*
 * softnic_cm_int.h - what the files of softnic's librdmacm.so.1 share: the
 * wire message, the id, channel, event and group structures, the one lock,
 * the id table and the device, and the functions one file calls in another.
 *
 * softnic's connection manager stands in for the kernel's rdma_cm and for
 * librdmacm at once: the rdma_* API of rdma-core v44 (all exports, same
 * version nodes, same struct layouts) over a per-process connection manager.
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
 * - Memory: ids, channels, events, groups and the id table come from
 *   cm_zalloc (pages of the CM's own), never from malloc: a program's
 *   registration of a heap buffer remaps the whole pages around it, and a
 *   write another thread makes there meanwhile is lost (softnic_cm_core.c).
 * - One mutex (cm_mu) guards every id and channel; nothing blocks while
 *   holding it. Functions named *_locked, and every cm_* helper that touches
 *   an id or a channel, expect it held.
 *
 * The files (softnic_cm_*.c):
 *   core   helpers, the device, the id table, channels, timers, binding
 *   wire   the kernel CM's QP attribute rules and the connection state
 *          machine: messages, timers, accepted sockets
 *   event  handing out and acking events, destroying an id
 *   api    the exported id API: channels, ids, address/route, connect,
 *          accept, reject, disconnect, options
 *   qp     QPs, CQs and SRQs on an id; the endpoint API (getaddrinfo, ep)
 *   mcast  multicast joins and leaves, ECE
 *   rsock  rsockets: not implemented, one line on first use
 *
 * Never: call an exported rdma_* function from inside the library (internal
 * calls go to the hidden cm_* functions, so a recorder that wraps rdma_*
 * sees only the program's calls) except where Debian's librdmacm does too:
 * a synchronous id's wait and rdma_get_request read their event through
 * the exported rdma_get_cm_event / rdma_ack_cm_event; never print anything but the one-line ENOSYS
 * notes (and, when SOFTNIC_CM_EVENTS names a file, one line per event it
 * hands out there: tests count them apart from any recorder), or use
 * anything of softnic but the public verbs API.
 */
#ifndef SOFTNIC_CM_INT_H
#define SOFTNIC_CM_INT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
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
#include <sys/mman.h>
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
	bool dead; /* destroyed by the program: a call in it or late to it parks */
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

extern pthread_mutex_t cm_mu;
extern pthread_cond_t cm_cv;
extern struct cm_id **cm_tab;
extern uint32_t cm_tab_n, *cm_tab_gen;

/* the one device, opened on first use and kept for the process */
struct cm_device {
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
};
extern struct cm_device cm_dev;

void cm_enosys_note(const char *fn, atomic_bool *said);

/* an unimplemented export: one line on stderr on first use, then ENOSYS */
#define CM_ENOSYS(ret)                            \
	do {                                      \
		static atomic_bool said_;         \
		cm_enosys_note(__func__, &said_); \
		errno = ENOSYS;                   \
		return ret;                       \
	} while (0)

/* softnic_cm_core.c */
void *cm_zalloc(size_t n);
void cm_free(void *p);
int cm_err(int e);
const char *cm_ev_name(enum rdma_cm_event_type event);
void cm_evlog(const struct rdma_cm_event *ev);
uint64_t cm_now_ns(void);
socklen_t cm_addrlen(const struct sockaddr *sa);
uint16_t cm_get_port(const struct sockaddr *sa);
void cm_set_port(struct sockaddr *sa, uint16_t port);
bool cm_addr_any(const struct sockaddr *sa);
bool cm_addr_local(const struct sockaddr *sa);
bool cm_addr_mcast(const struct sockaddr *sa);
bool cm_is_ud(const struct cm_id *c);
unsigned cm_space(const struct cm_id *c);
socklen_t cm_name(struct sockaddr_un *un, unsigned ps, uint16_t port);
uint8_t cm_pd_max(const struct cm_id *c, unsigned full);
int cm_dev_init(void);
void cm_attach_dev(struct cm_id *c);
void cm_fill_path(struct cm_id *c);
void cm_ah_attr(struct ibv_ah_attr *ah);
struct cm_id *cm_lookup(uint64_t data);
int cm_watch(struct cm_chan *ch, int fd, const struct cm_id *c, int kind);
void cm_unwatch(struct cm_chan *ch, int fd);
struct cm_chan *cm_chan_of(const struct cm_id *c);
struct cm_chan *cm_chan_new(void);
void cm_chan_free(struct cm_chan *ch);
void cm_chan_retire(struct cm_chan *ch);
void cm_chan_push(struct cm_chan *ch, struct cm_evt *e);
struct cm_evt *cm_chan_pop(struct cm_chan *ch);
struct cm_evt *cm_chan_take(struct cm_chan *ch, const struct cm_id *c);
struct cm_evt *cm_evt_new(struct cm_id *c, enum rdma_cm_event_type type, int status);
void cm_post(struct cm_id *c, enum rdma_cm_event_type type, int status);
void cm_conn_pd(struct cm_evt *e, const struct cm_wire *w, unsigned full);
struct cm_id *cm_id_new(struct cm_chan *ch, void *context, enum rdma_port_space ps,
			enum ibv_qp_type qpt);
void cm_close_conn(struct cm_id *c);
int cm_arm(struct cm_id *c, uint64_t ms);
void cm_disarm(struct cm_id *c);
int cm_send(struct cm_id *c, struct cm_wire *w);
void cm_send_simple(struct cm_id *c, uint8_t type, int32_t status);
void cm_qp_err(struct cm_id *c);
int cm_bind(struct cm_id *c, const struct sockaddr *sa);

/* softnic_cm_wire.c */
int cm_qp_attr(struct cm_id *c, struct ibv_qp_attr *a, int *mask);
int cm_modify(struct cm_id *c, enum ibv_qp_state st);
int cm_qp_connect(struct cm_id *c);
void cm_dispatch(uint64_t data);
int cm_try_connect(struct cm_id *c);

/* softnic_cm_event.c */
int cm_get_event(struct cm_chan *ch, struct rdma_cm_event **out);
void cm_ack_locked(struct rdma_cm_event *event);
int cm_complete(struct cm_id *c);
void cm_destroy_locked(struct cm_id *c);

/* softnic_cm_api.c */
int cm_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
		 void *context, enum rdma_port_space ps, enum ibv_qp_type qpt);
int cm_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr);
int cm_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
		    struct sockaddr *dst_addr, int timeout_ms);
int cm_resolve_route(struct rdma_cm_id *id, int timeout_ms);

#endif
