// Behaviour beyond the reference cases: invalid UTF-8, decode errors, streaming
// detokenization, plain (no added-token) encoding, byte-level alphabet, path lookup.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

using testing::ReadFileOrDie;
using testing::Shipped;

const Tokenizer& V41() { return Shipped("deepseek-v4.1"); }

std::string Lossy(std::string_view bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, &out);
  return out;
}

// Expected values are those of Python's bytes.decode('utf-8', errors='replace').
TEST(Utf8Test, MaximalSubpartReplacement) {
  EXPECT_EQ(Lossy("abc"), "abc");
  EXPECT_EQ(Lossy("\xff"), "\uFFFD");
  EXPECT_EQ(Lossy("\xe2\x82"), "\uFFFD");
  EXPECT_EQ(Lossy("\xe2\x82"
                  "A"),
            "\uFFFDA");
  EXPECT_EQ(Lossy("\xed\xa0\x80"), "\uFFFD\uFFFD\uFFFD");            // surrogate
  EXPECT_EQ(Lossy("\xf0\x9f\x98"), "\uFFFD");                        // truncated emoji
  EXPECT_EQ(Lossy("\xc0\xaf"), "\uFFFD\uFFFD");                      // overlong
  EXPECT_EQ(Lossy("\xf4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");  // > U+10FFFF
  EXPECT_EQ(Lossy("\xe0\x80\x80"), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(Lossy("\xf0\x9f\x98\x80"), "\U0001F600");
  EXPECT_EQ(Lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_TRUE(IsValidUtf8("h\u00e9llo \u4e16\u754c \U0001F600"));
  EXPECT_FALSE(IsValidUtf8("abcdefgh\x80"));
}

TEST(ByteLevelTest, AlphabetRoundTrips) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  const std::string spelled = BytesToByteLevel(all_bytes);
  EXPECT_EQ(ByteLevelToBytes(spelled), all_bytes);
  EXPECT_EQ(BytesToByteLevel(" the"), "\u0120the");
  EXPECT_EQ(ByteLevelToBytes("\u4e16"), std::nullopt);
}

TEST(PreTokenizerTest, RewritesWhitespaceClasses) {
  auto p = TranslateOnigurumaPattern("\\s+(?!\\S)|[a\\s]");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->find("\\s"), std::string::npos);
  EXPECT_EQ(p->find("\\S"), std::string::npos);
  EXPECT_FALSE(TranslateOnigurumaPattern("[\\S]").ok());
  auto letters = TranslateOnigurumaPattern("\\p{L}+|[^\\p{N}]");
  ASSERT_TRUE(letters.ok());
  EXPECT_EQ(letters->rfind("[\\p{L}\\x{", 0), 0u) << *letters;
  EXPECT_NE(letters->find("[^\\p{N}\\x{"), std::string::npos) << *letters;
  EXPECT_FALSE(TranslateOnigurumaPattern("\\p{Lu}").ok());
  EXPECT_FALSE(TranslateOnigurumaPattern("\\P{L}").ok());
}

TEST(TokenizerTest, InvalidUtf8EncodesAsReplacementCharacters) {
  const Tokenizer& tok = V41();
  const std::string bad = "ok \xff\xfe then \xe4\xb8 cut \xed\xa0\x80 end\xf0\x9f";
  EXPECT_EQ(tok.Encode(bad), tok.Encode(Lossy(bad)));
  auto decoded = tok.Decode(tok.Encode(bad));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, Lossy(bad));
}

TEST(TokenizerTest, RandomBytesNeverCrashAndRoundTripLossily) {
  const Tokenizer& tok = V41();
  std::mt19937 rng(1234);
  for (int round = 0; round < 300; ++round) {
    std::string bytes(rng() % 200, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    const std::vector<int32_t> ids = tok.Encode(bytes);
    auto decoded = tok.Decode(ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, Lossy(bytes));
  }
}

// Long runs exercise the heap BPE path and regex backtracking; they must stay linear-ish.
TEST(TokenizerTest, HugeRunsRoundTrip) {
  const Tokenizer& tok = V41();
  const std::vector<std::string> texts = {
      std::string(300000, 'a'), std::string(300000, ' ') + "x", std::string(200000, '!'),
      std::string(100000, '\n') + std::string(100000, '\t') + "y", std::string(150000, '7')};
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok.Encode(text);
    EXPECT_LT(ids.size(), text.size());
    EXPECT_EQ(tok.Decode(ids).value(), text);
  }
}

