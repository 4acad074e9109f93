#include "bench_corpus.h"

#include <array>
#include <random>
#include <string_view>

namespace deepinfer::bench {
namespace {

constexpr std::array<std::string_view, 120> kEnglishWords = {"the",
                                                             "of",
                                                             "and",
                                                             "to",
                                                             "a",
                                                             "in",
                                                             "is",
                                                             "it",
                                                             "that",
                                                             "for",
                                                             "was",
                                                             "on",
                                                             "are",
                                                             "as",
                                                             "with",
                                                             "they",
                                                             "be",
                                                             "at",
                                                             "one",
                                                             "have",
                                                             "this",
                                                             "from",
                                                             "by",
                                                             "hot",
                                                             "word",
                                                             "but",
                                                             "what",
                                                             "some",
                                                             "we",
                                                             "can",
                                                             "out",
                                                             "other",
                                                             "were",
                                                             "all",
                                                             "there",
                                                             "when",
                                                             "up",
                                                             "use",
                                                             "your",
                                                             "how",
                                                             "said",
                                                             "an",
                                                             "each",
                                                             "she",
                                                             "which",
                                                             "do",
                                                             "their",
                                                             "time",
                                                             "if",
                                                             "will",
                                                             "way",
                                                             "about",
                                                             "many",
                                                             "then",
                                                             "them",
                                                             "write",
                                                             "would",
                                                             "like",
                                                             "so",
                                                             "these",
                                                             "her",
                                                             "long",
                                                             "make",
                                                             "thing",
                                                             "see",
                                                             "him",
                                                             "two",
                                                             "has",
                                                             "look",
                                                             "more",
                                                             "day",
                                                             "could",
                                                             "go",
                                                             "come",
                                                             "did",
                                                             "number",
                                                             "sound",
                                                             "no",
                                                             "most",
                                                             "people",
                                                             "my",
                                                             "over",
                                                             "know",
                                                             "water",
                                                             "than",
                                                             "call",
                                                             "first",
                                                             "who",
                                                             "may",
                                                             "down",
                                                             "side",
                                                             "been",
                                                             "now",
                                                             "find",
                                                             "model",
                                                             "inference",
                                                             "tokenizer",
                                                             "throughput",
                                                             "latency",
                                                             "distributed",
                                                             "architecture",
                                                             "performance",
                                                             "implementation",
                                                             "unfortunately",
                                                             "nevertheless",
                                                             "characteristics",
                                                             "approximately",
                                                             "responsibility",
                                                             "international",
                                                             "configuration",
                                                             "experimental",
                                                             "significantly",
                                                             "documentation",
                                                             "transformation",
                                                             "Kubernetes",
                                                             "PostgreSQL",
                                                             "GPU",
                                                             "attention",
                                                             "gradient"};

constexpr std::array<std::string_view, 24> kIdentifiers = {
    "i",          "n",       "x",        "value",  "result", "buffer",     "count",    "index",
    "config",     "request", "response", "tokens", "logits", "batch_size", "kv_cache", "num_heads",
    "hidden_dim", "self",    "ctx",      "err",    "data",   "items",      "node",     "parser"};

// Common Chinese characters and Japanese kana (UTF-8 literals, split by code point below).
constexpr std::string_view kHanzi =
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学"
    "对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头"
    "面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向"
    "情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信"
    "模型推理训练数据计算服务器优化性能分布式系统";
constexpr std::string_view kKana =
    "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん"
    "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンー"
    "日本語東京大学研究開発";
constexpr std::array<std::string_view, 16> kMixedPieces = {
    "😀",        "🚀",      "👨‍👩‍👧",
    "👍🏽", "🇯🇵",     "안녕하세요",
    "한국어",   "مرحبا",  "بالعالم",
    "१२३",      "Привет", "мир",
    "café",     "naïve",  "½",
    "™"};

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  std::string Document() {
    const int kind = Uniform(100);
    const size_t length = 1000 + Uniform(7000);
    std::string doc;
    while (doc.size() < length) {
      if (kind < 55) {
        EnglishSentence(&doc);
      } else if (kind < 75) {
        CodeLine(&doc);
      } else if (kind < 87) {
        CjkSentence(kHanzi, "，", "。", &doc);
      } else if (kind < 92) {
        CjkSentence(kKana, "、", "。", &doc);
      } else {
        MixedLine(&doc);
      }
    }
    return doc;
  }

