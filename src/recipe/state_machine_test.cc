#include "recipe/state_machine.h"

#include <gtest/gtest.h>

namespace deepinfer::recipe {
namespace {

// Feeds `pieces` and returns "kind:length" per coalesced segment.
std::vector<std::pair<ActionKind, size_t>> Segments(const ParsingOptions& options,
                                                    const std::vector<std::string>& pieces) {
  StateMachine machine(options);
  std::vector<ActionSegment> segments;
  for (const std::string& piece : pieces) machine.Feed(piece, &segments);
  machine.Finish(&segments);
  std::vector<std::pair<ActionKind, size_t>> out;
  for (const ActionSegment& segment : segments) {
    if (!out.empty() && out.back().first == segment.action.kind) {
      out.back().second += segment.length;
    } else {
      out.emplace_back(segment.action.kind, segment.length);
    }
  }
  return out;
}

TEST(StateMachineTest, ReasoningThenAnswer) {
  ParsingOptions options;
  options.reasoning_initial_stage = ReasoningStage::kStart;
  const auto segments = Segments(options, {"\nthink\n\n</think>\n\nanswer"});
  const std::vector<std::pair<ActionKind, size_t>> expected = {{ActionKind::kSkip, 1},
                                                               {ActionKind::kReasoning, 5},
                                                               {ActionKind::kSkip, 12},
                                                               {ActionKind::kRaw, 6}};
  EXPECT_EQ(segments, expected);
}

TEST(StateMachineTest, SegmentLengthsCoverTheInput) {
  ParsingOptions options;
  options.stop_sequences = {"END"};
  const std::string text =
      "abc<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">EN</｜DSML｜ calls>xyz";
  size_t total = 0;
  for (const auto& [kind, length] : Segments(options, {text})) total += length;
  EXPECT_EQ(total, text.size());
}

TEST(StateMachineTest, HeldBackPrefixIsReleasedAtFinish) {
  ParsingOptions options;
  options.stop_sequences = {"STOP"};
  const auto segments = Segments(options, {"abc ST"});
  const std::vector<std::pair<ActionKind, size_t>> expected = {{ActionKind::kRaw, 6}};
  EXPECT_EQ(segments, expected);
}

TEST(StateMachineTest, ExtraEndOfThinkingInAnswerIsDropped) {
  ParsingOptions options;
  const auto segments = Segments(options, {"a</think>b"});
  const std::vector<std::pair<ActionKind, size_t>> expected = {
      {ActionKind::kRaw, 1}, {ActionKind::kSkipInvalid, 8}, {ActionKind::kRaw, 1}};
  EXPECT_EQ(segments, expected);
}

}  // namespace
}  // namespace deepinfer::recipe
