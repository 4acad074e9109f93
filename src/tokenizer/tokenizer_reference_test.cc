// Exactness against HF `tokenizers` 0.23.2: the shared reference cases, the recipe goldens
// that carry token ids, and this module's own goldens (testdata/, made by
// tools/reference/make_tokenizer_goldens.py).
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {
namespace {

using nlohmann::json;
using testing::ReadFileOrDie;
using testing::Shipped;

const std::string kShared = DEEPINFER_SHARED_DIR;
const std::string kSource = DEEPINFER_SOURCE_DIR;

std::string ShortRepr(const std::string& s) { return json(s).dump().substr(0, 200); }

// Checks encode / decode / decode(skip special) of every case; returns the number of cases.
int CheckCases(const Tokenizer& tok, const json& cases) {
  int checked = 0, failures = 0;
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok.Encode(text);
    ++checked;
    bool ok = ids == expected;
    if (c.contains("decoded")) {
      auto decoded = tok.Decode(expected, false);
      auto skipped = tok.Decode(expected, true);
      ok = ok && decoded.ok() && *decoded == c["decoded"].get<std::string>() && skipped.ok() &&
           *skipped == c["decoded_skip_special"].get<std::string>();
    }
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << "case " << ShortRepr(text) << "\n expected " << json(expected).dump()
                    << "\n got      " << json(ids).dump();
    }
  }
  EXPECT_EQ(failures, 0) << "of " << checked;
  return checked;
}

json LoadJsonLines(const std::string& path) {
  json lines = json::array();
  std::istringstream in(ReadFileOrDie(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(json::parse(line));
  }
  return lines;
}

TEST(TokenizerReferenceTest, SharedCasesV41) {
  const json file =
      json::parse(ReadFileOrDie(kShared + "/tokenizers/deepseek-v4.1/tokenizer_cases.json"));
  EXPECT_EQ(CheckCases(Shipped("deepseek-v4.1"), file["cases"]), 336);
}

TEST(TokenizerReferenceTest, SharedCasesV4) {
  const json file =
      json::parse(ReadFileOrDie(kShared + "/tokenizers/deepseek-v4/tokenizer_cases.json"));
  EXPECT_EQ(CheckCases(Shipped("deepseek-v4"), file["cases"]), 336);
}

const Tokenizer& ByRecipeName(const std::string& name) {
  return Shipped(name == "v4" ? "deepseek-v4" : "deepseek-v4.1");
}

// `tokenize` goldens: ids of `text`. `encode` goldens: ids of the rendered prompt, taken from
// the `render` golden with the same protocol, body and encoding; an encode case without one
// must round-trip (decode, re-encode).
TEST(TokenizerReferenceTest, RecipeGoldens) {
  const json corpus = LoadJsonLines(kShared + "/recipe/corpus.jsonl");
  const json goldens = LoadJsonLines(kShared + "/recipe/goldens/rust.jsonl");
  std::map<std::string, json> golden_by_name;
  for (const json& g : goldens) golden_by_name[g["name"].get<std::string>()] = g;
  int tokenize_cases = 0, prompt_cases = 0, round_trips = 0;
  for (const json& c : corpus) {
    const std::string op = c["op"].get<std::string>();
    const json& golden = golden_by_name.at(c["name"].get<std::string>());
    if ((op != "tokenize" && op != "encode") || !golden["ok"].get<bool>()) continue;
    const std::string encoding = c.value("encoding", "");
    const Tokenizer& tok = ByRecipeName(c.value("tokenizer", encoding == "v4" ? "v4" : "v41"));
    const auto expected = golden["result"]["ids"].get<std::vector<int32_t>>();
    if (op == "tokenize") {
      EXPECT_EQ(tok.Encode(c["text"].get<std::string>()), expected) << c["name"];
      ++tokenize_cases;
      continue;
    }
    const json* prompt = nullptr;
    for (const json& r : corpus) {
      if (r["op"] == "render" && r["protocol"] == c["protocol"] && r["body"] == c["body"] &&
          r.value("encoding", "") == encoding && golden_by_name.at(r["name"])["ok"] == true) {
        prompt = &golden_by_name.at(r["name"])["result"]["prompt"];
        break;
      }
    }
    if (prompt != nullptr) {
      EXPECT_EQ(tok.Encode(prompt->get<std::string>()), expected) << c["name"];
      ++prompt_cases;
    } else {
      auto text = tok.Decode(expected);
      ASSERT_TRUE(text.ok()) << text.status();
      EXPECT_EQ(tok.Encode(*text), expected) << c["name"];
      ++round_trips;
    }
  }
  EXPECT_EQ(tokenize_cases, 8);
  EXPECT_EQ(prompt_cases, 7);
  EXPECT_EQ(round_trips, 1);
}

// This module's own goldens: {"version", "special": bool, "text", "ids"} per line.
TEST(TokenizerReferenceTest, ProjectGoldens) {
  // DEEPINFER_TOKENIZER_GOLDENS overrides the file (e.g. a full code-point sweep kept out of
  // the repository).
  const char* override_path = std::getenv("DEEPINFER_TOKENIZER_GOLDENS");
  const json lines =
      LoadJsonLines(override_path ? std::string(override_path)
                                  : kSource + "/src/tokenizer/testdata/hf_goldens.jsonl");
  ASSERT_GT(lines.size(), 100u);
  int failures = 0;
  for (const json& g : lines) {
    const Tokenizer& tok = Shipped(g["version"].get<std::string>());
    const std::string text = g["text"].get<std::string>();
    const auto expected = g["ids"].get<std::vector<int32_t>>();
    const auto ids = tok.Encode(text, g["special"].get<bool>());
    if (ids != expected && ++failures <= 10) {
      ADD_FAILURE() << "golden " << ShortRepr(text) << " special=" << g["special"] << "\n expected "
                    << json(expected).dump() << "\n got      " << json(ids).dump();
    }
    if (g.contains("decoded")) {
      auto decoded = tok.Decode(expected, false);
      ASSERT_TRUE(decoded.ok());
      EXPECT_EQ(*decoded, g["decoded"].get<std::string>()) << ShortRepr(text);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << lines.size();
}

}  // namespace
}  // namespace deepinfer::tokenizer
