/*
 * softnic_tool: read-only views of a fabric for tools (the `rbtrace softnic`
 * subcommand): its directory and its counters. It maps fabric files
 * read-only and must never modify them or depend on a live softnic process.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "softnic/rbt_softnic.h"
#include "softnic/softnic_int.h"

void rbt_softnic_fabric_dir(char *buf, size_t n)
{
	const char *d = getenv("SOFTNIC_FABRIC");

	if (d && *d)
		snprintf(buf, n, "%s", d);
	else if (access("/dev/shm", W_OK) == 0)
		snprintf(buf, n, "/dev/shm/softnic-%u", (unsigned)getuid());
	else
		snprintf(buf, n, "/tmp/softnic-%u", (unsigned)getuid());
}

static void *map_ro(const char *dir, const char *name, size_t *len)
{
	char p[600];
	struct stat st;
	void *m;
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || st.st_size <= 0) {
		close(fd);
		return NULL;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return NULL;
	*len = (size_t)st.st_size;
	return m;
}

static const char *state_name(uint32_t s)
{
	static const char *const n[] = { "RESET", "INIT", "RTR", "RTS",
					 "SQD",	  "SQE",  "ERR" };

	return s < 7 ? n[s] : "?";
}

static const char *type_name(uint32_t t)
{
	return t == IBV_QPT_RC	 ? "RC"
	       : t == IBV_QPT_UC ? "UC"
	       : t == IBV_QPT_UD ? "UD"
				 : "?";
}

#define LD(x) ((unsigned long long)atomic_load(&(x)))

int rbt_softnic_print_counters(FILE *out, const char *dir)
{
	struct sn_fabric_shm *fab;
	unsigned long long t[8] = { 0 };
	struct dirent *de;
	size_t len;
	DIR *d;
	int nqp = 0;

	fab = map_ro(dir, "fabric", &len);
	if (!fab || len < sizeof(*fab))
		return -ENOENT;
	d = opendir(dir);
	if (!d)
		return -errno;
	fprintf(out, "%-8s %-4s %-6s %-8s %12s %14s %12s %14s %8s %8s %7s %7s\n", "qpn",
		"type", "state", "pid", "tx_pkts", "tx_bytes", "rx_pkts", "rx_bytes",
		"rnr_naks", "retries", "errors", "flushes");
	while ((de = readdir(d))) {
		struct sn_qp_shm *q;
		size_t ql;

		if (strncmp(de->d_name, "qp-", 3))
			continue;
		q = map_ro(dir, de->d_name, &ql);
		if (!q)
			continue;
		if (ql >= sizeof(*q) && !atomic_load(&q->destroyed)) {
			struct sn_counters *c = &q->cnt;

			fprintf(out,
				"%-8u %-4s %-6s %-8d %12llu %14llu %12llu %14llu %8llu "
				"%8llu %7llu %7llu\n",
				q->qpn, type_name(q->qp_type),
				state_name(atomic_load(&q->state)), (int)q->pid,
				LD(c->tx_pkts), LD(c->tx_bytes), LD(c->rx_pkts),
				LD(c->rx_bytes), LD(c->rnr_naks), LD(c->retries),
				LD(c->errors), LD(c->flushes));
			t[0] += LD(c->tx_pkts);
			t[1] += LD(c->tx_bytes);
			t[2] += LD(c->rx_pkts);
			t[3] += LD(c->rx_bytes);
			t[4] += LD(c->rnr_naks);
			t[5] += LD(c->retries);
			t[6] += LD(c->errors);
			t[7] += LD(c->flushes);
			nqp++;
		}
		munmap(q, ql);
	}
	closedir(d);
	{
		struct sn_counters *c = &fab->port;

		fprintf(out, "port 1 (live QPs: %d; destroyed QPs' totals included):\n",
			nqp);
		fprintf(out, "  port_xmit_packets %llu\n  port_xmit_data_bytes %llu\n",
			t[0] + LD(c->tx_pkts), t[1] + LD(c->tx_bytes));
		fprintf(out, "  port_rcv_packets %llu\n  port_rcv_data_bytes %llu\n",
			t[2] + LD(c->rx_pkts), t[3] + LD(c->rx_bytes));
		fprintf(out,
			"  rnr_nak_received %llu\n  retries %llu\n  errors %llu\n  "
			"flushes %llu\n",
			t[4] + LD(c->rnr_naks), t[5] + LD(c->retries),
			t[6] + LD(c->errors), t[7] + LD(c->flushes));
	}
	munmap(fab, len);
	return 0;
}
