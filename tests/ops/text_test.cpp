// Tests of src/ops/text.cpp: StringNormalizer and TfIdfVectorizer, against hand-computed results.
#include "op_case_util.hpp"
#include "op_test_util.hpp"

namespace graft::testing {
namespace {

NDArray ref1(const std::string& type, std::vector<NDArray> in, ir::Attributes a = {}) {
  return runReference(OpCase{type, std::move(in), std::move(a), 1, ""}).at(0);
}

using Strings = std::vector<std::string>;

NDArray strs(Shape s, Strings v) { return arr<std::string>(std::move(s), std::move(v)); }

// ---- StringNormalizer ---------------------------------------------------------------------------

TEST(StringNormalizer, CaseSensitiveStopwordsAndLower) {
  auto x = strs({4}, {"monday", "Tuesday", "wednesday", "Monday"});
  auto y = ref1("StringNormalizer", {x},
                attrs({{"case_change_action", std::string("LOWER")}, {"is_case_sensitive", int64_t{1}}, {"stopwords", Strings{"monday"}}}));
  EXPECT_TRUE(allClose(y, strs({3}, {"tuesday", "wednesday", "monday"})));
}

TEST(StringNormalizer, CaseInsensitiveStopwordsAndUpper) {
  auto x = strs({1, 4}, {"Monday", "tuesday", "MONDAY", "x"});
  auto y = ref1("StringNormalizer", {x}, attrs({{"case_change_action", std::string("UPPER")}, {"stopwords", Strings{"mOnDaY"}}}));
  EXPECT_TRUE(allClose(y, strs({1, 2}, {"TUESDAY", "X"})));
}

TEST(StringNormalizer, EverythingRemovedLeavesOneEmptyString) {
  auto a = attrs({{"stopwords", Strings{"a"}}});
  EXPECT_TRUE(allClose(ref1("StringNormalizer", {strs({2}, {"a", "A"})}, a), strs({1}, {""})));
  EXPECT_TRUE(allClose(ref1("StringNormalizer", {strs({1, 1}, {"a"})}, a), strs({1, 1}, {""})));
}

TEST(StringNormalizer, NoneKeepsStringsIncludingEmptyOnes) {
  auto x = strs({3}, {"MiXeD", "", "b"});
  EXPECT_TRUE(allClose(ref1("StringNormalizer", {x}), x));
}

TEST(StringNormalizer, Utf8CaseMapping) {
  auto x = strs({3}, {"Ärger ÉCOLE", "Σίσυφος", "straße"});
  EXPECT_TRUE(allClose(ref1("StringNormalizer", {x}, attrs({{"case_change_action", std::string("LOWER")}})),
                       strs({3}, {"ärger école", "σίσυφος", "straße"})));
  // One code point maps to one: sharp s has no single-character upper case and stays.
  EXPECT_TRUE(allClose(ref1("StringNormalizer", {x}, attrs({{"case_change_action", std::string("UPPER")}, {"locale", std::string("en_US")}})),
                       strs({3}, {"ÄRGER ÉCOLE", "ΣΊΣΥΦΟΣ", "STRAßE"})));
  // Bytes that are not UTF-8 pass through unchanged.
  EXPECT_TRUE(allClose(ref1("StringNormalizer", {strs({1}, {"\xff" "A\xc3"})}, attrs({{"case_change_action", std::string("LOWER")}})),
                       strs({1}, {"\xff" "a\xc3"})));
}

TEST(StringNormalizer, RejectsBadInputs) {
  EXPECT_THROW(ref1("StringNormalizer", {strs({2, 1}, {"a", "b"})}), Error);
  EXPECT_THROW(ref1("StringNormalizer", {arr<int64_t>({1}, {1})}), Error);
  EXPECT_THROW(ref1("StringNormalizer", {strs({1}, {"a"})}, attrs({{"case_change_action", std::string("TITLE")}})), Error);
  EXPECT_THROW(ref1("StringNormalizer", {strs({1}, {"a"})}, attrs({{"locale", std::string("xx_NOPE")}})), Error);
}

// ---- TfIdfVectorizer ----------------------------------------------------------------------------

// Pool: unigrams 2, 3, 5, 4 (columns 0-3), bigrams (5,6), (7,8), (6,7) (columns 4-6).
ir::Attributes tfidf(int64_t minGram, int64_t maxGram, int64_t skip, std::string mode = "TF",
                     std::vector<int64_t> indexes = {0, 1, 2, 3, 4, 5, 6}) {
  return attrs({{"min_gram_length", minGram}, {"max_gram_length", maxGram}, {"max_skip_count", skip}, {"mode", mode},
                {"ngram_counts", std::vector<int64_t>{0, 4}}, {"ngram_indexes", indexes},
                {"pool_int64s", std::vector<int64_t>{2, 3, 5, 4, 5, 6, 7, 8, 6, 7}}});
}

const std::vector<int32_t> kTokens = {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8};

TEST(TfIdfVectorizer, UnigramsAndSkippedBigrams) {
  auto x = arr<int32_t>({12}, kTokens);
  // 3 occurs 3 times, 5 once; (5,6) once; (7,8) at gaps 1, 3 and 6; (6,7) once.
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, tfidf(1, 2, 5)), arr<float>({7}, {0, 3, 1, 0, 1, 3, 1})));
  // Without skips only adjacent pairs count.
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, tfidf(2, 2, 0)), arr<float>({7}, {0, 0, 0, 0, 1, 1, 1})));
  // int64 input gives the same.
  std::vector<int64_t> t64(kTokens.begin(), kTokens.end());
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {arr<int64_t>({12}, t64)}, tfidf(1, 2, 5)), arr<float>({7}, {0, 3, 1, 0, 1, 3, 1})));
}

