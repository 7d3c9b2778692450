// The one JSON writer and escaping rule (util/rbt_json.h): every JSON rbtrace
// prints goes through it, so what it writes must parse, for any input bytes.
#include <gtest/gtest.h>

#include <string>

#include "util/rbt_json.h"

static std::string esc(const char *s)
{
	char buf[512];
	size_t n = rbt_json_escape(buf, sizeof(buf), s);
	EXPECT_EQ(n, strlen(buf));
	return buf;
}

TEST(Json, EscapingRule)
{
	EXPECT_EQ("\"\"", esc(nullptr));
	EXPECT_EQ("\"a\\\"b\\\\c\"", esc("a\"b\\c"));
	EXPECT_EQ("\"\\n\\r\\t\\b\\f\"", esc("\n\r\t\b\f"));
	EXPECT_EQ("\"\\u0001\\u001f\\u007f\"", esc("\x01\x1f\x7f"));
	// well-formed UTF-8 passes, anything else is its byte value as \u00XX
	EXPECT_EQ("\"h\xc3\xa9 \xe2\x82\xac\"", esc("h\xc3\xa9 \xe2\x82\xac"));
	EXPECT_EQ("\"\\u00ff\\u00c3(\"", esc("\xff\xc3("));
	EXPECT_EQ("\"\\u00ed\\u00a0\\u0080\"", esc("\xed\xa0\x80")); // a surrogate
	EXPECT_EQ("\"\\u00c0\\u0080\"", esc("\xc0\x80"));	     // overlong NUL
}

TEST(Json, EscapeIsSnprintfLike)
{
	char small[5];
	size_t n = rbt_json_escape(small, sizeof(small), "abcdef");
	EXPECT_EQ(8u, n);
	EXPECT_STREQ("\"abc", small);
	EXPECT_EQ(8u, rbt_json_escape(nullptr, 0, "abcdef"));
}

static std::string fput(const std::string &s)
{
	char *buf = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	rbt_json_fput_str(f, s.c_str());
	fclose(f);
	std::string r(buf, len);
	free(buf);
	return r;
}

TEST(Json, LongStringsInPiecesKeepSequencesWhole)
{
	std::string s;
	for (int i = 0; i < 300; i++)
		s += "\xe2\x82\xac\"\x01";
	std::string want = "\"";
	for (int i = 0; i < 300; i++)
		want += "\xe2\x82\xac\\\"\\u0001";
	want += "\"";
	EXPECT_EQ(want, fput(s));
}

TEST(Json, WriterPutsTheCommas)
{
	char *buf = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct rbt_json j;
	rbt_json_init(&j, f);
	rbt_json_obj(&j);
	rbt_json_kstr(&j, "a", "x\n");
	rbt_json_key(&j, "b");
	rbt_json_arr(&j);
	rbt_json_u64(&j, 1);
	rbt_json_i64(&j, -2);
	rbt_json_dbl(&j, "%.1f", 2.5);
	rbt_json_dbl(&j, "%.1f", 1.0 / 0.0);
	rbt_json_obj(&j);
	rbt_json_obj_end(&j);
	rbt_json_arr_end(&j);
	rbt_json_kbool(&j, "c", true);
	rbt_json_key(&j, "d");
	rbt_json_null(&j);
	rbt_json_obj_end(&j);
	fclose(f);
	EXPECT_EQ("{\"a\":\"x\\n\",\"b\":[1,-2,2.5,null,{}],\"c\":true,\"d\":null}",
		  std::string(buf, len));
	free(buf);
}
