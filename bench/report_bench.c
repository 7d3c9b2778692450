/* report_bench.c - how fast `rbtrace report`'s analysis runs and how much memory it
 * needs, on synthetic traces of 10 M and 100 M events (written here first, not timed).
 *
 * For each size, in a child process each (so peak RSS is per pass): a plain reader
 * pass (decode every event, nothing else) on one thread as the baseline, the same
 * decoding ahead on N threads (rbt_reader_opts.threads), then the full report
 * (read + analyse + diagnose + text output to /dev/null) with -j 1 and -j N.
 * Prints events/s of each (per wall and per CPU second), the ratio to the
 * baseline, the cores each kept busy, peak RSS (memory must stay flat from 10 M to
 * 100 M events), and whether the report JSON of -j 1 and -j N is the same.
 * No pass/fail on absolute numbers.
 *
 * usage: report_bench [--sizes 10,100] [--dir DIR] [-j N]   (sizes: millions of
 *        events; N: default the online CPUs, at least 2)
 *        report_bench --write OUT [--events N] [--chunk-bytes N]   (the trace only)
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
static uint64_t write_trace(const char *path, uint64_t target, size_t chunk_bytes)
{
	struct rbt_tb_opts o = { .chunk_bytes = chunk_bytes,
				 .tool = "report_bench",
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

/* Runs a pass in a child: its time, event count (through a pipe) and peak RSS.
 * analyse: the full report (text to /dev/null, and JSON to json when set), else a
 * plain reader pass; threads: the reader's (rbt_reader_opts.threads). */
