#include "model/backend.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace deepinfer::model {
namespace {

TEST(WeightFormatTest, NamesAreDistinct) {
  std::set<std::string> names;
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32,
                         WeightFormat::kFp8Row32, WeightFormat::kMxFp4}) {
    names.insert(std::string(WeightFormatName(f)));
  }
  EXPECT_EQ(names.size(), 5u);
  EXPECT_EQ(WeightFormatName(WeightFormat::kBF16), "bf16");
}

}  // namespace
}  // namespace deepinfer::model
