/* replay_net.c - the replayer's own out-of-band channel: a TCP connection to the
 * peer replayer (each side sends the new numbers of its QPs and MRs: the
 * directory) or to `rbtrace replay --responder` (replay_responder.c, told what
 * traffic to stand in for), the READY/DONE barriers and the agreed start time.
 *
 * The protocol is lines of text; every read has a timeout, so a vanished peer
 * ends the replay with a message and never hangs it. Must never issue a verb.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <limits.h>
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
int rp_sendf(int fd, const char *fmt, ...)
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
int rp_readline(int fd, char *buf, size_t n, int timeout_ms)
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

void rp_hex(char *out, const uint8_t *g)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", g[i]);
}

void rp_unhex(uint8_t *g, const char *s)
{
	memset(g, 0, 16);
	for (int i = 0; i < 16 && s[2 * i] && s[2 * i + 1]; i++) {
		unsigned v = 0;

		sscanf(s + 2 * i, "%2x", &v);
		g[i] = (uint8_t)v;
	}
}

/* Accepts n connections on port (all within 120 s); fds gets them. */
int rp_listen_accept_n(FILE *log, const char *port, int n, int *fds)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	char *end;
	long p = strtol(port, &end, 10);
	int one = 1, ls, got = 0;
	struct pollfd pf;
	struct timespec t0, t1;

	if (*end || p <= 0 || p > 65535) {
		fprintf(log, "rbtrace replay: --listen %s: not a port number\n", port);
		return -EINVAL;
	}
	a.sin_port = htons((uint16_t)p);
	ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0)
		return -errno;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, n)) {
		fprintf(log, "rbtrace replay: --listen %s: %s\n", port, strerror(errno));
		close(ls);
		return -EADDRINUSE;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < n) {
		long left;
		int fd;

		clock_gettime(CLOCK_MONOTONIC, &t1);
		left = 120000 - (t1.tv_sec - t0.tv_sec) * 1000 -
		       (t1.tv_nsec - t0.tv_nsec) / 1000000;
		pf.fd = ls;
		pf.events = POLLIN;
		if (left <= 0 || poll(&pf, 1, (int)left) != 1) {
			fprintf(log,
				"rbtrace replay: --listen %s: %d of %d peers connected "
				"within 120 s\n",
				port, got, n);
			close(ls);
			while (got > 0)
				close(fds[--got]);
			return -ETIMEDOUT;
		}
		fd = accept(ls, NULL, NULL);
		if (fd < 0)
			continue;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		fds[got++] = fd;
	}
	close(ls);
	return 0;
}

int rp_listen_accept(FILE *log, const char *port)
{
	int fd, rc = rp_listen_accept_n(log, port, 1, &fd);

	return rc < 0 ? rc : fd;
}

int rp_connect(FILE *log, const char *hostport)
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
/* The hosts named in the job (the writers of memory dependencies); -1: too many. */
int rp_host_id(struct rp_job *j, const char *host)
{
	for (int i = 0; i < j->nhost; i++)
		if (!strcmp(j->hosts[i], host))
			return i;
	if (j->nhost == RP_MAX_HOSTS)
		return -1;
	snprintf(j->hosts[j->nhost], sizeof(j->hosts[0]), "%s", host);
	return j->nhost++;
}

