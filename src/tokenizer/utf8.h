// UTF-8 helpers with the "maximal subpart" replacement rule (Unicode §3.9, W3C): every
// maximal ill-formed subsequence becomes one U+FFFD. This is what Python's
// bytes.decode('utf-8', errors='replace') and Rust's String::from_utf8_lossy do.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Result of inspecting the sequence that starts at some byte.
struct Utf8Step {
  enum Kind { kValid, kInvalid, kTruncated } kind;
  // kValid: length of the valid sequence. kInvalid: bytes replaced by one U+FFFD (>= 1).
  // kTruncated: bytes available, all a valid prefix of a sequence the input cuts off.
  size_t length;
};

// Classifies the sequence at the start of `bytes` (non-empty).
Utf8Step NextUtf8Step(std::string_view bytes);

// True if `bytes` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view bytes);

// Appends `bytes` to `out`, replacing ill-formed parts by U+FFFD (a truncated sequence at the
// end counts as ill-formed).
void AppendUtf8Lossy(std::string_view bytes, std::string* out);

// `bytes` itself when valid (no copy into `storage`), else the lossy conversion stored in
// `storage`.
std::string_view SanitizeUtf8(std::string_view bytes, std::string* storage);

}  // namespace deepinfer::tokenizer