TEST(TokenizerTest, EmptyInputs) {
  const Tokenizer& tok = V41();
  EXPECT_TRUE(tok.Encode("").empty());
  EXPECT_TRUE(tok.Encode("", false).empty());
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{}).value(), "");
}

TEST(TokenizerTest, DecodeRejectsOutOfRangeIds) {
  const Tokenizer& tok = V41();
  const std::vector<int32_t> too_big = {100, tok.vocab_size()};
  EXPECT_EQ(tok.Decode(too_big).status().code(), base::StatusCode::kOutOfRange);
  const std::vector<int32_t> negative = {-1};
  EXPECT_EQ(tok.Decode(negative).status().code(), base::StatusCode::kOutOfRange);
  EXPECT_FALSE(tok.IdToToken(-5).ok());
  EXPECT_FALSE(tok.TokenBytes(tok.vocab_size()).ok());
}

TEST(TokenizerTest, VocabularyFacts) {
  const Tokenizer& tok = V41();
  EXPECT_EQ(tok.vocab_size(), 129280);
  EXPECT_EQ(tok.TokenToId("<\uFF5CUser\uFF5C>"), 128803);
  EXPECT_EQ(tok.TokenToId("<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>"), 0);
  EXPECT_EQ(tok.TokenToId("\u0120the"), tok.Encode(" the").at(0));
  EXPECT_EQ(tok.TokenToId("no such token at all"), std::nullopt);
  EXPECT_EQ(tok.IdToToken(128821).value(), "<think>");
  EXPECT_TRUE(tok.IsSpecial(0));
  EXPECT_FALSE(tok.IsSpecial(128803));  // <｜User｜> is added but not special
  EXPECT_TRUE(tok.IsAdded(128803));
  EXPECT_EQ(tok.TokenBytes(tok.TokenToId("\u0120the").value()).value(), " the");
}

TEST(TokenizerTest, SpecialMatchingCanBeTurnedOff) {
  const Tokenizer& tok = V41();
  const std::string text = "<\uFF5CUser\uFF5C>Hi<think>";
  EXPECT_EQ(tok.Encode(text, true).front(), 128803);
  const std::vector<int32_t> plain = tok.Encode(text, false);
  for (int32_t id : plain) EXPECT_FALSE(tok.IsAdded(id)) << id;
  EXPECT_EQ(tok.Decode(plain).value(), text);
}

TEST(TokenizerTest, SkipSpecialDropsOnlySpecialTokens) {
  const Tokenizer& tok = V41();
  const std::vector<int32_t> ids =
      tok.Encode("<\uFF5Cbegin\u2581of\u2581sentence\uFF5C><\uFF5CUser\uFF5C>x");
  EXPECT_EQ(tok.Decode(ids, true).value(), "<\uFF5CUser\uFF5C>x");
}

TEST(TokenizerTest, EncodeBatchMatchesEncode) {
  const Tokenizer& tok = V41();
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back("batch item " + std::to_string(i) + " \u4f60\u597d");
  base::ThreadPool pool(3);
  const auto batch = tok.EncodeBatch(texts, true, &pool);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tok.Encode(texts[i]));
}

// Streams `ids` one at a time; checks that no chunk contains U+FFFD (when the full text has
// none) and that the chunks concatenate to Decode(ids).
void CheckStreaming(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::string streamed;
  const std::string full = tok.Decode(ids, skip).value();
  const bool full_has_fffd = full.find("\uFFFD") != std::string::npos;
  for (int32_t id : ids) {
    auto chunk = detok.Push(id);
    ASSERT_TRUE(chunk.ok());
    EXPECT_TRUE(IsValidUtf8(*chunk));
    if (!full_has_fffd) {
      EXPECT_EQ(chunk->find("\uFFFD"), std::string::npos);
    }
    streamed += *chunk;
  }
  streamed += detok.Flush();
  EXPECT_EQ(streamed, full);
}

