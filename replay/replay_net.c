/* replay_net.c - the replayer's own out-of-band channel: a TCP connection to the
 * peer replayer (each side sends the new numbers of its QPs and MRs) or to
 * `rbtrace replay --responder`, which stands in for a missing peer: it builds QPs
 * and MRs of the recorded sizes, posts the receives the traffic needs and sends
 * what the traced end had received.
 *
 * The protocol is lines of text; every read has a timeout, so a vanished peer
 * ends the replay with a message and never hangs it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "replay/replay_int.h"

#define RP_NET_TIMEOUT_MS 30000

int rp_dir_add_qp(struct rp_dir *d, const struct rp_dir_qp *q)
{
	if (!RP_GROW(d->qps, d->nqp, d->capqp))
		return -ENOMEM;
	d->qps[d->nqp++] = *q;
	return 0;
}

int rp_dir_add_mr(struct rp_dir *d, const struct rp_dir_mr *m)
{
	if (!RP_GROW(d->mrs, d->nmr, d->capmr))
		return -ENOMEM;
	d->mrs[d->nmr++] = *m;
	return 0;
}

int rp_dir_add_srq(struct rp_dir *d, const struct rp_dir_srq *r)
{
	if (!RP_GROW(d->srqs, d->nsrq, d->capsrq))
		return -ENOMEM;
	d->srqs[d->nsrq++] = *r;
	return 0;
}

/* ---- lines ------------------------------------------------------------------------ */
static int rp_sendf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rp_sendf(int fd, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n, off = 0;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(buf))
		return -EINVAL;
	while (off < n) {
		ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -EPIPE;
		off += (int)w;
	}
	return 0;
}

/* One byte at a time: nothing is buffered past the newline, so poll() on the
 * socket stays truthful about what is left to read. */
static int rp_readline(int fd, char *buf, size_t n, int timeout_ms)
{
	size_t len = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char c;
		ssize_t r;
		int pr = poll(&p, 1, timeout_ms);

		if (pr == 0)
			return -ETIMEDOUT;
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return -errno;
		r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -ECONNRESET;
		if (c == '\n') {
			buf[len] = 0;
			return (int)len;
		}
		if (len + 1 < n)
			buf[len++] = c;
	}
}

static void rp_hex(char *out, const uint8_t *g)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", g[i]);
}

static void rp_unhex(uint8_t *g, const char *s)
{
	memset(g, 0, 16);
	for (int i = 0; i < 16 && s[2 * i] && s[2 * i + 1]; i++) {
		unsigned v = 0;

		sscanf(s + 2 * i, "%2x", &v);
		g[i] = (uint8_t)v;
	}
}

static int rp_listen_accept(FILE *log, const char *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	char *end;
	long p = strtol(port, &end, 10);
	int one = 1, ls, fd;
	struct pollfd pf;

	if (*end || p <= 0 || p > 65535) {
		fprintf(log, "rbtrace replay: --listen %s: not a port number\n", port);
		return -EINVAL;
	}
	a.sin_port = htons((uint16_t)p);
	ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0)
		return -errno;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1)) {
		fprintf(log, "rbtrace replay: --listen %s: %s\n", port, strerror(errno));
		close(ls);
		return -EADDRINUSE;
	}
	pf.fd = ls;
	pf.events = POLLIN;
	if (poll(&pf, 1, 120000) != 1) {
		fprintf(log,
			"rbtrace replay: --listen %s: no peer connected within 120 s\n",
			port);
		close(ls);
		return -ETIMEDOUT;
	}
	fd = accept(ls, NULL, NULL);
	close(ls);
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd < 0 ? -errno : fd;
}