static int rp_net_hello(struct rp_job *j, int k)
{
	char line[512], host[200] = "";
	unsigned long long epoch = 0;
	int fd = j->peer_fd[k];

	if (rp_sendf(fd, "HELLO replayer %s %llu\n",
		     j->side[0].host[0] ? j->side[0].host : "-",
		     (unsigned long long)j->rec_epoch) ||
	    rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS) < 0) {
		return rp_fail(j, -ECONNRESET,
			       "the peer closed the connection during hello");
	}
	if (!strncmp(line, "HELLO responder", 15)) {
		if (j->npeer > 1)
			return rp_fail(j, -EPROTO,
				       "--peers: a responder serves one replayer, not %d",
				       j->npeer);
		j->peer_is_responder = 1;
		return 0;
	}
	if (sscanf(line, "HELLO replayer %199s %llu", host, &epoch) != 2) {
		return rp_fail(j, -EPROTO, "the peer is not an rbtrace replayer ('%s')",
			       line);
	}
	/* The listener names the files of shared XRC domains; on one machine both
	 * replayers then open the same ones (on two, nothing is shared anyway). */
	if (j->o->listen) {
		if (rp_sendf(fd, "XD %s\n", j->xrcd_prefix))
			return -EPIPE;
	} else if (rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS) < 0 ||
		   sscanf(line, "XD %199s", j->xrcd_prefix) != 1) {
		return rp_fail(j, -EPROTO,
			       "the peer replayer did not name its XRC domain files");
	}
	/* Same host: the recordings share CLOCK_MONOTONIC, keep their offset. */
	if (j->same_clock && !strcmp(host, j->side[0].host)) {
		if (epoch && epoch < j->rec_epoch)
			j->rec_epoch = epoch;
	} else {
		j->same_clock = 0;
	}
	return 0;
}

/* The listener takes --peers connections (a job spread over several
 * replayer processes: it relays each one's directory to the others and
 * holds the barriers); a connecting replayer has one peer, the listener. */
int rp_net_open(struct rp_job *j)
{
	int n = j->o->listen && j->o->peers > 1 ? j->o->peers : 1, rc;

	if (n > RP_MAX_PEERS)
		return rp_fail(j, -EINVAL, "--peers %d: at most %d", n, RP_MAX_PEERS);
	if (j->o->listen) {
		rc = rp_listen_accept_n(j->log, j->o->listen, n, j->peer_fd);
		if (rc < 0)
			return rc;
	} else {
		rc = rp_connect(j->log, j->o->connect);
		if (rc < 0)
			return rc;
		j->peer_fd[0] = rc;
	}
	j->npeer = n;
	j->net_fd = j->peer_fd[0];
	for (int k = 0; k < n; k++)
		if ((rc = rp_net_hello(j, k)))
			return rc;
	return 0;
}

/* Which peer a directory entry came from (-1: our own): the listener files
 * peer k's sides from RP_MAX_SIDES * (1 + k) on. */
static int rp_entry_peer(int side)
{
	return side < RP_MAX_SIDES ? -1 : side / RP_MAX_SIDES - 1;
}

/* Entry i of the directory's part kind (Q: QPs, M: MRs, S: XRC SRQs, W: the
 * WRITEs the peers' posts may wait for, replay_deps.c) as a line of text in
 * buf; returns the side it came from, or INT_MIN past the part's end. */
static int rp_dir_line(const struct rp_job *j, char kind, int i, char *buf, size_t n)
{
	char gid[40];

	if (kind == 'Q' && i < j->dir.nqp) {
		const struct rp_dir_qp *q = &j->dir.qps[i];

		rp_hex(gid, q->gid);
		snprintf(buf, n, "Q %d %u %u %u %u %u %u %s\n", q->side, q->rec_qpn,
			 q->rec_dest, q->new_qpn, q->type, q->lid, q->rec_lid, gid);
		return q->side;
	}
	if (kind == 'M' && i < j->dir.nmr) {
		const struct rp_dir_mr *m = &j->dir.mrs[i];

		snprintf(buf, n, "M %d %llu %llu %llu %u %u\n", m->side,
			 (unsigned long long)m->rec_addr, (unsigned long long)m->len,
			 (unsigned long long)m->new_addr, m->rec_rkey, m->new_rkey);
		return m->side;
	}
	if (kind == 'S' && i < j->dir.nsrq) {
		const struct rp_dir_srq *r = &j->dir.srqs[i];

		snprintf(buf, n, "S %d %u %u\n", r->side, r->rec_srqn, r->new_srqn);
		return r->side;
	}
	if (kind == 'W' && i < j->writes.n) {
		const struct rp_write *w = &j->writes.v[i];

		snprintf(buf, n, "W %d %s %u %u %u %u %u %llu %llu %llu %llu\n", w->side,
			 w->host >= 0 ? j->hosts[w->host] : "-", w->clk, w->rec_dest,
			 w->rkey, w->key, w->ord, (unsigned long long)w->raddr,
			 (unsigned long long)w->len, (unsigned long long)w->t_post,
			 (unsigned long long)w->t_done);
		return w->side;
	}
	return INT_MIN;
}

