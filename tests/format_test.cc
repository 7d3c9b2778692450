// format_test.cc - the trace writer and reader, round trip and compatibility.
//
// The random round trip is generated from the same X-macro lists as the format
// itself: a new event type or field is covered without touching this file. A
// second, independent encoder written from FORMAT.md checks the documented bytes
// (unknown types skipped, unknown trailing fields ignored, missing fields zero).
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "trace_format/rbt_format.h"

namespace
{

std::string tmp_path(const char *name)
{
	const char *d = getenv("TEST_TMPDIR");
	return std::string(d ? d : "/tmp") + "/" + name;
}

// ---- random values, biased to the edges the encoding cares about -------------
struct Gen {
	std::mt19937_64 rng;
	std::deque<std::string> strings;
	std::deque<std::vector<uint8_t>> blobs;
	std::deque<std::vector<uint8_t>> arrays; // raw storage of record arrays
	uint64_t ts = 0;
	uint64_t handles[4] = { 0x55d0c0de1000, 0x55d0c0de2000, 0x7f0011223344, 1 };

	explicit Gen(uint64_t seed) : rng(seed)
	{
	}
	uint64_t pick(uint64_t n)
	{
		return rng() % n;
	}
	uint64_t number()
	{
		switch (pick(6)) {
		case 0:
			return 0;
		case 1:
			return pick(128);
		case 2:
			return pick(1 << 20);
		case 3:
			return rng();
		case 4:
			return UINT64_MAX - pick(3);
		default:
			return 1ull << pick(64);
		}
	}
	const char *str()
	{
		switch (pick(4)) {
		case 0:
			return "";
		case 1:
			return nullptr; // read back as ""
		default: {
			std::string s;
			size_t n = pick(3) ? pick(20) : 100 + pick(300);
			for (size_t i = 0; i < n; i++)
				s += (char)(' ' + pick(95));
			strings.push_back(s);
			return strings.back().c_str();
		}
		}
	}
	rbt_blob blob()
	{
		if (pick(3) == 0)
			return rbt_blob{ nullptr, 0 };
		std::vector<uint8_t> b(pick(4) ? pick(40) : 200 + pick(2000));
		for (auto &c : b)
			c = (uint8_t)rng();
		blobs.push_back(b);
		return rbt_blob{ blobs.back().data(), (uint32_t)blobs.back().size() };
	}
};

void fill(uint64_t &v, char kind, Gen &g)
{
	switch (kind) {
	case 'T':
		v = g.pick(4) == 0 ? 0
				   : g.ts + g.pick(100000) - (g.pick(8) == 0 ? 50000 : 0);
		break;
	case 'H':
		v = g.pick(3) == 0 ? 0 : g.pick(3) ? g.handles[g.pick(4)] : g.rng();
		break;
	case 'D': // addresses in small strides around a base, or anything at all
		v = g.pick(4) == 0 ? 0
		    : g.pick(4)	   ? g.handles[g.pick(4)] + g.pick(64) * 64 - 2048
				   : g.number();
		break;
	default:
		v = g.number();
	}
}
void fill(int64_t &v, char, Gen &g)
{
	v = g.pick(2) ? -(int64_t)g.pick(200) : (int64_t)g.number();
}
void fill(const char *&v, char, Gen &g)
{
	v = g.str();
}
void fill(rbt_blob &v, char, Gen &g)
{
	v = g.blob();
}

#define FILL_F(kind, name) fill(x.name, #kind[0], g);
#define FILL_A(rec, name)  fill_array(x.n_##name, x.name, g);

template <typename T> void fill_array(uint32_t &n, const T *&p, Gen &g);

void fill_rec(rbt_sge &x, Gen &g)
{
	RBT_REC_sge(FILL_F, FILL_A)
}
void fill_rec(rbt_frame &x, Gen &g)
{
	RBT_REC_frame(FILL_F, FILL_A)
}
void fill_rec(rbt_send_wr &x, Gen &g)
{
	RBT_REC_send_wr(FILL_F, FILL_A)
}
void fill_rec(rbt_recv_wr &x, Gen &g)
{
	RBT_REC_recv_wr(FILL_F, FILL_A)
}
void fill_rec(rbt_wc &x, Gen &g)
{
	RBT_REC_wc(FILL_F, FILL_A)
}

template <typename T> void fill_array(uint32_t &n, const T *&p, Gen &g)
{
	n = g.pick(3) == 0 ? 0 : g.pick(5) ? (uint32_t)g.pick(4) : (uint32_t)g.pick(300);
	g.arrays.emplace_back(sizeof(T) * (n ? n : 1));
	T *v = reinterpret_cast<T *>(g.arrays.back().data());
	for (uint32_t i = 0; i < n; i++) {
		memset(&v[i], 0, sizeof(T));
		fill_rec(v[i], g);
	}
	p = n ? v : nullptr;
}

void fill_event(rbt_event &ev, Gen &g)
{
	switch (ev.type) {
#define FILL_EV(NAME, id, lname)                      \
	case id: {                                    \
		auto &x = ev.u.lname;                 \
		RBT_EV_##lname(FILL_F, FILL_A) break; \
	}
		RBT_EVENT_LIST(FILL_EV)
	}
}

// ---- comparison, generated the same way ------------------------------------
void same(uint64_t a, uint64_t b, const std::string &where)
{
	EXPECT_EQ(a, b) << where;
}
void same(int64_t a, int64_t b, const std::string &where)
{
	EXPECT_EQ(a, b) << where;
}
void same(const char *a, const char *b, const std::string &where)
{
	ASSERT_NE(nullptr, b) << where << ": decoded strings are never NULL";
	EXPECT_STREQ(a ? a : "", b) << where;
}
void same(const rbt_blob &a, const rbt_blob &b, const std::string &where)
{
	ASSERT_EQ(a.len, b.len) << where;
	if (a.len) {
		EXPECT_EQ(0, memcmp(a.data, b.data, a.len)) << where;
	}
}

#define SAME_F(kind, name) same(a.name, b.name, where + "." #name);
#define SAME_A(rec, name) \
	same_array(a.n_##name, a.name, b.n_##name, b.name, where + "." #name);

template <typename T>
void same_array(uint32_t na, const T *a, uint32_t nb, const T *b,
		const std::string &where);

void same_rec(const rbt_sge &a, const rbt_sge &b, const std::string &where)
{
	RBT_REC_sge(SAME_F, SAME_A)
}
void same_rec(const rbt_frame &a, const rbt_frame &b, const std::string &where)
{
	RBT_REC_frame(SAME_F, SAME_A)
}
void same_rec(const rbt_send_wr &a, const rbt_send_wr &b, const std::string &where)
{
	RBT_REC_send_wr(SAME_F, SAME_A)
}
void same_rec(const rbt_recv_wr &a, const rbt_recv_wr &b, const std::string &where)
{
	RBT_REC_recv_wr(SAME_F, SAME_A)
}
void same_rec(const rbt_wc &a, const rbt_wc &b, const std::string &where)
{
	RBT_REC_wc(SAME_F, SAME_A)
}

template <typename T>
void same_array(uint32_t na, const T *a, uint32_t nb, const T *b,
		const std::string &where)
{
	ASSERT_EQ(na, nb) << where;
	for (uint32_t i = 0; i < na; i++)
		same_rec(a[i], b[i], where + "[" + std::to_string(i) + "]");
}

void same_event(const rbt_event &a, const rbt_event &b, const std::string &at)
{
	ASSERT_EQ(a.type, b.type) << at;
	EXPECT_EQ(a.stream, b.stream) << at;
	EXPECT_EQ(a.ts, b.ts) << at;
	std::string where = at + " " + rbt_event_name(a.type);
	switch (a.type) {
#define SAME_EV(NAME, id, lname)                              \
	case id: {                                            \
		const auto &a_ = a.u.lname, &b_ = b.u.lname;  \
		[&](const decltype(a_) &a, decltype(a_) &b) { \
			RBT_EV_##lname(SAME_F, SAME_A)        \
		}(a_, b_);                                    \
		break;                                        \
	}
		RBT_EVENT_LIST(SAME_EV)
	}
}

std::vector<uint32_t> all_types()
{
	std::vector<uint32_t> v;
#define TYPE_ID(NAME, id, lname) v.push_back(id);
	RBT_EVENT_LIST(TYPE_ID)
	return v;
}

rbt_header test_header()
{
	rbt_header h = {};
	h.pid = 1234;
	h.ppid = 1;
	h.clock_source = RBT_CLOCK_TSC;
	h.clock_hz = 2400000000ull;
	h.start = { 1000, 2000, 3000 };
	h.host = "node-17";
	h.cmdline = "./kv_server --port 7000";
	h.tool = "format_test";
	return h;
}

} // namespace

TEST(Format, NamesComeFromTheList)
{
	for (uint32_t t : all_types()) {
		ASSERT_NE(nullptr, rbt_event_name(t));
		EXPECT_EQ(t, rbt_event_type_from_name(rbt_event_name(t)));
	}
	EXPECT_STREQ("post_send", rbt_event_name(RBT_EV_POST_SEND));
	EXPECT_EQ(nullptr, rbt_event_name(63));
	EXPECT_EQ(nullptr, rbt_event_name(100000));
	EXPECT_EQ(0u, rbt_event_type_from_name("no_such_event"));
}

// Every event type, many random values each, random streams and chunk sizes;
// seeds 7 to 12 with the timestamp column.
TEST(Format, RandomRoundTripOfEveryEventType)
{
	const std::vector<uint32_t> types = all_types();
	for (uint64_t seed = 1; seed <= 12; seed++) {
		Gen g(seed);
		std::string path = tmp_path("roundtrip.rbt");
		rbt_header h = test_header();
		rbt_writer_opts o = {};
		o.chunk_bytes = seed % 2 ? 4096 : 0;
		o.zstd_level = (int)seed % 3 - 1; // -1 (fast), 0 (default) and 1
		o.ts_column = seed > 6;
		rbt_writer *w;
		ASSERT_EQ(0, rbt_writer_open(path.c_str(), &h, &o, &w));
		std::vector<rbt_event> written;
		uint32_t stream = 100;
		ASSERT_EQ(0, rbt_writer_begin_chunk(w, stream));
		g.ts = 1ull << 40;
		for (int i = 0; i < 3000; i++) {
			if (g.pick(50) == 0) {
				stream = 100 + (uint32_t)g.pick(4);
				ASSERT_EQ(0, g.pick(2) ? rbt_writer_begin_chunk(w, stream)
						       : rbt_writer_end_chunk(w) ||
								 rbt_writer_begin_chunk(
									 w, stream));
			}
			rbt_event ev;
			memset(&ev, 0, sizeof(ev));
			// Each type at least 20 times, in random order.
			ev.type = i < (int)types.size() * 20
					  ? types[i % types.size()]
					  : types[g.pick(types.size())];
			ev.stream = stream;
			g.ts += g.pick(10) ? g.pick(1000) : g.rng() % (1ull << 33);
			if (g.pick(100) == 0)
				g.ts -= g.pick(5000); // clocks may step back across CPUs
			ev.ts = g.ts;
			fill_event(ev, g);
			ASSERT_EQ(0, rbt_writer_append(w, &ev))
				<< rbt_event_name(ev.type);
			written.push_back(ev);
		}
		rbt_trailer t = {};
		t.end = { 5, 6, 7 };
		ASSERT_EQ(0, rbt_writer_close(w, &t));
		// The reader hands events merged by time across streams: each
		// stream's in its order, the smallest next ts first (ties: the
		// one written first). The reference merge, written out here:
		std::vector<rbt_event> want;
		{
			std::map<uint32_t, std::deque<size_t>> q;
			for (size_t i = 0; i < written.size(); i++)
				q[written[i].stream].push_back(i);
			while (want.size() < written.size()) {
				size_t best = SIZE_MAX;
				for (auto &kv : q) {
					if (kv.second.empty())
						continue;
					size_t i = kv.second.front();
					if (best == SIZE_MAX ||
					    written[i].ts < written[best].ts ||
					    (written[i].ts == written[best].ts &&
					     i < best))
						best = i;
				}
				want.push_back(written[best]);
				q[written[best].stream].pop_front();
			}
		}
		EXPECT_EQ(written.size(), want.size());

		rbt_reader *r;
		ASSERT_EQ(0, rbt_reader_open(path.c_str(), &r));
		const rbt_header *rh = rbt_reader_header(r);
		EXPECT_EQ((uint32_t)RBT_FORMAT_VERSION, rh->version);
		EXPECT_EQ(1234u, rh->pid);
		EXPECT_EQ(2400000000ull, rh->clock_hz);
		EXPECT_EQ(3000u, rh->start.real_ns);
		EXPECT_STREQ("./kv_server --port 7000", rh->cmdline);
		const rbt_event *ev;
		size_t n = 0;
		int rc;
		while ((rc = rbt_reader_next(r, &ev)) > 0) {
			ASSERT_LT(n, want.size());
			same_event(want[n], *ev,
				   "seed " + std::to_string(seed) + " event " +
					   std::to_string(n));
			if (HasFatalFailure() || HasNonfatalFailure())
				break;
			// The printers handle every event (and report the length needed).
			char small[8];
			size_t need = rbt_event_format_json(rh, ev, small, sizeof(small));
			std::string json(need + 1, '\0');
			EXPECT_EQ(need,
				  rbt_event_format_json(rh, ev, &json[0], json.size()));
			EXPECT_EQ('{', json[0]);
			EXPECT_EQ('}', json[need - 1]);
			need = rbt_event_format_text(rh, ev, nullptr, 0);
			EXPECT_GT(need, 0u);
			n++;
		}
		ASSERT_EQ(0, rc);
		EXPECT_EQ(written.size(), n);
		const struct rbt_reader_stats *st = rbt_reader_stats(r);
		EXPECT_TRUE(st->finished);
		EXPECT_EQ(0u, st->bad_chunks);
		EXPECT_EQ(0u, st->bad_bytes);
		EXPECT_FALSE(st->truncated);
		EXPECT_EQ(written.size(), st->events);
		ASSERT_NE(nullptr, rbt_reader_trailer(r));
		EXPECT_EQ(written.size(), rbt_reader_trailer(r)->events);
		EXPECT_EQ(6u, rbt_reader_trailer(r)->end.mono_ns);
		EXPECT_STREQ("", rbt_reader_error(r));
		rbt_reader_close(r);
		unlink(path.c_str());
	}
}

// A recorder drains each thread's ring into its own chunks: a thread's chunk can
// sit in the file after another thread's chunk holding later events (rping: the
// CM thread's modify to RTS after the CQ thread's posts). The reader hands them
// in time order, each stream's events in their own order even where their ts
// step back (a call's ts is its entry; one nested in it is written first).
TEST(Format, StreamsMergedByTime)
{
	std::string path = tmp_path("merge.rbt");
	rbt_header h = test_header();
	rbt_writer *w;
	ASSERT_EQ(0, rbt_writer_open(path.c_str(), &h, nullptr, &w));
	struct {
		uint32_t stream;
		uint64_t ts;
	} in[] = {
		{ 7, 1000 }, { 7, 1003 }, { 7, 1001 }, { 7, 1006 }, // chunk of 7
		{ 5, 900 },  { 5, 1002 }, { 5, 1004 },		    // 5, written later
		{ 6, 1004 }, { 6, 1009 },			    // 6: a tie with 5
		{ 7, 1005 }, { 7, 1010 },			    // 7 again
	};
	uint32_t cur = 0;
	for (auto &e : in) {
		if (e.stream != cur) {
			ASSERT_EQ(0, rbt_writer_begin_chunk(w, e.stream));
			cur = e.stream;
		}
		rbt_event ev;
		memset(&ev, 0, sizeof(ev));
		ev.type = RBT_EV_NOTE;
		ev.stream = e.stream;
		ev.ts = e.ts;
		ASSERT_EQ(0, rbt_writer_append(w, &ev));
	}
	ASSERT_EQ(0, rbt_writer_close(w, nullptr));
	rbt_reader *r;
	ASSERT_EQ(0, rbt_reader_open(path.c_str(), &r));
	const rbt_event *ev;
	std::string got;
	while (rbt_reader_next(r, &ev) > 0)
		got += std::to_string(ev->stream) + ":" + std::to_string(ev->ts) + " ";
	rbt_reader_close(r);
	unlink(path.c_str());
	// 7's 1003 then 1001 stay in 7's order; 5's 1004 before 6's (5's chunk
	// is first in the file); 7's second chunk only after its first.
	EXPECT_EQ("5:900 7:1000 5:1002 7:1003 7:1001 5:1004 6:1004 7:1006 7:1005 "
		  "6:1009 7:1010 ",
		  got);
}

TEST(Format, WriterOnFdAndFileMode)
{
	std::string path = tmp_path("mode.rbt");
	unlink(path.c_str());
	rbt_header h = test_header();
	rbt_writer *w;
	ASSERT_EQ(0, rbt_writer_open(path.c_str(), &h, nullptr, &w));
	EXPECT_GT(rbt_writer_bytes(w), 24u); // the header is written at once
	ASSERT_EQ(0, rbt_writer_close(w, nullptr));
	struct stat st;
	ASSERT_EQ(0, stat(path.c_str(), &st));
	EXPECT_EQ(0600u, st.st_mode & 0777);

	int fd = open(path.c_str(), O_WRONLY | O_TRUNC);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(0, rbt_writer_open_fd(fd, &h, nullptr, &w));
	rbt_event ev = {};
	ev.type = RBT_EV_NOTE;
	ev.stream = 9;
	ev.ts = 77;
	ev.u.note.text = "hello";
	ASSERT_EQ(0,
		  rbt_writer_append(w, &ev)); // no begin_chunk: opens one for ev.stream
	ev.type = 62;			      // not a known type: refused
	EXPECT_EQ(-EINVAL, rbt_writer_append(w, &ev));
	ASSERT_EQ(0, rbt_writer_close(w, nullptr));
	EXPECT_EQ(0, rbt_writer_close(nullptr, nullptr));

	rbt_reader *r;
	ASSERT_EQ(0, rbt_reader_open(path.c_str(), &r));
	const rbt_event *e;
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(9u, e->stream);
	EXPECT_EQ(77u, e->ts);
	EXPECT_STREQ("hello", e->u.note.text);
	EXPECT_EQ(0, rbt_reader_next(r, &e));
	EXPECT_EQ(0, rbt_reader_next(r, &e)); // and stays at the end
	rbt_reader_close(r);
	rbt_reader_close(nullptr);
	unlink(path.c_str());
}

// Write errors come back as -errno, stick, and never crash or leak.
TEST(Format, WriterErrors)
{
	rbt_header h = test_header();
	rbt_writer *w = (rbt_writer *)1;
	EXPECT_EQ(-ENOENT, rbt_writer_open("/nonexistent/dir/x.rbt", &h, nullptr, &w));
	EXPECT_EQ(nullptr, w);
	int fd = open("/dev/null", O_RDONLY);
	ASSERT_GE(fd, 0);
	EXPECT_EQ(-EBADF, rbt_writer_open_fd(fd, &h, nullptr, &w));
	EXPECT_EQ(-EBADF, fcntl(fd, F_GETFD) == -1 ? -errno : 0); // the writer closed it
	if (access("/dev/full", W_OK) == 0) {
		EXPECT_EQ(-ENOSPC, rbt_writer_open("/dev/full", &h, nullptr, &w));
	}
	EXPECT_EQ(-EINVAL, rbt_writer_open_fd(-1, &h, nullptr, &w));
	EXPECT_EQ(-EINVAL, rbt_writer_append(nullptr, nullptr));
}

TEST(Format, OpenErrorsAreNamed)
{
	rbt_reader *r = nullptr;
	EXPECT_EQ(-ENOENT, rbt_reader_open("/nonexistent/x.rbt", &r));
	EXPECT_EQ(nullptr, r);
	const char *d = getenv("TEST_TMPDIR");
	EXPECT_EQ(-EISDIR, rbt_reader_open(d ? d : "/tmp", &r));
	EXPECT_EQ(-ENODATA, rbt_reader_open_mem("", 0, &r));
	EXPECT_EQ(-EILSEQ, rbt_reader_open_mem("#!/bin/sh\necho hi\n", 18, &r));
	EXPECT_EQ(-EILSEQ, rbt_reader_open_mem("\x89RBX", 4, &r));
	EXPECT_EQ(-ENOMSG, rbt_reader_open_mem("\x89RBTRACE\x01", 9, &r));
	for (int e : { ENODATA, EILSEQ, ENOMSG, EBADMSG, EPROTONOSUPPORT, EISDIR })
		EXPECT_NE(nullptr, strstr(rbt_strerror(-e), " ")) << e;
	EXPECT_STREQ("empty file", rbt_strerror(-ENODATA));
}

// ---- a second encoder, from FORMAT.md ------------------------------------------
namespace
{
uint32_t crc32c(const uint8_t *p, size_t n)
{
	uint32_t c = ~0u;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}
void le32(std::vector<uint8_t> &v, uint32_t x)
{
	for (int i = 0; i < 4; i++)
		v.push_back((uint8_t)(x >> (8 * i)));
}
void le64(std::vector<uint8_t> &v, uint64_t x)
{
	le32(v, (uint32_t)x);
	le32(v, (uint32_t)(x >> 32));
}
void varint(std::vector<uint8_t> &v, uint64_t x)
{
	while (x >= 0x80) {
		v.push_back((uint8_t)(x | 0x80));
		x >>= 7;
	}
	v.push_back((uint8_t)x);
}
uint64_t zz(int64_t x)
{
	return ((uint64_t)x << 1) ^ (uint64_t)(x >> 63);
}
void event(std::vector<uint8_t> &raw, uint32_t type, const std::vector<uint8_t> &payload)
{
	varint(raw, type);
	varint(raw, payload.size());
	raw.insert(raw.end(), payload.begin(), payload.end());
}
std::vector<uint8_t> file(uint32_t min_reader, const std::vector<uint8_t> &raw,
			  uint32_t nevents, bool trailer)
{
	std::vector<uint8_t> f = { 0x89, 'R', 'B', 'T', 'R', 'A', 'C', 'E' };
	std::vector<uint8_t> body;
	// Present: pid, ppid, clock_source, clock_hz, host, and field 10 from the future.
	varint(body, 1 | 2 | 4 | 8 | 1 << 7 | 1 << 10);
	varint(body, 4321); // pid
	varint(body, 1);    // ppid
	varint(body, 2);    // clock_source MONO
	varint(body, 1000000000);
	varint(body, 4); // host
	body.insert(body.end(), { 'h', 'o', 's', 't', 0 });
	varint(body, 1234); // the field from the future: ignored
	le32(f, 99);	    // written by version 99 ...
	le32(f, min_reader);
	le32(f, (uint32_t)body.size());
	std::vector<uint8_t> covered(f); // the prefix up to here, then the body
	covered.insert(covered.end(), body.begin(), body.end());
	le32(f, crc32c(covered.data(), covered.size()));
	f.insert(f.end(), body.begin(), body.end());
	std::vector<uint8_t> comp(ZSTD_compressBound(raw.size()));
	size_t c = ZSTD_compress(comp.data(), comp.size(), raw.data(), raw.size(), 1);
	EXPECT_FALSE(ZSTD_isError(c));
	comp.resize(c);
	std::vector<uint8_t> ch;
	le32(ch, 0x4b434252); // "RBCK"
	le32(ch, (uint32_t)c);
	le32(ch, (uint32_t)raw.size());
	le32(ch, nevents);
	le32(ch, 55); // stream
	le32(ch, 0);
	le64(ch, 5000); // first_ts
	le64(ch, 6000);
	le32(ch, crc32c(comp.data(), comp.size()));
	le32(ch, crc32c(ch.data(), ch.size()));
	f.insert(f.end(), ch.begin(), ch.end());
	f.insert(f.end(), comp.begin(), comp.end());
	if (trailer) {
		std::vector<uint8_t> t;
		le32(t, 0x444e4252); // "RBND"
		le32(t, 0);
		for (int i = 0; i < 3; i++)
			le64(t, 0);
		le64(t, nevents);
		le64(t, 0);
		le32(t, 0);
		le32(t, crc32c(t.data(), t.size()));
		f.insert(f.end(), t.begin(), t.end());
	}
	return f;
}
} // namespace

TEST(Format, SecondEncoderFromTheSpecAndCompatibility)
{
	std::vector<uint8_t> raw, p;
	// pd_alloc (ts_exit, ret, err, ctx, pd): ts delta +0; present ts_exit +100,
	// ctx 0x1000, pd 0x2000 and two fields from the future (bits 5 and 6: a
	// varint and a string) that must be skipped.
	p = {};
	varint(p, zz(0));
	varint(p, 1 << 0 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 6);
	varint(p, zz(100));
	varint(p, zz(0x1000));
	varint(p, zz(0x2000));
	varint(p, 777);
	varint(p, 3);
	p.insert(p.end(), { 'x', 'y', 'z', 0 });
	event(raw, RBT_EV_PD_ALLOC, p);
	// An unknown event type (63: no event has it yet), with a ts delta of +10: skipped but counted,
	// and its delta still moves the clock.
	p = {};
	varint(p, zz(10));
	for (int i = 0; i < 200; i++)
		p.push_back((uint8_t)i);
	event(raw, 63, p);
	// pd_dealloc with no field present: ts_exit, ret, err, pd all zero.
	p = {};
	varint(p, zz(5));
	event(raw, RBT_EV_PD_DEALLOC, p);
	// pd_alloc again: ts_exit +7, ret -5 (zigzag), pd = slot 0x2000 + 0x10; ctx
	// absent reads as 0 and leaves its slot alone.
	p = {};
	varint(p, zz(1));
	varint(p, 1 << 0 | 1 << 1 | 1 << 4);
	varint(p, zz(7));
	varint(p, zz(-5));
	varint(p, zz(0x10));
	event(raw, RBT_EV_PD_ALLOC, p);
	// An empty payload: same ts as before, all fields zero.
	event(raw, RBT_EV_DEVICE_CLOSE, {});
	// pd_alloc with ctx present and a zero delta: the slot still holds 0x1000.
	p = {};
	varint(p, zz(0));
	varint(p, 1 << 3);
	varint(p, zz(0));
	event(raw, RBT_EV_PD_ALLOC, p);
	// mr_reg (ts_exit, ret, err, pd, mr, addr D, length, iova D, ...): addr and
	// iova 0x7f0000000000 from their zero slots, length 4096.
	p = {};
	varint(p, zz(0));
	varint(p, 1 << 5 | 1 << 6 | 1 << 7);
	varint(p, zz(0x7f0000000000));
	varint(p, 4096);
	varint(p, zz(0x7f0000000000));
	event(raw, RBT_EV_MR_REG, p);
	// mr_reg: addr 0x1000 below its slot; iova absent reads as 0 and leaves its
	// slot alone.
	p = {};
	varint(p, zz(0));
	varint(p, 1 << 5);
	varint(p, zz(-0x1000));
	event(raw, RBT_EV_MR_REG, p);
	// mr_reg: iova +0x2000 from the slot it kept.
	p = {};
	varint(p, zz(0));
	varint(p, 1 << 7);
	varint(p, zz(0x2000));
	event(raw, RBT_EV_MR_REG, p);

	std::vector<uint8_t> f = file(1, raw, 9, true);
	rbt_reader *r;
	ASSERT_EQ(0, rbt_reader_open_mem(f.data(), f.size(), &r));
	EXPECT_EQ(4321u, rbt_reader_header(r)->pid);
	EXPECT_STREQ("host", rbt_reader_header(r)->host);
	EXPECT_EQ(99u, rbt_reader_header(r)->version);
	const rbt_event *e;
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ((uint32_t)RBT_EV_PD_ALLOC, e->type);
	EXPECT_EQ(55u, e->stream);
	EXPECT_EQ(5000u, e->ts);
	EXPECT_EQ(5100u, e->u.pd_alloc.ts_exit);
	EXPECT_EQ(0x1000u, e->u.pd_alloc.ctx);
	EXPECT_EQ(0x2000u, e->u.pd_alloc.pd);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(63u, e->type);
	EXPECT_EQ(5010u, e->ts);
	EXPECT_EQ(nullptr, rbt_event_name(e->type));
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ((uint32_t)RBT_EV_PD_DEALLOC, e->type);
	EXPECT_EQ(5015u, e->ts);
	EXPECT_EQ(0u, e->u.pd_dealloc.ts_exit);
	EXPECT_EQ(0u, e->u.pd_dealloc.pd);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(5016u, e->ts);
	EXPECT_EQ(5023u, e->u.pd_alloc.ts_exit);
	EXPECT_EQ(-5, e->u.pd_alloc.ret);
	EXPECT_EQ(0u, e->u.pd_alloc.ctx);
	EXPECT_EQ(0x2010u, e->u.pd_alloc.pd);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ((uint32_t)RBT_EV_DEVICE_CLOSE, e->type);
	EXPECT_EQ(5016u, e->ts);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(0x1000u, e->u.pd_alloc.ctx);
	EXPECT_EQ(0u, e->u.pd_alloc.pd);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	ASSERT_EQ((uint32_t)RBT_EV_MR_REG, e->type);
	EXPECT_EQ(0x7f0000000000u, e->u.mr_reg.addr);
	EXPECT_EQ(4096u, e->u.mr_reg.length);
	EXPECT_EQ(0x7f0000000000u, e->u.mr_reg.iova);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(0x7efffffff000u, e->u.mr_reg.addr);
	EXPECT_EQ(0u, e->u.mr_reg.iova);
	// Printed as the plain number it is (D is stored as a delta only): in
	// JSON a decimal like every U field, in text hex like other addresses.
	char buf[1024];
	rbt_event_format_json(rbt_reader_header(r), e, buf, sizeof(buf));
	EXPECT_NE(nullptr, strstr(buf, "\"addr\":139637976723456,")) << buf;
	EXPECT_NE(nullptr, strstr(buf, "\"iova\":0,")) << buf;
	rbt_event_format_text(rbt_reader_header(r), e, buf, sizeof(buf));
	EXPECT_NE(nullptr, strstr(buf, " addr=0x7efffffff000")) << buf;
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(0u, e->u.mr_reg.addr);
	EXPECT_EQ(0x7f0000002000u, e->u.mr_reg.iova);
	EXPECT_EQ(0, rbt_reader_next(r, &e));
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	EXPECT_EQ(1u, st->unknown_events);
	EXPECT_EQ(1u, st->events_by_type[63]);
	EXPECT_EQ(9u, st->events);
	EXPECT_TRUE(st->finished);
	EXPECT_EQ(0u, st->bad_chunks);
	rbt_reader_close(r);

	// A file that says it needs a newer reader is refused, by name.
	f = file(RBT_FORMAT_VERSION + 1, raw, 9, true);
	EXPECT_EQ(-EPROTONOSUPPORT, rbt_reader_open_mem(f.data(), f.size(), &r));

	// Without a trailer: every event, but not finished.
	f = file(1, raw, 9, false);
	ASSERT_EQ(0, rbt_reader_open_mem(f.data(), f.size(), &r));
	int n = 0;
	while (rbt_reader_next(r, &e) > 0)
		n++;
	EXPECT_EQ(9, n);
	EXPECT_FALSE(rbt_reader_stats(r)->finished);
	EXPECT_EQ(nullptr, rbt_reader_trailer(r));
	rbt_reader_close(r);
}

// An event larger than the chunk size, long strings (multi-byte length prefixes)
// and many WRs in one post.
// The writer's bytes, checked against FORMAT.md by hand for the events the
// recorder writes most (its per-type encoders are generated from the lists and
// must produce exactly what the spec says): handle slots per (list, field), T
// fields relative to the event's ts, absent zero fields, records behind their
// lengths, a ts that steps back, a string and an empty payload.
TEST(Format, WriterBytesFollowTheSpec)
{
	std::string path = tmp_path("spec_bytes.rbt");
	rbt_header h = test_header();
	rbt_writer *w;
	ASSERT_EQ(0, rbt_writer_open(path.c_str(), &h, nullptr, &w));
	ASSERT_EQ(0, rbt_writer_begin_chunk(w, 31));

	rbt_sge sg[2] = { { 0x7f0000002000, 64, 0x2f01 }, { 0x7f0000003000, 0, 0 } };
	rbt_send_wr sw[2];
	memset(sw, 0, sizeof(sw));
	sw[0].wr_id = 7;
	sw[0].opcode = 2;
	sw[0].send_flags = 2;
	sw[0].remote_addr = 0x7f0000001000;
	sw[0].rkey = 0x1234;
	sw[0].n_sges = 2;
	sw[0].sges = sg;
	static const uint8_t hi[] = { 'h', 'i' };
	sw[1].wr_id = 8;
	sw[1].opcode = 2;
	sw[1].ah = 0x9000;
	sw[1].remote_qpn = 77;
	sw[1].remote_qkey = 0x11111111;
	sw[1].payload = { hi, 2 };
	rbt_event e;
	memset(&e, 0, sizeof(e));
	e.type = RBT_EV_POST_SEND;
	e.stream = 31;
	e.ts = 1000;
	e.u.post_send.ts_exit = 1050;
	e.u.post_send.qp = 0x5000;
	e.u.post_send.qp_num = 0x1a2;
	e.u.post_send.n_wrs = 2;
	e.u.post_send.wrs = sw;
	ASSERT_EQ(0, rbt_writer_append(w, &e));

	rbt_wc wc;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = 7;
	wc.byte_len = 64;
	wc.qp_num = 0x1a2;
	wc.hw_ts = 123456789;
	memset(&e, 0, sizeof(e));
	e.type = RBT_EV_POLL_CQ;
	e.stream = 31;
	e.ts = 1100;
	e.u.poll_cq.ts_exit = 1130;
	e.u.poll_cq.ret = 1;
	e.u.poll_cq.cq = 0x6000;
	e.u.poll_cq.asked = 16;
	e.u.poll_cq.count = 1;
	e.u.poll_cq.n_wcs = 1;
	e.u.poll_cq.wcs = &wc;
	ASSERT_EQ(0, rbt_writer_append(w, &e));

	rbt_sge sg3 = { 0x7f0000002040, 64, 0 };
	rbt_send_wr sw2;
	memset(&sw2, 0, sizeof(sw2));
	sw2.wr_id = 9;
	sw2.remote_addr = 0x7f0000001040;
	sw2.ah = 0x9010;
	sw2.n_sges = 1;
	sw2.sges = &sg3;
	memset(&e, 0, sizeof(e));
	e.type = RBT_EV_POST_SEND;
	e.stream = 31;
	e.ts = 1090; // steps back
	e.u.post_send.ts_exit = 1090;
	e.u.post_send.ret = -12;
	e.u.post_send.qp = 0x5000; // same handle: delta 0, still present
	e.u.post_send.qp_num = 0x1a2;
	e.u.post_send.n_wrs = 1;
	e.u.post_send.wrs = &sw2;
	ASSERT_EQ(0, rbt_writer_append(w, &e));

	memset(&e, 0, sizeof(e));
	e.type = RBT_EV_THREAD;
	e.stream = 31;
	e.ts = 1090;
	e.u.thread.tid = 4242;
	e.u.thread.name = "main";
	ASSERT_EQ(0, rbt_writer_append(w, &e));

	memset(&e, 0, sizeof(e));
	e.type = RBT_EV_PD_DEALLOC;
	e.stream = 31;
	e.ts = 1090;
	ASSERT_EQ(0, rbt_writer_append(w, &e));
	ASSERT_EQ(0, rbt_writer_close(w, nullptr));

	std::vector<uint8_t> want, p, r, s;
	// post_send: ts delta 0; ts_exit, qp, qp_num, wrs present.
	p = {};
	varint(p, zz(0));
	varint(p, 1 << 0 | 1 << 2 | 1 << 3 | 1 << 6);
	varint(p, zz(50));
	varint(p, zz(0x5000));
	varint(p, 0x1a2);
	varint(p, 2);
	r = {}; // wr 0: wr_id, opcode, send_flags, remote_addr, rkey, sges
	varint(r, 1 << 0 | 1 << 1 | 1 << 2 | 1 << 4 | 1 << 5 | 1 << 11);
	varint(r, 7);
	varint(r, 2);
	varint(r, 2);
	varint(r, zz(0x7f0000001000)); // D: a delta from its slot, 0 at first
	varint(r, 0x1234);
	varint(r, 2);
	s = {};
	varint(s, 7);
	varint(s, zz(0x7f0000002000)); // slot sge.addr
	varint(s, 64);
	varint(s, 0x2f01);
	varint(r, s.size());
	r.insert(r.end(), s.begin(), s.end());
	s = {};
	varint(s, 1);
	varint(s, zz(0x1000)); // from the previous sge.addr, in the same event
	varint(r, s.size());
	r.insert(r.end(), s.begin(), s.end());
	varint(p, r.size());
	p.insert(p.end(), r.begin(), r.end());
	r = {}; // wr 1: wr_id, opcode, ah (slot send_wr.ah), remote_qpn, qkey, payload
	varint(r, 1 << 0 | 1 << 1 | 1 << 8 | 1 << 9 | 1 << 10 | 1 << 12);
	varint(r, 8);
	varint(r, 2);
	varint(r, zz(0x9000));
	varint(r, 77);
	varint(r, 0x11111111);
	varint(r, 2);
	r.insert(r.end(), { 'h', 'i' });
	varint(p, r.size());
	p.insert(p.end(), r.begin(), r.end());
	event(want, RBT_EV_POST_SEND, p);
	// poll_cq: +100; ts_exit, ret, cq, asked, count, wcs.
	p = {};
	varint(p, zz(100));
	varint(p, 1 << 0 | 1 << 1 | 1 << 2 | 1 << 3 | 1 << 5 | 1 << 6);
	varint(p, zz(30));
	varint(p, zz(1));
	varint(p, zz(0x6000));
	varint(p, 16);
	varint(p, 1);
	varint(p, 1);
	r = {}; // wr_id, byte_len, qp_num, hw_ts
	varint(r, 1 << 0 | 1 << 4 | 1 << 6 | 1 << 13);
	varint(r, 7);
	varint(r, 64);
	varint(r, 0x1a2);
	varint(r, zz(123456789)); // hw_ts is D too
	varint(p, r.size());
	p.insert(p.end(), r.begin(), r.end());
	event(want, RBT_EV_POLL_CQ, p);
	// post_send: -10; ts_exit (delta 0), ret, qp (delta 0), qp_num, wrs.
	p = {};
	varint(p, zz(-10));
	varint(p, 1 << 0 | 1 << 1 | 1 << 2 | 1 << 3 | 1 << 6);
	varint(p, zz(0));
	varint(p, zz(-12));
	varint(p, zz(0));
	varint(p, 0x1a2);
	varint(p, 1);
	r = {}; // wr_id, remote_addr: +0x40, ah: +0x10 from the slot, sges
	varint(r, 1 << 0 | 1 << 4 | 1 << 8 | 1 << 11);
	varint(r, 9);
	varint(r, zz(0x40));
	varint(r, zz(0x10));
	varint(r, 1);
	s = {}; // addr steps back from the last sge.addr (0x...3000), length
	varint(s, 1 | 2);
	varint(s, zz(0x2040 - 0x3000));
	varint(s, 64);
	varint(r, s.size());
	r.insert(r.end(), s.begin(), s.end());
	varint(p, r.size());
	p.insert(p.end(), r.begin(), r.end());
	event(want, RBT_EV_POST_SEND, p);
	// thread: +0; tid, name.
	p = {};
	varint(p, zz(0));
	varint(p, 3);
	varint(p, 4242);
	varint(p, 4);
	p.insert(p.end(), { 'm', 'a', 'i', 'n', 0 });
	event(want, RBT_EV_THREAD, p);
	// pd_dealloc: +0 and nothing present: an empty payload.
	event(want, RBT_EV_PD_DEALLOC, {});

	FILE *f = fopen(path.c_str(), "rb");
	ASSERT_NE(nullptr, f);
	std::vector<uint8_t> file;
	uint8_t buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		file.insert(file.end(), buf, buf + n);
	fclose(f);
	unlink(path.c_str());
	auto le = [&](size_t off) {
		return (uint32_t)file[off] | (uint32_t)file[off + 1] << 8 |
		       (uint32_t)file[off + 2] << 16 | (uint32_t)file[off + 3] << 24;
	};
	ASSERT_GT(file.size(), 24u);
	size_t off = 24 + le(16);
	ASSERT_LE(off + 48, file.size());
	EXPECT_EQ(0x4b434252u, le(off));
	uint32_t comp = le(off + 4), raw = le(off + 8);
	EXPECT_EQ(5u, le(off + 12));  // events
	EXPECT_EQ(31u, le(off + 16)); // stream
	EXPECT_EQ(1000u, le(off + 24));
	EXPECT_EQ(1090u, le(off + 32));
	ASSERT_LE(off + 48 + comp, file.size());
	std::vector<uint8_t> got(raw);
	size_t d = ZSTD_decompress(got.data(), got.size(), &file[off + 48], comp);
	ASSERT_FALSE(ZSTD_isError(d));
	got.resize(d);
	EXPECT_EQ(want, got);
}

// A writer of the test header at path (nullptr when it cannot open).
static rbt_writer *open_with(const std::string &path, size_t chunk_bytes, int ts_column)
{
	rbt_header h = test_header();
	rbt_writer_opts o = {};
	o.chunk_bytes = chunk_bytes;
	o.ts_column = ts_column;
	rbt_writer *w = nullptr;
	EXPECT_EQ(0, rbt_writer_open(path.c_str(), &h, &o, &w));
	return w;
}

TEST(Format, LargeEvents)
{
	std::string path = tmp_path("large.rbt");
	rbt_writer *w = open_with(path, 1024, 0);
	ASSERT_NE(nullptr, w);
	std::vector<uint8_t> big(1 << 20);
	for (size_t i = 0; i < big.size(); i++)
		big[i] = (uint8_t)(i * 7);
	std::vector<rbt_send_wr> wrs(5000);
	rbt_sge sge = { 1, 2, 3 };
	for (size_t i = 0; i < wrs.size(); i++) {
		wrs[i] = {};
		wrs[i].wr_id = i;
		wrs[i].n_sges = 1;
		wrs[i].sges = &sge;
	}
	wrs[10].payload = rbt_blob{ big.data(), (uint32_t)big.size() };
	rbt_event ev = {};
	ev.type = RBT_EV_POST_SEND;
	ev.ts = 1;
	ev.u.post_send.n_wrs = (uint32_t)wrs.size();
	ev.u.post_send.wrs = wrs.data();
	ASSERT_EQ(0, rbt_writer_append(w, &ev));
	std::string text(300, 'q');
	rbt_event note = {};
	note.type = RBT_EV_NOTE;
	note.ts = 2;
	note.u.note.text = text.c_str();
	ASSERT_EQ(0, rbt_writer_append(w, &note));
	ASSERT_EQ(0, rbt_writer_close(w, nullptr));

	rbt_reader *r;
	ASSERT_EQ(0, rbt_reader_open(path.c_str(), &r));
	const rbt_event *e;
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	ASSERT_EQ(5000u, e->u.post_send.n_wrs);
	EXPECT_EQ(4999u, e->u.post_send.wrs[4999].wr_id);
	EXPECT_EQ(3u, e->u.post_send.wrs[4999].sges[0].lkey);
	ASSERT_EQ(big.size(), e->u.post_send.wrs[10].payload.len);
	EXPECT_EQ(0, memcmp(big.data(), e->u.post_send.wrs[10].payload.data, big.size()));
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(text, e->u.note.text);
	EXPECT_EQ(0, rbt_reader_next(r, &e));
	EXPECT_EQ(2u, rbt_reader_stats(r)->chunks);
	rbt_reader_close(r);
	unlink(path.c_str());
}

// An event too big for any chunk is refused, and the events around it survive
// (handles stay in step although the refused one had been half encoded).
TEST(Format, OversizedEventIsRefusedCleanly)
{
	std::string path = tmp_path("oversized.rbt");
	rbt_header h = test_header();
	rbt_writer *w;
	ASSERT_EQ(0, rbt_writer_open(path.c_str(), &h, nullptr, &w));
	rbt_event ev = {};
	ev.type = RBT_EV_PD_ALLOC;
	ev.ts = 10;
	ev.u.pd_alloc.pd = 0x1000;
	ASSERT_EQ(0, rbt_writer_append(w, &ev));
	std::vector<uint8_t> huge(33u << 20, 0xab);
	rbt_recv_wr wr = {};
	wr.payload = rbt_blob{ huge.data(), (uint32_t)huge.size() };
	rbt_event big = {};
	big.type = RBT_EV_POST_SRQ_RECV;
	big.ts = 11;
	big.u.post_srq_recv.srq = 0x5000;
	big.u.post_srq_recv.n_wrs = 1;
	big.u.post_srq_recv.wrs = &wr;
	EXPECT_EQ(-E2BIG, rbt_writer_append(w, &big));
	big.u.post_srq_recv.n_wrs = 0; // the same event, small now
	ASSERT_EQ(0, rbt_writer_append(w, &big));
	ev.ts = 12;
	ev.u.pd_alloc.pd = 0x2000;
	ASSERT_EQ(0, rbt_writer_append(w, &ev));
	ASSERT_EQ(0, rbt_writer_close(w, nullptr));
	rbt_reader *r;
	ASSERT_EQ(0, rbt_reader_open(path.c_str(), &r));
	const rbt_event *e;
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(0x1000u, e->u.pd_alloc.pd);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(0x5000u, e->u.post_srq_recv.srq);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(0x2000u, e->u.pd_alloc.pd);
	EXPECT_EQ(0, rbt_reader_next(r, &e));
	EXPECT_EQ(0u, rbt_reader_stats(r)->bad_chunks);
	rbt_reader_close(r);
	unlink(path.c_str());
}

TEST(Format, TextAndJsonPrinters)
{
	rbt_header h = test_header();
	h.clock_hz = 1000000000;
	h.start.ticks = 0;
	rbt_sge sge = { 0x7f0000001000, 64, 0x1234 };
	rbt_send_wr wr = {};
	wr.wr_id = 99;
	wr.opcode = 0;
	wr.send_flags = 2;
	wr.n_sges = 1;
	wr.sges = &sge;
	rbt_event ev = {};
	ev.type = RBT_EV_POST_SEND;
	ev.stream = 7;
	ev.ts = 1000;
	ev.u.post_send.ts_exit = 1250;
	ev.u.post_send.qp = 0xabc0;
	ev.u.post_send.qp_num = 17;
	ev.u.post_send.n_wrs = 1;
	ev.u.post_send.wrs = &wr;
	char buf[1024];
	rbt_event_format_text(&h, &ev, buf, sizeof(buf));
	EXPECT_STREQ(
		"0.000001000 [7] post_send ts_exit=+0.250us ret=0 qp=0xabc0 qp_num=17 "
		"wrs=[{wr_id=99 opcode=RDMA_WRITE send_flags=SIGNALED "
		"sges=[{addr=0x7f0000001000 length=64 lkey=4660}]}]",
		buf);
	// Flags print by name, unknown bits and values as numbers.
	wr.send_flags = 2 | 8 | 0x100;
	wr.opcode = 99;
	rbt_event_format_text(&h, &ev, buf, sizeof(buf));
	EXPECT_NE(nullptr, strstr(buf, "opcode=99 send_flags=SIGNALED|INLINE|0x100"))
		<< buf;
	wr.send_flags = 2;
	wr.opcode = 0;
	rbt_event_format_json(&h, &ev, buf, sizeof(buf));
	EXPECT_NE(nullptr,
		  strstr(buf, "{\"type\":\"post_send\",\"stream\":7,\"ts\":1000,"));
	EXPECT_NE(nullptr, strstr(buf, "\"wrs\":[{\"wr_id\":99,\"opcode\":0,"));
	EXPECT_NE(nullptr, strstr(buf, "\"sges\":[{\"addr\":139637976731648,"));
	// Truncation: never past len, NUL-terminated, returns the full length.
	size_t need = rbt_event_format_json(&h, &ev, nullptr, 0);
	EXPECT_EQ(strlen(buf), need);
	char small[16];
	memset(small, 'x', sizeof(small));
	EXPECT_EQ(need, rbt_event_format_json(&h, &ev, small, 10));
	EXPECT_EQ(9u, strlen(small));
	EXPECT_EQ('x', small[10]);
	// Strings are escaped.
	rbt_event note = {};
	note.type = RBT_EV_NOTE;
	note.u.note.text = "a \"quoted\"\nline\\";
	rbt_event_format_json(&h, &note, buf, sizeof(buf));
	EXPECT_NE(nullptr, strstr(buf, "\"text\":\"a \\\"quoted\\\"\\nline\\\\\""));
}

// ---- flat records: rbt_writer_append_flat() writes append()'s bytes ----------------
namespace
{

struct ChunkSink {
	std::vector<uint8_t> bytes;
	static int put(void *arg, const void *c, size_t len, uint64_t, uint64_t)
	{
		auto *s = static_cast<ChunkSink *>(arg);
		s->bytes.insert(s->bytes.end(), (const uint8_t *)c,
				(const uint8_t *)c + len);
		return 0;
	}
};

template <class T> void put_flat(std::vector<uint8_t> &b, const T &v)
{
	b.insert(b.end(), (const uint8_t *)&v, (const uint8_t *)&v + sizeof(v));
}

// A value that is often zero, sometimes repeats, sometimes large.
uint64_t edge(std::mt19937_64 &rng, uint64_t prev)
{
	switch (rng() % 5) {
	case 0:
		return 0;
	case 1:
		return prev;
	case 2:
		return prev + rng() % 300;
	case 3:
		return rng() % 200;
	default:
		return rng();
	}
}

// The dense form of a completion (what the recorder's poll wrapper writes).
void put_dwc(std::vector<uint8_t> &b, const struct rbt_flat_wc &c)
{
	struct rbt_flat_dwc d = {};
	d.wr_id = c.wr_id;
	d.byte_len = c.byte_len;
	d.qp_num = c.qp_num;
	d.imm = c.imm;
	d.status = (uint8_t)c.status;
	d.opcode = (uint8_t)c.opcode;
	d.wc_flags = (uint8_t)c.wc_flags;
	d.ext = ((c.status | c.opcode | c.wc_flags) > 0xff) || c.vendor_err || c.src_qp ||
		c.pkey_index || c.slid || c.sl || c.dlid_path_bits;
	put_flat(b, d);
	if (!d.ext)
		return;
	struct rbt_flat_dwc_ext x = {};
	{
		struct rbt_flat_dwc_ext *d = &x;
		const struct rbt_flat_wc *s = &c;
		RBT_DWC_EXT_FIELDS(RBT_FIELD_CP)
	}
	put_flat(b, x);
}

// The dense form of a send WR's head and the parts its shape names (sges and
// payload follow, as in the full form). rdma: write the remote part even when
// it is zero (the recorder does for WRs with the extension).
void put_dswr(std::vector<uint8_t> &b, const struct rbt_flat_swr &x,
	      const struct rbt_flat_swr_ext &e, bool rdma)
{
	struct rbt_flat_dswr d = {};
	d.wr_id = x.wr_id;
	d.imm = x.imm;
	d.opcode = x.opcode;
	d.send_flags = (uint8_t)x.send_flags;
	d.nsge = (uint8_t)x.nsge;
	if (rdma || x.ext || x.remote_addr || x.rkey)
		d.shape |= RBT_DSWR_RDMA;
	if (x.ext)
		d.shape |= RBT_DSWR_EXT;
	if (x.send_flags > 0xff || x.payload_len)
		d.shape |= RBT_DSWR_WIDE;
	put_flat(b, d);
	struct rbt_flat_dswr_rdma r = { x.remote_addr, x.rkey, 0 };
	struct rbt_flat_dswr_wide wd = { x.send_flags, x.payload_len };
	if (d.shape & RBT_DSWR_RDMA)
		put_flat(b, r);
	if (x.ext)
		put_flat(b, e);
	if (d.shape & RBT_DSWR_WIDE)
		put_flat(b, wd);
}

} // namespace

// Each record three ways: the full flat layout, the dense one (RBT_FLAT_DENSE)
// and the event through append(): the same chunk bytes, so a reader decodes
// the same events from each. With the timestamp column, the dense record and
// append() again (d, e).
TEST(FormatFlat, SameBytesAsAppend)
{
	std::mt19937_64 rng(15);
	ChunkSink a, b, c, cd, ce;
	struct rbt_header hdr = {};
	struct rbt_writer_opts oa = {}, ob = {}, oc = {}, od = {}, oe = {};
	oa.sink = ChunkSink::put;
	oa.sink_arg = &a;
	oa.chunk_bytes = 4096; // many chunks: slots restart at each
	ob = oa;
	ob.sink_arg = &b;
	oc = oa;
	oc.sink_arg = &c;
	od = oa;
	od.sink_arg = &cd;
	od.ts_column = 1;
	oe = od;
	oe.sink_arg = &ce;
	struct rbt_writer *wa, *wb, *wc, *wd, *we;
	ASSERT_EQ(rbt_writer_open_sink(&hdr, &oa, &wa), 0);
	ASSERT_EQ(rbt_writer_open_sink(&hdr, &ob, &wb), 0);
	ASSERT_EQ(rbt_writer_open_sink(&hdr, &oc, &wc), 0);
	ASSERT_EQ(rbt_writer_open_sink(&hdr, &od, &wd), 0);
	ASSERT_EQ(rbt_writer_open_sink(&hdr, &oe, &we), 0);
	ASSERT_EQ(rbt_writer_begin_chunk(wa, 7), 0);
	ASSERT_EQ(rbt_writer_begin_chunk(wb, 7), 0);
	ASSERT_EQ(rbt_writer_begin_chunk(wc, 7), 0);
	ASSERT_EQ(rbt_writer_begin_chunk(wd, 7), 0);
	ASSERT_EQ(rbt_writer_begin_chunk(we, 7), 0);
	uint64_t ts = 1000, prev = 0;
	uint8_t payload[40];
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7);
	for (int n = 0; n < 20000; n++) {
		std::vector<uint8_t> rec, recd;
		std::deque<rbt_sge> sges;
		std::deque<rbt_send_wr> swrs;
		std::deque<rbt_recv_wr> rwrs;
		std::deque<rbt_wc> wcs;
		struct rbt_event ev = {};
		ts += rng() % 4 ? rng() % 200 : 0;
		ev.ts = ts;
		ev.stream = 7;
		unsigned kind = 1 + rng() % 4;
		uint32_t flags = 0;
		if (kind == RBT_FLAT_POLL) {
			struct rbt_flat_poll p = {};
			flags = rng() % 2 ? RBT_FLAT_WCX : 0;
			p.ts = ts;
			p.ts_exit = rng() % 8 ? ts + rng() % 100 : 0;
			p.ret = (int32_t)(rng() % 5) - 1;
			p.cq = prev = edge(rng, prev);
			p.asked = (uint32_t)(rng() % 33);
			p.api = (uint32_t)(rng() % 2);
			p.count = (uint32_t)(rng() % 3);
			p.nwc = (uint32_t)(rng() % 4 ? rng() % 3 : rng() % 20);
			put_flat(rec, p);
			put_flat(recd, p);
			ev.type = RBT_EV_POLL_CQ;
			ev.u.poll_cq.ts_exit = p.ts_exit;
			ev.u.poll_cq.ret = p.ret;
			ev.u.poll_cq.cq = p.cq;
			ev.u.poll_cq.asked = p.asked;
			ev.u.poll_cq.api = p.api;
			ev.u.poll_cq.count = p.count ? p.count : 1;
			ev.u.poll_cq.n_wcs = p.nwc;
			for (uint32_t k = 0; k < p.nwc; k++) {
				struct rbt_flat_wcx x = {};
				x.wc.wr_id = edge(rng, prev);
				x.wc.status = (uint32_t)(rng() % 3 ? 0 : rng() % 22);
				x.wc.opcode = (uint32_t)(rng() % 4);
				x.wc.vendor_err = (uint32_t)(rng() % 9 ? 0 : rng());
				x.wc.byte_len = (uint32_t)edge(rng, 64);
				x.wc.imm = (uint32_t)(rng() % 3 ? 0 : rng());
				x.wc.qp_num = (uint32_t)edge(rng, 0x123);
				x.wc.src_qp = (uint32_t)(rng() % 3 ? 0 : rng());
				x.wc.wc_flags = (uint32_t)(rng() % 16);
				if (rng() % 16 == 0) // too wide for the dense byte
					x.wc.wc_flags |= 1u << (8 + rng() % 24);
				if (rng() % 32 == 0)
					x.wc.opcode = 0x100 + (uint32_t)(rng() % 3);
				x.wc.pkey_index = (uint16_t)(rng() % 3);
				x.wc.slid = (uint16_t)(rng() % 3);
				x.wc.sl = (uint8_t)(rng() % 3);
				x.wc.dlid_path_bits = (uint8_t)(rng() % 3);
				x.hw_ts = flags ? edge(rng, ts) : 0;
				if (flags)
					put_flat(rec, x);
				else
					put_flat(rec, x.wc);
				if (flags)
					put_flat(recd, x);
				else
					put_dwc(recd, x.wc);
				struct rbt_wc w = {};
				w.wr_id = x.wc.wr_id;
				w.status = x.wc.status;
				w.opcode = x.wc.opcode;
				w.vendor_err = x.wc.vendor_err;
				w.byte_len = x.wc.byte_len;
				w.imm_data = x.wc.wc_flags & RBT_FLAT_WC_WITH_INV
						     ? x.wc.imm
						     : be32toh(x.wc.imm);
				w.qp_num = x.wc.qp_num;
				w.src_qp = x.wc.src_qp;
				w.wc_flags = x.wc.wc_flags;
				w.pkey_index = x.wc.pkey_index;
				w.slid = x.wc.slid;
				w.sl = x.wc.sl;
				w.dlid_path_bits = x.wc.dlid_path_bits;
				w.hw_ts = x.hw_ts;
				wcs.push_back(w);
			}
			std::vector<rbt_wc> flat(wcs.begin(), wcs.end());
			ev.u.poll_cq.wcs = flat.data();
			ASSERT_EQ(rbt_writer_append_flat(wa, RBT_FLAT_POLL, flags,
							 rec.data(), rec.size()),
				  0);
			ASSERT_EQ(rbt_writer_append_flat(wc, RBT_FLAT_POLL,
							 flags ? flags : RBT_FLAT_DENSE,
							 recd.data(), recd.size()),
				  0);
			ASSERT_EQ(rbt_writer_append_flat(wd, RBT_FLAT_POLL,
							 flags ? flags : RBT_FLAT_DENSE,
							 recd.data(), recd.size()),
				  0);
			ASSERT_EQ(rbt_writer_append(wb, &ev), 0);
			ASSERT_EQ(rbt_writer_append(we, &ev), 0);
			continue;
		}
		struct rbt_flat_post p = {};
		p.ts = ts;
		p.ts_exit = rng() % 8 ? ts + rng() % 100 : 0;
		p.ret = rng() % 6 ? 0 : 12;
		p.obj = prev = edge(rng, prev);
		p.qp_num = kind == RBT_FLAT_POST_SRQ ? 0 : (uint32_t)edge(rng, 0x123);
		p.bad_wr = p.ret ? (uint32_t)(rng() % 2) : 0;
		p.api = kind == RBT_FLAT_POST_SEND ? (uint16_t)(rng() % 2) : 0;
		p.nwr = (uint16_t)(rng() % 4 ? 1 + rng() % 2 : rng() % 9);
		put_flat(rec, p);
		put_flat(recd, p);
		std::vector<std::vector<rbt_sge>> sgv(p.nwr);
		for (uint32_t k = 0; k < p.nwr; k++) {
			uint32_t ns = (uint32_t)(rng() % 4 ? 1 : rng() % 4);
			if (kind == RBT_FLAT_POST_SEND) {
				struct rbt_flat_swr x = {};
				struct rbt_flat_swr_ext e = {};
				x.wr_id = edge(rng, k);
				x.remote_addr = edge(rng, 0x7f0000000000);
				x.rkey = (uint32_t)edge(rng, 0x1234);
				x.imm = (uint32_t)(rng() % 4 ? 0 : rng());
				x.send_flags = (uint32_t)(rng() % 8);
				if (rng() % 16 == 0) // too wide for the dense byte
					x.send_flags |= 1u << (8 + rng() % 24);
				x.opcode = (uint8_t)(rng() % 11);
				x.ext = rng() % 4 == 0;
				x.payload_len =
					rng() % 5 == 0 ? (uint32_t)(rng() % 40) : 0;
				x.nsge = (uint16_t)ns;
				put_flat(rec, x);
				if (x.ext) {
					e.compare_add = edge(rng, 0);
					e.swap = edge(rng, 0);
					e.ah = edge(rng, 0x55d0c0de2000);
					e.remote_qpn = (uint32_t)edge(rng, 0);
					e.remote_qkey = (uint32_t)edge(rng, 0);
					put_flat(rec, e);
				}
				put_dswr(recd, x, e, rng() % 8 == 0);
				struct rbt_send_wr w = {};
				w.wr_id = x.wr_id;
				w.opcode = x.opcode;
				w.send_flags = x.send_flags;
				w.imm_data = x.imm;
				w.remote_addr = x.remote_addr;
				w.rkey = x.rkey;
				w.compare_add = e.compare_add;
				w.swap = e.swap;
				w.ah = e.ah;
				w.remote_qpn = e.remote_qpn;
				w.remote_qkey = e.remote_qkey;
				w.n_sges = ns;
				w.payload.len = x.payload_len;
				w.payload.data = x.payload_len ? payload : nullptr;
				swrs.push_back(w);
			} else {
				struct rbt_flat_rwr x = {};
				x.wr_id = edge(rng, k);
				x.nsge = ns;
				put_flat(rec, x);
				put_flat(recd, x);
				struct rbt_recv_wr w = {};
				w.wr_id = x.wr_id;
				w.n_sges = ns;
				rwrs.push_back(w);
			}
			for (uint32_t j = 0; j < ns; j++) {
				struct rbt_flat_sge s = {};
				s.addr = edge(rng, 0x7f3100000000);
				s.length = (uint32_t)edge(rng, 64);
				s.lkey = (uint32_t)edge(rng, 0x4321);
				put_flat(rec, s);
				put_flat(recd, s);
				sgv[k].push_back({ s.addr, s.length, s.lkey });
			}
			if (kind == RBT_FLAT_POST_SEND) {
				uint32_t pl = swrs.back().payload.len;
				rec.insert(rec.end(), payload, payload + pl);
				rec.resize(rec.size() + ((8 - pl % 8) % 8));
				recd.insert(recd.end(), payload, payload + pl);
				recd.resize(recd.size() + ((8 - pl % 8) % 8));
			}
		}
		for (uint32_t k = 0; k < p.nwr; k++) {
			if (kind == RBT_FLAT_POST_SEND)
				swrs[k].sges = sgv[k].data();
			else
				rwrs[k].sges = sgv[k].data();
		}
		std::vector<rbt_send_wr> sw(swrs.begin(), swrs.end());
		std::vector<rbt_recv_wr> rw(rwrs.begin(), rwrs.end());
		if (kind == RBT_FLAT_POST_SEND) {
			ev.type = RBT_EV_POST_SEND;
			ev.u.post_send.ts_exit = p.ts_exit;
			ev.u.post_send.ret = p.ret;
			ev.u.post_send.qp = p.obj;
			ev.u.post_send.qp_num = p.qp_num;
			ev.u.post_send.bad_wr = p.bad_wr;
			ev.u.post_send.api = p.api;
			ev.u.post_send.n_wrs = p.nwr;
			ev.u.post_send.wrs = sw.data();
		} else if (kind == RBT_FLAT_POST_RECV) {
			ev.type = RBT_EV_POST_RECV;
			ev.u.post_recv.ts_exit = p.ts_exit;
			ev.u.post_recv.ret = p.ret;
			ev.u.post_recv.qp = p.obj;
			ev.u.post_recv.qp_num = p.qp_num;
			ev.u.post_recv.bad_wr = p.bad_wr;
			ev.u.post_recv.n_wrs = p.nwr;
			ev.u.post_recv.wrs = rw.data();
		} else {
			ev.type = RBT_EV_POST_SRQ_RECV;
			ev.u.post_srq_recv.ts_exit = p.ts_exit;
			ev.u.post_srq_recv.ret = p.ret;
			ev.u.post_srq_recv.srq = p.obj;
			ev.u.post_srq_recv.bad_wr = p.bad_wr;
			ev.u.post_srq_recv.n_wrs = p.nwr;
			ev.u.post_srq_recv.wrs = rw.data();
		}
		ASSERT_EQ(rbt_writer_append_flat(wa, (enum rbt_flat_kind)kind, 0,
						 rec.data(), rec.size()),
			  0)
			<< "record " << n;
		ASSERT_EQ(rbt_writer_append_flat(
				  wc, (enum rbt_flat_kind)kind,
				  kind == RBT_FLAT_POST_SEND ? RBT_FLAT_DENSE : 0,
				  recd.data(), recd.size()),
			  0)
			<< "dense record " << n;
		ASSERT_EQ(rbt_writer_append_flat(
				  wd, (enum rbt_flat_kind)kind,
				  kind == RBT_FLAT_POST_SEND ? RBT_FLAT_DENSE : 0,
				  recd.data(), recd.size()),
			  0)
			<< "dense record with the column " << n;
		ASSERT_EQ(rbt_writer_append(wb, &ev), 0);
		ASSERT_EQ(rbt_writer_append(we, &ev), 0);
	}
	for (rbt_writer *w : { wa, wb, wc, wd, we })
		ASSERT_EQ(rbt_writer_end_chunk(w), 0);
	EXPECT_GT(a.bytes.size(), 10000u);
	EXPECT_TRUE(a.bytes == b.bytes)
		<< "flat " << a.bytes.size() << " bytes, append " << b.bytes.size();
	EXPECT_TRUE(c.bytes == b.bytes)
		<< "dense " << c.bytes.size() << " bytes, append " << b.bytes.size();
	EXPECT_TRUE(cd.bytes == ce.bytes) << "dense with the column " << cd.bytes.size()
					  << " bytes, append " << ce.bytes.size();
	EXPECT_NE(cd.bytes, b.bytes);
	for (rbt_writer *w : { wa, wb, wc, wd, we })
		rbt_writer_close(w, nullptr);
}