static int rp_connect(FILE *log, const char *hostport)
{
	char host[256];
	const char *colon = strrchr(hostport, ':');
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM },
			*res = NULL;
	int one = 1;

	if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof(host)) {
		fprintf(log, "rbtrace replay: --connect %s: expected HOST:PORT\n",
			hostport);
		return -EINVAL;
	}
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = 0;
	if (getaddrinfo(host, colon + 1, &hints, &res) || !res) {
		fprintf(log, "rbtrace replay: --connect %s: cannot resolve\n", hostport);
		return -EINVAL;
	}
	/* The peer may still be starting: retry for a while. */
	for (int tries = 0; tries < 200; tries++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct timespec ts = { 0, 50000000 };

		if (fd < 0)
			break;
		if (!connect(fd, res->ai_addr, res->ai_addrlen)) {
			freeaddrinfo(res);
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			return fd;
		}
		close(fd);
		nanosleep(&ts, NULL);
	}
	freeaddrinfo(res);
	fprintf(log, "rbtrace replay: --connect %s: no peer listening (tried for 10 s)\n",
		hostport);
	return -ECONNREFUSED;
}

/* ---- the replayer's side ------------------------------------------------------------ */
int rp_net_open(struct rp_job *j)
{
	char line[512], host[200] = "";
	unsigned long long epoch = 0;
	int fd;

	fd = j->o->listen ? rp_listen_accept(j->log, j->o->listen)
			  : rp_connect(j->log, j->o->connect);
	if (fd < 0)
		return fd;
	j->net_fd = fd;
	if (rp_sendf(fd, "HELLO replayer %s %llu\n",
		     j->side[0].host[0] ? j->side[0].host : "-",
		     (unsigned long long)j->rec_epoch) ||
	    rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS) < 0) {
		fprintf(j->log,
			"rbtrace replay: the peer closed the connection during hello\n");
		return -ECONNRESET;
	}
	if (!strncmp(line, "HELLO responder", 15)) {
		j->peer_is_responder = 1;
		return 0;
	}
	if (sscanf(line, "HELLO replayer %199s %llu", host, &epoch) != 2) {
		fprintf(j->log,
			"rbtrace replay: the peer is not an rbtrace replayer ('%s')\n",
			line);
		return -EPROTO;
	}
	/* The listener names the files of shared XRC domains; on one machine both
	 * replayers then open the same ones (on two, nothing is shared anyway). */
	if (j->o->listen) {
		if (rp_sendf(fd, "XD %s\n", j->xrcd_prefix))
			return -EPIPE;
	} else if (rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS) < 0 ||
		   sscanf(line, "XD %199s", j->xrcd_prefix) != 1) {
		fprintf(j->log, "rbtrace replay: the peer replayer did not name its "
				"XRC domain files\n");
		return -EPROTO;
	}
	/* Same host: both recordings share CLOCK_MONOTONIC, keep their offset. */
	if (j->same_clock && !strcmp(host, j->side[0].host)) {
		if (epoch && epoch < j->rec_epoch)
			j->rec_epoch = epoch;
	} else {
		j->same_clock = 0;
	}
	return 0;
}

static int rp_send_dir(struct rp_job *j)
{
	char gid[40];
	int fd = j->net_fd;

	for (int i = 0; i < j->dir.nqp; i++) {
		const struct rp_dir_qp *q = &j->dir.qps[i];

		if (q->side >= RP_MAX_SIDES)
			continue;
		rp_hex(gid, q->gid);
		if (rp_sendf(fd, "Q %d %u %u %u %u %u %u %s\n", q->side, q->rec_qpn,
			     q->rec_dest, q->new_qpn, q->type, q->lid, q->rec_lid, gid))
			return -EPIPE;
	}
	for (int i = 0; i < j->dir.nmr; i++) {
		const struct rp_dir_mr *m = &j->dir.mrs[i];

		if (m->side >= RP_MAX_SIDES)
			continue;
		if (rp_sendf(fd, "M %d %llu %llu %llu %u %u\n", m->side,
			     (unsigned long long)m->rec_addr, (unsigned long long)m->len,
			     (unsigned long long)m->new_addr, m->rec_rkey, m->new_rkey))
			return -EPIPE;
	}
	for (int i = 0; i < j->dir.nsrq; i++) {
		const struct rp_dir_srq *r = &j->dir.srqs[i];

		if (r->side >= RP_MAX_SIDES)
			continue;
		if (rp_sendf(fd, "S %d %u %u\n", r->side, r->rec_srqn, r->new_srqn))
			return -EPIPE;
	}
	return rp_sendf(fd, "E\n");
}

