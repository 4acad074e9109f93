// Internal state of a Tokenizer (see tokenizer.h); built by LoadTokenizerImpl from a HF
// tokenizer.json. Not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/statusor.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace deepinfer::tokenizer {

// Per-id facts. An id with neither a vocab entry nor an added token has exists == false.
struct TokenInfo {
  std::string spelled;  // vocab spelling ("Ġthe") or added-token content
  std::string bytes;    // what the ByteLevel decoder produces for this token alone
  bool exists = false;
  bool added = false;
  bool special = false;
};

class TokenizerImpl {
 public:
  std::vector<TokenInfo> tokens;                       // indexed by id; size = vocab size
  std::unordered_map<std::string, int32_t> vocab_ids;  // vocab spelling -> id
  std::unordered_map<std::string, int32_t> added_ids;  // added content -> id
  AddedTokenMatcher added_matcher;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> bpe;

  // Appends the ids of plain text (valid UTF-8, no added-token matching).
  void EncodePlain(std::string_view text, std::vector<int32_t>* ids) const;
};

// Parses the JSON text of a tokenizer.json. `source_name` prefixes error messages.
base::StatusOr<std::unique_ptr<TokenizerImpl>> LoadTokenizerImpl(std::string_view json_text,
                                                                 std::string_view source_name);

}  // namespace deepinfer::tokenizer
