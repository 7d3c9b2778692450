/* rbtformat_layout.c - prints the layout of the structs librbtformat hands out
 * (struct rbt_header, struct rbt_reader_stats) as "struct.field offset size"
 * lines, so that python_reader_test can hold the Python module's ctypes mirror
 * of them to the header: a field added in the middle would otherwise shift
 * every later one under Python without a word. */
#include <stddef.h>
#include <stdio.h>

#include "trace_format/rbt_format.h"

#define F(s, f) \
	printf(#s "." #f " %zu %zu\n", offsetof(struct s, f), sizeof(((struct s *)0)->f))

int main(void)
{
	F(rbt_header, version);
	F(rbt_header, pid);
	F(rbt_header, ppid);
	F(rbt_header, clock_source);
	F(rbt_header, clock_hz);
	F(rbt_header, start);
	F(rbt_header, host);
	F(rbt_header, cmdline);
	F(rbt_header, tool);
	F(rbt_reader_stats, chunks);
	F(rbt_reader_stats, events);
	F(rbt_reader_stats, events_by_type);
	F(rbt_reader_stats, bad_chunks);
	F(rbt_reader_stats, bad_bytes);
	F(rbt_reader_stats, lost_events_in_bad_chunks);
	F(rbt_reader_stats, first_damage_offset);
	F(rbt_reader_stats, truncated);
	F(rbt_reader_stats, finished);
	F(rbt_reader_stats, unknown_events);
	F(rbt_reader_stats, unreadable_regions);
	printf("rbt_header.SIZE 0 %zu\n", sizeof(struct rbt_header));
	printf("rbt_reader_stats.SIZE 0 %zu\n", sizeof(struct rbt_reader_stats));
	return 0;
}
