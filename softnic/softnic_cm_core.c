/*
 * softnic_cm_core.c - the pieces of softnic's connection manager every other
 * file uses: its memory (pages of its own, off the malloc heap), error and
 * address helpers, the event log, the device (opened on first use through
 * the public verbs API), the id table (ids named by slot and generation in
 * epoll data), event channels and their queues, timers, sending a message,
 * and binding a port (an abstract socket name).
 *
 * Never: block while holding cm_mu, call an exported rdma_* function, keep
 * the CM's state in malloc'd memory (see cm_zalloc), or print anything but
 * SOFTNIC_CM_TIMEOUT_MS's one-line complaint and the ENOSYS notes.
 */
#include "softnic_cm_int.h"

pthread_mutex_t cm_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cm_cv = PTHREAD_COND_INITIALIZER;
struct cm_id **cm_tab;
uint32_t cm_tab_n, *cm_tab_gen;
struct cm_device cm_dev;

/* ---------------- memory ----------------
 *
 * Ids, channels, events, groups and the id table live on pages of their own
 * (mmap), never on the malloc heap. softnic registers memory by whole pages
 * (copy, then map a fabric file over them; deregistering copies back), and a
 * program's heap buffer shares its pages with whatever malloc put beside it:
 * a write another thread makes to those pages while the copy is under way
 * is lost. An ack counted on such a page while rping's main thread
 * deregistered its buffers was lost that way, and rdma_destroy_id then
 * waited for it forever. Here no registration of the program's can reach
 * the CM's state. Blocks are kept in power-of-two size classes from 64 KiB
 * chunks, never given back to the system; bigger ones are mapped alone.
 */
#define CM_MEM_HDR   16u
#define CM_MEM_MIN   64u
#define CM_MEM_CLS   6 /* 64 .. 2048 bytes with the header */
#define CM_MEM_CHUNK (64u << 10)

struct cm_blk {
	struct cm_blk *next;
};

static pthread_mutex_t cm_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cm_blk *cm_mem_free_list[CM_MEM_CLS];
static char *cm_mem_cur, *cm_mem_end;

/* a fork() while another thread allocates leaves the child a usable lock */
static void cm_mem_lock(void)
{
	pthread_mutex_lock(&cm_mem_mu);
}

static void cm_mem_unlock(void)
{
	pthread_mutex_unlock(&cm_mem_mu);
}

__attribute__((constructor)) static void cm_mem_init(void)
{
	pthread_atfork(cm_mem_lock, cm_mem_unlock, cm_mem_unlock);
}