TEST(TfIdfVectorizer, RowsAreCountedSeparately) {
  auto x = arr<int32_t>({2, 6}, kTokens);
  // Row 0 = 1 1 3 3 3 7, row 1 = 8 6 7 5 6 8.
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, tfidf(1, 2, 5)),
                       arr<float>({2, 7}, {0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1})));
}

TEST(TfIdfVectorizer, IdfTfidfWeightsAndColumnOrder) {
  auto x = arr<int32_t>({12}, kTokens);
  auto w = std::vector<float>{0.5f, 2, 3, 4, 5, 6, 7};
  auto idf = tfidf(1, 2, 5, "IDF");
  idf.set("weights", w);
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, idf), arr<float>({7}, {0, 2, 3, 0, 5, 6, 7})));
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, tfidf(1, 2, 5, "IDF")), arr<float>({7}, {0, 1, 1, 0, 1, 1, 1})));
  auto tfidfW = tfidf(1, 2, 5, "TFIDF");
  tfidfW.set("weights", w);
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, tfidfW), arr<float>({7}, {0, 6, 3, 0, 5, 18, 7})));
  // ngram_indexes place n-grams in columns: reversed order, and two n-grams sharing column 0.
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, tfidf(1, 2, 5, "TF", {6, 5, 4, 3, 2, 1, 0})),
                       arr<float>({7}, {1, 3, 1, 0, 1, 3, 0})));
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, tfidf(1, 2, 5, "TF", {0, 0, 1, 1, 2, 2, 2})), arr<float>({3}, {3, 1, 5})));
}

TEST(TfIdfVectorizer, StringPool) {
  auto a = attrs({{"min_gram_length", int64_t{1}}, {"max_gram_length", int64_t{3}}, {"max_skip_count", int64_t{1}},
                  {"mode", std::string("TF")}, {"ngram_counts", std::vector<int64_t>{0, 1, 3}},
                  {"ngram_indexes", std::vector<int64_t>{0, 1, 2}}, {"pool_strings", Strings{"a", "b", "c", "a", "b", "c"}}});
  // Unigram a; bigram (b, c); trigram (a, b, c), adjacent or with a gap of one.
  auto x = strs({7}, {"a", "b", "c", "x", "a", "y", "b"});
  // a twice; (b, c) and (a, b, c) once each, adjacent (no stride-2 matches).
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {x}, a), arr<float>({3}, {2, 1, 1})));
  auto y = strs({5}, {"a", "z", "b", "z", "c"});  // stride 2 gives (a, b, c) and (b, c)
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {y}, a), arr<float>({3}, {1, 1, 1})));
}

