/* fuzz_analyzer.c - libFuzzer harness for the analyzer (and, once it exists, the
 * model): the input is a trace, the reader decodes whatever it can, and every
 * decoded event is fed to rbt_analyzer_feed() as a damaged trace would feed it -
 * handles that never existed, completions of WRs never posted, time running
 * backwards, counts at their extremes. Then the report is finished and written as
 * text, JSON, HTML and Perfetto (to /dev/null). The analyzer must never trust an
 * event: a crash, leak, hang or sanitizer report here is its bug.
 *
 * An input whose last byte is odd is fed as two traces at once (each event to
 * both, interleaved), to reach the cross-trace pairing. Built like fuzz_reader.c.
 *
 * Hook for model/ (issue 11): when model/rbt_model.h lands, feed the same events
 * to the model here and finish it, under the same rule.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analyzer/rbt_analyzer.h"
#include "trace_format/rbt_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	if (!devnull)
		devnull = fopen("/dev/null", "w");
	if (!devnull)
		return 0;
	struct rbt_reader *r;
	if (rbt_reader_open_mem(data, size, &r))
		return 0;
	struct rbt_analyzer_opts o = { .perfetto = devnull };
	struct rbt_analyzer *an;
	if (rbt_analyzer_create(&o, &an)) {
		rbt_reader_close(r);
		return 0;
	}
	int two = size && data[size - 1] & 1;
	int t0 = rbt_analyzer_add_trace(an, rbt_reader_header(r), "fuzz-a");
	int t1 = two ? rbt_analyzer_add_trace(an, rbt_reader_header(r), "fuzz-b") : -1;
	const struct rbt_event *ev;
	while (rbt_reader_next(r, &ev) > 0) {
		if (t0 >= 0)
			rbt_analyzer_feed(an, t0, ev);
		if (t1 >= 0)
			rbt_analyzer_feed(an, t1, ev);
	}
	const struct rbt_reader_stats *st = rbt_reader_stats(r);
	int finished = rbt_reader_trailer(r) != NULL;
	if (t0 >= 0)
		rbt_analyzer_set_reader_stats(an, t0, st, finished);
	if (t1 >= 0)
		rbt_analyzer_set_reader_stats(an, t1, st, finished);
	if (!rbt_analyzer_finish(an)) {
		rbt_analyzer_write_text(an, devnull);
		rbt_analyzer_write_json(an, devnull);
		rbt_analyzer_write_html(an, devnull);
	}
	rbt_analyzer_destroy(an);
	rbt_reader_close(r);
	return 0;
}
