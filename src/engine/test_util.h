// Helpers shared by the engine tests (not part of the library).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "engine/fake_model_runner.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "fmt/format.h"

namespace deepinfer::engine::testing {

inline kv::StateLayout TestLayout(int block_tokens) {
  kv::StateLayout l;
  l.num_window_layers = 2;
  l.window = 4;
  l.window_row_bytes = 8;
  l.groups = {{.source_layer = 0,
               .ratio = 2,
               .entry_bytes = 4,
               .index_key_bytes = 1,
               .partial_row_bytes = 8}};
  l.block_tokens = block_tokens;
  return l;
}

// What a request generates when run alone on the fake model (the expected output under any
// batching, chunking or preemption).
inline std::vector<TokenId> ReferenceTokens(const FakeModelRunner& runner, const Request& req,
                                            int sample_index, uint64_t seed,
                                            const std::vector<TokenId>& eos, int64_t max_len) {
  std::vector<TokenId> tokens = req.prompt;
  std::vector<TokenId> out;
  while (true) {
    const std::vector<float> logits = runner.ReferenceLogits(tokens);
    const SampleContext ctx{seed, sample_index, static_cast<int64_t>(tokens.size()), req.prompt,
                            out};
    const TokenId t = SampleToken(logits, req.params, ctx).token;
    out.push_back(t);
    tokens.push_back(t);
    const bool stop =
        (!req.params.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end()) ||
        std::find(req.params.stop_token_ids.begin(), req.params.stop_token_ids.end(), t) !=
            req.params.stop_token_ids.end();
    if (stop || static_cast<int>(out.size()) >= req.params.max_tokens ||
        static_cast<int64_t>(tokens.size()) >= max_len) {
      return out;
    }
  }
}

// "<request>:<start>+<len>[blocks]" per chunk, "*k" when it samples k tokens, then copies.
inline std::string Describe(const StepPlan& plan) {
  std::string s;
  for (const ScheduledChunk& c : plan.chunks) {
    if (!s.empty()) s += " ";
    s += fmt::format("{}:{}+{}[{}]", c.request_id, c.start_position, c.tokens.size(),
                     fmt::join(c.block_table, ","));
    if (!c.samples.empty()) s += fmt::format("*{}", c.samples.size());
  }
  for (const kv::StateCopy& c : plan.copies_after) {
    s += fmt::format(" copy(slot {}->{}, block {}->{})", c.src_slot, c.dst_slot, c.src_block,
                     c.dst_block);
  }
  return s;
}

}  // namespace deepinfer::engine::testing
