// DeepSeek V4 / V4.1 tokenizer: byte-level BPE loaded from a Hugging Face tokenizer.json,
// bit-exact with HF `tokenizers` 0.23.2 (encode with add_special_tokens=False, decode).
//
// Pipeline (encode): UTF-8 input (invalid bytes -> U+FFFD, as Python's
// bytes.decode('utf-8', errors='replace')) -> split out added tokens (every added token,
// special or not, longest match first; optional) -> pre-tokenizer (three Split(Isolated)
// regexes run by PCRE2/JIT, then ByteLevel byte->unicode mapping) -> BPE with merge ranks.
//
// Thread-safety: a Tokenizer is immutable after FromFile; every const method may be called
// concurrently from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/statusor.h"

namespace deepinfer::base {
class ThreadPool;
}

namespace deepinfer::tokenizer {

class TokenizerImpl;

class Tokenizer {
 public:
  // Loads a HF tokenizer.json (BPE model, byte-level). Errors name the file and the field.
  static base::StatusOr<std::unique_ptr<Tokenizer>> FromFile(
      const std::string& tokenizer_json_path);
  // Same, from the JSON text itself; `source_name` is used in error messages.
  static base::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text,
                                                             std::string_view source_name);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes `text` (UTF-8; invalid bytes -> U+FFFD). With match_special_tokens, added-token
  // strings in the text become their ids; without, everything is plain BPE. Never adds
  // BOS/EOS.
  std::vector<int32_t> Encode(std::string_view text, bool match_special_tokens = true) const;

  // Encodes every text, in parallel on `pool` (ThreadPool::Default() when null). Result i
  // belongs to texts[i].
  std::vector<std::vector<int32_t>> EncodeBatch(std::span<const std::string> texts,
                                                bool match_special_tokens = true,
                                                base::ThreadPool* pool = nullptr) const;

  // ids -> bytes -> UTF-8 (invalid UTF-8 in the byte stream -> U+FFFD, as HF's
  // String::from_utf8_lossy). skip_special_tokens drops added tokens flagged "special".
  // An id outside [0, vocab_size()) -> OutOfRange error.
  base::StatusOr<std::string> Decode(std::span<const int32_t> ids,
                                     bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // 1 + the largest id (129280 for V4 / V4.1)

  // Vocab token (byte-level spelling, e.g. "Ġthe") or added-token content -> id.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Raw token string (byte-level spelling for vocab tokens; content for added tokens).
  base::StatusOr<std::string> IdToToken(int32_t id) const;
  // True for added tokens flagged "special" (what skip_special_tokens drops).
  bool IsSpecial(int32_t id) const;
  // True for every added token (special or not).
  bool IsAdded(int32_t id) const;
  // Raw bytes of one token (byte-level decoded; added tokens: their content). May be an
  // incomplete UTF-8 sequence.
  base::StatusOr<std::string> TokenBytes(int32_t id) const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

// Streaming: feed ids one at a time, get the newly completed UTF-8 text. Bytes of an
// incomplete UTF-8 sequence are held back until the sequence completes; a byte that can
// never start/continue a valid sequence is emitted as U+FFFD immediately. The concatenation of
// all Push results and Flush equals Decode(all ids) for the same skip_special_tokens.
class IncrementalDetokenizer {
 public:
  // `tok` must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens);
  // May return "" while a UTF-8 sequence is incomplete. Out-of-range id -> OutOfRange error
  // (state unchanged).
  base::StatusOr<std::string> Push(int32_t id);
  // Remaining held-back bytes (an incomplete sequence -> U+FFFD); resets the state.
  std::string Flush();

 private:
  const Tokenizer* tok_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence (at most 3)
};

// Path of a shipped tokenizer.json ("deepseek-v4.1" or "deepseek-v4"). Search order:
//   1. $DEEPINFER_TOKENIZER_DIR/<version>/tokenizer.json, then
//   $DEEPINFER_TOKENIZER_DIR/tokenizer.json
//   2. <dir of the running executable>/../share/deepinfer/tokenizers/<version>/tokenizer.json
//      and <exe dir>/../assets/tokenizers/<version>/tokenizer.json (build tree: build/bin)
//   3. <DEEPINFER_SOURCE_DIR compiled in>/assets/tokenizers/<version>/tokenizer.json
// Returns the first that exists; if none exists, the last candidate (so the caller's load
// error names a concrete path).
std::string DefaultTokenizerPath(std::string_view version = "deepseek-v4.1");

}  // namespace deepinfer::tokenizer
