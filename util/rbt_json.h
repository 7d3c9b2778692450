/* rbt_json.h - the one JSON writer of rbtrace and its one escaping rule, for every
 * JSON document or line it prints (report, Perfetto timeline, dump --json, diff,
 * replay).
 *
 * The escaping rule: a string is written in double quotes; '"' and '\\' get a
 * backslash; \n \r \t \b \f their short forms; every other byte below 0x20, and
 * 0x7f, is \u00XX; well-formed UTF-8 passes through; a byte that is not part of
 * well-formed UTF-8 (a damaged trace's string) is \u00XX of its value, so the
 * output is always valid JSON and valid UTF-8.
 *
 * Depends on nothing but libc; never allocates; a NULL string is written as "".
 * The writer puts the commas: a value after a value of the same object or array
 * gets one. It checks nothing else (keys and values must alternate in objects).
 */
#ifndef RBT_JSON_H
#define RBT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* s as a JSON string literal (with its quotes) into buf, snprintf-like: never
 * writes past len, NUL-terminates when len > 0, returns the length needed. */
size_t rbt_json_escape(char *buf, size_t len, const char *s);
/* The same into f. */
void rbt_json_fput_str(FILE *f, const char *s);

#define RBT_JSON_MAX_DEPTH 64

struct rbt_json {
	FILE *f;
	uint32_t depth;
	bool after_key;
	uint64_t nonempty; /* bit d: the container at depth d has a member */
	/* members of the containers at this depth are separated by ",\n" (one per
	 * line, for documents read line by line); 0: never */
	uint32_t line_depth;
};

void rbt_json_init(struct rbt_json *j, FILE *f);
void rbt_json_obj(struct rbt_json *j); /* { */
void rbt_json_obj_end(struct rbt_json *j);
void rbt_json_arr(struct rbt_json *j); /* [ */
void rbt_json_arr_end(struct rbt_json *j);
void rbt_json_key(struct rbt_json *j, const char *key);
void rbt_json_str(struct rbt_json *j, const char *s);
void rbt_json_u64(struct rbt_json *j, uint64_t v);
void rbt_json_i64(struct rbt_json *j, int64_t v);
/* fmt: a printf format for one double ("%.1f"); NaN and infinities as null. */
void rbt_json_dbl(struct rbt_json *j, const char *fmt, double v);
void rbt_json_bool(struct rbt_json *j, bool v);
void rbt_json_null(struct rbt_json *j);
/* A value that is JSON already (a number formatted elsewhere, a nested document). */
void rbt_json_raw(struct rbt_json *j, const char *json);
/* key + value in one call. */
void rbt_json_kstr(struct rbt_json *j, const char *key, const char *s);
void rbt_json_ku64(struct rbt_json *j, const char *key, uint64_t v);
void rbt_json_ki64(struct rbt_json *j, const char *key, int64_t v);
void rbt_json_kdbl(struct rbt_json *j, const char *key, const char *fmt, double v);
void rbt_json_kbool(struct rbt_json *j, const char *key, bool v);

#ifdef __cplusplus
}
#endif
#endif
