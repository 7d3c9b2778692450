/*
 * softnic shared registered memory: how a peer reaches the pages of a run
 * that the registering process already shares with other processes (SysV
 * shm, MAP_SHARED files, memfds, shared anonymous mappings). Only the
 * registration path and the first access to a peer's run use it; it must
 * never be called on the post/poll fast path beyond a cached pointer.
 */
#ifndef SOFTNIC_MEM_H
#define SOFTNIC_MEM_H

#include <stdint.h>

enum sn_mem_kind {
	SN_MEM_FABRIC = 0, /* pages moved into a fabric file (private memory) */
	SN_MEM_SYSV = 1,   /* a SysV segment: peers shmat(id) */
	SN_MEM_FD = 2,	   /* a shared file: peers open /proc/<pid>/fd/<id> */
};

/* Lives inside the fabric's MR table: fixed-size fields only. */
struct sn_mem_src {
	uint32_t kind; /* enum sn_mem_kind */
	int32_t id;    /* SysV shmid, or the registering process's fd */
	uint32_t pid;  /* SN_MEM_FD: whose fd */
	uint32_t pad;
	uint64_t off; /* offset of the run's first byte in the segment or file */
};

/* How the pages at [va, va + len) are backed: fills *src and returns how
 * many bytes from va share that backing (at most len), or -EFAULT when va
 * is not mapped. Private memory (SN_MEM_FABRIC) stops where shared memory
 * starts, so that one run never mixes the two. */
int64_t sn_mem_probe(uint64_t va, uint64_t len, struct sn_mem_src *src);

/* Drop what sn_mem_probe holds for a run (a duplicated descriptor). */
void sn_mem_release(struct sn_mem_src *src);

/* Map a peer's shared run of len bytes; returns its first byte or NULL. */
void *sn_mem_peer_map(const struct sn_mem_src *src, uint64_t len);

#endif