 private:
  int Uniform(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  // Zipf-like: low indices much more frequent.
  template <typename Array>
  std::string_view Zipf(const Array& words) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
    const auto i = static_cast<size_t>(static_cast<double>(words.size()) * u * u * u);
    return words[std::min(i, words.size() - 1)];
  }

  void EnglishSentence(std::string* out) {
    const int words = 5 + Uniform(20);
    for (int w = 0; w < words; ++w) {
      std::string word(Zipf(kEnglishWords));
      if (w == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      if (Uniform(40) == 0) word = std::to_string(Uniform(100000));
      if (w > 0) out->push_back(' ');
      out->append(word);
      if (Uniform(12) == 0 && w + 1 < words) out->push_back(',');
    }
    static constexpr std::string_view kEnds[] = {". ", ". ", ". ", "? ", "! ", ".\n\n"};
    out->append(kEnds[Uniform(6)]);
  }

  void CodeLine(std::string* out) {
    const int indent = Uniform(4) * 4;
    out->append(static_cast<size_t>(indent), ' ');
    switch (Uniform(6)) {
      case 0:
        out->append("if (").append(Zipf(kIdentifiers)).append(" >= ");
        out->append(std::to_string(Uniform(1024))).append(") {\n");
        break;
      case 1:
        out->append(Zipf(kIdentifiers)).append(" = ").append(Zipf(kIdentifiers));
        out->append("[").append(Zipf(kIdentifiers)).append(" + 1];\n");
        break;
      case 2:
        out->append("def ").append(Zipf(kIdentifiers)).append("_fn(self, ");
        out->append(Zipf(kIdentifiers)).append("=None):\n");
        break;
      case 3:
        out->append("return std::make_unique<").append(Zipf(kIdentifiers)).append(">(");
        out->append(std::to_string(Uniform(64))).append(");\n");
        break;
      case 4:
        out->append("// TODO: ").append(Zipf(kEnglishWords)).append(" the ");
        out->append(Zipf(kEnglishWords)).append(" ").append(Zipf(kEnglishWords)).append("\n");
        break;
      default:
        out->append("}\n\n");
        break;
    }
  }

  static std::vector<std::string_view> CodePoints(std::string_view text) {
    std::vector<std::string_view> out;
    for (size_t i = 0; i < text.size();) {
      const auto lead = static_cast<unsigned char>(text[i]);
      const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      out.push_back(text.substr(i, n));
      i += n;
    }
    return out;
  }

  void CjkSentence(std::string_view alphabet, std::string_view comma, std::string_view stop,
                   std::string* out) {
    const std::vector<std::string_view> chars = CodePoints(alphabet);
    const int length = 8 + Uniform(30);
    for (int c = 0; c < length; ++c) {
      out->append(Zipf(chars));
      if (Uniform(10) == 0) out->append(comma);
      if (Uniform(30) == 0) out->append(std::to_string(Uniform(2030)));
    }
    out->append(stop);
    if (Uniform(5) == 0) out->append("\n");
  }

  void MixedLine(std::string* out) {
    switch (Uniform(4)) {
      case 0:
        out->append("{\"id\": ").append(std::to_string(Uniform(1 << 20)));
        out->append(", \"name\": \"").append(Zipf(kIdentifiers)).append("\", \"ok\": true}\n");
        break;
      case 1:
        for (int i = 0; i < 6; ++i) out->append(Zipf(kMixedPieces)).append(" ");
        out->append("\n");
        break;
      case 2:
        out->append("\t").append(std::to_string(rng_())).append("\t\t3.14159  \r\n");
        break;
      default:
        out->append("    ").append(Zipf(kEnglishWords)).append("  \n\n\n");
        break;
    }
  }

  std::mt19937_64 rng_;
};

}  // namespace

std::vector<std::string> MakeMixedCorpus(size_t target_bytes, uint64_t seed) {
  Generator generator(seed);
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < target_bytes) {
    docs.push_back(generator.Document());
    total += docs.back().size();
  }
  return docs;
}

}  // namespace deepinfer::bench