static struct pass run_child(const char *path, int analyse, unsigned threads,
			     const char *json)
{
	struct pass p = { 0 };
	int fd[2];
	if (pipe(fd))
		exit(1);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[0]);
		double t0 = now_s();
		uint64_t events = 0;
		if (analyse) {
			struct rbt_analyzer *an;
			struct rbt_analyzer_opts ao = { .threads = threads };
			char err[256];
			if (rbt_analyzer_create(&ao, &an) ||
			    rbt_analyzer_run_files(an, &path, 1, err, sizeof(err)) ||
			    rbt_analyzer_finish(an))
				_exit(1);
			FILE *null = fopen("/dev/null", "w");
			rbt_analyzer_write_text(an, null);
			fclose(null);
			struct rbt_analyzer_counts c;
			rbt_analyzer_counts(an, &c);
			events = c.events;
			if (json) {
				/* after the timing: not part of the pass */
				double t1 = now_s();
				FILE *f = fopen(json, "w");
				if (!f || rbt_analyzer_write_json(an, f) || fclose(f))
					_exit(1);
				t0 += now_s() - t1;
			}
			rbt_analyzer_destroy(an);
		} else {
			struct rbt_reader *r;
			struct rbt_reader_opts ro = { .threads = threads };
			const struct rbt_event *ev;
			if (rbt_reader_open_opts(path, &ro, &r))
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

static int same_file(const char *a, const char *b)
{
	FILE *fa = fopen(a, "r"), *fb = fopen(b, "r");
	int same = fa && fb;
	while (same) {
		int ca = getc(fa), cb = getc(fb);
		if (ca != cb)
			same = 0;
		if (ca == EOF || cb == EOF)
			break;
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return same;
}

static void row(const char *what, uint64_t n, const struct pass *p,
		const struct pass *base)
{
	double we = (double)n / p->secs, ce = (double)n / p->cpu;
	printf("%-18s %9.2f M %7.2fx %11.2f M %9.2f %9ld KiB\n", what, we / 1e6,
	       we / ((double)n / base->secs), ce / 1e6, p->cpu / p->secs, p->maxrss_kb);
}

int main(int argc, char **argv)
{
	const char *sizes = "10,100", *dir = "/tmp", *write_path = NULL;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned threads = ncpu > 1 ? (unsigned)ncpu : 2;
	uint64_t write_events = 1000000, chunk_bytes = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
			sizes = argv[++i];
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "-j") && i + 1 < argc)
			threads = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--write") && i + 1 < argc)
			write_path = argv[++i];
		else if (!strcmp(argv[i], "--events") && i + 1 < argc)
			write_events = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--chunk-bytes") && i + 1 < argc)
			chunk_bytes = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr,
				"usage: report_bench [--sizes 10,100] [--dir DIR] "
				"[-j N]\n"
				"       report_bench --write OUT [--events N] "
				"[--chunk-bytes N]\n");
			return 2;
		}
	}
	if (threads < 2)
		threads = 2;
	if (write_path) {
		/* the bench's trace alone, for tests (report_jobs_test) */
		write_trace(write_path, write_events, (size_t)chunk_bytes);
		return 0;
	}
	printf("report_bench: `rbtrace report` (read + analyse + diagnose + text) and a "
	       "plain reader pass,\n"
	       "on 1 thread (the baseline: the single-threaded reader) and decoding on "
	       "%u threads (-j %u)\n",
	       threads, threads);
	char *s = strdup(sizes), *save = NULL;
	for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t target = strtoull(tok, NULL, 10) * 1000000ull;
		char path[4096], j1[4200], jn[4200];
		snprintf(path, sizeof(path), "%s/report_bench.%d.rbt", dir,
			 (int)getpid());
		snprintf(j1, sizeof(j1), "%s.j1.json", path);
		snprintf(jn, sizeof(jn), "%s.jn.json", path);
		uint64_t n = write_trace(path, target, 0);
		FILE *f = fopen(path, "r");
		long size = 0;
		if (f) {
			fseek(f, 0, SEEK_END);
			size = ftell(f);
			fclose(f);
		}
		struct pass rd1 = run_child(path, 0, 1, NULL);
		struct pass rdn = run_child(path, 0, threads, NULL);
		struct pass rep1 = run_child(path, 1, 1, j1);
		struct pass repn = run_child(path, 1, threads, jn);
		int same = same_file(j1, jn);
		if (!getenv("REPORT_BENCH_KEEP"))
			unlink(path);
		unlink(j1);
		unlink(jn);
		if (rd1.events != n || rdn.events != n || rep1.events != n ||
		    repn.events != n)
			fprintf(stderr,
				"report_bench: event counts differ: wrote %llu, read "
				"%llu / %llu, analysed %llu / %llu\n",
				(unsigned long long)n, (unsigned long long)rd1.events,
				(unsigned long long)rdn.events,
				(unsigned long long)rep1.events,
				(unsigned long long)repn.events);
		printf("\n%llu events, %.1f MiB\n", (unsigned long long)n,
		       (double)size / 1048576.0);
		printf("%-18s %11s %8s %13s %9s %13s\n", "pass", "events/s", "vs base",
		       "per CPU-s", "CPUs", "peak RSS");
		char what[64];
		row("reader -j 1", n, &rd1, &rd1);
		snprintf(what, sizeof(what), "reader -j %u", threads);
		row(what, n, &rdn, &rd1);
		row("report -j 1", n, &rep1, &rd1);
		snprintf(what, sizeof(what), "report -j %u", threads);
		row(what, n, &repn, &rd1);
		printf("report -j %u / report -j 1: %.2fx (wall)   report JSON of -j 1 "
		       "and "
		       "-j %u: %s\n",
		       threads, rep1.secs / repn.secs, threads,
		       same ? "identical" : "DIFFERENT");
		fflush(stdout);
	}
	free(s);
	printf("\nevents/s = events / wall seconds; vs base = that / the plain "
	       "reader's on 1 thread;\n"
	       "per CPU-s = events / (user + system CPU seconds of the pass, all "
	       "threads): robust when the\n"
	       "machine is shared; CPUs = CPU seconds / wall seconds (how many cores "
	       "the pass kept busy);\n"
	       "peak RSS = of that pass (flat when it does not grow with the trace's "
	       "length).\n");
	return 0;
}
