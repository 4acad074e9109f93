// Engram's compressed token map (model.md §2.6 step 1): every token id -> a compressed id,
// tokens whose decoded text normalises alike sharing one id. Reproduces upstream's
// `build_compressed_token_map` exactly:
//   text = lossy UTF-8 of decode([id], skip_special_tokens=False)
//   key  = raw vocab string (IdToToken)       if text contains U+FFFD (a byte fragment)
//          Normalize(text), or text if that is empty, otherwise
//   compressed ids are assigned in first-seen order over ids 0..vocab-1.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/statusor.h"

namespace deepinfer::model {

// One vocabulary entry as the token map sees it.
struct EngramVocabEntry {
  std::string decoded;    // bytes of the single-id decode (may be invalid UTF-8)
  std::string raw_token;  // the vocab spelling (byte-level "Ġthe"; added tokens: content)
};

// The normaliser chain of upstream, on valid UTF-8: NFKC, NFD, drop combining marks
// (General_Category M*), per-code-point full lowercase (no context rules), runs of
// [ \t\r\n] -> one space, then strip Unicode White_Space at both ends except that a text
// that is exactly " " stays " " (and any U+E000 in the result becomes a space: upstream
// uses U+E000 as its sentinel).
std::string EngramNormalize(std::string_view utf8);

// The map key of one vocab entry (rule in the file comment).
std::string EngramTokenKey(const EngramVocabEntry& entry);

struct CompressedTokenMap {
  std::vector<int32_t> token_map;  // [vocab] token id -> compressed id
  int64_t compressed_vocab_size = 0;
};

CompressedTokenMap BuildCompressedTokenMap(std::span<const EngramVocabEntry> vocab);

// Reads every id 0..vocab-1 of a Hugging Face tokenizer.json: a WordLevel model (the
// goldens' tiny tokenizers: decode = the vocab string) is parsed directly; anything else
// goes through tokenizer::Tokenizer (byte-level BPE: TokenBytes / IdToToken). Errors name
// the file; an id with no token is an error.
base::StatusOr<std::vector<EngramVocabEntry>> LoadEngramVocab(
    const std::string& tokenizer_json_path);

}  // namespace deepinfer::model