// What programs post: the same one-WR post again and again on a few QPs, its
// addresses walking a ring buffer, with the occasional change - another
// wr_id, signaled, a failure, no exit time, a fifth QP, a new chunk (the delta
// slots restart). Flat records (dense and full) and append() give the same
// bytes, with the timestamp column and without.
TEST(FormatFlat, RepeatedPostsSameBytesAsAppend)
{
	std::mt19937_64 rng(23);
	// with the column: dense, append, full; without: dense, append
	enum { DENSE, APPEND, FULL, PDENSE, PAPPEND, NW };
	ChunkSink sink[NW];
	struct rbt_header hdr = {};
	rbt_writer *w[NW];
	for (int k = 0; k < NW; k++) {
		struct rbt_writer_opts o = {};
		o.sink = ChunkSink::put;
		o.sink_arg = &sink[k];
		o.chunk_bytes = 4096;
		o.ts_column = k < PDENSE;
		ASSERT_EQ(rbt_writer_open_sink(&hdr, &o, &w[k]), 0);
		ASSERT_EQ(rbt_writer_begin_chunk(w[k], 3), 0);
	}
	// QPs 10..13 in turn, now and then 14 or one out of turn
	const uint32_t qpn[5] = { 10, 11, 12, 13, 14 };
	uint64_t off[5] = {}, ts = 5000;
	for (int n = 0; n < 30000; n++) {
		int q = rng() % 16 ? n % 4 : (int)(rng() % 5);
		struct rbt_flat_post p = {};
		ts += 80 + rng() % 40;
		p.ts = ts;
		p.ts_exit = rng() % 64 ? ts + 30 + rng() % 20 : 0;
		p.obj = 0x55d000001000 + 0x200 * (uint64_t)q;
		p.qp_num = qpn[q];
		p.ret = rng() % 500 ? 0 : -12;
		p.nwr = 1;
		struct rbt_flat_swr x = {};
		struct rbt_flat_swr_ext e = {};
		x.wr_id = rng() % 50 ? 7 + (uint64_t)q : (uint64_t)n;
		x.opcode = q == 3 ? 2 /* SEND */ : 0 /* RDMA_WRITE */;
		x.send_flags = n % 16 == 0 ? 2 : 0;
		if (x.opcode == 0) {
			x.remote_addr = 0x7f3000000000 + (uint64_t)q * 0x10000 + off[q];
			x.rkey = 0x300 + (uint32_t)q;
		}
		x.nsge = 1;
		struct rbt_flat_sge g = { 0x55e000000000 + (uint64_t)q * 0x10000 + off[q],
					  64, 0x300 + (uint32_t)q };
		off[q] = (off[q] + 64) % 4096;
		std::vector<uint8_t> recd, recf;
		put_flat(recd, p);
		put_dswr(recd, x, e, false);
		put_flat(recd, g);
		put_flat(recf, p);
		put_flat(recf, x);
		put_flat(recf, g);
		rbt_sge sge = { g.addr, g.length, g.lkey };
		rbt_send_wr wr = {};
		wr.wr_id = x.wr_id;
		wr.opcode = x.opcode;
		wr.send_flags = x.send_flags;
		wr.remote_addr = x.remote_addr;
		wr.rkey = x.rkey;
		wr.n_sges = 1;
		wr.sges = &sge;
		rbt_event ev = {};
		ev.type = RBT_EV_POST_SEND;
		ev.stream = 3;
		ev.ts = p.ts;
		ev.u.post_send.ts_exit = p.ts_exit;
		ev.u.post_send.ret = p.ret;
		ev.u.post_send.qp = p.obj;
		ev.u.post_send.qp_num = p.qp_num;
		ev.u.post_send.n_wrs = 1;
		ev.u.post_send.wrs = &wr;
		for (int k : { DENSE, PDENSE })
			ASSERT_EQ(rbt_writer_append_flat(w[k], RBT_FLAT_POST_SEND,
							 RBT_FLAT_DENSE, recd.data(),
							 recd.size()),
				  0)
				<< "post " << n;
		ASSERT_EQ(rbt_writer_append_flat(w[FULL], RBT_FLAT_POST_SEND, 0,
						 recf.data(), recf.size()),
			  0)
			<< "post " << n;
		ASSERT_EQ(rbt_writer_append(w[APPEND], &ev), 0);
		ASSERT_EQ(rbt_writer_append(w[PAPPEND], &ev), 0);
	}
	for (rbt_writer *x : w)
		ASSERT_EQ(rbt_writer_end_chunk(x), 0);
	const auto &a = sink[APPEND].bytes;
	EXPECT_GT(a.size(), 20000u);
	EXPECT_TRUE(sink[DENSE].bytes == a)
		<< "dense " << sink[DENSE].bytes.size() << " bytes, append " << a.size();
	EXPECT_TRUE(sink[FULL].bytes == a)
		<< "full " << sink[FULL].bytes.size() << " bytes, append " << a.size();
	EXPECT_TRUE(sink[PDENSE].bytes == sink[PAPPEND].bytes)
		<< "without the column " << sink[PDENSE].bytes.size() << " bytes, append "
		<< sink[PAPPEND].bytes.size();
	EXPECT_NE(sink[PAPPEND].bytes, a);
	for (rbt_writer *x : w)
		rbt_writer_close(x, nullptr);
}

