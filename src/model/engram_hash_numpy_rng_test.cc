#include "model/engram_hash_numpy_rng.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace deepinfer::model {
namespace {

nlohmann::json LoadGoldens() {
  const std::string path =
      std::string(DEEPINFER_SOURCE_DIR) + "/src/model/testdata/numpy_rng_goldens.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

int64_t ToInt64(const nlohmann::json& value) { return std::stoll(value.get<std::string>()); }
uint64_t ToUint64(const nlohmann::json& value) { return std::stoull(value.get<std::string>()); }

TEST(NumpyRngTest, RawStreamMatchesNumpy) {
  const nlohmann::json goldens = LoadGoldens();
  ASSERT_GE(goldens["random_raw"].size(), 4u);
  for (const auto& item : goldens["random_raw"]) {
    NumpyDefaultRng rng(ToUint64(item["seed"]));
    for (const auto& value : item["values"]) {
      EXPECT_EQ(rng.NextUint64(), ToUint64(value)) << "seed " << item["seed"];
    }
  }
}

TEST(NumpyRngTest, IntegersMatchNumpy) {
  const nlohmann::json goldens = LoadGoldens();
  ASSERT_GE(goldens["integers"].size(), 100u);
  for (const auto& item : goldens["integers"]) {
    NumpyDefaultRng rng(ToUint64(item["seed"]));
    const auto& expected = item["values"];
    const std::vector<int64_t> got =
        rng.Integers(ToInt64(item["low"]), ToInt64(item["high"]), expected.size());
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], ToInt64(expected[i]))
          << "seed " << item["seed"] << " high " << item["high"] << " index " << i;
    }
  }
}

TEST(NumpyRngTest, ReleaseLayerOneMultipliersFromSpec) {
  // model.md §2.6 pins the release's layer-1 multipliers (compressed vocab 99092).
  const int64_t bound = INT64_MAX / 99092 / 2;
  NumpyDefaultRng rng(10007);
  const std::vector<int64_t> v = rng.Integers(0, bound, 4);
  EXPECT_EQ(2 * v[0] + 1, 76632096046245);
  EXPECT_EQ(2 * v[1] + 1, 4839876093313);
  EXPECT_EQ(2 * v[2] + 1, 35959672319349);
  EXPECT_EQ(2 * v[3] + 1, 73987337458391);
}

}  // namespace
}  // namespace deepinfer::model
