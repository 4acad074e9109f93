// Deterministic synthetic mixed-language corpus for tokenizer benchmarks (never committed;
// generated at bench time). Byte shares, roughly: English prose 55 %, source code 20 %,
// Chinese 12 %, Japanese 5 %, mixed (emoji, Korean, Arabic, numbers, JSON, whitespace) 8 %.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::bench {

// Documents of ~1-8 KB until their total size reaches `target_bytes`. Same seed, same corpus.
std::vector<std::string> MakeMixedCorpus(size_t target_bytes, uint64_t seed);

}  // namespace deepinfer::bench
