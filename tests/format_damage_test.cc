// format_damage_test.cc - damaged and truncated traces: the reader never crashes,
// returns every event of every intact chunk, and says where the damage is.
//
// Truncation is tried at every byte offset of the last chunks (what kill -9 of
// the recorder leaves), bit flips at every byte of the file, plus garbage
// inserted between chunks and a zeroed disk block.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "trace_format/rbt_format.h"

namespace
{

struct Trace {
	std::vector<uint8_t> bytes;
	std::vector<uint64_t> chunk_off; // start of chunk i; last entry: the trailer
	std::vector<std::vector<std::string>> chunk_events; // events of chunk i, as JSON
};

std::string json(const rbt_header *h, const rbt_event *ev)
{
	size_t n = rbt_event_format_json(h, ev, nullptr, 0);
	std::string s(n + 1, '\0');
	rbt_event_format_json(h, ev, &s[0], s.size());
	s.resize(n);
	return s;
}

// name in the test's scratch directory.
std::string tmp_path(const char *name)
{
	const char *d = getenv("TEST_TMPDIR");
	return std::string(d ? d : "/tmp") + "/" + name;
}

// b written whole to tmp_path(name); that path, or "" when it could not be.
std::string write_tmp(const std::vector<uint8_t> &b, const char *name)
{
	std::string path = tmp_path(name);
	FILE *f = fopen(path.c_str(), "wb");
	bool ok = f && fwrite(b.data(), 1, b.size(), f) == b.size();
	if (f && fclose(f))
		ok = false;
	return ok ? path : std::string();
}

// A ping-pong of posts and polls on two streams, chunk by chunk (ts_column:
// with the timestamp column, as the recorder writes).
Trace make_trace(int chunks, int per_chunk, int ts_column = 0)
{
	Trace t;
	std::string path = tmp_path("dmg.rbt");
	rbt_header h = {};
	h.pid = 77;
	h.clock_source = RBT_CLOCK_MONO;
	h.clock_hz = 1000000000;
	h.host = "h";
	h.cmdline = "pingpong";
	h.tool = "format_damage_test";
	rbt_writer *w;
	rbt_writer_opts o = {};
	o.ts_column = ts_column;
	EXPECT_EQ(0, rbt_writer_open(path.c_str(), &h, &o, &w));
	uint64_t ts = 1000000;
	rbt_sge sge = { 0x7f0000010000, 64, 0x77 };
	for (int c = 0; c < chunks; c++) {
		t.chunk_off.push_back(rbt_writer_bytes(w));
		EXPECT_EQ(0, rbt_writer_begin_chunk(w, 500 + c % 2));
		for (int i = 0; i < per_chunk; i++) {
			rbt_event ev = {};
			ev.ts = ts += 300 + (i * 7) % 13;
			ev.stream = 500 + c % 2;
			rbt_send_wr wr = {};
			rbt_wc wc = {};
			if (i % 2 == 0) {
				ev.type = RBT_EV_POST_SEND;
				wr.wr_id = (uint64_t)(c * per_chunk + i);
				wr.opcode = 2;
				wr.send_flags = 2;
				wr.n_sges = 1;
				wr.sges = &sge;
				ev.u.post_send.ts_exit = ts + 80;
				ev.u.post_send.qp = 0x55000000;
				ev.u.post_send.qp_num = 9;
				ev.u.post_send.n_wrs = 1;
				ev.u.post_send.wrs = &wr;
			} else {
				ev.type = RBT_EV_POLL_CQ;
				wc.wr_id = (uint64_t)(c * per_chunk + i - 1);
				wc.byte_len = 64;
				wc.qp_num = 9;
				ev.u.poll_cq.ts_exit = ts + 40;
				ev.u.poll_cq.ret = 1;
				ev.u.poll_cq.cq = 0x56000000;
				ev.u.poll_cq.asked = 16;
				ev.u.poll_cq.n_wcs = 1;
				ev.u.poll_cq.wcs = &wc;
			}
			EXPECT_EQ(0, rbt_writer_append(w, &ev));
		}
		EXPECT_EQ(0, rbt_writer_end_chunk(w));
	}
	t.chunk_off.push_back(rbt_writer_bytes(w));
	EXPECT_EQ(0, rbt_writer_close(w, nullptr));
	FILE *f = fopen(path.c_str(), "rb");
	EXPECT_NE(nullptr, f);
	int ch;
	while ((ch = fgetc(f)) != EOF)
		t.bytes.push_back((uint8_t)ch);
	fclose(f);
	unlink(path.c_str());

	// The expected events, chunk by chunk, from the intact file.
	rbt_reader *r;
	EXPECT_EQ(0, rbt_reader_open_mem(t.bytes.data(), t.bytes.size(), &r));
	const rbt_event *ev;
	t.chunk_events.resize(chunks);
	for (int c = 0; c < chunks; c++)
		for (int i = 0; i < per_chunk; i++) {
			EXPECT_EQ(1, rbt_reader_next(r, &ev));
			t.chunk_events[c].push_back(json(rbt_reader_header(r), ev));
		}
	EXPECT_EQ(0, rbt_reader_next(r, &ev));
	EXPECT_TRUE(rbt_reader_stats(r)->finished);
	rbt_reader_close(r);
	return t;
}

struct Result {
	int open_err = 0;
	std::vector<std::string> events;
	struct rbt_reader_stats st = {};
	std::string error;
	rbt_header hdr = {};
};

// Every event r has left, as JSON; the last rbt_reader_next's return in *rc.
std::vector<std::string> rest_of(rbt_reader *r, int *rc = nullptr)
{
	std::vector<std::string> v;
	const rbt_event *ev;
	int ret;
	while ((ret = rbt_reader_next(r, &ev)) > 0)
		v.push_back(json(rbt_reader_header(r), ev));
	if (rc)
		*rc = ret;
	return v;
}

Result read_with(const uint8_t *p, size_t n, unsigned threads)
{
	Result res;
	rbt_reader *r;
	rbt_reader_opts o = {};
	o.threads = threads;
	res.open_err = rbt_reader_open_mem_opts(p, n, &o, &r);
	if (res.open_err)
		return res;
	int rc;
	res.events = rest_of(r, &rc);
	EXPECT_EQ(0, rc);
	res.st = *rbt_reader_stats(r);
	res.error = rbt_reader_error(r);
	res.hdr = *rbt_reader_header(r);
	rbt_reader_close(r);
	return res;
}

void expect_same_stats(const struct rbt_reader_stats &a, const struct rbt_reader_stats &b)
{
	EXPECT_EQ(a.chunks, b.chunks);
	EXPECT_EQ(a.events, b.events);
	for (size_t i = 0; i < sizeof(a.events_by_type) / sizeof(a.events_by_type[0]);
	     i++)
		EXPECT_EQ(a.events_by_type[i], b.events_by_type[i]) << "type " << i;
	EXPECT_EQ(a.bad_chunks, b.bad_chunks);
	EXPECT_EQ(a.bad_bytes, b.bad_bytes);
	EXPECT_EQ(a.lost_events_in_bad_chunks, b.lost_events_in_bad_chunks);
	EXPECT_EQ(a.first_damage_offset, b.first_damage_offset);
	EXPECT_EQ(a.truncated, b.truncated);
	EXPECT_EQ(a.finished, b.finished);
	EXPECT_EQ(a.unknown_events, b.unknown_events);
	EXPECT_EQ(a.unreadable_regions, b.unreadable_regions);
	EXPECT_EQ(a.series_files, b.series_files);
	EXPECT_EQ(a.carried_skipped, b.carried_skipped);
}

// Every damaged input is also read decoding ahead on threads: the events, the
// stats and the damage said must be those of the single-threaded reader.
Result read_all(const uint8_t *p, size_t n)
{
	Result res = read_with(p, n, 0);
	Result par = read_with(p, n, 3);
	EXPECT_EQ(res.open_err, par.open_err);
	EXPECT_EQ(res.events, par.events);
	EXPECT_EQ(res.error, par.error);
	expect_same_stats(res.st, par.st);
	return res;
}

// The events of every chunk but `skip` (-1: none) whose end is within `len`.
std::vector<std::string> expected(const Trace &t, size_t len, int skip)
{
	std::vector<std::string> v;
	for (size_t c = 0; c + 1 < t.chunk_off.size(); c++)
		if (t.chunk_off[c + 1] <= len && (int)c != skip)
			v.insert(v.end(), t.chunk_events[c].begin(),
				 t.chunk_events[c].end());
	return v;
}

// Events are compared as JSON text, but without the chunk-relative timestamps
// that a salvaged header with clock_hz 0 would print differently.
} // namespace