TEST(IncrementalDetokenizerTest, SplitsMultiByteCharactersAcrossTokens) {
  const Tokenizer& tok = V41();
  // Emoji, ZWJ sequences and rare CJK are split over several byte-level tokens.
  const std::string text =
      "\U0001F468\u200D\U0001F469\u200D\U0001F467 family \U0001F680 \u9F98\u9F96 "
      "\U0001D573 caf\u00e9 \u0627\u0644\u0639\u0631\u0628\u064A\u0629";
  const std::vector<int32_t> ids = tok.Encode(text);
  int incomplete_tokens = 0;
  for (int32_t id : ids) incomplete_tokens += !IsValidUtf8(tok.TokenBytes(id).value());
  EXPECT_GT(incomplete_tokens, 0);  // the test really exercises held-back bytes
  CheckStreaming(tok, ids, false);
  CheckStreaming(tok, ids, true);
}

TEST(IncrementalDetokenizerTest, HoldsBackUntilComplete) {
  const Tokenizer& tok = V41();
  // Find a token that is a lone UTF-8 lead byte (e.g. 0xF0) and one continuation byte.
  const int32_t lead = tok.TokenToId(BytesToByteLevel("\xF0")).value();
  const int32_t cont9f = tok.TokenToId(BytesToByteLevel("\x9F")).value();
  const int32_t cont98 = tok.TokenToId(BytesToByteLevel("\x98")).value();
  const int32_t cont80 = tok.TokenToId(BytesToByteLevel("\x80")).value();
  IncrementalDetokenizer detok(tok, false);
  EXPECT_EQ(detok.Push(lead).value(), "");
  EXPECT_EQ(detok.Push(cont9f).value(), "");
  EXPECT_EQ(detok.Push(cont98).value(), "");
  EXPECT_EQ(detok.Push(cont80).value(), "\U0001F600");
  // A truncated sequence followed by ASCII: one U+FFFD, then the ASCII.
  EXPECT_EQ(detok.Push(lead).value(), "");
  EXPECT_EQ(detok.Push(tok.Encode("a").at(0)).value(), "\uFFFDa");
  // Flush replaces an incomplete tail.
  EXPECT_EQ(detok.Push(lead).value(), "");
  EXPECT_EQ(detok.Flush(), "\uFFFD");
  EXPECT_EQ(detok.Flush(), "");
  // Out-of-range: error, state unchanged.
  EXPECT_EQ(detok.Push(-3).status().code(), base::StatusCode::kOutOfRange);
}

TEST(IncrementalDetokenizerTest, SharedCasesStreamLikeDecode) {
  const auto file = nlohmann::json::parse(ReadFileOrDie(
      std::string(DEEPINFER_SHARED_DIR) + "/tokenizers/deepseek-v4.1/tokenizer_cases.json"));
  int cases = 0;
  for (const auto& c : file["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    CheckStreaming(V41(), ids, false);
    CheckStreaming(V41(), ids, true);
    ++cases;
  }
  EXPECT_EQ(cases, 336);
}

TEST(DefaultTokenizerPathTest, FindsShippedFilesAndHonoursEnv) {
  const std::string path = DefaultTokenizerPath();
  EXPECT_NE(path.find("deepseek-v4.1/tokenizer.json"), std::string::npos) << path;
  EXPECT_TRUE(Tokenizer::FromFile(path).ok());
  const std::string dir = std::string(DEEPINFER_SOURCE_DIR) + "/assets/tokenizers";
  setenv("DEEPINFER_TOKENIZER_DIR", dir.c_str(), 1);
  EXPECT_EQ(DefaultTokenizerPath("deepseek-v4"), dir + "/deepseek-v4/tokenizer.json");
  unsetenv("DEEPINFER_TOKENIZER_DIR");
}

TEST(TokenizerLoadTest, ErrorsNameTheProblem) {
  auto missing = Tokenizer::FromFile("/nonexistent/tokenizer.json");
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
  auto bad_json = Tokenizer::FromJson("{not json", "mem.json");
  ASSERT_FALSE(bad_json.ok());
  EXPECT_NE(bad_json.status().message().find("mem.json"), std::string::npos);
  auto wrong_model = Tokenizer::FromJson(R"({"model":{"type":"WordPiece"}})", "wp.json");
  EXPECT_EQ(wrong_model.status().code(), base::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace deepinfer::tokenizer
