// peer_probe: our side of the side-by-side comparison with llama.cpp (bench/peer/peer-bench.sh). It
// measures what llama-bench measures, the same way, so that the two can be set in one table:
//   speed:  pp = a prompt of --pp tokens computed in one step (one 512-token chunk at a time, as
//           llama-bench's default micro-batch), tg = --tg decode steps after a context of --depth tokens,
//           each --reps times; tokens/s per repetition.
//   greedy: the greedy tokens after the token ids of --ids (no tokenizer on either side), with each
//           chosen token's logprob, for the check that both engines compute the same function.
// Prints one JSON object on stdout.
// Usage: peer_probe speed --model DIR [--weight-format F] [--kv-cache-dtype K] [--threads N]
//                         [--pp N] [--tg N] [--depth N] [--reps N]
//        peer_probe greedy --model DIR --ids 1,2,3 [--n N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../engine/synthetic_prompt.h"
#include "infergate/engine/engine.h"

namespace e = infergate::runtime::engine;
using Json = nlohmann::json;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "peer_probe: %s\n", what.c_str());
  std::exit(2);
}

template <class T>
T check(infergate::Result<T> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.error().to_string());
  return std::move(*r);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Options {
  std::string mode;
  std::string model;
  std::string weight_format = "fp16";
  std::string kv_dtype = "fp16";
  int threads = 0;
  int64_t pp = 512, tg = 128, depth = 0;
  int reps = 3;
  std::vector<int32_t> ids;
  int64_t n = 16;
};

int64_t number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < 0) die(flag + " needs a non-negative integer, got '" + v + "'");
  return x;
}

std::vector<int32_t> parse_ids(const std::string& v) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at <= v.size()) {
    size_t comma = v.find(',', at);
    if (comma == std::string::npos) comma = v.size();
    out.push_back(static_cast<int32_t>(number("--ids", v.substr(at, comma - at))));
    at = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) die("usage: peer_probe speed|greedy --model DIR ...");
  o.mode = argv[1];
  if (o.mode != "speed" && o.mode != "greedy") die("unknown mode '" + o.mode + "' (speed or greedy)");
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) die("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--model") {
      o.model = v;
    } else if (a == "--weight-format") {
      o.weight_format = v;
    } else if (a == "--kv-cache-dtype") {
      o.kv_dtype = v;
    } else if (a == "--threads") {
      o.threads = static_cast<int>(number(a, v));
    } else if (a == "--pp") {
      o.pp = number(a, v);
    } else if (a == "--tg") {
      o.tg = number(a, v);
    } else if (a == "--depth") {
      o.depth = number(a, v);
    } else if (a == "--reps") {
      o.reps = static_cast<int>(std::max<int64_t>(1, number(a, v)));
    } else if (a == "--ids") {
      o.ids = parse_ids(v);
    } else if (a == "--n") {
      o.n = number(a, v);
    } else {
      die("unknown flag " + a);
    }
  }
  if (o.model.empty()) die("--model is required");
  if (o.mode == "greedy" && o.ids.empty()) die("greedy needs --ids");
  return o;
}

std::unique_ptr<e::Engine> load(const Options& o, int64_t context) {
  e::EngineConfig c;
  c.model_dir = o.model;
  c.weight_format = check(e::parse_weight_format(o.weight_format), "--weight-format");
  c.kv_dtype = check(e::parse_kv_cache_dtype(o.kv_dtype), "--kv-cache-dtype");
  c.max_sequences = 1;
  c.max_context = context;
  c.threads = o.threads;
  return std::move(check(e::load_engine(c), "load").engine);
}

// Runs the sequence's pending tokens in chunks of `chunk`; returns the seconds it took.
double prefill(e::Engine& eng, e::SeqId id, int64_t until, int32_t chunk) {
  const std::vector<e::StepRequest> req = {{id, chunk}};
  const double t0 = now();
  while (eng.sequence(id)->computed < until) check(eng.step(req), "prefill");
  return now() - t0;
}

Json speed(const Options& o) {
  auto eng = load(o, std::max<int64_t>(o.pp, o.depth + o.tg) + 16);
  constexpr int32_t kChunk = 512;  // llama-bench's default n_ubatch
  Json pp = Json::array(), tg = Json::array();
  for (int r = 0; r < o.reps; ++r) {
    e::SamplingParams p;
    p.ignore_eos = true;
    if (o.pp > 0) {
      p.max_tokens = 1;
      auto id = check(eng->add_sequence(infergate::bench::synthetic_prompt(o.pp, eng->vocab(), 1 + r), p),
                      "add_sequence");
      const double s = prefill(*eng, id, o.pp, kChunk);
      pp.push_back(static_cast<double>(o.pp) / s);
      eng->release(id);
    }
    if (o.tg > 0) {
      // As llama-bench -d: the context is filled untimed, then each generated token is one timed step.
      p.max_tokens = o.tg + 2;
      const int64_t ctx = std::max<int64_t>(o.depth, 1);
      auto id = check(eng->add_sequence(infergate::bench::synthetic_prompt(ctx, eng->vocab(), 100 + r), p),
                      "add_sequence");
      prefill(*eng, id, ctx, kChunk);
      const std::vector<e::StepRequest> req = {{id, 0}};
      const double t0 = now();
      for (int64_t i = 0; i < o.tg; ++i) check(eng->step(req), "decode");
      tg.push_back(static_cast<double>(o.tg) / (now() - t0));
      eng->release(id);
    }
  }
  return {{"engine", "infergate"},
          {"weight_format", o.weight_format},
          {"kv_cache_dtype", o.kv_dtype},
          {"threads", o.threads},
          {"pp_tokens", o.pp},
          {"tg_tokens", o.tg},
          {"depth", o.depth},
          {"pp_tokens_per_s", pp},
          {"tg_tokens_per_s", tg}};
}

Json greedy(const Options& o) {
  auto eng = load(o, static_cast<int64_t>(o.ids.size()) + o.n + 16);
  for (int32_t id : o.ids) {
    if (id < 0 || id >= eng->vocab()) die("--ids holds " + std::to_string(id) + ", outside the vocabulary");
  }
  e::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = o.n;
  p.ignore_eos = true;
  auto r = check(e::generate(*eng, o.ids, p), "generate");
  Json tokens = Json::array(), logprobs = Json::array();
  for (const auto& t : r.tokens) {
    tokens.push_back(t.token);
    logprobs.push_back(t.logprob);
  }
  return {{"engine", "infergate"}, {"tokens", tokens}, {"logprobs", logprobs}};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const Json out = o.mode == "speed" ? speed(o) : greedy(o);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