TEST(FormatDamage, TruncatedAtEveryByteOfTheLastChunks)
{
	Trace t = make_trace(12, 40);
	const size_t n = t.bytes.size();
	const size_t nchunks = t.chunk_off.size() - 1;
	const uint64_t from = t.chunk_off[nchunks - 3];
	for (size_t len = from; len <= n; len++) {
		Result res = read_all(t.bytes.data(), len);
		ASSERT_EQ(0, res.open_err) << len;
		ASSERT_EQ(expected(t, len, -1), res.events) << "cut at " << len;
		const uint64_t trailer = t.chunk_off[nchunks];
		bool boundary = false;
		for (uint64_t o : t.chunk_off)
			boundary |= o == len;
		if (len == n) {
			EXPECT_TRUE(res.st.finished);
			EXPECT_FALSE(res.st.truncated);
			EXPECT_EQ("", res.error);
		} else if (boundary) {
			// A clean cut between chunks: nothing lost, but not finished.
			EXPECT_FALSE(res.st.finished) << len;
			EXPECT_FALSE(res.st.truncated) << len;
			EXPECT_EQ(0u, res.st.bad_bytes) << len;
		} else {
			EXPECT_FALSE(res.st.finished) << len;
			EXPECT_TRUE(res.st.truncated) << len;
			EXPECT_NE("", res.error) << len;
			size_t c = 0; // the chunk that was cut
			while (c + 1 < t.chunk_off.size() && t.chunk_off[c + 1] <= len)
				c++;
			EXPECT_EQ(t.chunk_off[c], res.st.first_damage_offset) << len;
			EXPECT_NE(std::string::npos,
				  res.error.find(std::to_string(t.chunk_off[c])))
				<< res.error;
			if (len >= trailer) {
				EXPECT_EQ(0u, res.st.lost_events_in_bad_chunks) << len;
			} else if (len - t.chunk_off[c] >= 48) {
				// The chunk header survived: it says how many events were lost.
				EXPECT_EQ(t.chunk_events[c].size(),
					  res.st.lost_events_in_bad_chunks)
					<< len;
			}
		}
	}
}