/* Our directory, and (the listener) every other peer's, to fd; not what came
 * from peer skip. */
static int rp_send_dir(struct rp_job *j, int fd, int skip)
{
	int relay = j->o->listen != NULL;
	char line[512];

	for (const char *kind = "QMSW"; *kind; kind++)
		for (int i = 0;; i++) {
			int side = rp_dir_line(j, *kind, i, line, sizeof(line));
			int pk = side == INT_MIN ? -1 : rp_entry_peer(side);

			if (side == INT_MIN)
				break;
			if (pk >= 0 && (!relay || pk == skip))
				continue;
			if (rp_sendf(fd, "%s", line))
				return -EPIPE;
		}
	return rp_sendf(fd, "E\n");
}

/* The directory from fd; its sides are filed from base on. */
static int rp_recv_dir(struct rp_job *j, int fd, int base)
{
	char line[512], gid[64];

	for (;;) {
		int n = rp_readline(fd, line, sizeof(line), RP_NET_TIMEOUT_MS);

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
			q.side += base;
			rp_unhex(q.gid, gid);
			if (rp_dir_add_qp(&j->dir, &q))
				return -ENOMEM;
		} else if (line[0] == 'M') {
			struct rp_dir_mr m = { 0 };
			unsigned long long a, l, na;

			if (sscanf(line, "M %d %llu %llu %llu %u %u", &m.side, &a, &l,
				   &na, &m.rec_rkey, &m.new_rkey) != 6)
				goto bad;
			m.side += base;
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
			r.side += base;
			if (rp_dir_add_srq(&j->dir, &r))
				return -ENOMEM;
		} else if (line[0] == 'W') {
			struct rp_write w = { 0 };
			unsigned long long a, l, tp, td;
			char host[200];

			if (sscanf(line, "W %d %199s %u %u %u %u %u %llu %llu %llu %llu",
				   &w.side, host, &w.clk, &w.rec_dest, &w.rkey, &w.key,
				   &w.ord, &a, &l, &tp, &td) != 11)
				goto bad;
			w.side += base;
			w.host = rp_host_id(j, host);
			w.raddr = a;
			w.len = l;
			w.t_post = tp;
			w.t_done = td;
			if (!RP_GROW(j->writes.v, j->writes.n, j->writes.cap))
				return -ENOMEM;
			j->writes.v[j->writes.n++] = w;
		} else if (line[0] == 'X') {
			return rp_fail(j, -EPROTO, "the peer refused: %s", line + 1);
		} else {
			goto bad;
		}
	}
bad:
	return rp_fail(j, -EPROTO, "bad line from the peer: '%s'", line);
}

static int rp_is_msg_op(uint64_t op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
	       op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_INV;
}

/* The messages the recording received on q (the model's join, per QP), each
 * after as many of q's messages as the recording had posted by then. */
static int rp_send_received(struct rp_job *j, const struct rp_side *s,
			    const struct rp_qp *q)
{
	const struct rp_wclist *rl = &q->rec_wc[1];
	uint64_t nmsg = 0;
	int i = 0;

	for (uint32_t k = 0; k < rl->n; k++) {
		const struct rp_wcrec *w = &rl->v[k];

		for (; i < s->nstep && s->step[i].ev->ts < w->ts; i++) {
			const struct rbt_event *e = s->step[i].ev;

			if (e->type != RBT_EV_POST_SEND || s->step[i].qp != q)
				continue;
			for (uint32_t x = 0; x < e->u.post_send.n_wrs; x++)
				nmsg += rp_is_msg_op(e->u.post_send.wrs[x].opcode);
		}
		if (w->status != IBV_WC_SUCCESS || !(w->opcode & IBV_WC_RECV))
			continue;
		if (rp_sendf(j->net_fd, "NS %u %llu %u %u %u\n", q->rec_dest_qpn,
			     (unsigned long long)nmsg, w->with_imm ? IBV_WC_WITH_IMM : 0,
			     w->byte_len, w->imm))
			return -EPIPE;
	}
	return 0;
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
				const struct rbt_event *e = s->step[i].ev;

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
			if (rp_send_received(j, s, q))
				return -EPIPE;
		}
	}
	return rp_sendf(fd, "E\n");
}

