// model_bench: the quantizer's throughput (GB/s of input) and peak memory (as a fraction of the model)
// on a generated checkpoint of at least 1 GiB, and the time to open (map and validate) that checkpoint
// against `cat` of the same files to /dev/null, all in the same run. The generated data is deleted at
// the end. Usage: model_bench [--dir PARENT] [--small]   (--small: a 64 MiB model, for a quick check)
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"
#include "infergate/runtime/model/model.h"

namespace fs = std::filesystem;
namespace m = infergate::runtime::model;
using infergate::Json;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "model_bench: %s\n", what.c_str());
  std::exit(1);
}

infergate::CommandResult run(const std::vector<std::string>& argv) {
  auto r = infergate::run_command(argv, std::chrono::minutes(30));
  if (!r.ok()) die(r.error().to_string());
  if (!r->status.success()) die(argv[1] + " failed: " + r->err);
  return *r;
}

// Median of `reps` timings of fn.
double median_seconds(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    double s = now();
    fn();
    t.push_back(now() - s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double children_cpu_seconds() {
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

uint64_t dir_bytes(const fs::path& d) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(d)) n += e.is_regular_file() ? e.file_size() : 0;
  return n;
}

// A hasher that only counts: the cost of the read-into-memory path without the SHA-256 itself.
class CountingHasher : public m::LoadHasher {
 public:
  infergate::Status begin_file(std::string_view, uint64_t) override { return infergate::ok_status(); }
  void update(std::span<const uint8_t> b) override { bytes += b.size(); }
  infergate::Status end_file() override { return infergate::ok_status(); }
  uint64_t bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  fs::path parent = fs::temp_directory_path();
  bool small = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      parent = argv[++i];
    } else if (a == "--small") {
      small = true;
    } else {
      die("unknown argument " + a + " (usage: model_bench [--dir PARENT] [--small])");
    }
  }
  auto tmp = infergate::TempDir::create("infergate-model-bench", parent);
  if (!tmp.ok()) die(tmp.error().to_string());
  const fs::path model = tmp->path() / "model";
  // 9 layers, hidden 2048, MLP 5632, vocab 32000, bf16: 1.03 GiB.
  const std::vector<std::string> shape =
      small ? std::vector<std::string>{"--layers",   "4", "--hidden", "512",   "--heads",        "8",
                                       "--kv-heads", "4", "--vocab",  "32000", "--intermediate", "1408"}
            : std::vector<std::string>{"--layers",   "9", "--hidden", "2048",  "--heads",        "16",
                                       "--kv-heads", "8", "--vocab",  "32000", "--intermediate", "5632"};
  std::vector<std::string> gen = {INFERGATE_RUNTIME_BIN,
                                  "make-test-model",
                                  "--out",
                                  model.string(),
                                  "--arch",
                                  "llama",
                                  "--seed",
                                  "1",
                                  "--dtype",
                                  "bf16",
                                  "--max-shard-bytes",
                                  "268435456"};
  gen.insert(gen.end(), shape.begin(), shape.end());
  double g0 = now();
  run(gen);
  const uint64_t model_bytes = dir_bytes(model);
  std::printf(
      "model_bench: generated a llama checkpoint of %.2f GiB (bf16, shards of <= 256 MiB) in %.1f s under "
      "%s\n",
      static_cast<double>(model_bytes) / (1u << 30), now() - g0, tmp->path().c_str());
  std::printf(
      "machine: %ld cores; the page cache is warm for every measurement (the files were just written)\n\n",
      sysconf(_SC_NPROCESSORS_ONLN));

  // ---- quantizer: each run is its own process, so its peak RSS is its own ----
  // CPU seconds (user + system, from the child's rusage) beside wall seconds: on a shared machine the
  // wall clock includes time spent waiting for a core.
  std::printf("%-24s %9s %9s %11s %14s %14s %9s %9s\n", "quantize", "wall s", "CPU s", "GB/s wall",
              "GB/CPU-s", "peak RSS", "of model", "target");
  struct Q {
    const char* label;
    std::vector<std::string> args;
  };
  for (const Q& q :
       {Q{"int8 (per channel)", {"--weight-format", "int8"}},
        Q{"int4 g128 asymmetric", {"--weight-format", "int4", "--group-size", "128"}},
        Q{"int4 g32 symmetric", {"--weight-format", "int4", "--group-size", "32", "--symmetric"}}}) {
    const fs::path out = tmp->path() / "quantized";
    std::vector<std::string> cmd = {INFERGATE_RUNTIME_BIN, "quantize", "--model", model.string(), "--out",
                                    out.string(),          "--json"};
    cmd.insert(cmd.end(), q.args.begin(), q.args.end());
    const double cpu0 = children_cpu_seconds();
    auto r = run(cmd);
    const double cpu = children_cpu_seconds() - cpu0;
    auto j = infergate::parse_json(r.out, "quantize --json");
    if (!j.ok()) die("unreadable quantize report: " + r.out);
    double frac = (*j)["peak_rss_fraction_of_model"].get<double>();
    double in_gb = static_cast<double>((*j)["input_bytes"].get<uint64_t>()) / 1e9;
    std::printf("%-24s %9.2f %9.2f %11.3f %14.3f %10.1f MiB %8.2f%% %9s\n", q.label,
                (*j)["seconds"].get<double>(), cpu, (*j)["throughput_gb_per_s"].get<double>(), in_gb / cpu,
                static_cast<double>((*j)["peak_rss_bytes"].get<uint64_t>()) / (1u << 20), 100 * frac,
                frac < 0.10 ? "<10% ok" : "MISSED");
    fs::remove_all(out);
  }

  // ---- loading: Model::open against cat of the same files ----
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(model)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  auto cat = [&] {
    infergate::SpawnOptions o;
    o.argv = {"cat"};
    o.argv.insert(o.argv.end(), files.begin(), files.end());
    o.stdout_file = "/dev/null";
    auto p = infergate::Subprocess::spawn(o);
    if (!p.ok()) die(p.error().to_string());
    if (!p->wait().success()) die("cat failed");
  };
  const int reps = 5;
  double t_cat = median_seconds(reps, cat);
  double t_ckpt = median_seconds(reps, [&] {
    auto d = m::ModelDirectory::open(model);
    if (!d.ok()) die(d.error().to_string());
    auto c = m::Checkpoint::open(*d);
    if (!c.ok()) die(c.error().to_string());
  });
  double t_map = median_seconds(reps, [&] {
    auto mm = m::Model::open(model);
    if (!mm.ok()) die(mm.error().to_string());
  });
  volatile uint64_t sink = 0;
  double t_touch = median_seconds(reps, [&] {
    auto mm = m::Model::open(model);
    if (!mm.ok()) die(mm.error().to_string());
    uint64_t s = 0;
    for (const std::string& n : mm->tensor_names()) {
      auto v = mm->tensor(n);
      for (uint64_t off = 0; off < v->nbytes; off += 4096) s += v->data[off];
    }
    sink = sink + s;
  });
  uint64_t read_bytes = 0;
  double t_read = median_seconds(reps, [&] {
    CountingHasher h;
    m::ModelOptions o;
    o.hasher = &h;
    auto mm = m::Model::open(model, o);
    if (!mm.ok()) die(mm.error().to_string());
    read_bytes = h.bytes;
  });
  if (read_bytes != model_bytes) die("the read path did not see every byte");
  auto row = [&](const char* label, double t) {
    std::printf("%-58s %8.3f s %9.2f GB/s %8.2fx cat\n", label, t, static_cast<double>(model_bytes) / t / 1e9,
                t / t_cat);
  };
  std::printf("\nopen %.2f GiB (median of %d, warm page cache)\n",
              static_cast<double>(model_bytes) / (1u << 30), reps);
  row("cat FILES > /dev/null (baseline)", t_cat);
  row("Checkpoint::open: mmap + validate every safetensors header", t_ckpt);
  row("Model::open: the above + config, tokenizer.json, tensor check", t_map);
  row("Model::open + touch every page of every tensor", t_touch);
  row("Model::open with a LoadHasher: read() every byte (no SHA)", t_read);
  std::printf(
      "(mmap maps without reading: the tensors' pages are read when first used, e.g. by the touch row)\n");
  std::printf("\nthe generated data under %s is deleted now\n", tmp->path().c_str());
  return 0;
}
