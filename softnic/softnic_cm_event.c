/*
 * softnic_cm_event.c - handing events out and taking them back:
 * rdma_get_cm_event's wait over the channel's epoll set, the ack that lets a
 * destroy go on, synchronous ids (no channel) driven to their answer, and
 * destroying an id once its given events are acked.
 *
 * Never: sleep holding cm_mu (waits drop it), free an event the program
 * still holds, or call an exported rdma_* function but the two a
 * synchronous id's wait goes through (see cm_complete).
 */
#include "softnic_cm_int.h"

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

int cm_get_event(struct cm_chan *ch, struct rdma_cm_event **out)
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

void cm_ack_locked(struct rdma_cm_event *event)
{
	struct cm_evt *e = (struct cm_evt *)event;

	e->owner->completed++;
	if (e->mc)
		e->mc->completed++;
	pthread_cond_broadcast(&cm_cv);
	cm_free(e);
}

/* a synchronous id's call waits for its own event, as librdmacm does: through
 * the exported rdma_get_cm_event / rdma_ack_cm_event (the PLT), as Debian's
 * library does, so that a preloaded tracer sees the events (nested in the call) */
int cm_complete(struct cm_id *c)
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

void cm_destroy_locked(struct cm_id *c)
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

			cm_free(e);
			cm_destroy_locked(child);
			continue;
		}
		cm_free(e);
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
		cm_free(m);
	}
	cm_free(c->ep_attr);
	cm_free(c->req);
	cm_free(c);
}
