// tokenizer_bench: the tokenizer's throughput (input bytes/s) on text that needs the Unicode database
// (Chinese, Cyrillic, Japanese, accented Latin written precomposed and decomposed) against the same
// tokenizer on ASCII English, which touches no Unicode table (ASCII is classified inline and is
// already in NFC). The summary prints each case's cost per byte as a multiple of the ASCII baseline
// measured in the same run, so a change to the Unicode classes or to NFC shows as a change in those
// multiples whatever the machine's speed. The tokenizer is trained (train_byte_level_bpe) on the test
// models' multilingual text, Llama-3 pattern, NFC normaliser on (as Qwen2's tokenizer.json has it).
//
//   tokenizer_bench [--benchmark_repetitions=N --benchmark_enable_random_interleaving=true]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "infergate/runtime/model/test_model.h"
#include "infergate/runtime/model/tokenizer.h"
#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::model {
namespace {

constexpr size_t kTextBytes = 64 << 10;  // each input repeated up to about 64 KiB

std::string repeat_to_size(std::string_view unit) {
  std::string s;
  while (s.size() < kTextBytes) {
    s.append(unit);
    s.push_back('\n');
  }
  return s;
}

// English prose, numbers and code: every byte below 0x80.
const std::string& ascii_text() {
  static const std::string s = repeat_to_size(
      "The model server starts only after the init container has checked every file against the signed "
      "manifest. If a shard changed, the digest differs, and the pod never becomes ready; the operator "
      "rolls the canary back. It's a careful process, isn't it? We'll measure everything: 1, 2, 42, 4096, "
      "3.14159 and 99.9%.\nfor (int i = 0; i < n; ++i) { out[i] = scale * static_cast<float>(q[i]); }");
  return s;
}

// Scripts whose letters and numbers are looked up in the Unicode database; precomposed (already NFC,
// but NFC must still look at every character above U+0300).
const std::string& multilingual_text() {
  static const std::string s = repeat_to_size(
      "部署大语言模型时，服务进程只会在初始化容器验证所有文件之后启动。如果任何一个分片被修改，摘要就会不同。"
      "Привет! Модель загружается только после проверки подписи, версия ٣ и ½. "
      "こんにちは、署名を確認してからモデルを読み込みます。 Bonjour, le modèle démarre après la "
      "vérification; "
      "naïve café, Straße, ñandú, Ångström, 한국어 텍스트.");
  return s;
}

// Latin with its accents as combining marks (NFD): NFC decomposes, reorders and composes each one.
const std::string& decomposed_text() {
  static const std::string s = repeat_to_size(
      "Le mode\xcc\x80le de\xcc\x81marre apre\xcc\x80s la ve\xcc\x81rification; nai\xcc\x88ve cafe\xcc\x81, "
      "fac\xcc\xa7"
      "ade, n\xcc\x83"
      "andu\xcc\x81, A\xcc\x8a"
      "ngstro\xcc\x88m, Vie\xcc\xa3\xcc\x82t Nam, "
      "a\xcc\x81\xcc\xa3 o\xcc\x9b\xcc\x81 e\xcc\x82\xcc\x83; \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 hangul "
      "jamo.");
  return s;
}

const std::string& text(int which) {
  switch (which) {
    case 0: return ascii_text();
    case 1: return multilingual_text();
    default: return decomposed_text();
  }
}
const char* text_name(int which) { return which == 0 ? "ascii" : which == 1 ? "multilingual" : "decomposed"; }

const Tokenizer& tokenizer() {
  static const Tokenizer t = [] {
    TrainedBpe bpe = train_byte_level_bpe(test_model_training_text(), 2048, SplitPattern::kLlama3);
    TokenizerJsonOptions o;
    o.pattern = SplitPattern::kLlama3;
    o.nfc = true;
    auto r = Tokenizer::from_json(make_tokenizer_json(bpe, o));
    if (!r.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", r.error().to_string().c_str());
      std::exit(1);
    }
    return *r;
  }();
  return t;
}

void set_bytes(benchmark::State& state, size_t bytes, int which) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.SetLabel(text_name(which));
}

// The whole path: NFC, pre-tokenizer, byte-level BPE.
void BM_Encode(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const std::string& s = text(which);
  const Tokenizer& t = tokenizer();
  for (auto _ : state) {
    std::vector<int32_t> ids = t.encode(s, {.add_special_tokens = false, .parse_special = false});
    benchmark::DoNotOptimize(ids.data());
  }
  set_bytes(state, s.size(), which);
}
BENCHMARK(BM_Encode)->Name("encode")->DenseRange(0, 2)->Unit(benchmark::kMicrosecond)->MinTime(0.3);

// The pre-tokenizer alone: \p{L}, \p{N} and \s for every character.
void BM_PreTokenize(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const std::string& s = text(which);
  for (auto _ : state) {
    std::vector<std::string_view> pieces = pre_tokenize(s, SplitPattern::kLlama3);
    benchmark::DoNotOptimize(pieces.data());
  }
  set_bytes(state, s.size(), which);
}
BENCHMARK(BM_PreTokenize)
    ->Name("pre_tokenize")
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

// NFC alone.
void BM_Nfc(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const std::string& s = text(which);
  for (auto _ : state) {
    std::string n = unicode::nfc(s);
    benchmark::DoNotOptimize(n.data());
  }
  set_bytes(state, s.size(), which);
}
BENCHMARK(BM_Nfc)->Name("nfc")->DenseRange(0, 2)->Unit(benchmark::kMicrosecond)->MinTime(0.3);

// Prints, per operation, each text's cost per byte as a multiple of the ASCII text's (the medians
// when repetitions are asked for).
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Aggregate ? r.aggregate_name != "median" : r.repetitions > 1) continue;
      const auto it = r.counters.find("bytes_per_second");
      if (it == r.counters.end()) continue;
      const std::string op = r.run_name.function_name;
      bytes_per_second_[op][r.report_label] = static_cast<double>(it->second);
    }
  }
  void print_summary() const {
    std::printf("\nSummary: cost per byte as a multiple of ASCII text in the same run\n");
    std::printf("%-14s %14s %14s %14s %10s %10s\n", "op", "ascii MB/s", "multi MB/s", "decomp MB/s",
                "multi/x", "decomp/x");
    for (const auto& [op, by_text] : bytes_per_second_) {
      auto get = [&](const char* name) {
        auto it = by_text.find(name);
        return it == by_text.end() ? 0.0 : it->second;
      };
      const double a = get("ascii"), m = get("multilingual"), d = get("decomposed");
      if (a <= 0 || m <= 0 || d <= 0) continue;
      std::printf("%-14s %14.1f %14.1f %14.1f %9.2fx %9.2fx\n", op.c_str(), a / 1e6, m / 1e6, d / 1e6, a / m,
                  a / d);
    }
  }

 private:
  std::map<std::string, std::map<std::string, double>> bytes_per_second_;
};

}  // namespace
}  // namespace infergate::runtime::model

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  infergate::runtime::model::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_summary();
  benchmark::Shutdown();
  return 0;
}