static int rp_recv_dir(struct rp_job *j)
{
	char line[512], gid[64];

	for (;;) {
		int n = rp_readline(j->net_fd, line, sizeof(line), RP_NET_TIMEOUT_MS);

		if (n < 0) {
			fprintf(j->log,
				"rbtrace replay: the peer did not send its numbers: %s\n",
				strerror(-n));
			return n;
		}
		if (!strcmp(line, "E"))
			return 0;
		if (line[0] == 'Q') {
			struct rp_dir_qp q = { 0 };

			if (sscanf(line, "Q %d %u %u %u %u %u %u %63s", &q.side,
				   &q.rec_qpn, &q.rec_dest, &q.new_qpn, &q.type, &q.lid,
				   &q.rec_lid, gid) != 8)
				goto bad;
			q.side += RP_MAX_SIDES;
			rp_unhex(q.gid, gid);
			if (rp_dir_add_qp(&j->dir, &q))
				return -ENOMEM;
		} else if (line[0] == 'M') {
			struct rp_dir_mr m = { 0 };
			unsigned long long a, l, na;

			if (sscanf(line, "M %d %llu %llu %llu %u %u", &m.side, &a, &l,
				   &na, &m.rec_rkey, &m.new_rkey) != 6)
				goto bad;
			m.side += RP_MAX_SIDES;
			m.rec_addr = a;
			m.len = l;
			m.new_addr = na;
			if (rp_dir_add_mr(&j->dir, &m))
				return -ENOMEM;
		} else if (line[0] == 'S') {
			struct rp_dir_srq r = { 0 };

			if (sscanf(line, "S %d %u %u", &r.side, &r.rec_srqn,
				   &r.new_srqn) != 3)
				goto bad;
			r.side += RP_MAX_SIDES;
			if (rp_dir_add_srq(&j->dir, &r))
				return -ENOMEM;
		} else if (line[0] == 'X') {
			fprintf(j->log, "rbtrace replay: the peer refused: %s\n",
				line + 1);
			return -EPROTO;
		} else {
			goto bad;
		}
	}
bad:
	fprintf(j->log, "rbtrace replay: bad line from the peer: '%s'\n", line);
	return -EPROTO;
}

static int rp_is_msg_op(uint64_t op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
	       op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_INV;
}

/* What the responder must stand in for: each of our QPs whose peer is missing,
 * the remote memory our posts name, the receives our messages consume, and the
 * messages the recording received (sent once the responder has seen as many of
 * ours as the recording had posted by then). */
