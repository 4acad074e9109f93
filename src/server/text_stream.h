// Generated token ids -> text, incrementally, with stop strings: text that could still turn
// out to be the start of a stop string is held back until it is decided. Stop tokens (EOS)
// count as generated tokens but produce no text.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "server/generation_service.h"

namespace deepinfer::tokenizer {
class Tokenizer;
class IncrementalDetokenizer;
}  // namespace deepinfer::tokenizer

namespace deepinfer::server {

// Id of "<｜end▁of▁sentence｜>" (1 for DeepSeek V4 / V4.1 when the token is missing).
TokenId EosTokenId(const tokenizer::Tokenizer& tokenizer);

class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<TokenId> stop_token_ids,
             std::vector<std::string> stop_strings);
  ~TextStream();

  // Returns true once the text is complete (a stop token or stop string was seen); later
  // tokens are ignored.
  bool Push(std::span<const TokenId> tokens);
  // Text decided since the last call.
  std::string TakeReady();
  // At the end: the decided text plus everything held back.
  std::string Flush();

  int64_t tokens() const { return tokens_; }
  bool stopped() const { return stopped_; }

 private:
  void Settle();

  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer_;
  std::vector<TokenId> stop_token_ids_;
  std::vector<std::string> stop_strings_;
  std::string pending_;  // undecided text (a possible stop-string prefix)
  std::string ready_;
  int64_t tokens_ = 0;
  bool stopped_ = false;
};

}  // namespace deepinfer::server
