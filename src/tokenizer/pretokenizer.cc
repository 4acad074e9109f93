#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "base/check.h"
#include "base/status.h"

namespace deepinfer::tokenizer {
namespace {

#include "tokenizer/unicode_additions.inc"

// Extra class items for \p{X}: code points in category X under Unicode 16 but not 14.
std::string_view Unicode16Additions(char general_category) {
  switch (general_category) {
    case 'L':
      return kUnicode16AddedL;
    case 'M':
      return kUnicode16AddedM;
    case 'N':
      return kUnicode16AddedN;
    case 'P':
      return kUnicode16AddedP;
    case 'S':
      return kUnicode16AddedS;
    default:
      return {};
  }
}

// Unicode White_Space (PropList.txt), the set Oniguruma's \s matches in UTF-8 mode.
constexpr std::string_view kWhiteSpaceRanges =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// Per-thread PCRE2 match state (match data with room for any group count and a JIT stack
// large enough for long inputs).
struct ThreadMatchState {
  pcre2_match_data* match_data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* match_context = nullptr;
  ThreadMatchState() {
    match_data = pcre2_match_data_create(64, nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    match_context = pcre2_match_context_create(nullptr);
    CHECK(match_data != nullptr && jit_stack != nullptr && match_context != nullptr);
    pcre2_jit_stack_assign(match_context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(match_context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

ThreadMatchState& GetThreadMatchState() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

base::StatusOr<std::string> TranslateOnigurumaPattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 128);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 'p' || next == 'P') {
        // Only the one-letter major categories are supported: \p{L} -> [\p{L}<additions>].
        if (next == 'P' || i + 3 >= pattern.size() || pattern[i + 1] != '{' ||
            pattern[i + 3] != '}' || Unicode16Additions(pattern[i + 2]).empty()) {
          return base::UnimplementedError("pre-tokenizer regex: unsupported property in '" +
                                          std::string(pattern) + "'");
        }
        const char category = pattern[i + 2];
        const std::string item =
            std::string("\\p{") + category + "}" + std::string(Unicode16Additions(category));
        out.append(in_class ? item : "[" + item + "]");
        i += 3;
      } else if (next == 's') {
        if (in_class) {
          out.append(kWhiteSpaceRanges);
        } else {
          out.append("[").append(kWhiteSpaceRanges).append("]");
        }
      } else if (next == 'S') {
        if (in_class) {
          return base::UnimplementedError(
              "pre-tokenizer regex: \\S inside a character class is not supported");
        }
        out.append("[^").append(kWhiteSpaceRanges).append("]");
      } else {
        out.push_back('\\');
        out.push_back(next);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == '[' && in_class) {
      return base::UnimplementedError("pre-tokenizer regex: nested character classes");
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  if (in_class) return base::InvalidArgumentError("pre-tokenizer regex: unterminated class");
  return out;
}

base::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    const std::vector<std::string>& patterns) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  for (const std::string& pattern : patterns) {
    DI_ASSIGN_OR_RETURN(const std::string translated, TranslateOnigurumaPattern(pattern));
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                      PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      return base::InvalidArgumentError("pre-tokenizer regex '" + pattern + "' at offset " +
                                        std::to_string(error_offset) + ": " +
                                        reinterpret_cast<const char*>(message));
    }
    compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
    pre->regexes_.push_back(std::move(compiled));
  }
  return pre;
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return;
  SplitLevel(0, text, pieces);
}

void PreTokenizer::SplitLevel(size_t level, std::string_view text,
                              std::vector<std::string_view>* pieces) const {
  if (level == regexes_.size()) {
    pieces->push_back(text);
    return;
  }
  const Compiled& regex = *regexes_[level];
  ThreadMatchState& state = GetThreadMatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0;
  size_t offset = 0;
  while (offset < text.size()) {
    int rc;
    if (regex.jit) {
      rc = pcre2_jit_match(regex.code, subject, text.size(), offset, 0, state.match_data,
                           state.match_context);
    } else {
      rc = pcre2_match(regex.code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                       state.match_data, state.match_context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    // Errors (resource limits) are not expected for these patterns; the unmatched rest
    // stays one piece rather than crashing.
    if (rc < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
    const size_t start = ovector[0];
    size_t end = ovector[1];
    if (end == start) {  // empty match: HF emits nothing for it; step one character on
      ++end;
      while (end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;
      offset = end;
      continue;
    }
    if (start > gap_start) SplitLevel(level + 1, text.substr(gap_start, start - gap_start), pieces);
    SplitLevel(level + 1, text.substr(start, end - start), pieces);
    gap_start = end;
    offset = end;
  }
  if (gap_start < text.size()) SplitLevel(level + 1, text.substr(gap_start), pieces);
}

}  // namespace deepinfer::tokenizer
