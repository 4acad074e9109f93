#include "model/engram_hash_token_map.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "base/check.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model {
namespace {

constexpr UChar32 kSentinel = 0xE000;  // upstream's private-use placeholder for " "

bool IsCombiningMark(UChar32 c) {
  const int8_t type = u_charType(c);
  return type == U_NON_SPACING_MARK || type == U_COMBINING_SPACING_MARK || type == U_ENCLOSING_MARK;
}

bool IsCollapsibleSpace(UChar32 c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Full lowercase without context (Rust char::to_lowercase): the only unconditional
// multi-code-point lowercase mapping in SpecialCasing.txt is U+0130.
void AppendLowercase(UChar32 c, std::u32string* out) {
  if (c == 0x0130) {
    out->push_back('i');
    out->push_back(0x0307);
    return;
  }
  out->push_back(u_tolower(c));
}

icu::UnicodeString Normalized(const icu::Normalizer2* normalizer, const icu::UnicodeString& in) {
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString out = normalizer->normalize(in, status);
  CHECK(U_SUCCESS(status)) << "ICU normalisation failed: " << u_errorName(status);
  return out;
}

const icu::Normalizer2* Nfkc() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFKCInstance(status);
  CHECK(U_SUCCESS(status)) << "ICU NFKC data missing: " << u_errorName(status);
  return n;
}

const icu::Normalizer2* Nfd() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFDInstance(status);
  CHECK(U_SUCCESS(status)) << "ICU NFD data missing: " << u_errorName(status);
  return n;
}

std::string ToUtf8(const std::u32string& text) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF32(
      reinterpret_cast<const UChar32*>(text.data()), static_cast<int32_t>(text.size()));
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool ContainsReplacementAfterLossyDecode(std::string_view bytes) {
  // ICU's fromUTF8 substitutes U+FFFD for ill-formed input, like a lossy decode.
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(bytes.data(), static_cast<int32_t>(bytes.size())));
  return u.indexOf(static_cast<UChar32>(0xFFFD)) >= 0;
}

base::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::NotFoundError("cannot open tokenizer file " + path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return base::DataLossError("cannot read " + path);
  return text.str();
}

// WordLevel: ids from model.vocab and added_tokens; decode of one id = its string.
base::StatusOr<std::vector<EngramVocabEntry>> WordLevelVocab(const nlohmann::json& doc,
                                                             const std::string& path) {
  std::map<int64_t, std::string> by_id;
  const auto& vocab = doc["model"]["vocab"];
  if (!vocab.is_object())
    return base::InvalidArgumentError(path + ": model.vocab is not an object");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return base::InvalidArgumentError(path + ": model.vocab[\"" + token + "\"] is not an id");
    }
    by_id[id.get<int64_t>()] = token;
  }
  if (doc.contains("added_tokens") && doc["added_tokens"].is_array()) {
    for (const auto& added : doc["added_tokens"]) {
      if (!added.contains("id") || !added.contains("content")) {
        return base::InvalidArgumentError(path + ": added_tokens entry without id/content");
      }
      by_id[added["id"].get<int64_t>()] = added["content"].get<std::string>();
    }
  }
  std::vector<EngramVocabEntry> entries;
  entries.reserve(by_id.size());
  for (const auto& [id, token] : by_id) {
    if (id != static_cast<int64_t>(entries.size())) {
      return base::InvalidArgumentError(path + ": no token with id " +
                                        std::to_string(entries.size()));
    }
    entries.push_back({token, token});
  }
  return entries;
}

base::StatusOr<std::vector<EngramVocabEntry>> TokenizerVocab(std::string_view json_text,
                                                             const std::string& path) {
  DI_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::FromJson(json_text, path));
  std::vector<EngramVocabEntry> entries(tok->vocab_size());
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    auto bytes = tok->TokenBytes(id);
    auto raw = tok->IdToToken(id);
    if (!bytes.ok() || !raw.ok()) {
      return base::InvalidArgumentError(path + ": no token with id " + std::to_string(id));
    }
    entries[id] = {std::move(bytes).value(), std::move(raw).value()};
  }
  return entries;
}

}  // namespace

std::string EngramNormalize(std::string_view utf8) {
  static const icu::Normalizer2* const nfkc = Nfkc();
  static const icu::Normalizer2* const nfd = Nfd();
  const icu::UnicodeString input = icu::UnicodeString::fromUTF8(
      icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
  const icu::UnicodeString decomposed = Normalized(nfd, Normalized(nfkc, input));

  // Strip marks, lowercase, collapse [ \t\r\n]+ -> " ".
  std::u32string text;
  bool in_space_run = false;
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 c = decomposed.char32At(i);
    i += U16_LENGTH(c);
    if (IsCombiningMark(c)) continue;
    std::u32string lowered;
    AppendLowercase(c, &lowered);
    for (const char32_t l : lowered) {
      if (IsCollapsibleSpace(static_cast<UChar32>(l))) {
        if (!in_space_run) text.push_back(U' ');
        in_space_run = true;
      } else {
        text.push_back(l);
        in_space_run = false;
      }
    }
  }
  if (text == U" ") text = std::u32string(1, static_cast<char32_t>(kSentinel));
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && u_isUWhiteSpace(static_cast<UChar32>(text[begin]))) ++begin;
  while (end > begin && u_isUWhiteSpace(static_cast<UChar32>(text[end - 1]))) --end;
  std::u32string stripped = text.substr(begin, end - begin);
  for (char32_t& c : stripped) {
    if (c == static_cast<char32_t>(kSentinel)) c = U' ';
  }
  return ToUtf8(stripped);
}

std::string EngramTokenKey(const EngramVocabEntry& entry) {
  if (ContainsReplacementAfterLossyDecode(entry.decoded)) return entry.raw_token;
  std::string normalized = EngramNormalize(entry.decoded);
  return normalized.empty() ? entry.decoded : normalized;
}

CompressedTokenMap BuildCompressedTokenMap(std::span<const EngramVocabEntry> vocab) {
  CompressedTokenMap result;
  result.token_map.resize(vocab.size());
  std::unordered_map<std::string, int32_t> key_to_id;
  key_to_id.reserve(vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) {
    const auto [it, inserted] =
        key_to_id.try_emplace(EngramTokenKey(vocab[id]), static_cast<int32_t>(key_to_id.size()));
    result.token_map[id] = it->second;
  }
  result.compressed_vocab_size = static_cast<int64_t>(key_to_id.size());
  return result;
}

base::StatusOr<std::vector<EngramVocabEntry>> LoadEngramVocab(
    const std::string& tokenizer_json_path) {
  DI_ASSIGN_OR_RETURN(const std::string text, ReadFile(tokenizer_json_path));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return base::InvalidArgumentError(tokenizer_json_path + ": invalid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object()) {
    return base::InvalidArgumentError(tokenizer_json_path + ": no \"model\" object");
  }
  if (doc["model"].value("type", std::string()) == "WordLevel") {
    return WordLevelVocab(doc, tokenizer_json_path);
  }
  return TokenizerVocab(text, tokenizer_json_path);
}

}  // namespace deepinfer::model