TEST(FormatFlat, RefusesRecordsThatOverrunTheirLength)
{
	ChunkSink a;
	struct rbt_header hdr = {};
	struct rbt_writer_opts o = {};
	o.sink = ChunkSink::put;
	o.sink_arg = &a;
	struct rbt_writer *w;
	ASSERT_EQ(rbt_writer_open_sink(&hdr, &o, &w), 0);
	struct {
		struct rbt_flat_post p;
		struct rbt_flat_swr s;
	} r = {};
	r.p.nwr = 1;
	r.s.nsge = 3; // three sges that are not there
	EXPECT_EQ(rbt_writer_append_flat(w, RBT_FLAT_POST_SEND, 0, &r, sizeof(r)),
		  -EINVAL)
		<< "no chunk open";
	ASSERT_EQ(rbt_writer_begin_chunk(w, 1), 0);
	EXPECT_EQ(rbt_writer_append_flat(w, RBT_FLAT_POST_SEND, 0, &r, sizeof(r)),
		  -EBADMSG);
	EXPECT_EQ(rbt_writer_append_flat(w, RBT_FLAT_POST_SEND, 0, &r, 8), -EBADMSG);
	struct rbt_flat_poll pl = {};
	pl.nwc = 2;
	EXPECT_EQ(rbt_writer_append_flat(w, RBT_FLAT_POLL, 0, &pl, sizeof(pl)), -EBADMSG);
	// dense: an extension or a remote part that is not there, an unknown shape
	struct {
		struct rbt_flat_poll p;
		struct rbt_flat_dwc c;
	} dp = {};
	dp.p.nwc = 1;
	dp.c.ext = 1;
	EXPECT_EQ(
		rbt_writer_append_flat(w, RBT_FLAT_POLL, RBT_FLAT_DENSE, &dp, sizeof(dp)),
		-EBADMSG);
	struct {
		struct rbt_flat_post p;
		struct rbt_flat_dswr s;
	} ds = {};
	ds.p.nwr = 1;
	ds.s.shape = RBT_DSWR_RDMA;
	EXPECT_EQ(rbt_writer_append_flat(w, RBT_FLAT_POST_SEND, RBT_FLAT_DENSE, &ds,
					 sizeof(ds)),
		  -EBADMSG);
	ds.s.shape = 0x80;
	EXPECT_EQ(rbt_writer_append_flat(w, RBT_FLAT_POST_SEND, RBT_FLAT_DENSE, &ds,
					 sizeof(ds)),
		  -EBADMSG);
	ds.s.shape = 0;
	EXPECT_EQ(rbt_writer_append_flat(w, RBT_FLAT_POST_SEND, RBT_FLAT_DENSE, &ds,
					 sizeof(ds)),
		  0);
	dp.c.ext = 0;
	EXPECT_EQ(
		rbt_writer_append_flat(w, RBT_FLAT_POLL, RBT_FLAT_DENSE, &dp, sizeof(dp)),
		0);
	r.s.nsge = 0;
	EXPECT_EQ(rbt_writer_append_flat(w, RBT_FLAT_POST_SEND, 0, &r, sizeof(r)), 0);
	EXPECT_EQ(rbt_writer_end_chunk(w), 0);
	EXPECT_EQ(rbt_writer_close(w, nullptr), 0);
}

