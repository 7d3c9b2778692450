/* fuzz_reader.c - libFuzzer target for the trace reader: any bytes in, every
 * event decoded and printed as text and JSON, never a crash, leak or hang; and
 * read again decoding ahead on threads, which must read exactly the same.
 *
 * Built with libFuzzer by `bazel build --config=fuzz //tests:fuzz_reader` (clang,
 * ASan, UBSan, -DRBT_FUZZING: the reader then ignores checksums so the fuzzer
 * reaches the decoder) and run by tests/fuzz.sh. The plain build links
 * fuzz_main.c instead, and fuzz_reader_test replays the seed corpus.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_format/rbt_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One pass: a hash of every event's JSON, of the stats and of the last damage
 * said; ~0 when the open fails. */
static uint64_t read_pass(const uint8_t *data, size_t size, unsigned threads,
			  size_t *total)
{
	struct rbt_reader *r;
	struct rbt_reader_opts o = { .threads = threads };
	if (rbt_reader_open_mem_opts(data, size, &o, &r))
		return ~0ull;
	static char buf[1 << 16];
	const struct rbt_event *ev;
	const struct rbt_header *h = rbt_reader_header(r);
	uint64_t hash = 1469598103934665603ull;
#define MIX(p, n)                           \
	for (size_t k_ = 0; k_ < (n); k_++) \
	hash = (hash ^ ((const uint8_t *)(p))[k_]) * 1099511628211ull
	while (rbt_reader_next(r, &ev) > 0) {
		*total += rbt_event_format_text(h, ev, buf, sizeof(buf));
		size_t n = rbt_event_format_json(h, ev, buf, sizeof(buf));
		*total += n;
		MIX(buf, n < sizeof(buf) ? n : sizeof(buf) - 1);
	}
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	if (st->events > size * 2 + 16) /* every event takes at least 2 raw bytes ... */
		(*total)++;		/* (compressed: no bound; just use the value) */
	uint64_t nums[] = { st->chunks,
			    st->events,
			    st->bad_chunks,
			    st->bad_bytes,
			    st->lost_events_in_bad_chunks,
			    st->first_damage_offset,
			    (uint64_t)st->truncated,
			    (uint64_t)st->finished,
			    st->unknown_events,
			    st->unreadable_regions };
	MIX(nums, sizeof(nums));
	(void)rbt_reader_trailer(r);
	const char *err = rbt_reader_error(r);
	MIX(err, strlen(err));
#undef MIX
	rbt_reader_close(r);
	return hash;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t total = 0;
	uint64_t one = read_pass(data, size, 0, &total);
	/* Decoding ahead on threads must read exactly the same. */
	if (read_pass(data, size, 2, &total) != one)
		abort();
	return total == (size_t)-1;
}
