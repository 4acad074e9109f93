// Runs every reference case of ../shared/recipe through the library (the same runner as
// `deepinfer recipe-check`); all must pass.
#include "recipe/conformance.h"

#include <gtest/gtest.h>

namespace deepinfer::recipe {
namespace {

const std::string kRecipeDir = std::string(DEEPINFER_SHARED_DIR) + "/recipe";

TEST(ConformanceTest, AllReferenceCasesPass) {
  ConformanceOptions options;
  options.tokenizers_dir = std::string(DEEPINFER_SHARED_DIR) + "/tokenizers";
  auto report =
      RunConformance(kRecipeDir + "/corpus.jsonl", kRecipeDir + "/goldens/rust.jsonl", options);
  ASSERT_TRUE(report.ok()) << report.status();
  for (const CaseOutcome& outcome : report->cases) {
    EXPECT_TRUE(outcome.passed) << outcome.name << ": " << outcome.difference;
  }
  EXPECT_EQ(report->passed, 148);
  EXPECT_EQ(report->failed, 0);
}

TEST(ConformanceTest, MissingCorpusIsAnError) {
  auto report = RunConformance("/nonexistent/corpus.jsonl", kRecipeDir + "/goldens/rust.jsonl", {});
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), base::StatusCode::kNotFound);
}

TEST(ConformanceTest, ComparisonIgnoresTimestampsOnly) {
  const Json test_case = Json{{"name", "x"}, {"op", "complete"}};
  const Json actual = Json::parse(R"({"ok":true,"result":{"created":5,"a":1},"name":"x"})");
  EXPECT_EQ(ConformanceRunner::Compare(test_case, actual,
                                       R"({"ok":true,"result":{"created":9,"a":1},"name":"x"})"),
            "");
  EXPECT_NE(ConformanceRunner::Compare(test_case, actual,
                                       R"({"ok":true,"result":{"created":9,"a":2},"name":"x"})"),
            "");
}

}  // namespace
}  // namespace deepinfer::recipe
