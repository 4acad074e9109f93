#include "server/text_stream.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace deepinfer::server {
namespace {

const tokenizer::Tokenizer& Tok() {
  static const auto* tokenizer =
      tokenizer::Tokenizer::FromFile(tokenizer::DefaultTokenizerPath())->release();
  return *tokenizer;
}

std::string RunOneByOne(TextStream& stream, const std::vector<TokenId>& ids) {
  std::string out;
  for (const TokenId id : ids) {
    if (stream.Push(std::span<const TokenId>(&id, 1))) break;
    out += stream.TakeReady();
  }
  return out + stream.Flush();
}

TEST(TextStreamTest, DecodesAndDropsEos) {
  const TokenId eos = EosTokenId(Tok());
  EXPECT_EQ(eos, 1);
  std::vector<TokenId> ids = Tok().Encode("你好, world");
  ids.push_back(eos);
  ids.push_back(Tok().Encode("after")[0]);
  TextStream stream(Tok(), {eos}, {});
  EXPECT_EQ(RunOneByOne(stream, ids), "你好, world");
  EXPECT_TRUE(stream.stopped());
  EXPECT_EQ(stream.tokens(), static_cast<int64_t>(ids.size()) - 1);
}

TEST(TextStreamTest, StopStringAcrossTokensIsCutAndHeldBack) {
  const std::vector<TokenId> ids = Tok().Encode("The answer is STOP here");
  TextStream stream(Tok(), {}, {"STOP", "zzz"});
  std::string emitted;
  for (const TokenId id : ids) {
    const bool done = stream.Push(std::span<const TokenId>(&id, 1));
    emitted += stream.TakeReady();
    // "ST" / "S" prefixes are never emitted early.
    EXPECT_EQ(emitted.find('S'), std::string::npos);
    if (done) break;
  }
  emitted += stream.Flush();
  EXPECT_EQ(emitted, "The answer is ");
  EXPECT_TRUE(stream.stopped());
}

TEST(TextStreamTest, PartialStopPrefixIsReleasedAtTheEnd) {
  const std::vector<TokenId> ids = Tok().Encode("ends with ST");
  TextStream stream(Tok(), {}, {"STOP"});
  EXPECT_EQ(RunOneByOne(stream, ids), "ends with ST");
  EXPECT_FALSE(stream.stopped());
}

}  // namespace
}  // namespace deepinfer::server
