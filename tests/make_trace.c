/* make_trace.c - writes a realistic trace through the writer API, for the CLI
 * tests, the fuzz seed corpus and the demo until the recorder records real ones:
 * resources with a stack and module map of this very binary, a ping-pong of
 * posts and polls on two threads, a loss record and a note.
 *
 * usage: make_trace OUT [--iters N] [--chunk-bytes N] [--ts-column 0|1]
 * Test fixture only: it never touches a verbs device.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/trace_builder.h"

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct rbt_tb *tb;
static uint64_t tick;

/* Events are 250 ns apart. */
static uint64_t next_ts(void)
{
	uint64_t t = tick;
	tick += 250;
	return t;
}

/* Named so the CLI test can find it in a symbolised stack. */
__attribute__((noinline)) void make_trace_create_qp(uint64_t *frames, int *n)
{
	frames[(*n)++] = (uint64_t)(uintptr_t)&make_trace_create_qp + 8;
}

/* The loaded modules as the recorder describes them (see module_map in
 * rbt_format.h); the first dl_iterate_phdr entry is the main program. */
static int module_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		if (ph->p_vaddr < lo)
			lo = ph->p_vaddr;
		if (ph->p_vaddr + ph->p_memsz > hi)
			hi = ph->p_vaddr + ph->p_memsz;
	}
	char path[4096];
	if (info->dlpi_name && info->dlpi_name[0]) {
		snprintf(path, sizeof(path), "%s", info->dlpi_name);
	} else {
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
		path[n > 0 ? n : 0] = 0;
	}
	if (lo == UINT64_MAX || !path[0])
		return 0;
	/* A sanitizer build links its runtimes: leave them out, so that the trace
	 * (and the report goldens made from it) is the same in every build. */
	static const char *const runtimes[] = { "/libasan.so", "/libubsan.so",
						"/libtsan.so", "/liblsan.so" };
	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++)
		if (strstr(path, runtimes[i]))
			return 0;
	(void)arg;
	struct rbt_event *ev = rbt_tb_new(tb, RBT_EV_MODULE_MAP, next_ts());
	ev->u.module_map.base = info->dlpi_addr + lo;
	ev->u.module_map.size = hi - lo;
	ev->u.module_map.offset = lo;
	ev->u.module_map.path = path;
	rbt_tb_put(tb, ev);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: make_trace OUT [--iters N] [--chunk-bytes N] "
				"[--ts-column 0|1]\n");
		return 2;
	}
	unsigned iters = 200;
	size_t chunk = 0;
	int tscol = 0;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--iters"))
			iters = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--chunk-bytes"))
			chunk = (size_t)atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--ts-column"))
			tscol = atoi(argv[i + 1]);
	}
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	tick = now_ns(CLOCK_MONOTONIC);
	uint64_t real0 = now_ns(CLOCK_REALTIME);
	struct rbt_tb_opts o = {
		.tool = "make_trace",
		.host = host,
		.cmdline = "ibv_rc_pingpong -n 200 (synthetic, by make_trace)",
		.pid = (uint32_t)getpid(),
		.ppid = (uint32_t)getppid(),
		.t0 = tick,
		.real0 = real0,
		.chunk_bytes = chunk,
		.ts_column = tscol,
	};
	tb = rbt_tb_open(argv[1], &o);
	const uint32_t main_tid = 4242, cq_tid = 4243;
	const uint64_t ctx = 0x5600000010a0, pd = 0x5600000011c0, mr = 0x560000001300,
		       cq = 0x560000001500, qp = 0x560000001800, buf = 0x7f5a3c000000;
	struct rbt_event *ev;
	uint64_t t;

	rbt_tb_stream(tb, main_tid);
	rbt_tb_thread(tb, next_ts(), main_tid, "main");
	dl_iterate_phdr(module_cb, NULL);
	ev = rbt_tb_new(tb, RBT_EV_DEVICE_OPEN, t = next_ts());
	ev->u.device_open.ts_exit = t + 900;
	ev->u.device_open.ctx = ctx;
	ev->u.device_open.name = "softnic0";
	ev->u.device_open.num_comp_vectors = 1;
	rbt_tb_put(tb, ev);
	t = next_ts();
	rbt_tb_pd(tb, t, t + 100, ctx, pd);
	t = next_ts();
	rbt_tb_mr(tb, t, t + 5000, pd, mr, buf, 4096, 0x1001, 0x1001);
	ev = rbt_tb_new(tb, RBT_EV_CQ_CREATE, t = next_ts());
	ev->u.cq_create.ts_exit = t + 300;
	ev->u.cq_create.ctx = ctx;
	ev->u.cq_create.cq = cq;
	ev->u.cq_create.cqe_asked = 500;
	ev->u.cq_create.cqe = 511;
	rbt_tb_put(tb, ev);
	struct rbt_tb_qp q = { .ctx = ctx,
			       .pd = pd,
			       .qp = qp,
			       .qp_num = 17,
			       .qp_type = 2, /* IBV_QPT_RC */
			       .send_cq = cq,
			       .recv_cq = cq,
			       .max_send_wr = 1,
			       .max_recv_wr = 500,
			       .max_send_sge = 1,
			       .max_recv_sge = 1 };
	t = next_ts();
	rbt_tb_qp(tb, t, t + 700, &q);
	uint64_t frames_ip[4];
	int nf = 0;
	make_trace_create_qp(frames_ip, &nf);
	frames_ip[nf++] = (uint64_t)(uintptr_t)&main + 16;
	/* A frame in libc, named from its .dynsym (Debian strips .symtab). */
	frames_ip[nf++] = (uint64_t)(uintptr_t)&getpid + 2;
	struct rbt_frame frames[4];
	for (int i = 0; i < nf; i++)
		frames[i].ip = frames_ip[i];
	ev = rbt_tb_new(tb, RBT_EV_STACK, next_ts());
	ev->u.stack.ref_type = RBT_EV_QP_CREATE;
	ev->u.stack.n_frames = (uint32_t)nf;
	ev->u.stack.frames = frames;
	rbt_tb_put(tb, ev);
	static const uint32_t states[] = { 1, 2, 3 }; /* INIT, RTR, RTS */
	for (int i = 0; i < 3; i++) {
		struct rbt_ev_qp_modify m = { .dest_qp_num = i == 1 ? 18 : 0,
					      .path_mtu = i == 1 ? 3 : 0 };
		t = next_ts();
		rbt_tb_modify(tb, t, t + 2000, qp, states[i],
			      i == 0   ? 0x31
			      : i == 1 ? 0x1a1
				       : 0x3d01,
			      &m);
	}
	ev = rbt_tb_new(tb, RBT_EV_CLOCK_SAMPLE, t = next_ts());
	ev->u.clock_sample.mono_ns = t;
	ev->u.clock_sample.real_ns = real0 + (t - o.t0);
	rbt_tb_put(tb, ev);

	/* The ping-pong: a receive, a send, polls until both complete. */
	struct rbt_sge sge = { buf, 4096, 0x1001 };
	for (unsigned i = 0; i < iters; i++) {
		struct rbt_recv_wr rwr = rbt_tb_recv_wr(1, &sge);
		t = next_ts();
		rbt_tb_post_recv(tb, t, t + 60, qp, 17, &rwr, 1);
		struct rbt_send_wr swr = rbt_tb_send_wr(2, 2 /* SEND */, 2, &sge);
		t = next_ts();
		rbt_tb_post_send(tb, t, t + 90, qp, 17, &swr, 1);
		t = next_ts();
		rbt_tb_poll(tb, t, t + 40, cq, 2, NULL, 0, 3); /* three empty polls */
		struct rbt_wc wcs[2] = {
			rbt_tb_wc(2, 0 /* SEND */, 17, 4096),
			rbt_tb_wc(1, 128 /* RECV */, 17, 4096),
		};
		t = next_ts();
		rbt_tb_poll(tb, t, t + 50, cq, 2, wcs, 2, 1);
		if (i % 64 == 63) {
			/* The other thread's batch goes into its own chunk. */
			rbt_tb_stream(tb, cq_tid);
			ev = rbt_tb_new(tb, RBT_EV_REQ_NOTIFY, t = next_ts());
			ev->u.req_notify.ts_exit = t + 30;
			ev->u.req_notify.cq = cq;
			rbt_tb_put(tb, ev);
			rbt_tb_stream(tb, main_tid);
		}
	}
	rbt_tb_stream(tb, cq_tid);
	ev = rbt_tb_new(tb, RBT_EV_LOSS, t = next_ts());
	ev->u.loss.lost_stream = cq_tid;
	ev->u.loss.events = 12;
	ev->u.loss.bytes = 600;
	ev->u.loss.first_ts = t - 5000;
	ev->u.loss.last_ts = t - 1000;
	rbt_tb_put(tb, ev);
	ev = rbt_tb_new(tb, RBT_EV_NOTE, next_ts());
	ev->u.note.level = 1;
	ev->u.note.text = "synthetic trace: no device was used";
	rbt_tb_put(tb, ev);
	rbt_tb_stream(tb, main_tid);
	t = next_ts();
	rbt_tb_destroy_qp(tb, t, t + 800, qp);
	t = next_ts();
	rbt_tb_dereg_mr(tb, t, t + 800, mr);
	struct rbt_trailer end = { .end = { tick, tick, real0 + (tick - o.t0) } };
	rbt_tb_close(tb, &end);
	return 0;
}
