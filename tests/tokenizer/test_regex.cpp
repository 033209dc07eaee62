// lt::Regex (PCRE2) where it must behave as Oniguruma, tokenizers' engine: U+180E MONGOLIAN VOWEL
// SEPARATOR is not \s (PCRE2 counts it), in and out of character classes; the rewrite leaves
// escaped backslashes, \Q..\E and classes without \s alone; compile errors point into the pattern
// as written.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/regex.h"

namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;

Matches find(const std::string& pattern, const std::string& s) { return lt::Regex(pattern, "test").find_all(s); }

const std::string kMvs = "\xE1\xA0\x8E";  // U+180E

TEST(Regex, U180EIsNotWhitespace) {
  EXPECT_TRUE(find("\\s", kMvs).empty());
  EXPECT_EQ(find("\\s+", " " + kMvs + "\t"), (Matches{{0, 1}, {4, 5}}));
  EXPECT_EQ(find("\\S+", "a" + kMvs + "b c"), (Matches{{0, 5}, {6, 7}}));
  // negated class with \s (GPT-2 / Llama 3 punctuation runs): U+180E is neither space, letter
  // nor digit, so it belongs to the run
  EXPECT_EQ(find("[^\\s\\p{L}\\p{N}]+", "!" + kMvs + "?"), (Matches{{0, 5}}));
  EXPECT_EQ(find("[\\s]+", kMvs + " "), (Matches{{3, 4}}));
  EXPECT_EQ(find("[^\\S]", kMvs + " "), (Matches{{3, 4}}));
  EXPECT_EQ(find("[\\Sx]+", kMvs + " "), (Matches{{0, 3}}));
  EXPECT_EQ(find("\\s+(?!\\S)", "a " + kMvs), (Matches{}));  // the space is followed by a non-space
  EXPECT_EQ(find("\\s", "\xE2\x80\x83\xE3\x80\x80"), (Matches{{0, 3}, {3, 6}}));  // other spaces still are
}

TEST(Regex, RewriteLeavesOtherSyntaxAlone) {
  EXPECT_EQ(lt::onig_whitespace_pattern("\\\\s"), "\\\\s");  // an escaped backslash, then 's'
  EXPECT_EQ(lt::onig_whitespace_pattern("\\Q\\s\\E\\s"), "\\Q\\s\\E[^\\S\\x{180E}]");
  EXPECT_EQ(lt::onig_whitespace_pattern("[]\\s]"), "(?:(?!\\x{180E})[]\\s])");
  EXPECT_EQ(lt::onig_whitespace_pattern("[[:alpha:]\\d]+ ?\\p{L}"), "[[:alpha:]\\d]+ ?\\p{L}");
  EXPECT_EQ(lt::onig_whitespace_pattern("[\\s\\S]"), "[\\s\\S]");
  EXPECT_EQ(find("\\\\s", "\\s"), (Matches{{0, 2}}));
}

TEST(Regex, ErrorsPointIntoThePatternAsWritten) {
  try {
    lt::Regex("\\s(", "tok.json (Split pattern)");
    FAIL() << "no error";
  } catch (const lt::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tok.json (Split pattern)"), std::string::npos) << m;
    EXPECT_NE(m.find("'\\s('"), std::string::npos) << m;
    EXPECT_NE(m.find("offset 3"), std::string::npos) << m;
  }
}

}  // namespace
