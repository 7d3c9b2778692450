/* report_bench.c - how fast `rbtrace report`'s analysis runs and how much memory it
 * needs, on synthetic traces of 10 M and 100 M events (written here first, not timed).
 *
 * For each size, in a child process each (so peak RSS is per pass): a plain reader
 * pass (decode every event, nothing else) as the baseline, then the full report
 * (read + analyse + diagnose + text output to /dev/null). Prints events/s of both,
 * their ratio, and peak RSS; memory must stay flat from 10 M to 100 M events.
 * No pass/fail on absolute numbers.
 *
 * usage: report_bench [--sizes 10,100] [--dir DIR] (sizes in millions of events)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "analyzer/rbt_analyzer.h"
#include "tests/trace_builder.h"
#include "trace_format/rbt_format.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A busy RC sender: chains of 4 WRITEs (last signaled), a poll with the completion
 * after a folded run of empty polls, a receive reposted now and then, 4 QPs on 2
 * threads. Returns events written. */
static uint64_t write_trace(const char *path, uint64_t target)
{
	struct rbt_tb_opts o = { .tool = "report_bench",
				 .host = "bench",
				 .pid = 1,
				 .real0 = 1700000000000000000ull };
	struct rbt_tb *tb = rbt_tb_open(path, &o);
	uint64_t n = 0, t = 1000;
	struct rbt_event *ev;
	for (int q = 0; q < 4; q++) {
		rbt_tb_stream(tb, 10 + q % 2);
		ev = rbt_tb_new(tb, RBT_EV_CQ_CREATE, t++);
		ev->u.cq_create.cq = 0xc000 + q;
		ev->u.cq_create.cqe = 4096;
		rbt_tb_put(tb, ev);
		struct rbt_tb_qp qp = { .qp = 0xa000 + q,
					.qp_num = 0x100 + q,
					.qp_type = IBV_QPT_RC,
					.send_cq = 0xc000 + q,
					.recv_cq = 0xc000 + q,
					.max_send_wr = 1024,
					.max_recv_wr = 1024 };
		rbt_tb_qp(tb, t, 0, &qp);
		t++;
		for (int s = IBV_QPS_INIT; s <= IBV_QPS_RTS; s++) {
			struct rbt_ev_qp_modify m = { .dest_qp_num = 0x900 + q };
			rbt_tb_modify(tb, t++, 0, 0xa000 + q, (uint32_t)s,
				      IBV_QP_STATE | IBV_QP_DEST_QPN, &m);
		}
		n += 5;
	}
	struct rbt_sge sge = { .addr = 0x100000, .length = 4096, .lkey = 0x42 };
	struct rbt_send_wr wrs[4];
	memset(wrs, 0, sizeof(wrs));
	for (int i = 0; i < 4; i++) {
		wrs[i].opcode = IBV_WR_RDMA_WRITE;
		wrs[i].n_sges = 1;
		wrs[i].sges = &sge;
	}
	struct rbt_wc wc[2];
	memset(wc, 0, sizeof(wc));
	wc[0].opcode = IBV_WC_RDMA_WRITE;
	wc[1].opcode = IBV_WC_RECV;
	wc[1].byte_len = 64;
	uint64_t last_recv[4] = { 0 };
	int have_recv[4] = { 0 };
	struct rbt_recv_wr rwr;
	memset(&rwr, 0, sizeof(rwr));
	rwr.n_sges = 1;
	rwr.sges = &sge;
	uint64_t id = 0;
	while (n < target) {
		for (int q = 0; q < 4 && n < target; q++) {
			rbt_tb_stream(tb, 10 + q % 2);
			for (int k = 0; k < 64; k++) {
				for (int i = 0; i < 4; i++) {
					wrs[i].wr_id = id + i;
					wrs[i].send_flags =
						i == 3 ? IBV_SEND_SIGNALED : 0;
				}
				rbt_tb_post_send(tb, t, t + 150, 0xa000 + q, 0x100 + q,
						 wrs, 4);
				/* 40 empty polls folded into one event */
				rbt_tb_poll(tb, t + 200, t + 1800, 0xc000 + q, 16, NULL,
					    0, 40);
				wc[0].wr_id = id + 3;
				wc[0].qp_num = wc[1].qp_num = 0x100 + q;
				wc[1].wr_id = last_recv[q];
				rbt_tb_poll(tb, t + 1850, t + 1900 + (id % 97),
					    0xc000 + q, 16, wc,
					    1 + (uint32_t)have_recv[q], 1);
				/* a receive completed by the next poll of this QP */
				rwr.wr_id = id;
				last_recv[q] = id;
				have_recv[q] = 1;
				rbt_tb_post_recv(tb, t + 2000, t + 2050, 0xa000 + q,
						 0x100 + q, &rwr, 1);
				n++;
				n += 3;
				id += 4;
				t += 2100;
			}
		}
	}
	rbt_tb_close(tb, NULL);
	return n;
}

struct pass {
	double secs;
	long maxrss_kb;
	double cpu; /* user + system seconds of the child: robust on a shared machine */
	uint64_t events;
};

