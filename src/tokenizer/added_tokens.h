// Finds added tokens inside input text, as HF `tokenizers` AddedVocabulary does: first the
// tokens with normalized=false are matched over the whole text (leftmost-longest), then the
// tokens with normalized=true inside the gaps left by the first pass (the normalizer is empty
// for DeepSeek, so "normalized" text equals the input). lstrip/rstrip/single_word are not
// supported (rejected at load time).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

// A piece of input text: either an added token (id >= 0) or plain text (id = -1).
struct TextSegment {
  std::string_view text;
  int32_t added_id;
};

// Byte trie of token contents with leftmost-longest search.
class TokenTrie {
 public:
  void Add(std::string_view content, int32_t id);
  bool empty() const { return nodes_.size() <= 1; }
  // Splits `text` into segments (matches and the non-empty gaps between them), appended to
  // `out` in order.
  void Split(std::string_view text, std::vector<TextSegment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node index)
    int32_t token_id = -1;
  };
  int32_t Child(int32_t node, uint8_t byte) const;
  // Length of the longest token starting at text[pos] (0 if none); its id in *id.
  size_t LongestMatchAt(std::string_view text, size_t pos, int32_t* id) const;

  std::vector<Node> nodes_{Node{}};
  bool can_start_[256] = {};
};

class AddedTokenMatcher {
 public:
  void Add(std::string_view content, int32_t id, bool normalized);
  // Splits `text` into added tokens and plain-text gaps (appended to `out`).
  void Split(std::string_view text, std::vector<TextSegment>* out) const;

 private:
  TokenTrie non_normalized_;
  TokenTrie normalized_;
};

}  // namespace deepinfer::tokenizer
