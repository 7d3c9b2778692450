/* cm_hang.c - a program that hangs as users' programs do when they forget an
 * ack: it takes a CM event (ADDR_RESOLVED), never calls rdma_ack_cm_event, then
 * calls rdma_destroy_id, which waits for that ack forever. Prints "destroying"
 * first, so a test knows it got there; it is meant to be killed (SIGTERM).
 *
 * Used by tests/cm_record_test.sh: the report of its trace must say that the
 * destroy waits for the event forever (cm_event_not_acked, error).
 */
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev = NULL;
	struct sockaddr_in a;
	struct pollfd p;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(9);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000)) {
		perror("cm_hang: setup");
		return 1;
	}
	p.fd = ch->fd;
	p.events = POLLIN;
	if (poll(&p, 1, 5000) != 1 || rdma_get_cm_event(ch, &ev)) {
		perror("cm_hang: no event");
		return 1;
	}
	printf("got %s, destroying without the ack\n", rdma_event_str(ev->event));
	fflush(stdout);
	rdma_destroy_id(id); /* waits for the ack that never comes */
	printf("destroy returned\n");
	return 0;
}