/* Runs fn in a child: its time, event count (through a pipe) and peak RSS. */
static struct pass run_child(const char *path, int analyse)
{
	struct pass p = { 0 };
	int fd[2];
	if (pipe(fd))
		exit(1);
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[0]);
		double t0 = now_s();
		uint64_t events = 0;
		if (analyse) {
			struct rbt_analyzer *an;
			char err[256];
			if (rbt_analyzer_create(NULL, &an) ||
			    rbt_analyzer_run_files(an, &path, 1, err, sizeof(err)) ||
			    rbt_analyzer_finish(an))
				_exit(1);
			FILE *null = fopen("/dev/null", "w");
			rbt_analyzer_write_text(an, null);
			fclose(null);
			struct rbt_analyzer_counts c;
			rbt_analyzer_counts(an, &c);
			events = c.events;
			rbt_analyzer_destroy(an);
		} else {
			struct rbt_reader *r;
			const struct rbt_event *ev;
			if (rbt_reader_open(path, &r))
				_exit(1);
			while (rbt_reader_next(r, &ev) > 0)
				events++;
			rbt_reader_close(r);
		}
		double secs = now_s() - t0;
		if (write(fd[1], &secs, sizeof(secs)) != sizeof(secs) ||
		    write(fd[1], &events, sizeof(events)) != sizeof(events))
			_exit(1);
		_exit(0);
	}
	close(fd[1]);
	int st;
	struct rusage ru;
	if (read(fd[0], &p.secs, sizeof(p.secs)) != sizeof(p.secs) ||
	    read(fd[0], &p.events, sizeof(p.events)) != sizeof(p.events))
		p.secs = -1;
	close(fd[0]);
	wait4(pid, &st, 0, &ru);
	p.maxrss_kb = ru.ru_maxrss;
	p.cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
		(double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "report_bench: pass failed\n");
		exit(1);
	}
	return p;
}

int main(int argc, char **argv)
{
	const char *sizes = "10,100", *dir = "/tmp";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
			sizes = argv[++i];
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else {
			fprintf(stderr,
				"usage: report_bench [--sizes 10,100] [--dir DIR]\n");
			return 2;
		}
	}
	printf("report_bench: `rbtrace report` analysis vs a plain reader pass "
	       "(baseline)\n");
	printf("%10s %9s %5s %13s %13s %7s %15s %12s %12s\n", "events", "file MiB",
	       "time", "reader ev/s", "report ev/s", "ratio", "analysis ev/s",
	       "reader RSS", "report RSS");
	char *s = strdup(sizes), *save = NULL;
	for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t target = strtoull(tok, NULL, 10) * 1000000ull;
		char path[4096];
		snprintf(path, sizeof(path), "%s/report_bench.%d.rbt", dir,
			 (int)getpid());
		uint64_t n = write_trace(path, target);
		FILE *f = fopen(path, "r");
		long size = 0;
		if (f) {
			fseek(f, 0, SEEK_END);
			size = ftell(f);
			fclose(f);
		}
		struct pass base = run_child(path, 0);
		struct pass rep = run_child(path, 1);
		if (!getenv("REPORT_BENCH_KEEP"))
			unlink(path);
		if (base.events != n || rep.events != n)
			fprintf(stderr,
				"report_bench: event counts differ: wrote %llu, read "
				"%llu, "
				"analysed %llu\n",
				(unsigned long long)n, (unsigned long long)base.events,
				(unsigned long long)rep.events);
		double be = (double)base.events / base.secs,
		       re = (double)rep.events / rep.secs;
		/* the analysis alone: report time minus the decoding it includes */
		double ae = (double)n / (rep.secs - base.secs);
		printf("%10llu %9.1f %5s %11.2f M %11.2f M %6.2fx %13.2f M %8ld KiB %8ld "
		       "KiB\n",
		       (unsigned long long)n, (double)size / 1048576.0, "wall", be / 1e6,
		       re / 1e6, re / be, rep.secs > base.secs ? ae / 1e6 : 0.0,
		       base.maxrss_kb, rep.maxrss_kb);
		/* the same per CPU second (wall time includes waiting for the CPU) */
		double bc = (double)n / base.cpu, rc = (double)n / rep.cpu;
		double ac = (double)n / (rep.cpu - base.cpu);
		printf("%10s %9s %5s %11.2f M %11.2f M %6.2fx %13.2f M\n", "", "", "cpu",
		       bc / 1e6, rc / 1e6, rc / bc, rep.cpu > base.cpu ? ac / 1e6 : 0.0);
		fflush(stdout);
	}
	free(s);
	printf("ratio = report events/s / reader events/s (1.00x: analysis costs nothing "
	       "beyond decoding); analysis ev/s = events / (report time - reader time);\n"
	       "RSS = peak resident memory of that pass (flat when it does not grow with "
	       "the trace's length).\n"
	       "time: wall = elapsed; cpu = user+system CPU seconds of the pass (robust "
	       "when the machine is shared).\n");
	return 0;
}
