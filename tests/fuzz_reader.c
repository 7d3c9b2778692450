/* fuzz_reader.c - libFuzzer target for the trace reader: any bytes in, every
 * event decoded and printed as text and JSON, never a crash, leak or hang.
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

#include "trace_format/rbt_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rbt_reader *r;
	if (rbt_reader_open_mem(data, size, &r))
		return 0;
	static char buf[1 << 16];
	const struct rbt_event *ev;
	const struct rbt_header *h = rbt_reader_header(r);
	size_t total = 0;
	while (rbt_reader_next(r, &ev) > 0) {
		total += rbt_event_format_text(h, ev, buf, sizeof(buf));
		total += rbt_event_format_json(h, ev, buf, sizeof(buf));
	}
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	if (st->events > size * 2 + 16) /* every event takes at least 2 raw bytes ... */
		total++;		/* (compressed: no bound; just use the value) */
	(void)rbt_reader_trailer(r);
	(void)rbt_reader_error(r);
	rbt_reader_close(r);
	return total == (size_t)-1;
}