int rp_net_exchange(struct rp_job *j)
{
	int rc = 0;

	if (j->peer_is_responder) {
		rc = rp_send_needs(j);
		if (!rc)
			rc = rp_recv_dir(j, j->net_fd, RP_MAX_SIDES);
		return rc;
	}
	if (!j->o->listen) {
		rc = rp_send_dir(j, j->net_fd, -1);
		return rc ? rc : rp_recv_dir(j, j->net_fd, RP_MAX_SIDES);
	}
	/* the listener: every peer's first, then to each all the others' */
	for (int k = 0; k < j->npeer && !rc; k++)
		rc = rp_recv_dir(j, j->peer_fd[k], RP_MAX_SIDES * (1 + k));
	for (int k = 0; k < j->npeer && !rc; k++)
		rc = rp_send_dir(j, j->peer_fd[k], k);
	return rc;
}

/* The listener hears the word from every peer before it answers any. */
int rp_net_barrier(struct rp_job *j, const char *word)
{
	char line[64];
	int n = 0;

	if (!j->o->listen && rp_sendf(j->net_fd, "%s\n", word))
		return -EPIPE;
	for (int k = 0; k < j->npeer; k++) {
		n = rp_readline(j->peer_fd[k], line, sizeof(line), RP_NET_TIMEOUT_MS * 4);
		if (n < 0 || strcmp(line, word)) {
			fprintf(j->log, "rbtrace replay: the peer did not reach %s: %s\n",
				word, n < 0 ? strerror(-n) : line);
			return n < 0 ? n : -EPROTO;
		}
		if (!j->o->listen)
			break;
	}
	for (int k = 0; j->o->listen && k < j->npeer; k++)
		if (rp_sendf(j->peer_fd[k], "%s\n", word))
			return -EPIPE;
	return 0;
}

/* Same host: every replayer reads one CLOCK_MONOTONIC, so they can agree on
 * the very same start instant (the latest of the proposals). */
static void rp_take_t0(struct rp_job *j, uint64_t *t0, unsigned long long theirs)
{
	if (j->same_clock && theirs > *t0 && theirs - *t0 < 1000000000ull)
		*t0 = theirs;
}

int rp_net_agree_t0(struct rp_job *j, uint64_t *t0)
{
	char line[64];
	unsigned long long theirs = 0;

	if (!j->o->listen) {
		if (rp_sendf(j->net_fd, "T0 %llu\n", (unsigned long long)*t0) ||
		    rp_readline(j->net_fd, line, sizeof(line), RP_NET_TIMEOUT_MS) < 0 ||
		    sscanf(line, "T0 %llu", &theirs) != 1)
			return rp_fail(j, -EPROTO,
				       "the peer did not agree on a start time");
		rp_take_t0(j, t0, theirs);
		return 0;
	}
	for (int k = 0; k < j->npeer; k++) {
		if (rp_readline(j->peer_fd[k], line, sizeof(line), RP_NET_TIMEOUT_MS) <
			    0 ||
		    sscanf(line, "T0 %llu", &theirs) != 1)
			return rp_fail(j, -EPROTO,
				       "the peer did not agree on a start time");
		rp_take_t0(j, t0, theirs);
	}
	for (int k = 0; k < j->npeer; k++)
		if (rp_sendf(j->peer_fd[k], "T0 %llu\n", (unsigned long long)*t0))
			return -EPIPE;
	return 0;
}

void rp_net_close(struct rp_job *j)
{
	for (int k = 0; k < j->npeer; k++)
		if (j->peer_fd[k] >= 0)
			close(j->peer_fd[k]);
	if (!j->npeer && j->net_fd >= 0)
		close(j->net_fd);
	j->npeer = 0;
	j->net_fd = -1;
}
