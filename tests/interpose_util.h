// interpose_util.h - helpers for the recorder's tests: the traces a run left and a
// summary of one through the reader API (counts that the tests compare with what
// the traced program says it did). Running commands: tests/test_util.h.
#ifndef RBT_INTERPOSE_UTIL_H
#define RBT_INTERPOSE_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "trace_format/rbt_format.h"

namespace rbt_test
{

inline std::vector<std::string> list_traces(const std::string &dir)
{
	std::vector<std::string> v;
	DIR *d = opendir(dir.c_str());
	if (!d)
		return v;
	while (struct dirent *e = readdir(d)) {
		std::string n = e->d_name;
		if (n.size() > 4 && n.substr(n.size() - 4) == ".rbt")
			v.push_back(dir + "/" + n);
	}
	closedir(d);
	return v;
}

struct summary {
	int open_err = 0;
	bool finished = false, damaged = false;
	uint32_t pid = 0;
	uint64_t events = 0, lost = 0;
	std::map<uint32_t, uint64_t> by_type;
	uint64_t send_wrs = 0, recv_wrs = 0, srq_recv_wrs = 0, signaled_send_wrs = 0;
	uint64_t post_send_failed = 0;
	uint64_t wc_ok = 0, wc_bad = 0, wc_send_ok = 0, wc_recv_ok = 0, wc_rdma_ok = 0;
	uint64_t wc_with_hw_ts = 0;
	uint64_t empty_polls = 0; // sum of count of empty poll events
	uint64_t api1_posts = 0, api1_polls = 0;
	std::map<uint64_t, uint64_t> send_wrs_by_opcode;
	std::set<uint32_t> post_streams;
	uint64_t failed_calls = 0; // resource events with ret < 0 or err != 0
	uint64_t notes = 0, stacks = 0, clock_samples_nic = 0, recorder_ts_cqs = 0;
	// NIC clock samples whose ctx is that of a CQ with completion timestamps
	// (what the analyzer pairs them by), and of other contexts.
	uint64_t nic_samples_on_ts_ctx = 0, nic_samples_elsewhere = 0;
	std::set<uint64_t> ts_cq_ctxs;
	std::vector<uint64_t> nic_sample_ctxs;
};

inline summary summarize(const std::string &path)
{
	summary s;
	struct rbt_reader *r = nullptr;
	s.open_err = rbt_reader_open(path.c_str(), &r);
	if (s.open_err < 0)
		return s;
	s.pid = rbt_reader_header(r)->pid;
	const struct rbt_event *ev;
	int err;
	while ((err = rbt_reader_next(r, &ev)) > 0) {
		s.events++;
		s.by_type[ev->type]++;
		switch (ev->type) {
		case RBT_EV_POST_SEND:
			s.send_wrs += ev->u.post_send.n_wrs;
			for (uint32_t i = 0; i < ev->u.post_send.n_wrs; i++) {
				s.send_wrs_by_opcode[ev->u.post_send.wrs[i].opcode]++;
				if (ev->u.post_send.wrs[i].send_flags & 2 /* SIGNALED */)
					s.signaled_send_wrs++;
			}
			if (ev->u.post_send.ret)
				s.post_send_failed++;
			if (ev->u.post_send.api == 1)
				s.api1_posts++;
			s.post_streams.insert(ev->stream);
			break;
		case RBT_EV_POST_RECV:
			s.recv_wrs += ev->u.post_recv.n_wrs;
			break;
		case RBT_EV_POST_SRQ_RECV:
			s.srq_recv_wrs += ev->u.post_srq_recv.n_wrs;
			break;
		case RBT_EV_POLL_CQ:
			if (ev->u.poll_cq.api == 1)
				s.api1_polls++;
			if (ev->u.poll_cq.n_wcs == 0)
				s.empty_polls += ev->u.poll_cq.count;
			for (uint32_t i = 0; i < ev->u.poll_cq.n_wcs; i++) {
				const struct rbt_wc *w = &ev->u.poll_cq.wcs[i];
				if (w->status != 0) {
					s.wc_bad++;
					continue;
				}
				s.wc_ok++;
				if (w->hw_ts)
					s.wc_with_hw_ts++;
				if (w->opcode == 0 /* IBV_WC_SEND */)
					s.wc_send_ok++;
				else if (w->opcode & 128 /* IBV_WC_RECV* */)
					s.wc_recv_ok++;
				else
					s.wc_rdma_ok++;
			}
			break;
		case RBT_EV_LOSS:
			s.lost += ev->u.loss.events;
			break;
		case RBT_EV_NOTE:
			s.notes++;
			break;
		case RBT_EV_STACK:
			s.stacks++;
			break;
		case RBT_EV_CLOCK_SAMPLE:
			if (ev->u.clock_sample.ctx) {
				s.clock_samples_nic++;
				s.nic_sample_ctxs.push_back(ev->u.clock_sample.ctx);
			}
			break;
		case RBT_EV_CQ_CREATE:
			if (ev->u.cq_create.ts_source == 2)
				s.recorder_ts_cqs++;
			if (ev->u.cq_create.ts_source && ev->u.cq_create.ret == 0)
				s.ts_cq_ctxs.insert(ev->u.cq_create.ctx);
			break;
		case RBT_EV_MR_REG:
			if (ev->u.mr_reg.ret < 0)
				s.failed_calls++;
			break;
		case RBT_EV_QP_MODIFY:
			if (ev->u.qp_modify.ret != 0)
				s.failed_calls++;
			break;
		default:
			break;
		}
	}
	for (uint64_t c : s.nic_sample_ctxs)
		(s.ts_cq_ctxs.count(c) ? s.nic_samples_on_ts_ctx
				       : s.nic_samples_elsewhere)++;
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	s.finished = rbt_reader_trailer(r) != nullptr;
	s.damaged = err < 0 || st->bad_chunks || st->truncated;
	rbt_reader_close(r);
	return s;
}

// "key=123" in text, or -1.
inline long long field(const std::string &text, const std::string &key, size_t from = 0)
{
	size_t p = text.find(key + "=", from);
	if (p == std::string::npos)
		return -1;
	return atoll(text.c_str() + p + key.size() + 1);
}

} // namespace rbt_test

#endif
