#include "model/engram_hash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "io/safetensors.h"

namespace deepinfer::model {
namespace {

const std::string kGoldens = std::string(DEEPINFER_SHARED_DIR) + "/goldens/v41/";
const std::string kRealTokenizer =
    std::string(DEEPINFER_SHARED_DIR) + "/tokenizers/deepseek-v4.1/tokenizer.json";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The goldens' small I32/I64 tensors, through the io module's reader.
struct GoldenTensors {
  std::unique_ptr<io::SafetensorsFile> file;

  explicit GoldenTensors(const std::string& path) {
    auto opened = io::SafetensorsFile::Open(path);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (opened.ok()) file = std::move(*opened);
  }
  template <typename T>
  std::vector<T> Get(const std::string& name) const {
    if (!file) return {};
    auto bytes = file->Bytes(name);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return {};
    std::vector<T> out(bytes->size() / sizeof(T));
    std::memcpy(out.data(), bytes->data(), out.size() * sizeof(T));
    return out;
  }
  int64_t Dim(const std::string& name, int i) const {
    auto info = file->Info(name);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? (*info)->shape[i] : -1;
  }
};

// The Engram fields of a config.json's text_config.
io::TextConfig EngramConfig(const std::string& config_path) {
  const nlohmann::json text = nlohmann::json::parse(ReadAll(config_path))["text_config"];
  io::TextConfig config;
  config.engram_layer_ids = text["engram_layer_ids"].get<std::vector<int>>();
  config.engram_num_embeddings = text["engram_num_embeddings"].get<std::vector<int64_t>>();
  config.engram_max_ngram_size = text["engram_max_ngram_size"];
  config.engram_vocab_size = text["engram_vocab_size"];
  config.engram_n_heads = text["engram_n_heads"];
  config.engram_head_dim = text["engram_head_dim"];
  config.engram_pad_token_id = text["engram_pad_token_id"];
  config.engram_compressed_vocab_size = text["engram_compressed_vocab_size"];
  return config;
}

class EngramGoldenTest : public testing::TestWithParam<std::string> {};

TEST_P(EngramGoldenTest, DerivedConstantsEqualGoldens) {
  const std::string dir = kGoldens + GetParam() + "/";
  const io::TextConfig config = EngramConfig(dir + "config.json");
  auto derived = DeriveEngramConstants(config, dir + "tokenizer.json");
  ASSERT_TRUE(derived.ok()) << derived.status();
  const GoldenTensors golden(dir + "engram_hash.safetensors");

  EXPECT_EQ(derived->token_map, golden.Get<int32_t>("token_map"));
  EXPECT_EQ(derived->pad_id, golden.Get<int64_t>("pad_id").at(0));
  EXPECT_EQ(derived->multipliers, golden.Get<int64_t>("multipliers"));
  EXPECT_EQ(derived->primes, golden.Get<int64_t>("primes"));
  EXPECT_EQ(derived->offsets, golden.Get<int64_t>("offsets"));
  EXPECT_EQ(derived->compressed_vocab_size, config.engram_compressed_vocab_size);
  EXPECT_EQ(derived->n_columns, golden.Dim("primes", 1));
  EXPECT_EQ(derived->n_layers, golden.Dim("multipliers", 0));
}

TEST_P(EngramGoldenTest, ModelFormMatches) {
  const std::string dir = kGoldens + GetParam() + "/";
  const io::TextConfig config = EngramConfig(dir + "config.json");
  auto c = DeriveEngramHashConstants(config, dir + "tokenizer.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const GoldenTensors golden(dir + "engram_hash.safetensors");
  EXPECT_EQ(c->n_layers, static_cast<int>(config.engram_layer_ids.size()));
  EXPECT_EQ(c->max_ngram, config.engram_max_ngram_size);
  EXPECT_EQ(c->n_heads, config.engram_n_heads);
  EXPECT_EQ(c->columns(), golden.Dim("primes", 1));
  EXPECT_EQ(c->token_map, golden.Get<int32_t>("token_map"));
  EXPECT_EQ(c->offsets, golden.Get<int64_t>("offsets"));
}

// End to end: constants derived from tokenizer + config reproduce the goldens' row ids.
TEST_P(EngramGoldenTest, RowIdsOfPromptsEqualGoldens) {
  const std::string dir = kGoldens + GetParam() + "/";
  auto c = DeriveEngramHashConstants(EngramConfig(dir + "config.json"), dir + "tokenizer.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const GoldenTensors golden(dir + "goldens.safetensors");
  for (int p = 0; p < 3; ++p) {
    const std::string prefix = "prompt." + std::to_string(p) + ".";
    const std::vector<int32_t> tokens = golden.Get<int32_t>(prefix + "input_ids");
    const std::vector<int64_t> expected = golden.Get<int64_t>(prefix + "engram_hash_ids");
    ASSERT_FALSE(tokens.empty());
    std::vector<int64_t> rows;
    ComputeEngramRowIds(*c, {}, tokens, &rows);
    EXPECT_EQ(rows, expected) << "prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, EngramGoldenTest, testing::Values("tiny_a", "tiny_b"));

TEST(EngramHashTest, RealTokenizerTokenMapMatchesUpstream) {
  const nlohmann::json expected = nlohmann::json::parse(
      ReadAll(std::string(DEEPINFER_SOURCE_DIR) + "/src/model/testdata/engram_token_map_v41.json"));
  auto vocab = LoadEngramVocab(kRealTokenizer);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  const CompressedTokenMap map = BuildCompressedTokenMap(*vocab);
  ASSERT_EQ(map.token_map.size(), expected["vocab"].get<size_t>());
  EXPECT_EQ(map.compressed_vocab_size, 99092);
  EXPECT_EQ(map.compressed_vocab_size, expected["compressed_vocab_size"].get<int64_t>());
  for (const auto& [id, compressed] : expected["samples"].items()) {
    EXPECT_EQ(map.token_map[std::stoi(id)], compressed.get<int32_t>()) << "token id " << id;
  }
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const int32_t v : map.token_map) {
    for (int byte = 0; byte < 4; ++byte) {
      hash = (hash ^ ((static_cast<uint32_t>(v) >> (8 * byte)) & 0xFF)) * 0x100000001b3ULL;
    }
  }
  EXPECT_EQ(hash, std::stoull(expected["fnv1a64_int32_le"].get<std::string>()));
}

TEST(EngramHashTest, ReleaseConfigPrimesSumToTableSizes) {
  // model.md §1.1: engram_num_embeddings [384006168, 384016682] for vocab_size 16e6,
  // 8 heads, 2..4-grams, two layers.
  const std::vector<int64_t> primes = EngramPrimes(2, 4, 8, 16000000);
  ASSERT_EQ(primes.size(), 48u);
  const std::vector<int64_t> offsets = EngramOffsets(primes, 24);
  EXPECT_EQ(offsets[23] + primes[23], 384006168);
  EXPECT_EQ(offsets[47] + primes[47], 384016682);
  EXPECT_EQ(primes[0], 16000057);  // first prime >= 16,000,000
  EXPECT_EQ(offsets[24], 0);
  EXPECT_EQ(offsets[1], primes[0]);
}

TEST(EngramHashTest, ReleaseMultipliersFromSpec) {
  const std::vector<int> layers = {1, 14};
  const std::vector<int64_t> m = EngramMultipliers(layers, 4, 99092);
  ASSERT_EQ(m.size(), 8u);
  EXPECT_EQ(m[0], 76632096046245);
  EXPECT_EQ(m[3], 73987337458391);
  EXPECT_EQ(m[4], 67716810739261);
  EXPECT_EQ(m[5], 51510806800915);
  EXPECT_EQ(m[6], 30921347202721);
  for (const int64_t v : m) EXPECT_EQ(v % 2, 1);
}

TEST(EngramHashTest, IsPrime64) {
  EXPECT_FALSE(IsPrime64(0));
  EXPECT_FALSE(IsPrime64(1));
  EXPECT_TRUE(IsPrime64(2));
  EXPECT_TRUE(IsPrime64(97));
  EXPECT_FALSE(IsPrime64(561));                     // Carmichael
  EXPECT_FALSE(IsPrime64(3215031751ULL));           // strong pseudoprime to 2,3,5,7
  EXPECT_TRUE(IsPrime64(18446744073709551557ULL));  // largest 64-bit prime
  EXPECT_FALSE(IsPrime64(18446744073709551559ULL));
  int count = 0;
  for (uint64_t n = 0; n < 10000; ++n) count += IsPrime64(n);
  EXPECT_EQ(count, 1229);
}

TEST(EngramNormalizeTest, UpstreamChain) {
  EXPECT_EQ(EngramNormalize(" "), " ");   // a lone space survives
  EXPECT_EQ(EngramNormalize("  "), " ");  // collapses to one, then survives
  EXPECT_EQ(EngramNormalize(" \t\n"), " ");
  EXPECT_EQ(EngramNormalize(" The "), "the");
  EXPECT_EQ(EngramNormalize("Ａ"), "a");           // NFKC full-width
  EXPECT_EQ(EngramNormalize("ﬁ"), "fi");           // NFKC ligature
  EXPECT_EQ(EngramNormalize("É"), "e");            // accents stripped
  EXPECT_EQ(EngramNormalize("Straße"), "straße");  // no case folding
  EXPECT_EQ(EngramNormalize("ΟΔΟΣ"), "οδοσ");      // no final-sigma context rule
  EXPECT_EQ(EngramNormalize("İ"), "i");            // NFD splits off the dot, which is stripped
  EXPECT_EQ(EngramNormalize("ẞ"), "ß");
  EXPECT_EQ(EngramNormalize("ǅ"), "dz");
  EXPECT_EQ(EngramNormalize("\xE2\x80\xA8x\xC2\x85"), "x");  // Unicode White_Space stripped
  EXPECT_EQ(EngramNormalize("\xCC\x81"), "");                // a lone combining mark vanishes
  EXPECT_EQ(EngramNormalize("a\xEE\x80\x80"), "a ");         // U+E000 becomes a space (sentinel)
}

TEST(EngramNormalizeTest, TokenKeys) {
  EXPECT_EQ(EngramTokenKey({"\xCC\x81", "\xCC\x81"}), "\xCC\x81");  // empty -> raw text
  EXPECT_EQ(EngramTokenKey({"\xE6\x97", "æĹ"}), "æĹ");              // byte fragment -> raw
  EXPECT_EQ(EngramTokenKey({"x\xEF\xBF\xBD", "x\xEF\xBF\xBD"}), "x\xEF\xBF\xBD");
  EXPECT_EQ(EngramTokenKey({" Hello", "ĠHello"}), "hello");
}

TEST(EngramHashTest, Errors) {
  io::TextConfig config = EngramConfig(kGoldens + "tiny_a/config.json");
  std::vector<EngramVocabEntry> vocab = {{"a", "a"}, {"A", "A"}, {"b", "b"}};
  auto derived = DeriveEngramConstants(config, vocab);
  ASSERT_FALSE(derived.ok());
  EXPECT_NE(derived.status().message().find("engram_compressed_vocab_size"), std::string::npos);

  config.engram_compressed_vocab_size = 2;
  config.engram_pad_token_id = 7;
  derived = DeriveEngramConstants(config, vocab);
  ASSERT_FALSE(derived.ok());
  EXPECT_NE(derived.status().message().find("engram_pad_token_id"), std::string::npos);

  config.engram_pad_token_id = 2;
  config.engram_num_embeddings = {1, 2};
  derived = DeriveEngramConstants(config, vocab);
  ASSERT_FALSE(derived.ok());
  EXPECT_NE(derived.status().message().find("engram_num_embeddings[0]"), std::string::npos);

  config.engram_num_embeddings = {630, 834};
  config.engram_n_heads = 1 << 20;
  EXPECT_FALSE(DeriveEngramConstants(config, vocab).ok());
  config.engram_n_heads = 2;
  config.engram_vocab_size = INT64_MAX;
  EXPECT_FALSE(DeriveEngramConstants(config, vocab).ok());

  config.engram_layer_ids.clear();
  EXPECT_FALSE(DeriveEngramConstants(config, vocab).ok());
  EXPECT_FALSE(LoadEngramVocab("/nonexistent/tokenizer.json").ok());
}

}  // namespace
}  // namespace deepinfer::model