static void bit_flips_anywhere(const Trace &t)
{
	const size_t n = t.bytes.size();
	const size_t nchunks = t.chunk_off.size() - 1;
	std::mt19937 rng(1);
	std::vector<uint8_t> b;
	for (size_t at = 0; at < n; at++) {
		b = t.bytes;
		b[at] ^= (uint8_t)(1u << (rng() % 8));
		Result res = read_all(b.data(), b.size());
		if (at < 8) {
			EXPECT_EQ(-EILSEQ, res.open_err) << at;
			continue;
		}
		ASSERT_EQ(0, res.open_err) << "flip at " << at;
		int chunk = -1;
		for (size_t c = 0; c < nchunks; c++)
			if (at >= t.chunk_off[c] && at < t.chunk_off[c + 1])
				chunk = (int)c;
		EXPECT_NE("", res.error) << "flip at " << at << " not reported";
		EXPECT_TRUE(res.st.bad_chunks || res.st.bad_bytes) << at;
		if (at < t.chunk_off[0]) {
			// The file header: its fields are lost, every event is kept (their
			// JSON differs only where the header's clock enters it).
			EXPECT_EQ(expected(t, n, -1).size(), res.events.size()) << at;
			EXPECT_EQ(24u, res.st.first_damage_offset);
			continue;
		}
		EXPECT_EQ(expected(t, n, chunk), res.events) << "flip at " << at;
		if (chunk >= 0) {
			EXPECT_EQ(t.chunk_off[chunk], res.st.first_damage_offset) << at;
		} else {
			EXPECT_FALSE(res.st.finished)
				<< "damaged trailer accepted, flip at " << at;
		}
	}
}

