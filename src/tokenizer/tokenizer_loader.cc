// tokenizer.json -> TokenizerImpl. Only the configuration DeepSeek V3/V4/V4.1 uses is
// accepted (BPE model, empty normalizer, Split(Isolated)* + ByteLevel pre-tokenizer,
// ByteLevel decoder); anything else is rejected with UNIMPLEMENTED naming the field, so a
// file we would tokenize differently from HF never loads silently.
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"

namespace deepinfer::tokenizer {
namespace {

using nlohmann::json;

base::Status FieldError(std::string_view source, std::string_view field, std::string_view what) {
  return base::InvalidArgumentError(std::string(source) + ": " + std::string(field) + ": " +
                                    std::string(what));
}

base::Status Unsupported(std::string_view source, std::string_view field, std::string_view what) {
  return base::UnimplementedError(std::string(source) + ": " + std::string(field) +
                                  ": unsupported " + std::string(what));
}

bool IsNullOrFalse(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_boolean() && !j[key].get<bool>());
}

base::Status CheckNormalizer(const json& root, std::string_view source) {
  if (!root.contains("normalizer") || root["normalizer"].is_null()) return base::Status::Ok();
  const json& n = root["normalizer"];
  if (n.value("type", "") == "Sequence" && n.contains("normalizers") &&
      n["normalizers"].is_array() && n["normalizers"].empty()) {
    return base::Status::Ok();
  }
  return Unsupported(source, "normalizer", "normalizer (only an empty Sequence)");
}

// Collects the Split regexes; requires the last step to be ByteLevel without its own regex.
base::StatusOr<std::vector<std::string>> ParsePreTokenizer(const json& root,
                                                           std::string_view source) {
  if (!root.contains("pre_tokenizer") || !root["pre_tokenizer"].is_object()) {
    return Unsupported(source, "pre_tokenizer", "missing pre-tokenizer");
  }
  const json& pre = root["pre_tokenizer"];
  json steps = json::array();
  if (pre.value("type", "") == "Sequence") {
    steps = pre.value("pretokenizers", json::array());
  } else {
    steps.push_back(pre);
  }
  std::vector<std::string> patterns;
  bool saw_byte_level = false;
  for (const json& step : steps) {
    const std::string type = step.value("type", "");
    if (saw_byte_level) return Unsupported(source, "pre_tokenizer", "step after ByteLevel");
    if (type == "Split") {
      if (step.value("behavior", "") != "Isolated" || step.value("invert", false) ||
          !step.contains("pattern") || !step["pattern"].contains("Regex")) {
        return Unsupported(source, "pre_tokenizer.Split", "behavior/pattern");
      }
      patterns.push_back(step["pattern"]["Regex"].get<std::string>());
    } else if (type == "ByteLevel") {
      if (step.value("use_regex", true) || step.value("add_prefix_space", false)) {
        return Unsupported(source, "pre_tokenizer.ByteLevel", "use_regex/add_prefix_space");
      }
      saw_byte_level = true;
    } else {
      return Unsupported(source, "pre_tokenizer", "step type '" + type + "'");
    }
  }
  if (!saw_byte_level) return Unsupported(source, "pre_tokenizer", "no ByteLevel step");
  return patterns;
}

base::Status ParseVocab(const json& model, std::string_view source, TokenizerImpl* impl) {
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return FieldError(source, "model.vocab", "missing or not an object");
  }
  for (const auto& [spelled, id_json] : model["vocab"].items()) {
    if (!id_json.is_number_integer()) return FieldError(source, "model.vocab", "id not an integer");
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id > 10'000'000) return FieldError(source, "model.vocab", "id out of range");
    if (static_cast<size_t>(id) >= impl->tokens.size()) impl->tokens.resize(id + 1);
    TokenInfo& info = impl->tokens[id];
    info.exists = true;
    info.spelled = spelled;
    std::optional<std::string> bytes = ByteLevelToBytes(spelled);
    info.bytes = bytes ? *bytes : spelled;
    impl->vocab_ids[spelled] = static_cast<int32_t>(id);
  }
  return base::Status::Ok();
}

base::StatusOr<std::vector<BpeModel::Merge>> ParseMerges(const json& model, std::string_view source,
                                                         const TokenizerImpl& impl) {
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return FieldError(source, "model.merges", "missing or not an array");
  }
  std::vector<BpeModel::Merge> merges;
  merges.reserve(model["merges"].size());
  for (const json& m : model["merges"]) {
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) return FieldError(source, "model.merges", "'" + s + "'");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return FieldError(source, "model.merges", "entry is neither \"a b\" nor [a, b]");
    }
    auto l = impl.vocab_ids.find(left);
    auto r = impl.vocab_ids.find(right);
    if (l == impl.vocab_ids.end() || r == impl.vocab_ids.end()) {
      return FieldError(source, "model.merges", "'" + left + " " + right + "' not in vocab");
    }
    merges.push_back({l->second, r->second});
  }
  return merges;
}

