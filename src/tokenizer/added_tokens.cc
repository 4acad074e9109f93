#include "tokenizer/added_tokens.h"

namespace deepinfer::tokenizer {

void TokenTrie::Add(std::string_view content, int32_t id) {
  if (content.empty()) return;
  int32_t node = 0;
  for (char c : content) {
    const auto byte = static_cast<uint8_t>(c);
    int32_t next = Child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      nodes_[node].children.emplace_back(byte, next);
    }
    node = next;
  }
  // HF keeps one id per content (its map is keyed by content; the later entry wins).
  nodes_[node].token_id = id;
  can_start_[static_cast<uint8_t>(content[0])] = true;
}

int32_t TokenTrie::Child(int32_t node, uint8_t byte) const {
  for (const auto& [b, child] : nodes_[node].children) {
    if (b == byte) return child;
  }
  return -1;
}

size_t TokenTrie::LongestMatchAt(std::string_view text, size_t pos, int32_t* id) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token_id >= 0) {
      best = i + 1 - pos;
      *id = nodes_[node].token_id;
    }
  }
  return best;
}

void TokenTrie::Split(std::string_view text, std::vector<TextSegment>* out) const {
  size_t gap_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!can_start_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    int32_t id = -1;
    const size_t length = LongestMatchAt(text, pos, &id);
    if (length == 0) {
      ++pos;
      continue;
    }
    if (pos > gap_start) out->push_back({text.substr(gap_start, pos - gap_start), -1});
    out->push_back({text.substr(pos, length), id});
    pos += length;
    gap_start = pos;
  }
  if (gap_start < text.size()) out->push_back({text.substr(gap_start), -1});
}

void AddedTokenMatcher::Add(std::string_view content, int32_t id, bool normalized) {
  (normalized ? normalized_ : non_normalized_).Add(content, id);
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<TextSegment>* out) const {
  if (normalized_.empty()) {
    non_normalized_.Split(text, out);
    return;
  }
  std::vector<TextSegment> first_pass;
  non_normalized_.Split(text, &first_pass);
  for (const TextSegment& segment : first_pass) {
    if (segment.added_id >= 0) {
      out->push_back(segment);
    } else {
      normalized_.Split(segment.text, out);
    }
  }
}

}  // namespace deepinfer::tokenizer