TEST(FormatDamage, BitFlipsAnywhere)
{
	bit_flips_anywhere(make_trace(8, 20));
}

TEST(FormatDamage, BitFlipsAnywhereWithTheTimestampColumn)
{
	bit_flips_anywhere(make_trace(8, 20, 1));
}

TEST(FormatDamage, GarbageBetweenChunksAndAZeroedBlock)
{
	Trace t = make_trace(10, 30);
	const size_t n = t.bytes.size();
	// 100 random bytes (with a fake chunk magic) inserted before chunk 4.
	std::vector<uint8_t> b(t.bytes.begin(), t.bytes.begin() + (long)t.chunk_off[4]);
	std::mt19937 rng(7);
	for (int i = 0; i < 100; i++)
		b.push_back((uint8_t)rng());
	const char fake[] = "RBCKxxxxxxxxRBND";
	b.insert(b.end(), fake, fake + 16);
	b.insert(b.end(), t.bytes.begin() + (long)t.chunk_off[4], t.bytes.end());
	Result res = read_all(b.data(), b.size());
	ASSERT_EQ(0, res.open_err);
	EXPECT_EQ(expected(t, n, -1), res.events);
	EXPECT_EQ(116u, res.st.bad_bytes);
	EXPECT_EQ(t.chunk_off[4], res.st.first_damage_offset);
	EXPECT_TRUE(res.st.finished);

	// A block of zeros from the data of chunk 2 into the header of chunk 3:
	// those two are lost, chunk 2's count is known from its header.
	b = t.bytes;
	size_t from = t.chunk_off[2] + 50, to = t.chunk_off[3] + 10;
	ASSERT_LT(from, t.chunk_off[3]);
	for (size_t i = from; i < to; i++)
		b[i] = 0;
	res = read_all(b.data(), b.size());
	std::vector<std::string> want = expected(t, n, 2);
	std::vector<std::string> three = t.chunk_events[3];
	for (const auto &e : three)
		want.erase(std::find(want.begin(), want.end(), e));
	EXPECT_EQ(want, res.events);
	EXPECT_EQ(2u, res.st.bad_chunks);
	EXPECT_EQ(t.chunk_events[2].size(), res.st.lost_events_in_bad_chunks);
	EXPECT_EQ(1u, res.st.unreadable_regions);
	EXPECT_TRUE(res.st.finished);

	// Two whole files concatenated: the second header is not a chunk.
	b = t.bytes;
	b.insert(b.end(), t.bytes.begin(), t.bytes.end());
	res = read_all(b.data(), b.size());
	EXPECT_EQ(expected(t, n, -1), res.events);
	EXPECT_TRUE(res.st.finished);
	EXPECT_NE("", res.error);
}

// The header is cut: whatever the offset, a clear error, never a crash.
TEST(FormatDamage, TruncatedHeader)
{
	Trace t = make_trace(2, 4);
	for (size_t len = 0; len < t.chunk_off[0]; len++) {
		Result res = read_all(t.bytes.data(), len);
		if (len == 0)
			EXPECT_EQ(-ENODATA, res.open_err);
		else
			EXPECT_EQ(-ENOMSG, res.open_err) << len;
	}
}