base::Status ParseAddedTokens(const json& root, std::string_view source, TokenizerImpl* impl) {
  if (!root.contains("added_tokens")) return base::Status::Ok();
  for (const json& t : root["added_tokens"]) {
    if (!t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      return FieldError(source, "added_tokens", "entry without integer id / string content");
    }
    if (!IsNullOrFalse(t, "lstrip") || !IsNullOrFalse(t, "rstrip") ||
        !IsNullOrFalse(t, "single_word")) {
      return Unsupported(source, "added_tokens", "lstrip/rstrip/single_word");
    }
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id > 10'000'000) return FieldError(source, "added_tokens", "id out of range");
    const std::string content = t["content"].get<std::string>();
    if (static_cast<size_t>(id) >= impl->tokens.size()) impl->tokens.resize(id + 1);
    TokenInfo& info = impl->tokens[id];
    info.exists = true;
    info.added = true;
    info.special = t.value("special", false);
    info.spelled = content;
    // HF's ByteLevel decoder maps a token char by char when every char is in the byte
    // alphabet, otherwise it keeps the token's own UTF-8 bytes.
    std::optional<std::string> bytes = ByteLevelToBytes(content);
    info.bytes = bytes ? *bytes : content;
    impl->added_ids[content] = static_cast<int32_t>(id);
    impl->added_matcher.Add(content, static_cast<int32_t>(id), t.value("normalized", false));
  }
  return base::Status::Ok();
}

base::Status CheckModel(const json& model, std::string_view source) {
  if (model.value("type", "BPE") != "BPE") return Unsupported(source, "model.type", "model");
  if (!IsNullOrFalse(model, "dropout") &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return Unsupported(source, "model.dropout", "dropout");
  }
  if (!IsNullOrFalse(model, "byte_fallback") || !IsNullOrFalse(model, "ignore_merges") ||
      !(IsNullOrFalse(model, "continuing_subword_prefix") ||
        model["continuing_subword_prefix"] == "") ||
      !(IsNullOrFalse(model, "end_of_word_suffix") || model["end_of_word_suffix"] == "")) {
    return Unsupported(source, "model", "BPE option (byte_fallback/ignore_merges/affixes)");
  }
  return base::Status::Ok();
}

base::StatusOr<std::unique_ptr<TokenizerImpl>> LoadFromJson(const json& root,
                                                            std::string_view source) {
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
    return FieldError(source, "model", "missing");
  }
  const json& model = root["model"];
  DI_RETURN_IF_ERROR(CheckModel(model, source));
  DI_RETURN_IF_ERROR(CheckNormalizer(root, source));
  if (root.contains("decoder") && !root["decoder"].is_null() &&
      root["decoder"].value("type", "") != "ByteLevel") {
    return Unsupported(source, "decoder", "decoder (only ByteLevel)");
  }
  DI_ASSIGN_OR_RETURN(std::vector<std::string> patterns, ParsePreTokenizer(root, source));

  auto impl = std::make_unique<TokenizerImpl>();
  DI_RETURN_IF_ERROR(ParseVocab(model, source, impl.get()));
  DI_ASSIGN_OR_RETURN(std::vector<BpeModel::Merge> merges, ParseMerges(model, source, *impl));
  // The BPE model works on raw bytes of the vocab (not of added tokens).
  std::vector<std::string> vocab_bytes(impl->tokens.size());
  for (size_t id = 0; id < impl->tokens.size(); ++id) {
    if (impl->tokens[id].exists) vocab_bytes[id] = impl->tokens[id].bytes;
  }
  DI_RETURN_IF_ERROR(ParseAddedTokens(root, source, impl.get()));
  auto bpe = BpeModel::Create(std::move(vocab_bytes), merges);
  if (!bpe.ok()) return bpe.status().WithContext(source);
  impl->bpe = std::make_unique<BpeModel>(std::move(bpe).value());
  auto pre = PreTokenizer::Create(patterns);
  if (!pre.ok()) return pre.status().WithContext(source);
  impl->pre_tokenizer = std::move(pre).value();
  return impl;
}

}  // namespace

base::StatusOr<std::unique_ptr<TokenizerImpl>> LoadTokenizerImpl(std::string_view json_text,
                                                                 std::string_view source_name) {
  json root;
  try {
    root = json::parse(json_text);
    return LoadFromJson(root, source_name);
  } catch (const json::exception& e) {
    return base::InvalidArgumentError(std::string(source_name) + ": bad JSON: " + e.what());
  }
}

}  // namespace deepinfer::tokenizer