// A writer with the timestamp column says so in the file header (min_reader 2)
// and in each chunk's flags; a writer without one refuses to copy its chunks.
TEST(Format, TimestampColumnIsDeclared)
{
	std::string path = tmp_path("tscol.rbt");
	rbt_writer *w = open_with(path, 0, 1);
	ASSERT_NE(nullptr, w);
	ASSERT_EQ(0, rbt_writer_begin_chunk(w, 5));
	rbt_event ev = {};
	ev.type = RBT_EV_POST_SEND;
	ev.ts = 1000;
	ev.u.post_send.ts_exit = 1090;
	ASSERT_EQ(0, rbt_writer_append(w, &ev));
	ev.ts = 1000; // a zero delta and no field: an empty payload
	ev.u.post_send.ts_exit = 0;
	ASSERT_EQ(0, rbt_writer_append(w, &ev));
	ASSERT_EQ(0, rbt_writer_end_chunk(w));
	ASSERT_EQ(0, rbt_writer_close(w, nullptr));
	std::vector<uint8_t> f;
	{
		FILE *fp = fopen(path.c_str(), "rb");
		ASSERT_NE(nullptr, fp);
		int ch;
		while ((ch = fgetc(fp)) != EOF)
			f.push_back((uint8_t)ch);
		fclose(fp);
	}
	ASSERT_GT(f.size(), 24u);
	EXPECT_EQ(2u, f[12] | f[13] << 8); // min_reader
	uint32_t body = f[16] | f[17] << 8 | f[18] << 16 | (uint32_t)f[19] << 24;
	size_t at = 24 + body;
	ASSERT_GT(f.size(), at + 48);
	EXPECT_EQ((uint32_t)RBT_CHUNK_TSCOL, f[at + 20] & RBT_CHUNK_TSCOL);
	uint32_t comp =
		f[at + 4] | f[at + 5] << 8 | f[at + 6] << 16 | (uint32_t)f[at + 7] << 24;

	ChunkSink s;
	rbt_writer_opts so = {};
	so.sink = ChunkSink::put;
	so.sink_arg = &s;
	rbt_header h = test_header();
	rbt_writer *plain;
	ASSERT_EQ(0, rbt_writer_open_sink(&h, &so, &plain));
	EXPECT_EQ(-EINVAL, rbt_writer_copy_chunk(plain, &f[at], 48 + comp));
	rbt_writer_close(plain, nullptr);

	rbt_reader *r;
	ASSERT_EQ(0, rbt_reader_open(path.c_str(), &r));
	const rbt_event *e;
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(1000u, e->ts);
	EXPECT_EQ(1090u, e->u.post_send.ts_exit);
	ASSERT_EQ(1, rbt_reader_next(r, &e));
	EXPECT_EQ(1000u, e->ts);
	EXPECT_EQ(0u, e->u.post_send.ts_exit);
	EXPECT_EQ(0, rbt_reader_next(r, &e));
	EXPECT_EQ(0u, rbt_reader_stats(r)->bad_chunks);
	rbt_reader_close(r);
	unlink(path.c_str());
}
