/*
 * softnic_cm_rsock.c - rsockets, which softnic's connection manager does not
 * implement: every r* export fails with ENOSYS and says so once on stderr.
 *
 * Never: do anything else (a program using rsockets needs the real
 * librdmacm).
 */
#include "softnic_cm_int.h"

/* one export that fails: rsockets are not part of softnic's CM */
#define CM_RSOCKET_STUB(type, name, params) \
	CM_EXPORT type name params          \
	{                                   \
		CM_ENOSYS(-1);              \
	}

CM_RSOCKET_STUB(int, rsocket, (int domain, int type, int protocol))
CM_RSOCKET_STUB(int, rbind, (int s, const struct sockaddr *addr, socklen_t addrlen))
CM_RSOCKET_STUB(int, rlisten, (int s, int backlog))
CM_RSOCKET_STUB(int, raccept, (int s, struct sockaddr *addr, socklen_t *addrlen))
CM_RSOCKET_STUB(int, rconnect, (int s, const struct sockaddr *addr, socklen_t addrlen))
CM_RSOCKET_STUB(int, rshutdown, (int s, int how))
CM_RSOCKET_STUB(int, rclose, (int s))
CM_RSOCKET_STUB(ssize_t, rrecv, (int s, void *buf, size_t len, int flags))
CM_RSOCKET_STUB(ssize_t, rrecvfrom,
		(int s, void *buf, size_t len, int flags, struct sockaddr *src_addr,
		 socklen_t *addrlen))
CM_RSOCKET_STUB(ssize_t, rrecvmsg, (int s, struct msghdr *msg, int flags))
CM_RSOCKET_STUB(ssize_t, rsend, (int s, const void *buf, size_t len, int flags))
CM_RSOCKET_STUB(ssize_t, rsendto,
		(int s, const void *buf, size_t len, int flags,
		 const struct sockaddr *dest_addr, socklen_t addrlen))
CM_RSOCKET_STUB(ssize_t, rsendmsg, (int s, const struct msghdr *msg, int flags))
CM_RSOCKET_STUB(ssize_t, rread, (int s, void *buf, size_t count))
CM_RSOCKET_STUB(ssize_t, rreadv, (int s, const struct iovec *iov, int iovcnt))
CM_RSOCKET_STUB(ssize_t, rwrite, (int s, const void *buf, size_t count))
CM_RSOCKET_STUB(ssize_t, rwritev, (int s, const struct iovec *iov, int iovcnt))
CM_RSOCKET_STUB(int, rpoll, (struct pollfd * fds, nfds_t nfds, int timeout))
CM_RSOCKET_STUB(int, rselect,
		(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		 struct timeval *timeout))
CM_RSOCKET_STUB(int, rgetpeername, (int s, struct sockaddr *addr, socklen_t *addrlen))
CM_RSOCKET_STUB(int, rgetsockname, (int s, struct sockaddr *addr, socklen_t *addrlen))
CM_RSOCKET_STUB(int, rsetsockopt,
		(int s, int level, int optname, const void *optval, socklen_t optlen))
CM_RSOCKET_STUB(int, rgetsockopt,
		(int s, int level, int optname, void *optval, socklen_t *optlen))
CM_RSOCKET_STUB(int, rfcntl, (int s, int cmd, ...))
CM_RSOCKET_STUB(off_t, riomap,
		(int s, void *buf, size_t len, int prot, int flags, off_t offset))
CM_RSOCKET_STUB(int, riounmap, (int s, void *buf, size_t len))
CM_RSOCKET_STUB(size_t, riowrite,
		(int s, const void *buf, size_t count, off_t offset, int flags))
