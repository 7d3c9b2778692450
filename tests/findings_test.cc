// findings_test.cc - the finding codes are one list (RBT_FINDING_LIST in
// analyzer/rbt_analyzer.h) that docs/findings.md agrees with: an entry
// "**`code`** (severity ...)" for every code, with the severities the list gives it,
// and no entry for a code the list does not have. Fails when either side loses one.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

extern "C" {
#include "analyzer/rbt_analyzer.h"
}

static std::string g_doc_path;

static const char *sev_name(int s)
{
	return s == RBT_SEV_ERROR ? "error" : s == RBT_SEV_WARNING ? "warning" : "info";
}

// code -> the severities its entry names in the parenthesis after it
static std::map<std::string, std::set<std::string>> doc_entries()
{
	std::ifstream f(g_doc_path);
	std::stringstream ss;
	ss << f.rdbuf();
	std::string text = ss.str();
	std::map<std::string, std::set<std::string>> out;
	std::regex entry("\\*\\*`([a-z_]+)`\\*\\* \\(([^)]*)\\)");
	std::regex word("error|warning|info");
	for (auto it = std::sregex_iterator(text.begin(), text.end(), entry);
	     it != std::sregex_iterator(); ++it) {
		std::string code = (*it)[1], sev = (*it)[2];
		for (auto w = std::sregex_iterator(sev.begin(), sev.end(), word);
		     w != std::sregex_iterator(); ++w)
			out[code].insert(w->str());
	}
	return out;
}

TEST(Findings, DocsNameEveryCodeWithItsSeverities)
{
	auto docs = doc_entries();
	ASSERT_FALSE(docs.empty()) << "no entries found in " << g_doc_path;
	const rbt_finding_kind *k = rbt_analyzer_finding_kinds();
	for (int i = 0; i < RBT_FINDING_COUNT; i++) {
		SCOPED_TRACE(k[i].code);
		auto d = docs.find(k[i].code);
		ASSERT_NE(docs.end(), d) << "docs/findings.md has no **`" << k[i].code
					 << "`** (...) entry";
		std::set<std::string> want = { sev_name(k[i].severity) };
		if (k[i].also >= 0)
			want.insert(sev_name(k[i].also));
		EXPECT_EQ(want, d->second);
		EXPECT_TRUE(k[i].title && *k[i].title);
	}
}

TEST(Findings, DocsNameNoOtherCode)
{
	std::set<std::string> list;
	const rbt_finding_kind *k = rbt_analyzer_finding_kinds();
	for (int i = 0; i < RBT_FINDING_COUNT; i++)
		list.insert(k[i].code);
	EXPECT_EQ(RBT_FINDING_COUNT, (int)list.size()) << "a code twice in the list";
	for (auto &d : doc_entries())
		EXPECT_TRUE(list.count(d.first))
			<< d.first << " is documented but not in RBT_FINDING_LIST";
}

int main(int argc, char **argv)
{
	::testing::InitGoogleTest(&argc, argv);
	if (argc < 2) {
		fprintf(stderr, "usage: findings_test docs/findings.md\n");
		return 2;
	}
	g_doc_path = argv[1];
	return RUN_ALL_TESTS();
}