static int rp_send_needs(struct rp_job *j)
{
	int fd = j->net_fd;

	for (int si = 0; si < j->nside; si++) {
		struct rp_side *s = &j->side[si];

		for (int qi = 0; qi < s->nqp; qi++) {
			struct rp_qp *q = &s->qp[qi];
			uint64_t nmsg = 0, maxlen = 0;
			char gid[40];
			int local = 0;

			if (!q->has_dest || q->rec.qp_type == IBV_QPT_UD)
				continue;
			for (int sj = 0; sj < j->nside; sj++) {
				struct rp_qp *o =
					rp_qp_by_rec_qpn(&j->side[sj], q->rec_dest_qpn);

				if (o && o != q)
					local = 1;
			}
			if (local)
				continue;
			for (int i = 0; i < s->nstep; i++) {
				const struct rbt_event *e = &s->step[i].ev;

				if (e->type != RBT_EV_POST_SEND || s->step[i].qp != q)
					continue;
				for (uint32_t w = 0; w < e->u.post_send.n_wrs; w++) {
					const struct rbt_send_wr *r =
						&e->u.post_send.wrs[w];
					uint64_t len = 0;

					for (uint32_t g = 0; g < r->n_sges; g++)
						len += r->sges[g].length;
					if (rp_is_msg_op(r->opcode)) {
						nmsg++;
						if (len > maxlen)
							maxlen = len;
					}
					if (r->opcode == IBV_WR_RDMA_WRITE ||
					    r->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
					    r->opcode == IBV_WR_RDMA_READ ||
					    r->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
					    r->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
						if (r->opcode >=
						    IBV_WR_ATOMIC_CMP_AND_SWP)
							len = 8;
						if (rp_sendf(
							    fd, "NM %u %llu %llu\n",
							    (unsigned)r->rkey,
							    (unsigned long long)
								    r->remote_addr,
							    (unsigned long long)(r->remote_addr +
										 len)))
							return -EPIPE;
					}
				}
			}
			rp_hex(gid, s->gid.raw);
			if (rp_sendf(
				    fd,
				    "NQ %u %u %llu %llu %u %u %u %u %u %u %d %u %llu "
				    "%llu\n",
				    q->rec_dest_qpn, (unsigned)q->rec.qp_num,
				    (unsigned long long)q->rec.qp_type,
				    (unsigned long long)(q->rec.max_send_wr >
									 q->rec.max_recv_wr
								 ? q->rec.max_send_wr
								 : q->rec.max_recv_wr),
				    q->qp->qp_num, s->pattr.lid, q->rec_sq_psn,
				    q->rec_rq_psn, q->rec_path_mtu, q->rec_max_rd_atomic,
				    q->is_global, q->sgid_index, (unsigned long long)nmsg,
				    (unsigned long long)maxlen) ||
			    rp_sendf(fd, "NG %u %s\n", q->rec_dest_qpn, gid))
				return -EPIPE;
			/* the sends the recording received on q */
			nmsg = 0;
			for (int i = 0; i < s->nstep; i++) {
				const struct rbt_event *e = &s->step[i].ev;

				if (e->type == RBT_EV_POST_SEND && s->step[i].qp == q) {
					for (uint32_t w = 0; w < e->u.post_send.n_wrs;
					     w++)
						if (rp_is_msg_op(
							    e->u.post_send.wrs[w].opcode))
							nmsg++;
				} else if (e->type == RBT_EV_POLL_CQ) {
					for (uint32_t k = 0; k < e->u.poll_cq.n_wcs;
					     k++) {
						const struct rbt_wc *w =
							&e->u.poll_cq.wcs[k];

						if (w->qp_num != q->rec.qp_num ||
						    w->status != IBV_WC_SUCCESS ||
						    !(w->opcode & IBV_WC_RECV))
							continue;
						if (rp_sendf(
							    fd,
							    "NS %u %llu %llu %llu %llu\n",
							    q->rec_dest_qpn,
							    (unsigned long long)nmsg,
							    (unsigned long long)(w->wc_flags &
										 IBV_WC_WITH_IMM),
							    (unsigned long long)
								    w->byte_len,
							    (unsigned long long)
								    w->imm_data))
							return -EPIPE;
					}
				}
			}
		}
	}
	return rp_sendf(fd, "E\n");
}

int rp_net_exchange(struct rp_job *j)
{
	int rc;

	if (j->peer_is_responder) {
		rc = rp_send_needs(j);
		if (!rc)
			rc = rp_recv_dir(j);
		return rc;
	}
	rc = rp_send_dir(j);
	if (!rc)
		rc = rp_recv_dir(j);
	return rc;
}

int rp_net_barrier(struct rp_job *j, const char *word)
{
	char line[64];
	int n;

	if (rp_sendf(j->net_fd, "%s\n", word))
		return -EPIPE;
	n = rp_readline(j->net_fd, line, sizeof(line), RP_NET_TIMEOUT_MS * 4);
	if (n < 0 || strcmp(line, word)) {
		fprintf(j->log, "rbtrace replay: the peer did not reach %s: %s\n", word,
			n < 0 ? strerror(-n) : line);
		return n < 0 ? n : -EPROTO;
	}
	return 0;
}

/* Same host: both replayers read one CLOCK_MONOTONIC, so they can agree on the
 * very same start instant (the later of the two proposals). */
int rp_net_agree_t0(struct rp_job *j, uint64_t *t0)
{
	char line[64];
	unsigned long long theirs = 0;

	if (rp_sendf(j->net_fd, "T0 %llu\n", (unsigned long long)*t0) ||
	    rp_readline(j->net_fd, line, sizeof(line), RP_NET_TIMEOUT_MS) < 0 ||
	    sscanf(line, "T0 %llu", &theirs) != 1) {
		fprintf(j->log,
			"rbtrace replay: the peer did not agree on a start time\n");
		return -EPROTO;
	}
	if (j->same_clock && theirs > *t0 && theirs - *t0 < 1000000000ull)
		*t0 = theirs;
	return 0;
}