// The file reader (pread, one chunk in memory) resynchronises across more garbage
// than its scan window, exactly like the memory reader.
TEST(FormatDamage, FileReaderSkipsLongGarbage)
{
	Trace t = make_trace(6, 25);
	std::vector<uint8_t> b(t.bytes.begin(), t.bytes.begin() + (long)t.chunk_off[3]);
	std::mt19937 rng(3);
	for (int i = 0; i < 200000; i++)
		b.push_back(i % 1000 == 0 ? 'R' : (uint8_t)rng());
	b.insert(b.end(), t.bytes.begin() + (long)t.chunk_off[3], t.bytes.end());
	std::string path = write_tmp(b, "long.rbt");
	ASSERT_FALSE(path.empty());
	rbt_reader *r;
	ASSERT_EQ(0, rbt_reader_open(path.c_str(), &r));
	std::vector<std::string> got = rest_of(r);
	EXPECT_EQ(expected(t, t.bytes.size(), -1), got);
	EXPECT_EQ(200000u, rbt_reader_stats(r)->bad_bytes);
	EXPECT_EQ(t.chunk_off[3], rbt_reader_stats(r)->first_damage_offset);
	EXPECT_TRUE(rbt_reader_stats(r)->finished);
	rbt_reader_close(r);
	unlink(path.c_str());
}

// The file reader reads the file in windows (RD_WINDOW, 256 KiB): chunks that
// straddle a window's end, garbage spanning several windows and a damaged chunk
// just past a boundary read exactly as from memory.
TEST(FormatDamage, FileReaderWindowsMatchTheMemoryReader)
{
	Trace t = make_trace(400, 120);
	std::vector<uint8_t> b;
	std::mt19937 rng(11);
	size_t ncopied = 0;
	for (size_t c = 0; c + 1 < t.chunk_off.size(); c++) {
		// garbage of 1..300 KiB before a few chunks, one bit flipped in others
		if (c % 97 == 5)
			for (size_t i = 0, n = 1024 + rng() % (300u << 10); i < n; i++)
				b.push_back(i % 4096 == 0 ? 'R' : (uint8_t)rng());
		size_t at = b.size();
		b.insert(b.end(), t.bytes.begin() + (long)t.chunk_off[c],
			 t.bytes.begin() + (long)t.chunk_off[c + 1]);
		if (c % 53 == 7)
			b[at + 48 + rng() % (t.chunk_off[c + 1] - t.chunk_off[c] - 48)] ^=
				4;
		ncopied++;
	}
	// file header first, trailer last
	b.insert(b.begin(), t.bytes.begin(), t.bytes.begin() + (long)t.chunk_off[0]);
	b.insert(b.end(), t.bytes.begin() + (long)t.chunk_off.back(), t.bytes.end());
	ASSERT_GT(b.size(), 3u * (256u << 10)); // several windows
	std::string path = write_tmp(b, "windows.rbt");
	ASSERT_FALSE(path.empty());

	Result mem = read_all(b.data(), b.size());
	rbt_reader *r;
	ASSERT_EQ(0, rbt_reader_open(path.c_str(), &r));
	std::vector<std::string> got = rest_of(r);
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	EXPECT_EQ(mem.events, got);
	EXPECT_EQ(mem.st.chunks, st->chunks);
	EXPECT_EQ(mem.st.bad_chunks, st->bad_chunks);
	EXPECT_EQ(mem.st.bad_bytes, st->bad_bytes);
	EXPECT_EQ(mem.st.first_damage_offset, st->first_damage_offset);
	EXPECT_TRUE(st->finished);
	EXPECT_EQ(mem.error, rbt_reader_error(r));
	// every chunk whose bytes were not flipped is there, in order
	size_t flipped = 0;
	for (size_t c = 0; c < ncopied; c++)
		flipped += c % 53 == 7;
	EXPECT_EQ((ncopied - flipped) * 120, got.size());
	EXPECT_EQ(ncopied - flipped, st->chunks);
	rbt_reader_close(r);
	unlink(path.c_str());
}