void *cm_zalloc(size_t n)
{
	size_t total = n + CM_MEM_HDR;
	unsigned k = 0;
	char *b;

	while (k < CM_MEM_CLS && (size_t)CM_MEM_MIN << k < total)
		k++;
	if (k == CM_MEM_CLS) {
		size_t len = (total + 4095) & ~(size_t)4095;

		b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
		if (b == MAP_FAILED)
			return NULL;
		*(size_t *)b = len;
		return b + CM_MEM_HDR; /* fresh pages are zero */
	}
	pthread_mutex_lock(&cm_mem_mu);
	b = (char *)cm_mem_free_list[k];
	if (b) {
		cm_mem_free_list[k] = ((struct cm_blk *)b)->next;
	} else {
		if (cm_mem_end - cm_mem_cur < (ptrdiff_t)(CM_MEM_MIN << k)) {
			void *m = mmap(NULL, CM_MEM_CHUNK, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (m == MAP_FAILED) {
				pthread_mutex_unlock(&cm_mem_mu);
				return NULL;
			}
			cm_mem_cur = m; /* the old chunk's tail is left unused */
			cm_mem_end = cm_mem_cur + CM_MEM_CHUNK;
		}
		b = cm_mem_cur;
		cm_mem_cur += CM_MEM_MIN << k;
	}
	pthread_mutex_unlock(&cm_mem_mu);
	memset(b, 0, (size_t)CM_MEM_MIN << k);
	*(size_t *)b = k;
	return b + CM_MEM_HDR;
}

void cm_free(void *p)
{
	char *b;
	size_t k;

	if (!p)
		return;
	b = (char *)p - CM_MEM_HDR;
	k = *(size_t *)b;
	if (k >= CM_MEM_CLS) {
		munmap(b, k);
		return;
	}
	pthread_mutex_lock(&cm_mem_mu);
	((struct cm_blk *)b)->next = cm_mem_free_list[k];
	cm_mem_free_list[k] = (struct cm_blk *)b;
	pthread_mutex_unlock(&cm_mem_mu);
}

/* ---------------- small helpers ---------------- */

int cm_err(int e)
{
	errno = e;
	return -1;
}

const char *cm_ev_name(enum rdma_cm_event_type event)
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

void cm_evlog(const struct rdma_cm_event *ev)
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

uint64_t cm_now_ns(void)
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

void cm_enosys_note(const char *fn, atomic_bool *said)
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

socklen_t cm_addrlen(const struct sockaddr *sa)
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

uint16_t cm_get_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

void cm_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

bool cm_addr_any(const struct sockaddr *sa)
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
bool cm_addr_local(const struct sockaddr *sa)
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

bool cm_addr_mcast(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return IN_MULTICAST(
			ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_MULTICAST(
			&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

bool cm_is_ud(const struct cm_id *c)
{
	return c->id.qp_type == IBV_QPT_UD;
}

/* the port space a socket name lives in: UD ids share one */
unsigned cm_space(const struct cm_id *c)
{
	return c->id.ps == RDMA_PS_IPOIB ? RDMA_PS_UDP : (unsigned)c->id.ps;
}

socklen_t cm_name(struct sockaddr_un *un, unsigned ps, uint16_t port)
{
	int n;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1,
		     "softnic-cm/%016llx/%x/%u", (unsigned long long)cm_dev.fabric, ps,
		     port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

uint8_t cm_pd_max(const struct cm_id *c, unsigned full)
{
	return (uint8_t)(c->id.ps == RDMA_PS_IB ? full : full - CM_IP_HDR);
}

/* ---------------- the device ---------------- */

int cm_dev_init(void)
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

void cm_attach_dev(struct cm_id *c)
{
	c->id.verbs = cm_dev.ctx;
	c->id.port_num = 1;
	if (!c->id.pd)
		c->id.pd = cm_dev.pd;
	c->id.route.addr.addr.ibaddr.sgid = cm_dev.gid;
	c->id.route.addr.addr.ibaddr.dgid = cm_dev.gid;
	c->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
}

void cm_fill_path(struct cm_id *c)
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

void cm_ah_attr(struct ibv_ah_attr *ah)
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

struct cm_id *cm_lookup(uint64_t data)
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
		struct cm_id **t = cm_zalloc(n * sizeof(*t));
		uint32_t *g = cm_zalloc(n * sizeof(*g));

		if (!t || !g) {
			cm_free(t);
			cm_free(g);
			return -ENOMEM;
		}
		if (cm_tab_n) {
			memcpy(t, cm_tab, cm_tab_n * sizeof(*t));
			memcpy(g, cm_tab_gen, cm_tab_n * sizeof(*g));
		}
		cm_free(cm_tab);
		cm_free(cm_tab_gen);
		cm_tab = t;
		cm_tab_gen = g;
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

int cm_watch(struct cm_chan *ch, int fd, const struct cm_id *c, int kind)
{
	struct epoll_event e = { .events = EPOLLIN,
				 .data.u64 = c ? cm_data(c, kind) : 0 };

	return epoll_ctl(ch->ch.fd, EPOLL_CTL_ADD, fd, &e) ? -errno : 0;
}

void cm_unwatch(struct cm_chan *ch, int fd)
{
	if (fd >= 0 && ch)
		epoll_ctl(ch->ch.fd, EPOLL_CTL_DEL, fd, NULL);
}

struct cm_chan *cm_chan_of(const struct cm_id *c)
{
	return (struct cm_chan *)c->id.channel;
}

struct cm_chan *cm_chan_new(void)
{
	struct cm_chan *ch = cm_zalloc(sizeof(*ch));

	if (!ch)
		return NULL;
	ch->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	ch->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ch->ch.fd < 0 || ch->evfd < 0 || cm_watch(ch, ch->evfd, NULL, K_EVFD)) {
		if (ch->ch.fd >= 0)
			close(ch->ch.fd);
		if (ch->evfd >= 0)
			close(ch->evfd);
		cm_free(ch);
		return NULL;
	}
	return ch;
}

/* A channel the program destroyed: its events and fds go, the struct stays,
 * dead (a late rdma_get_cm_event on it parks); a few dozen bytes per
 * destroyed channel, never reused. */
void cm_chan_retire(struct cm_chan *ch)
{
	struct cm_evt *e, *n;

	for (e = ch->head; e; e = n) {
		n = e->next;
		cm_free(e);
	}
	ch->head = ch->tail = NULL;
	close(ch->ch.fd);
	close(ch->evfd);
	ch->ch.fd = ch->evfd = -1;
	ch->dead = true;
}

void cm_chan_free(struct cm_chan *ch)
{
	if (!ch)
		return;
	cm_chan_retire(ch);
	cm_free(ch);
}

void cm_chan_push(struct cm_chan *ch, struct cm_evt *e)
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

struct cm_evt *cm_chan_pop(struct cm_chan *ch)
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
struct cm_evt *cm_chan_take(struct cm_chan *ch, const struct cm_id *c)
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

struct cm_evt *cm_evt_new(struct cm_id *c, enum rdma_cm_event_type type, int status)
{
	struct cm_evt *e = cm_zalloc(sizeof(*e));

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
void cm_post(struct cm_id *c, enum rdma_cm_event_type type, int status)
{
	struct cm_evt *e = cm_evt_new(c, type, status);

	if (e)
		cm_chan_push(cm_chan_of(c), e);
}

void cm_conn_pd(struct cm_evt *e, const struct cm_wire *w, unsigned full)
{
	memcpy(e->pd, w->pd, w->pd_len);
	e->ev.param.conn.private_data = e->pd;
	e->ev.param.conn.private_data_len = (uint8_t)full;
}

struct cm_id *cm_id_new(struct cm_chan *ch, void *context, enum rdma_port_space ps,
			enum ibv_qp_type qpt)
{
	struct cm_id *c = cm_zalloc(sizeof(*c));
	uint32_t r;

	if (!c)
		return NULL;
	if (!ch) {
		ch = cm_chan_new();
		if (!ch) {
			cm_free(c);
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
		cm_free(c);
		return NULL;
	}
	return c;
}

void cm_close_conn(struct cm_id *c)
{
	if (c->cfd >= 0) {
		cm_unwatch(c->cfd_chan, c->cfd);
		close(c->cfd);
		c->cfd = -1;
		c->cfd_chan = NULL;
	}
}

int cm_arm(struct cm_id *c, uint64_t ms)
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

void cm_disarm(struct cm_id *c)
{
	struct itimerspec it = { 0 };

	if (c->tfd >= 0)
		timerfd_settime(c->tfd, 0, &it, NULL);
}

int cm_send(struct cm_id *c, struct cm_wire *w)
{
	w->magic = CM_WIRE_MAGIC;
	if (c->cfd < 0)
		return -ENOTCONN;
	return send(c->cfd, w, sizeof(*w), MSG_NOSIGNAL | MSG_DONTWAIT) ==
			       (ssize_t)sizeof(*w)
		       ? 0
		       : -errno;
}

void cm_send_simple(struct cm_id *c, uint8_t type, int32_t status)
{
	struct cm_wire w;

	memset(&w, 0, sizeof(w));
	w.type = type;
	w.status = status;
	cm_send(c, &w);
}

void cm_qp_err(struct cm_id *c)
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

int cm_bind(struct cm_id *c, const struct sockaddr *sa)
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