void rp_net_close(struct rp_job *j)
{
	if (j->net_fd >= 0)
		close(j->net_fd);
	j->net_fd = -1;
}

/* ---- the responder ------------------------------------------------------------------ */
struct rs_send {
	uint32_t qpn; /* recorded qpn of the stand-in */
	uint64_t after, imm;
	int with_imm;
	uint32_t len;
	int done;
};

struct rs_qp {
	uint32_t rec_qpn, peer_rec_qpn, type, peer_qpn, peer_lid, sq_psn, rq_psn, mtu,
		rd_atomic, sgid_index;
	int is_global;
	uint8_t peer_gid[16];
	uint64_t nrecv, maxlen, posted, received, sent, send_done;
	uint32_t depth;
	int *sidx, nsidx, cur; /* this QP's scripted sends, in order */
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
};

struct rs_mr {
	uint32_t rkey;
	uint64_t lo, hi;
	uint8_t *buf;
	struct ibv_mr *mr;
};

struct responder {
	FILE *log;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	struct rs_qp *qp;
	int nqp;
	struct rs_mr *mr;
	int nmr;
	struct rs_send *snd;
	int nsnd;
	struct ibv_mr *smr;
	uint8_t *sbuf;
	uint64_t smax;
};

static struct rs_qp *rs_qp_find(struct responder *r, uint32_t rec_qpn)
{
	for (int i = 0; i < r->nqp; i++)
		if (r->qp[i].rec_qpn == rec_qpn)
			return &r->qp[i];
	return NULL;
}

static int rs_read_needs(struct responder *r, int fd)
{
	char line[512];

	for (;;) {
		int n = rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS);

		if (n < 0)
			return n;
		if (!strcmp(line, "E"))
			return 0;
		if (!strncmp(line, "NQ ", 3)) {
			struct rs_qp q = { 0 };
			unsigned long long type, depth, nrecv, maxlen;
			void *v = realloc(r->qp, (size_t)(r->nqp + 1) * sizeof(*r->qp));

			if (!v)
				return -ENOMEM;
			r->qp = v;
			if (sscanf(line,
				   "NQ %u %u %llu %llu %u %u %u %u %u %u %d %u %llu %llu",
				   &q.rec_qpn, &q.peer_rec_qpn, &type, &depth,
				   &q.peer_qpn, &q.peer_lid, &q.rq_psn, &q.sq_psn, &q.mtu,
				   &q.rd_atomic, &q.is_global, &q.sgid_index, &nrecv,
				   &maxlen) != 14)
				goto bad;
			/* our sq_psn is the peer's rq_psn and the other way round */
			q.type = (uint32_t)type;
			q.depth = (uint32_t)(depth ? depth : 64);
			q.nrecv = nrecv;
			q.maxlen = maxlen ? maxlen : 1;
			r->qp[r->nqp++] = q;
		} else if (!strncmp(line, "NG ", 3)) {
			unsigned qpn;
			char gid[64];
			struct rs_qp *q;

			if (sscanf(line, "NG %u %63s", &qpn, gid) != 2 ||
			    !(q = rs_qp_find(r, qpn)))
				goto bad;
			rp_unhex(q->peer_gid, gid);
		} else if (!strncmp(line, "NM ", 3)) {
			unsigned rkey;
			unsigned long long lo, hi;
			int k;

			if (sscanf(line, "NM %u %llu %llu", &rkey, &lo, &hi) != 3)
				goto bad;
			for (k = 0; k < r->nmr; k++)
				if (r->mr[k].rkey == rkey)
					break;
			if (k == r->nmr) {
				void *v = realloc(r->mr,
						  (size_t)(r->nmr + 1) * sizeof(*r->mr));

				if (!v)
					return -ENOMEM;
				r->mr = v;
				r->mr[r->nmr++] = (struct rs_mr){ .rkey = rkey,
								  .lo = lo,
								  .hi = hi };
			}
			if (lo < r->mr[k].lo)
				r->mr[k].lo = lo;
			if (hi > r->mr[k].hi)
				r->mr[k].hi = hi;
		} else if (!strncmp(line, "NS ", 3)) {
			struct rs_send s = { 0 };
			unsigned long long after, wi, len, imm;
			void *v =
				realloc(r->snd, (size_t)(r->nsnd + 1) * sizeof(*r->snd));

			if (!v)
				return -ENOMEM;
			r->snd = v;
			if (sscanf(line, "NS %u %llu %llu %llu %llu", &s.qpn, &after, &wi,
				   &len, &imm) != 5)
				goto bad;
			s.after = after;
			s.with_imm = wi != 0;
			s.len = (uint32_t)len;
			s.imm = imm;
			if (len > r->smax)
				r->smax = len;
			r->snd[r->nsnd++] = s;
		} else {
			goto bad;
		}
	}
