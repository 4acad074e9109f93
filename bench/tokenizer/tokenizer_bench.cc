// tokenizer_bench: encode throughput of deepinfer::tokenizer.
//
//   tokenizer_bench [--corpus-mb 12] [--seed 1] [--repeats 3] [--threads 0]
//                   [--corpus corpus.jsonl] [--write-corpus corpus.jsonl] [--dump-ids ids.jsonl]
//                   [--tokenizer PATH] [--json]
//
// Single-thread: Encode(doc) for every document in a loop on one thread (the first pass, with
// a cold word cache, and the best of --repeats passes). Multi-thread: EncodeBatch over all
// documents on a ThreadPool of --threads workers (0 = all cores). MB = 10^6 bytes of UTF-8
// input. compare_hf.py runs this next to HF tokenizers on the same corpus.
#include <time.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "bench_corpus.h"
#include "tokenizer/tokenizer.h"

namespace {

using deepinfer::tokenizer::Tokenizer;
using nlohmann::json;

struct Options {
  std::string tokenizer_path;
  double corpus_mb = 12.0;
  uint64_t seed = 1;
  int repeats = 3;
  int threads = 0;
  std::string corpus_path;
  std::string write_corpus_path;
  std::string dump_ids_path;
  bool json_output = false;
};

bool ReadCorpus(const std::string& path, std::vector<std::string>* docs) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  try {
    while (std::getline(in, line)) {
      if (!line.empty()) docs->push_back(json::parse(line).at("text").get<std::string>());
    }
  } catch (const json::exception& e) {
    std::fprintf(stderr, "error: %s: %s\n", path.c_str(), e.what());
    return false;
  }
  return true;
}

bool WriteJsonLines(const std::string& path, const std::vector<json>& lines) {
  std::ofstream out(path);
  for (const json& line : lines) out << line.dump() << "\n";
  return static_cast<bool>(out);
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Wall-clock seconds of fn(); its process CPU seconds in *cpu_seconds (if given). On a shared
// machine the CPU time of a single-thread pass is the steadier figure.
double Seconds(const std::function<void()>& fn, double* cpu_seconds = nullptr) {
  const double cpu_start = ProcessCpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  fn();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (cpu_seconds != nullptr) *cpu_seconds = ProcessCpuSeconds() - cpu_start;
  return wall;
}

int Run(const Options& options) {
  auto loaded = Tokenizer::FromFile(options.tokenizer_path.empty()
                                        ? deepinfer::tokenizer::DefaultTokenizerPath()
                                        : options.tokenizer_path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str());
    return 2;
  }
  const Tokenizer& tok = **loaded;
  std::vector<std::string> docs;
  if (!options.corpus_path.empty()) {
    if (!ReadCorpus(options.corpus_path, &docs)) return 2;
  } else {
    docs = deepinfer::bench::MakeMixedCorpus(static_cast<size_t>(options.corpus_mb * 1e6),
                                             options.seed);
  }
  size_t bytes = 0;
  for (const std::string& doc : docs) bytes += doc.size();
  if (!options.write_corpus_path.empty()) {
    std::vector<json> lines;
    for (const std::string& doc : docs) lines.push_back(json{{"text", doc}});
    if (!WriteJsonLines(options.write_corpus_path, lines)) return 2;
  }

  size_t tokens = 0;
  auto single_pass = [&] {
    tokens = 0;
    for (const std::string& doc : docs) tokens += tok.Encode(doc).size();
  };
  double cpu = 0;
  const double first_pass = Seconds(single_pass, &cpu);
  double best_single = first_pass;
  double best_single_cpu = cpu;
  for (int r = 1; r < options.repeats; ++r) {
    best_single = std::min(best_single, Seconds(single_pass, &cpu));
    best_single_cpu = std::min(best_single_cpu, cpu);
  }

  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  deepinfer::base::ThreadPool pool(threads);
  std::vector<std::vector<int32_t>> batch;
  double best_batch = 1e30;
  for (int r = 0; r < std::max(1, options.repeats); ++r) {
    best_batch = std::min(best_batch, Seconds([&] { batch = tok.EncodeBatch(docs, true, &pool); }));
  }
  if (!options.dump_ids_path.empty()) {
    std::vector<json> lines;
    for (const auto& ids : batch) lines.push_back(json{{"ids", ids}});
    if (!WriteJsonLines(options.dump_ids_path, lines)) return 2;
  }

  const double mb = static_cast<double>(bytes) / 1e6;
  const json result = {
      {"impl", "deepinfer"},
      {"docs", docs.size()},
      {"bytes", bytes},
      {"tokens", tokens},
      {"single_first_pass_s", first_pass},
      {"single_best_s", best_single},
      {"single_mb_per_s", mb / best_single},
      {"single_tokens_per_s", static_cast<double>(tokens) / best_single},
      {"single_first_pass_mb_per_s", mb / first_pass},
      {"single_cpu_mb_per_s", mb / best_single_cpu},
      {"batch_threads", threads},
      {"batch_best_s", best_batch},
      {"batch_mb_per_s", mb / best_batch},
      {"batch_tokens_per_s", static_cast<double>(tokens) / best_batch},
  };
  if (options.json_output) {
    std::printf("%s\n", result.dump().c_str());
  } else {
    std::printf("corpus: %zu docs, %.2f MB, %zu tokens\n", docs.size(), mb, tokens);
    std::printf(
        "single-thread: %.2f MB/s, %.0f tokens/s (best of %d; first pass %.2f MB/s; "
        "by CPU time %.2f MB/s)\n",
        mb / best_single, static_cast<double>(tokens) / best_single, options.repeats,
        mb / first_pass, mb / best_single_cpu);
    std::printf("batch (%d threads): %.2f MB/s, %.0f tokens/s\n", threads, mb / best_batch,
                static_cast<double>(tokens) / best_batch);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("deepinfer tokenizer encode throughput");
  Options options;
  app.add_option("--tokenizer", options.tokenizer_path, "tokenizer.json (default: shipped V4.1)");
  app.add_option("--corpus-mb", options.corpus_mb, "generated corpus size in MB");
  app.add_option("--seed", options.seed, "corpus generator seed");
  app.add_option("--repeats", options.repeats, "timed passes (best is reported)");
  app.add_option("--threads", options.threads, "batch threads (0 = all cores)");
  app.add_option("--corpus", options.corpus_path, "read the corpus (JSONL {\"text\"}) instead");
  app.add_option("--write-corpus", options.write_corpus_path, "write the corpus as JSONL");
  app.add_option("--dump-ids", options.dump_ids_path, "write the ids as JSONL {\"ids\"}");
  app.add_flag("--json", options.json_output, "print one JSON result line");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return Run(options);
}
