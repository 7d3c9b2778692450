/* make_trace.c - writes a realistic trace through the writer API, for the CLI
 * tests, the fuzz seed corpus and the demo until the recorder records real ones:
 * resources with a stack and module map of this very binary, a ping-pong of
 * posts and polls on two threads, a loss record and a note.
 *
 * usage: make_trace OUT [--iters N] [--chunk-bytes N]
 * Test fixture only: it never touches a verbs device.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trace_format/rbt_format.h"

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct rbt_writer *w;
static uint64_t tick;

static void put(uint32_t stream, struct rbt_event *ev)
{
	ev->stream = stream;
	ev->ts = tick;
	tick += 250;
	if (rbt_writer_append(w, ev)) {
		fprintf(stderr, "make_trace: append failed\n");
		exit(1);
	}
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
	struct rbt_event ev = { .type = RBT_EV_MODULE_MAP };
	ev.u.module_map.base = info->dlpi_addr + lo;
	ev.u.module_map.size = hi - lo;
	ev.u.module_map.offset = lo;
	ev.u.module_map.path = path;
	put(*(uint32_t *)arg, &ev);
	return 0;
}

static void module_maps(uint32_t stream)
{
	dl_iterate_phdr(module_cb, &stream);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: make_trace OUT [--iters N] [--chunk-bytes N]\n");
		return 2;
	}
	unsigned iters = 200;
	size_t chunk = 0;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--iters"))
			iters = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--chunk-bytes"))
			chunk = (size_t)atol(argv[i + 1]);
	}
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	tick = now_ns(CLOCK_MONOTONIC);
	struct rbt_header h = {
		.pid = (uint32_t)getpid(),
		.ppid = (uint32_t)getppid(),
		.clock_source = RBT_CLOCK_MONO,
		.clock_hz = 1000000000,
		.start = { tick, tick, now_ns(CLOCK_REALTIME) },
		.host = host,
		.cmdline = "ibv_rc_pingpong -n 200 (synthetic, by make_trace)",
		.tool = "make_trace",
	};
	struct rbt_writer_opts o = { .chunk_bytes = chunk };
	int err = rbt_writer_open(argv[1], &h, &o, &w);
	if (err) {
		fprintf(stderr, "make_trace: %s: %s\n", argv[1], rbt_strerror(err));
		return 1;
	}
	const uint32_t main_tid = 4242, cq_tid = 4243;
	const uint64_t ctx = 0x5600000010a0, pd = 0x5600000011c0, mr = 0x560000001300,
		       cq = 0x560000001500, qp = 0x560000001800, buf = 0x7f5a3c000000;
	struct rbt_event ev;

	rbt_writer_begin_chunk(w, main_tid);
	ev = (struct rbt_event){ .type = RBT_EV_THREAD };
	ev.u.thread.tid = main_tid;
	ev.u.thread.name = "main";
	put(main_tid, &ev);
	module_maps(main_tid);
	ev = (struct rbt_event){ .type = RBT_EV_DEVICE_OPEN };
	ev.u.device_open.ts_exit = tick + 900;
	ev.u.device_open.ctx = ctx;
	ev.u.device_open.name = "softnic0";
	ev.u.device_open.num_comp_vectors = 1;
	put(main_tid, &ev);
	ev = (struct rbt_event){ .type = RBT_EV_PD_ALLOC };
	ev.u.pd_alloc.ts_exit = tick + 100;
	ev.u.pd_alloc.ctx = ctx;
	ev.u.pd_alloc.pd = pd;
	put(main_tid, &ev);
	ev = (struct rbt_event){ .type = RBT_EV_MR_REG };
	ev.u.mr_reg.ts_exit = tick + 5000;
	ev.u.mr_reg.pd = pd;
	ev.u.mr_reg.mr = mr;
	ev.u.mr_reg.addr = buf;
	ev.u.mr_reg.length = 4096;
	ev.u.mr_reg.access = 7;
	ev.u.mr_reg.lkey = 0x1001;
	ev.u.mr_reg.rkey = 0x1001;
	put(main_tid, &ev);
	ev = (struct rbt_event){ .type = RBT_EV_CQ_CREATE };
	ev.u.cq_create.ts_exit = tick + 300;
	ev.u.cq_create.ctx = ctx;
	ev.u.cq_create.cq = cq;
	ev.u.cq_create.cqe_asked = 500;
	ev.u.cq_create.cqe = 511;
	put(main_tid, &ev);
	ev = (struct rbt_event){ .type = RBT_EV_QP_CREATE };
	ev.u.qp_create.ts_exit = tick + 700;
	ev.u.qp_create.ctx = ctx;
	ev.u.qp_create.pd = pd;
	ev.u.qp_create.qp = qp;
	ev.u.qp_create.qp_num = 17;
	ev.u.qp_create.qp_type = 2; /* IBV_QPT_RC */
	ev.u.qp_create.send_cq = cq;
	ev.u.qp_create.recv_cq = cq;
	ev.u.qp_create.max_send_wr = 1;
	ev.u.qp_create.max_recv_wr = 500;
	ev.u.qp_create.max_send_sge = 1;
	ev.u.qp_create.max_recv_sge = 1;
	put(main_tid, &ev);
	uint64_t frames_ip[4];
	int nf = 0;
	make_trace_create_qp(frames_ip, &nf);
	frames_ip[nf++] = (uint64_t)(uintptr_t)&main + 16;
	/* A frame in libc, named from its .dynsym (Debian strips .symtab). */
	frames_ip[nf++] = (uint64_t)(uintptr_t)&getpid + 2;
	struct rbt_frame frames[4];
	for (int i = 0; i < nf; i++)
		frames[i].ip = frames_ip[i];
	ev = (struct rbt_event){ .type = RBT_EV_STACK };
	ev.u.stack.ref_type = RBT_EV_QP_CREATE;
	ev.u.stack.n_frames = (uint32_t)nf;
	ev.u.stack.frames = frames;
	put(main_tid, &ev);
	static const uint64_t states[] = { 1, 2, 3 }; /* INIT, RTR, RTS */
	for (int i = 0; i < 3; i++) {
		ev = (struct rbt_event){ .type = RBT_EV_QP_MODIFY };
		ev.u.qp_modify.ts_exit = tick + 2000;
		ev.u.qp_modify.qp = qp;
		ev.u.qp_modify.qp_state = states[i];
		ev.u.qp_modify.attr_mask = i == 0 ? 0x31 : i == 1 ? 0x1a1 : 0x3d01;
		ev.u.qp_modify.dest_qp_num = i == 1 ? 18 : 0;
		ev.u.qp_modify.path_mtu = i == 1 ? 3 : 0;
		put(main_tid, &ev);
	}
	ev = (struct rbt_event){ .type = RBT_EV_CLOCK_SAMPLE };
	ev.u.clock_sample.mono_ns = tick;
	ev.u.clock_sample.real_ns = h.start.real_ns + (tick - h.start.ticks);
	put(main_tid, &ev);

	/* The ping-pong: a receive, a send, polls until both complete. */
	struct rbt_sge sge = { buf, 4096, 0x1001 };
	for (unsigned i = 0; i < iters; i++) {
		struct rbt_recv_wr rwr = { .wr_id = 1, .n_sges = 1, .sges = &sge };
		ev = (struct rbt_event){ .type = RBT_EV_POST_RECV };
		ev.u.post_recv.ts_exit = tick + 60;
		ev.u.post_recv.qp = qp;
		ev.u.post_recv.qp_num = 17;
		ev.u.post_recv.n_wrs = 1;
		ev.u.post_recv.wrs = &rwr;
		put(main_tid, &ev);
		struct rbt_send_wr swr = {
			.wr_id = 2, .opcode = 2 /* SEND */, .send_flags = 2, .n_sges = 1
		};
		swr.sges = &sge;
		ev = (struct rbt_event){ .type = RBT_EV_POST_SEND };
		ev.u.post_send.ts_exit = tick + 90;
		ev.u.post_send.qp = qp;
		ev.u.post_send.qp_num = 17;
		ev.u.post_send.n_wrs = 1;
		ev.u.post_send.wrs = &swr;
		put(main_tid, &ev);
		ev = (struct rbt_event){ .type = RBT_EV_POLL_CQ };
		ev.u.poll_cq.ts_exit = tick + 40;
		ev.u.poll_cq.cq = cq;
		ev.u.poll_cq.asked = 2;
		ev.u.poll_cq.count = 3;
		put(main_tid, &ev);
		struct rbt_wc wcs[2] = {
			{ .wr_id = 2, .opcode = 0, .byte_len = 4096, .qp_num = 17 },
			{ .wr_id = 1, .opcode = 128, .byte_len = 4096, .qp_num = 17 },
		};
		ev = (struct rbt_event){ .type = RBT_EV_POLL_CQ };
		ev.u.poll_cq.ts_exit = tick + 50;
		ev.u.poll_cq.ret = 2;
		ev.u.poll_cq.cq = cq;
		ev.u.poll_cq.asked = 2;
		ev.u.poll_cq.count = 1;
		ev.u.poll_cq.n_wcs = 2;
		ev.u.poll_cq.wcs = wcs;
		put(main_tid, &ev);
		if (i % 64 == 63) {
			/* The other thread's batch goes into its own chunk. */
			rbt_writer_begin_chunk(w, cq_tid);
			ev = (struct rbt_event){ .type = RBT_EV_REQ_NOTIFY };
			ev.u.req_notify.ts_exit = tick + 30;
			ev.u.req_notify.cq = cq;
			put(cq_tid, &ev);
			rbt_writer_begin_chunk(w, main_tid);
		}
	}
	rbt_writer_begin_chunk(w, cq_tid);
	ev = (struct rbt_event){ .type = RBT_EV_LOSS };
	ev.u.loss.lost_stream = cq_tid;
	ev.u.loss.events = 12;
	ev.u.loss.bytes = 600;
	ev.u.loss.first_ts = tick - 5000;
	ev.u.loss.last_ts = tick - 1000;
	put(cq_tid, &ev);
	ev = (struct rbt_event){ .type = RBT_EV_NOTE };
	ev.u.note.level = 1;
	ev.u.note.text = "synthetic trace: no device was used";
	put(cq_tid, &ev);
	rbt_writer_begin_chunk(w, main_tid);
	ev = (struct rbt_event){ .type = RBT_EV_QP_DESTROY };
	ev.u.qp_destroy.ts_exit = tick + 800;
	ev.u.qp_destroy.qp = qp;
	put(main_tid, &ev);
	ev = (struct rbt_event){ .type = RBT_EV_MR_DEREG };
	ev.u.mr_dereg.ts_exit = tick + 800;
	ev.u.mr_dereg.mr = mr;
	put(main_tid, &ev);
	struct rbt_trailer t = { .end = { tick, tick,
					  h.start.real_ns + (tick - h.start.ticks) } };
	err = rbt_writer_close(w, &t);
	if (err) {
		fprintf(stderr, "make_trace: %s: %s\n", argv[1], rbt_strerror(err));
		return 1;
	}
	return 0;
}