TEST(TfIdfVectorizer, EmptyRows) {
  EXPECT_TRUE(allClose(ref1("TfIdfVectorizer", {arr<int64_t>({2, 0}, {})}, tfidf(1, 2, 5)), arr<float>({2, 7}, std::vector<float>(14, 0))));
}

TEST(TfIdfVectorizer, RejectsBadAttributesAndInputs) {
  auto x = arr<int32_t>({12}, kTokens);
  auto bad = [&](const std::string& k, ir::AttrValue v) {
    auto a = tfidf(1, 2, 5);
    a.set(k, std::move(v));
    return a;
  };
  EXPECT_THROW(ref1("TfIdfVectorizer", {x}, bad("ngram_counts", std::vector<int64_t>{0, 3})), Error);  // 7 items are not pairs
  EXPECT_THROW(ref1("TfIdfVectorizer", {x}, bad("pool_strings", Strings{"a"})), Error);                // two pools
  EXPECT_THROW(ref1("TfIdfVectorizer", {x}, bad("mode", std::string("BM25"))), Error);
  EXPECT_THROW(ref1("TfIdfVectorizer", {x}, bad("min_gram_length", int64_t{3})), Error);
  EXPECT_THROW(ref1("TfIdfVectorizer", {x}, bad("ngram_indexes", std::vector<int64_t>{0, 1, 2})), Error);  // too few
  EXPECT_THROW(ref1("TfIdfVectorizer", {x}, bad("weights", std::vector<float>{1, 2})), Error);
  EXPECT_THROW(ref1("TfIdfVectorizer", {x}, bad("ngram_indexes", std::vector<int64_t>{0, 1, 2, 3, 4, 5, INT64_MAX})), Error);
  EXPECT_THROW(ref1("TfIdfVectorizer", {strs({1}, {"a"})}, tfidf(1, 2, 5)), Error);
  EXPECT_THROW(ref1("TfIdfVectorizer", {arr<int32_t>({1, 1, 1}, {1})}, tfidf(1, 2, 5)), Error);
}


// ---- opset 18-28 additions ----------------------------------------------------------------------

TEST(StringConcat, Broadcasts) {
  EXPECT_TRUE(
      allClose(runOutputs("StringConcat", {strs({2}, {"a", "bc"}), strs({1}, {"!"})}).at(0), strs({2}, {"a!", "bc!"})));
  EXPECT_THROW(runOutputs("StringConcat", {strs({1}, {"a"}), arr<float>({1}, {1})}), Error);
}

TEST(StringSplit, DelimiterWhitespaceAndMaxsplit) {
  auto r = runOutputs("StringSplit", {strs({2}, {"a,b,,c", "d"})}, attrs({{"delimiter", std::string(",")}}), 2);
  EXPECT_TRUE(allClose(r.at(0), strs({2, 4}, {"a", "b", "", "c", "d", "", "", ""})));
  EXPECT_TRUE(allClose(r.at(1), arr<int64_t>({2}, {4, 1})));
  r = runOutputs("StringSplit", {strs({1}, {"  x \t y  "})}, {}, 2);
  EXPECT_TRUE(allClose(r.at(0), strs({1, 2}, {"x", "y"})));
  r = runOutputs("StringSplit", {strs({1}, {"1-2-3"})},
                 attrs({{"delimiter", std::string("-")}, {"maxsplit", int64_t{1}}}), 2);
  EXPECT_TRUE(allClose(r.at(0), strs({1, 2}, {"1", "2-3"})));
  EXPECT_TRUE(allClose(r.at(1), arr<int64_t>({1}, {2})));
}

TEST(RegexFullMatch, WholeStringOnly) {
  auto y = runOutputs("RegexFullMatch", {strs({3}, {"abc.com", "abc.comx", "x"})},
                      attrs({{"pattern", std::string("[a-z]+\\.com")}}));
  EXPECT_TRUE(allClose(y.at(0), arr<bool>({3}, {true, false, false})));
  // An RE2-only construct: refused with a message naming the pattern.
  try {
    runOutputs("RegexFullMatch", {strs({1}, {"a"})}, attrs({{"pattern", std::string("(?P<n>a)")}}));
    ADD_FAILURE() << "expected graft::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(?P<n>a)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace graft::testing
