// Pre-tokenizer: a sequence of HF `Split(pattern, behavior=Isolated, invert=false)` steps.
// Each step splits every piece produced by the previous step into matches and the gaps
// between them (both kept, in order); the regex never sees beyond its piece (so `(?!\S)` at a
// piece end looks at the end of the subject). The final ByteLevel step (use_regex=false) only
// respells bytes and is folded into the BPE model.
//
// Regexes are Oniguruma patterns (what HF uses) run by PCRE2 with UTF + UCP and JIT. Two
// constructs mean different things in the two engines and are rewritten:
//  - `\s`/`\S` -> an explicit class of Unicode White_Space characters (Oniguruma's
//    definition; PCRE2's also contains U+180E);
//  - `\p{L|M|N|P|S}` -> the class plus the code points added to it between Unicode 14.0
//    (Debian 12's PCRE2 10.42) and Unicode 16.0 (the Oniguruma in HF tokenizers 0.23.2), see
//    gen_unicode_additions.py. Other properties are rejected.
//
// Thread-safety: immutable after Create; Split may run concurrently (per-thread match data).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/statusor.h"

namespace deepinfer::tokenizer {

class PreTokenizer {
 public:
  // `patterns` in application order. Errors name the pattern and the PCRE2 message.
  static base::StatusOr<std::unique_ptr<PreTokenizer>> Create(
      const std::vector<std::string>& patterns);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the non-empty pieces of `text` (valid UTF-8) to `pieces`, in order; the pieces
  // concatenate to `text`.
  void Split(std::string_view text, std::vector<std::string_view>* pieces) const;

 private:
  struct Compiled;
  PreTokenizer() = default;
  void SplitLevel(size_t level, std::string_view text, std::vector<std::string_view>* pieces) const;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

// Rewrites `\s`, `\S` and `\p{X}` of an Oniguruma pattern for PCRE2 (see above). Exposed for tests.
base::StatusOr<std::string> TranslateOnigurumaPattern(std::string_view pattern);

}  // namespace deepinfer::tokenizer