bad:
	fprintf(r->log, "rbtrace replay --responder: bad request line '%s'\n", line);
	return -EPROTO;
}

static int rs_post_recvs(struct rs_qp *q)
{
	while (q->posted < q->nrecv && q->posted - q->received < q->depth) {
		uint32_t slot = (uint32_t)(q->posted % q->depth);
		struct ibv_sge sge = { .addr = (uintptr_t)(q->buf +
							   (uint64_t)slot * q->maxlen),
				       .length = (uint32_t)q->maxlen,
				       .lkey = q->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = q->posted,
					  .sg_list = &sge,
					  .num_sge = 1 },
				   *bad;

		if (ibv_post_recv(q->qp, &wr, &bad))
			return -EIO;
		q->posted++;
	}
	return 0;
}

/* Whole pages: a device may pin (and read) every page an MR touches. */
static size_t rs_pages(size_t n)
{
	return (n + 4095) & ~(size_t)4095;
}

static int rs_setup(struct responder *r)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	int cqe = 16;

	r->pd = ibv_alloc_pd(r->ctx);
	for (int i = 0; i < r->nqp; i++)
		cqe += (int)r->qp[i].depth * 2;
	r->cq = r->pd ? ibv_create_cq(r->ctx, cqe, NULL, NULL, 0) : NULL;
	if (!r->cq)
		return -EIO;
	for (int i = 0; i < r->nmr; i++) {
		struct rs_mr *m = &r->mr[i];
		size_t len = m->hi > m->lo ? m->hi - m->lo : 1;

		if (len > (1ull << 32) ||
		    posix_memalign((void **)&m->buf, 4096, rs_pages(len)))
			return -ENOMEM;
		memset(m->buf, 0x5a, len);
		m->mr = ibv_reg_mr(r->pd, m->buf, len, acc);
		if (!m->mr)
			return -EIO;
	}
	if (posix_memalign((void **)&r->sbuf, 4096, rs_pages(r->smax + 64)))
		return -ENOMEM;
	memset(r->sbuf, 0xa5, r->smax + 64);
	r->smr = ibv_reg_mr(r->pd, r->sbuf, r->smax + 64, acc);
	if (!r->smr)
		return -EIO;
	for (int i = 0; i < r->nqp; i++) {
		struct rs_qp *q = &r->qp[i];
		struct ibv_qp_init_attr ia = {
			.send_cq = r->cq,
			.recv_cq = r->cq,
			.cap = { .max_send_wr = q->depth,
				 .max_recv_wr = q->depth,
				 .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = (enum ibv_qp_type)q->type,
		};
		struct ibv_qp_attr a;

		if (posix_memalign((void **)&q->buf, 4096,
				   rs_pages(q->maxlen * q->depth)))
			return -ENOMEM;
		q->mr = ibv_reg_mr(r->pd, q->buf, q->maxlen * q->depth, acc);
		q->qp = q->mr ? ibv_create_qp(r->pd, &ia) : NULL;
		if (!q->qp)
			return -EIO;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		a.qp_access_flags = (unsigned)acc;
		if (ibv_modify_qp(q->qp, &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
			return -EIO;
		if (rs_post_recvs(q))
			return -EIO;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = (enum ibv_mtu)(q->mtu ? q->mtu : r->pattr.active_mtu);
		a.dest_qp_num = q->peer_qpn;
		a.rq_psn = q->rq_psn;
		a.max_dest_rd_atomic = (uint8_t)(q->rd_atomic ? q->rd_atomic : 1);
		a.min_rnr_timer = 1;
		a.ah_attr.dlid = (uint16_t)q->peer_lid;
		a.ah_attr.port_num = 1;
		if (q->is_global) {
			a.ah_attr.is_global = 1;
			memcpy(a.ah_attr.grh.dgid.raw, q->peer_gid, 16);
			a.ah_attr.grh.sgid_index = (uint8_t)q->sgid_index;
			a.ah_attr.grh.hop_limit = 1;
		}
		if (ibv_modify_qp(q->qp, &a,
				  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  (q->type == IBV_QPT_RC
						   ? IBV_QP_MAX_DEST_RD_ATOMIC |
							     IBV_QP_MIN_RNR_TIMER
						   : 0)))
			return -EIO;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = q->sq_psn;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		if (ibv_modify_qp(q->qp, &a,
				  IBV_QP_STATE | IBV_QP_SQ_PSN |
					  (q->type == IBV_QPT_RC
						   ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
							     IBV_QP_RNR_RETRY |
							     IBV_QP_MAX_QP_RD_ATOMIC
						   : 0)))
			return -EIO;
	}
	return 0;
}

static int rs_publish(struct responder *r, int fd)
{
	char gid[40];

	rp_hex(gid, r->gid.raw);
	for (int i = 0; i < r->nqp; i++)
		if (rp_sendf(fd, "Q 0 %u %u %u %u %u 0 %s\n", r->qp[i].rec_qpn,
			     r->qp[i].peer_rec_qpn, r->qp[i].qp->qp_num, r->qp[i].type,
			     r->pattr.lid, gid))
			return -EPIPE;
	for (int i = 0; i < r->nmr; i++)
		if (rp_sendf(fd, "M 0 %llu %llu %llu %u %u\n",
			     (unsigned long long)r->mr[i].lo,
			     (unsigned long long)(r->mr[i].hi - r->mr[i].lo),
			     (unsigned long long)(uintptr_t)r->mr[i].buf, r->mr[i].rkey,
			     r->mr[i].mr->rkey))
			return -EPIPE;
	return rp_sendf(fd, "E\n");
}

static void rs_try_sends(struct responder *r)
{
	for (int k = 0; k < r->nqp; k++) {
		struct rs_qp *q = &r->qp[k];

		/* in order per QP, each once the peer's messages it answered arrived */
		while (q->cur < q->nsidx) {
			struct rs_send *s = &r->snd[q->sidx[q->cur]];
			struct ibv_sge sge = { .addr = (uintptr_t)r->sbuf,
					       .length = s->len,
					       .lkey = r->smr->lkey };
			struct ibv_send_wr wr, *bad;

			if (q->received < s->after || q->sent - q->send_done >= q->depth)
				break;
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = 1ull << 63 | (uint64_t)q->cur;
			wr.sg_list = &sge;
			wr.num_sge = 1;
			wr.opcode = s->with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
			wr.imm_data = htobe32((uint32_t)s->imm);
			wr.send_flags = IBV_SEND_SIGNALED;
			if (ibv_post_send(q->qp, &wr, &bad))
				return;
			s->done = 1;
			q->sent++;
			q->cur++;
		}
	}
}

int rp_responder_run(const struct rbt_replay_opts *o)
{
	struct responder r = { .log = o->log ? o->log : stderr };
	struct rp_job jj = { .o = o, .log = r.log, .net_fd = -1 };
	char line[256];
	int fd, rc = 0;
	unsigned long iter = 0;

	if (!o->listen && !o->connect) {
		fprintf(r.log, "rbtrace replay --responder: give --listen PORT (or "
			       "--connect)\n");
		return -EINVAL;
	}
	rc = rp_open_device(&jj, NULL, &r.ctx);
	if (rc)
		return rc;
	if (ibv_query_port(r.ctx, 1, &r.pattr) || ibv_query_gid(r.ctx, 1, 0, &r.gid))
		memset(&r.gid, 0, sizeof(r.gid));
	fd = o->listen ? rp_listen_accept(r.log, o->listen)
		       : rp_connect(r.log, o->connect);
	if (fd < 0) {
		ibv_close_device(r.ctx);
		return fd;
	}
	if (rp_sendf(fd, "HELLO responder\n") ||
	    rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS) < 0 ||
	    strncmp(line, "HELLO replayer", 14)) {
		fprintf(r.log,
			"rbtrace replay --responder: the peer is not a replayer\n");
		rc = -EPROTO;
		goto out;
	}
	rc = rs_read_needs(&r, fd);
	for (int i = 0; !rc && i < r.nsnd; i++) {
		struct rs_qp *q = rs_qp_find(&r, r.snd[i].qpn);
		int *v;

		if (!q)
			continue;
		v = realloc(q->sidx, (size_t)(q->nsidx + 1) * sizeof(*v));
		if (!v) {
			rc = -ENOMEM;
			break;
		}
		q->sidx = v;
		q->sidx[q->nsidx++] = i;
	}
	if (!rc)
		rc = rs_setup(&r);
	if (rc) {
		fprintf(r.log, "rbtrace replay --responder: cannot stand in: %s\n",
			strerror(-rc));
		rp_sendf(fd, "X cannot build the stand-in resources\n");
		goto out;
	}
	rc = rs_publish(&r, fd);
	if (!rc && (rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS * 4) < 0 ||
		    strcmp(line, "READY") || rp_sendf(fd, "READY\n")))
		rc = -EPROTO;
	while (!rc) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(r.cq, 16, wc);

		for (int i = 0; i < n; i++) {
			struct rs_qp *q = NULL;

			for (int k = 0; k < r.nqp; k++)
				if (r.qp[k].qp->qp_num == wc[i].qp_num)
					q = &r.qp[k];
			if (!q)
				continue;
			if (wc[i].opcode & IBV_WC_RECV) {
				q->received++;
				rs_post_recvs(q);
			} else {
				q->send_done++;
			}
		}
		rs_try_sends(&r);
		if ((++iter & 1023) == 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };

			if (poll(&p, 1, 0) == 1) {
				if (rp_readline(fd, line, sizeof(line), 1000) < 0 ||
				    strcmp(line, "DONE"))
					rc = -ECONNRESET;
				else
					rp_sendf(fd, "DONE\n");
				break;
			}
			if ((iter & 16383) == 0)
				sched_yield();
		}
	}
	fprintf(r.log, "rbtrace replay --responder: stood in for %d QP(s), %d MR(s); ",
		r.nqp, r.nmr);
	for (int i = 0; i < r.nqp; i++)
		fprintf(r.log, "QP %u: %llu received, %llu sent%s", r.qp[i].rec_qpn,
			(unsigned long long)r.qp[i].received,
			(unsigned long long)r.qp[i].sent, i + 1 < r.nqp ? "; " : "\n");
	if (!r.nqp)
		fputc('\n', r.log);
out:
	close(fd);
	for (int i = 0; i < r.nqp; i++) {
		if (r.qp[i].qp)
			ibv_destroy_qp(r.qp[i].qp);
		if (r.qp[i].mr)
			ibv_dereg_mr(r.qp[i].mr);
		free(r.qp[i].buf);
		free(r.qp[i].sidx);
	}
	for (int i = 0; i < r.nmr; i++) {
		if (r.mr[i].mr)
			ibv_dereg_mr(r.mr[i].mr);
		free(r.mr[i].buf);
	}
	if (r.smr)
		ibv_dereg_mr(r.smr);
	free(r.sbuf);
	if (r.cq)
		ibv_destroy_cq(r.cq);
	if (r.pd)
		ibv_dealloc_pd(r.pd);
	ibv_close_device(r.ctx);
	free(r.qp);
	free(r.mr);
	free(r.snd);
	return rc;
}
