/*
 * softnic multicast: the fabric's groups (ibv_attach_mcast/ibv_detach_mcast
 * of UD QPs) and the list of QPs a multicast datagram goes to.
 *
 * A group is a file of the fabric, mc-<MGID in hex>, holding the QPNs
 * attached to it in slots any process claims or frees with a CAS; whoever
 * attaches first creates it (and nobody removes it: groups are few and
 * small). A sender reads the slots when it sends; it never writes them.
 * Control path except sn_mc_members, which must not allocate once the
 * group is mapped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "softnic_int.h"

struct sn_mc_shm {
	uint64_t magic;
	_Atomic uint32_t slot[SN_MC_QPS]; /* qpn + 1, 0 = free */
};

#define SN_MC_MAGIC 0x534e4d4301ull

struct sn_mc_map { /* this process's mapping of one group */
	union ibv_gid gid;
	struct sn_mc_shm *shm;
	struct sn_mc_map *next;
};

static struct sn_mc_map *sn_mc_maps; /* under sn_g.lock, never freed */

bool sn_gid_is_mcast(const union ibv_gid *gid)
{
	return gid->raw[0] == 0xff;
}

/* The group's file, mapped once per process; created when `create`. */
static struct sn_mc_shm *sn_mc_get(const union ibv_gid *gid, bool create)
{
	struct sn_mc_map *m;
	struct sn_mc_shm *s = NULL;
	char name[64], p[512];
	int fd;

	pthread_mutex_lock(&sn_g.lock);
	for (m = sn_mc_maps; m; m = m->next)
		if (!memcmp(&m->gid, gid, sizeof(*gid))) {
			s = m->shm;
			goto out;
		}
	strcpy(name, "mc-");
	for (int i = 0; i < 16; i++)
		snprintf(name + 3 + 2 * i, 3, "%02x", gid->raw[i]);
	sn_path(p, sizeof(p), name);
	fd = open(p, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
	if (fd < 0)
		goto out;
	/* idempotent: two processes creating the group at once agree */
	if (create && posix_fallocate(fd, 0, sizeof(*s))) {
		close(fd);
		goto out;
	}
	if (lseek(fd, 0, SEEK_END) < (off_t)sizeof(*s)) {
		close(fd);
		goto out; /* a creator that has not sized it yet: no members */
	}
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s == MAP_FAILED) {
		s = NULL;
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		munmap(s, sizeof(*s));
		s = NULL;
		goto out;
	}
	m->gid = *gid;
	m->shm = s;
	m->next = sn_mc_maps;
	sn_mc_maps = m;
out:
	pthread_mutex_unlock(&sn_g.lock);
	return s;
}

int sn_attach_mcast(struct ibv_qp *ibqp, const union ibv_gid *gid, uint16_t lid)
{
	struct sn_qp *qp = sn_qp_of(ibqp);
	uint32_t want = qp->shm->qpn + 1;
	struct sn_mc_shm *s;
	int i;

	/* as the kernel's ib_attach_mcast: UD only, a multicast GID, and on
	 * InfiniBand a multicast LID */
	if (ibqp->qp_type != IBV_QPT_UD || !gid || !sn_gid_is_mcast(gid) ||
	    (!sn_g.eth && (lid < 0xc000 || lid == 0xffff)))
		return EINVAL;
	for (i = 0; i < qp->nmc; i++)
		if (!memcmp(&qp->mc[i], gid, sizeof(*gid)))
			return 0; /* attached already: the kernel says 0 too */
	if (qp->nmc == SN_QP_MCS)
		return ENOMEM;
	s = sn_mc_get(gid, true);
	if (!s)
		return ENOMEM;
	for (i = 0; i < SN_MC_QPS; i++) {
		uint32_t z = 0;

		if (atomic_compare_exchange_strong(&s->slot[i], &z, want))
			break;
	}
	if (i == SN_MC_QPS)
		return ENOMEM; /* the group is full */
	qp->mc[qp->nmc++] = *gid;
	return 0;
}

int sn_detach_mcast(struct ibv_qp *ibqp, const union ibv_gid *gid, uint16_t lid)
{
	struct sn_qp *qp = sn_qp_of(ibqp);
	uint32_t want = qp->shm->qpn + 1;
	struct sn_mc_shm *s;
	int i, k;

	(void)lid;
	if (ibqp->qp_type != IBV_QPT_UD || !gid)
		return EINVAL;
	for (k = 0; k < qp->nmc; k++)
		if (!memcmp(&qp->mc[k], gid, sizeof(*gid)))
			break;
	if (k == qp->nmc)
		return EINVAL; /* not attached to it */
	s = sn_mc_get(gid, false);
	for (i = 0; s && i < SN_MC_QPS; i++) {
		uint32_t v = want;

		if (atomic_compare_exchange_strong(&s->slot[i], &v, 0))
			break;
	}
	qp->mc[k] = qp->mc[--qp->nmc];
	return 0;
}

/* A QP going away leaves its groups (the kernel detaches on destroy). */
void sn_mc_detach_all(struct sn_qp *qp)
{
	while (qp->nmc)
		sn_detach_mcast(&qp->qpx.qp_base, &qp->mc[qp->nmc - 1], 0);
}

/* The QPNs attached to gid now, at most max; 0 for a group nobody joined. */
int sn_mc_members(const union ibv_gid *gid, uint32_t *qpn, int max)
{
	struct sn_mc_shm *s = sn_mc_get(gid, false);
	int n = 0;

	for (int i = 0; s && i < SN_MC_QPS && n < max; i++) {
		uint32_t v = atomic_load_explicit(&s->slot[i], memory_order_acquire);

		if (v)
			qpn[n++] = v - 1;
	}
	return n;
}
