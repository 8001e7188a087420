// The streaming weight quantizer.
#include "infergate/runtime/model/quantize.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/log.h"
#include "infergate/runtime/model/checkpoint.h"
#include "infergate/runtime/model/config.h"
#include "infergate/runtime/model/safetensors_writer.h"
#include "infergate/runtime/model/staged_dir.h"

namespace infergate::runtime::model {
namespace {
namespace fs = std::filesystem;

constexpr uint64_t kBlockBytes = 4u << 20;  // input bytes per block
constexpr uint64_t kCopyChunk = 8u << 20;

Error cancelled() {
  return Error(ErrorCode::kCancelled, "quantize: interrupted; no output was written", "Cancelled");
}

// Runs fn(begin, end) over [0, n) split into `threads` contiguous parts.
template <class Fn>
void parallel_for(uint64_t n, int threads, Fn fn) {
  if (threads <= 1 || n < 2) {
    fn(uint64_t{0}, n);
    return;
  }
  uint64_t parts = std::min<uint64_t>(static_cast<uint64_t>(threads), n);
  std::vector<std::thread> pool;
  for (uint64_t p = 1; p < parts; ++p) pool.emplace_back(fn, n * p / parts, n * (p + 1) / parts);
  fn(uint64_t{0}, n / parts);
  for (auto& t : pool) t.join();
}

struct TensorPlan {
  const TensorInfo* info;
  bool quantize;
};

struct ErrorStats {
  double max_abs_err = 0, max_abs = 0, sum_sq_err = 0, sum_sq = 0;
  double max_rel() const { return max_abs > 0 ? max_abs_err / max_abs : 0; }
  double rms_rel() const { return sum_sq > 0 ? std::sqrt(sum_sq_err / sum_sq) : 0; }
};

// The error of one quantized row against its source, decoded with the kernels' per-element format
// maths (formats.h), without a dequantized copy of the block. Each loop runs over one type, so it
// vectorises.
ErrorStats row_error(const uint8_t* src, DType dtype, uint64_t cols, const QuantScheme& scheme,
                     const uint8_t* q, const uint8_t* scales, const uint8_t* zeros) {
  thread_local std::vector<float> xs, ys;
  xs.resize(cols);
  ys.resize(cols);
  if (dtype == DType::kF32) {
    std::memcpy(xs.data(), src, cols * 4);
  } else {
    const auto* h = reinterpret_cast<const uint16_t*>(src);  // the block buffer is 2-byte aligned
    if (dtype == DType::kBF16) {
      for (uint64_t c = 0; c < cols; ++c) xs[c] = bf16_to_f32(h[c]);
    } else {
      for (uint64_t c = 0; c < cols; ++c) xs[c] = f16_to_f32(h[c]);
    }
  }
  const kernels::WeightLayout l = kernel_layout(scheme, 1, static_cast<int64_t>(cols));
  const bool int8 = scheme.format == WeightFormat::kInt8;
  const uint64_t group = int8 ? cols : static_cast<uint64_t>(scheme.group_size);
  for (uint64_t g0 = 0, gi = 0; g0 < cols; g0 += group, ++gi) {
    uint16_t bits;
    std::memcpy(&bits, scales + 2 * gi, 2);
    const float d = kernels::scale_to_float(bits, l.scale_dtype);
    const uint32_t z = zeros ? zeros[gi] : 8u;
    const uint64_t g1 = std::min(cols, g0 + group);
    if (int8) {
      for (uint64_t c = g0; c < g1; ++c) ys[c] = kernels::dequantize_int8(static_cast<int8_t>(q[c]), d);
    } else {
      for (uint64_t c = g0; c < g1; ++c) {
        ys[c] = kernels::dequantize_int4(kernels::int4_get(q, static_cast<int64_t>(c)), z, d);
      }
    }
  }
  float max_err = 0, max_abs = 0;
  double sum_sq_err = 0, sum_sq = 0;
  for (uint64_t c = 0; c < cols; ++c) {
    const float e = std::fabs(xs[c] - ys[c]);
    max_err = std::max(max_err, e);
    max_abs = std::max(max_abs, std::fabs(xs[c]));
    sum_sq_err += static_cast<double>(e) * e;
    sum_sq += static_cast<double>(xs[c]) * xs[c];
  }
  return {max_err, max_abs, sum_sq_err, sum_sq};
}

uint64_t peak_rss_bytes() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

Status copy_bytes(const fs::path& from, const fs::path& to) {
  INFERGATE_ASSIGN_OR_RETURN(UniqueFd in, open_read(from));
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return errno_error("creating " + to.string(), errno);
  UniqueFd outfd(out);
  std::vector<char> buf(1u << 20);
  while (true) {
    ssize_t r = ::read(in.get(), buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno_error("reading " + from.string(), errno);
    }
    if (r == 0) break;
    INFERGATE_RETURN_IF_ERROR(
        write_all(out, std::string_view(buf.data(), static_cast<size_t>(r)), to.string()));
  }
  if (fsync(out) != 0) return errno_error("fsync " + to.string(), errno);
  return ok_status();
}

class Quantizer {
 public:
  explicit Quantizer(const QuantizeOptions& o) : o_(o) {
    threads_ =
        o.threads > 0 ? o.threads : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
    set_quantize_threads(threads_);
  }

  Result<QuantizeReport> run();

 private:
  Status quantize_tensor(int fd, uint64_t data_offset, const TensorInfo& t, SafetensorsWriter& w,
                         ErrorStats* stats);
  Status copy_tensor(int fd, uint64_t data_offset, const TensorInfo& t, SafetensorsWriter& w);
  void report_progress(std::string_view tensor) {
    if (o_.progress) o_.progress({tensor_index_, tensor_count_, tensor, bytes_done_, bytes_total_});
  }
  bool is_cancelled() const { return o_.cancel && o_.cancel->load(); }

  const QuantizeOptions& o_;
  int threads_ = 1;
  size_t tensor_index_ = 0, tensor_count_ = 0;
  uint64_t bytes_done_ = 0, bytes_total_ = 0;
};

Status Quantizer::copy_tensor(int fd, uint64_t data_offset, const TensorInfo& t, SafetensorsWriter& w) {
  std::vector<uint8_t> buf;
  for (uint64_t off = 0; off < t.nbytes(); off += kCopyChunk) {
    if (is_cancelled()) return cancelled();
    uint64_t n = std::min(kCopyChunk, t.nbytes() - off);
    buf.resize(n);
    INFERGATE_RETURN_IF_ERROR(read_exact_at(fd, buf.data(), n, data_offset + t.begin + off, t.name));
    INFERGATE_RETURN_IF_ERROR(w.write(t.name, buf, off));
    bytes_done_ += n;
    report_progress(t.name);
  }
  return ok_status();
}

Status Quantizer::quantize_tensor(int fd, uint64_t data_offset, const TensorInfo& t, SafetensorsWriter& w,
                                  ErrorStats* stats) {
  const uint64_t rows = t.shape[0], cols = t.shape[1];
  const size_t esize = dtype_size(t.dtype);
  const uint64_t row_in = cols * esize;
  const uint64_t block_rows = std::max<uint64_t>(1, kBlockBytes / std::max<uint64_t>(row_in, 1));
  const RowBytes one = row_bytes(1, cols, o_.scheme);
  const std::string qn = qweight_name(t.name), sn = scales_name(t.name), zn = zeros_name(t.name);
  std::vector<uint8_t> in;
  std::vector<uint8_t> q, sc, zs;
  std::vector<ErrorStats> row_stats;
  for (uint64_t r0 = 0; r0 < rows; r0 += block_rows) {
    if (is_cancelled()) return cancelled();
    const uint64_t nr = std::min(block_rows, rows - r0);
    in.resize(nr * row_in);
    INFERGATE_RETURN_IF_ERROR(
        read_exact_at(fd, in.data(), in.size(), data_offset + t.begin + r0 * row_in, t.name));
    q.resize(nr * one.qweight);
    sc.resize(nr * one.scales);
    zs.resize(nr * one.zeros);
    row_stats.assign(nr, ErrorStats{});
    // Rows are independent, and each row's statistics are combined below in row order, so the bytes
    // and the numbers do not depend on the thread count. The kernels' optimised quantizer
    // parallelises inside; the reference is parallelised here, by rows.
    std::vector<Status> part_status(static_cast<size_t>(threads_) + 1);
    std::atomic<size_t> next_part{0};
    parallel_for(nr, quantize_rows_is_parallel() ? 1 : threads_, [&](uint64_t a, uint64_t b) {
      Status& st = part_status[next_part++];
      st = quantize_rows(in.data() + a * row_in, t.dtype, b - a, cols, o_.scheme, q.data() + a * one.qweight,
                         sc.data() + a * one.scales, zs.data() + a * one.zeros);
      if (!st.ok()) st = Error(std::move(st).error()).context("rows from " + std::to_string(r0 + a));
    });
    for (Status& st : part_status) {
      if (!st.ok()) return Error(std::move(st).error()).context(t.name).with_detail("tensor", t.name);
    }
    parallel_for(nr, threads_, [&](uint64_t a, uint64_t b) {
      for (uint64_t r = a; r < b; ++r) {
        row_stats[r] = row_error(in.data() + r * row_in, t.dtype, cols, o_.scheme, q.data() + r * one.qweight,
                                 sc.data() + r * one.scales, one.zeros ? zs.data() + r * one.zeros : nullptr);
      }
    });
    for (const ErrorStats& s : row_stats) {
      stats->max_abs_err = std::max(stats->max_abs_err, s.max_abs_err);
      stats->max_abs = std::max(stats->max_abs, s.max_abs);
      stats->sum_sq_err += s.sum_sq_err;
      stats->sum_sq += s.sum_sq;
    }
    INFERGATE_RETURN_IF_ERROR(w.write(qn, q, r0 * one.qweight));
    INFERGATE_RETURN_IF_ERROR(w.write(sn, sc, r0 * one.scales));
    if (one.zeros) INFERGATE_RETURN_IF_ERROR(w.write(zn, zs, r0 * one.zeros));
    bytes_done_ += in.size();
    report_progress(t.name);
  }
  return ok_status();
}

Result<QuantizeReport> Quantizer::run() {
  const auto start = std::chrono::steady_clock::now();
  INFERGATE_RETURN_IF_ERROR(validate_scheme(o_.scheme));
  INFERGATE_ASSIGN_OR_RETURN(ModelDirectory dir,
                             ModelDirectory::open(o_.model, DirectoryOptions{false, nullptr}));
  INFERGATE_RETURN_IF_ERROR(refuse_pickle_files(dir));
  INFERGATE_ASSIGN_OR_RETURN(std::string config_text, dir.read("config.json", 16u << 20));
  INFERGATE_ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(config_text, "config.json"));
  if (config.quantization) {
    return Error(ErrorCode::kFailedPrecondition,
                 "config.json already has a quantization_config (quant_method '" +
                     config.quantization->quant_method + "'); quantize from the original weights",
                 "AlreadyQuantized");
  }
  auto config_json = nlohmann::ordered_json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (config_json.is_discarded() || !config_json.is_object())
    return invalid_argument("config.json: not a JSON object");

  // Validates every shard and the index together; the data is then read with pread, block by block.
  INFERGATE_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir));
  std::set<std::string> linear;
  for (const ExpectedTensor& e : expected_tensors(config)) {
    if (quantizer_compresses(e, o_.quantize_lm_head)) linear.insert(e.name);
  }

  // Output specs per shard, same shard names as the input.
  std::vector<std::vector<TensorPlan>> plans(ckpt.shards().size());
  std::vector<std::vector<TensorSpec>> specs(ckpt.shards().size());
  std::map<std::string, std::string> weight_map;
  for (size_t s = 0; s < ckpt.shards().size(); ++s) {
    const SafetensorsFile& shard = ckpt.shards()[s];
    for (const TensorInfo& t : shard.tensors()) {
      bool q = linear.count(t.name) && t.shape.size() == 2 &&
               (t.dtype == DType::kF16 || t.dtype == DType::kBF16 || t.dtype == DType::kF32);
      plans[s].push_back({&t, q});
      bytes_total_ += t.nbytes();
      if (q) {
        for (TensorSpec& p : quantized_parts(t.name, t.shape[0], t.shape[1], o_.scheme)) {
          weight_map[p.name] = shard.name();
          specs[s].push_back(std::move(p));
        }
      } else {
        weight_map[t.name] = shard.name();
        specs[s].push_back({t.name, t.dtype, t.shape});
      }
    }
    tensor_count_ += shard.tensors().size();
  }

  INFERGATE_ASSIGN_OR_RETURN(StagedDirectory staged, StagedDirectory::create(o_.out, o_.force));
  const fs::path out = staged.path();
  QuantizeReport report;
  Json quantized = Json::object();
  Json unquantized = Json::array();
  double rms_sum = 0;
  for (size_t s = 0; s < plans.size(); ++s) {
    const SafetensorsFile& shard = ckpt.shards()[s];
    INFERGATE_ASSIGN_OR_RETURN(UniqueFd fd, open_read(o_.model / shard.name()));
    std::map<std::string, std::string> metadata;
    for (const auto& [k, v] : shard.header().metadata) metadata[k] = v;
    INFERGATE_ASSIGN_OR_RETURN(SafetensorsWriter w,
                               SafetensorsWriter::create(out / shard.name(), specs[s], metadata));
    for (const TensorPlan& p : plans[s]) {
      const TensorInfo& t = *p.info;
      report.input_bytes += t.nbytes();
      if (p.quantize) {
        ErrorStats stats;
        INFERGATE_RETURN_IF_ERROR(quantize_tensor(fd.get(), shard.header().data_offset, t, w, &stats));
        quantized[t.name] = {{"shape", t.shape},
                             {"dtype", std::string(dtype_name(t.dtype))},
                             {"max_rel_error", stats.max_rel()},
                             {"rms_rel_error", stats.rms_rel()}};
        report.max_rel_error = std::max(report.max_rel_error, stats.max_rel());
        rms_sum += stats.rms_rel();
        ++report.tensors_quantized;
      } else {
        INFERGATE_RETURN_IF_ERROR(copy_tensor(fd.get(), shard.header().data_offset, t, w));
        unquantized.push_back(t.name);
        ++report.tensors_copied;
      }
      ++tensor_index_;
    }
    INFERGATE_RETURN_IF_ERROR(w.finish());
    report.output_bytes += w.file_size() - 8 - w.header().size();
  }
  if (report.tensors_quantized == 0) {
    return Error(ErrorCode::kFailedPrecondition,
                 "no tensor of this checkpoint is a linear layer that can be quantized", "NothingToQuantize");
  }
  report.mean_rms_rel_error = rms_sum / static_cast<double>(report.tensors_quantized);

  const std::string fmt(weight_format_name(o_.scheme.format));
  const std::string scale = o_.scheme.scale_dtype == DType::kBF16 ? "bfloat16" : "float16";
  const int64_t group = o_.scheme.format == WeightFormat::kInt4 ? o_.scheme.group_size : 0;
  if (ckpt.layout().sharded) {
    Json index = {{"metadata", {{"total_size", report.output_bytes}}}, {"weight_map", weight_map}};
    INFERGATE_RETURN_IF_ERROR(write_file_atomic(out / kCheckpointIndexName, index.dump(2) + "\n"));
  }
  nlohmann::ordered_json qc = {{"quant_method", "infergate"},
                               {"weight_format", fmt},
                               {"bits", o_.scheme.format == WeightFormat::kInt8 ? 8 : 4},
                               {"group_size", group},
                               {"symmetric", o_.scheme.symmetric},
                               {"scale_dtype", scale},
                               {"modules_not_to_convert", unquantized}};
  config_json["quantization_config"] = qc;
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(out / "config.json", config_json.dump(2) + "\n"));
  Json record = {
      {"format_version", 1},
      {"tool", "infergate-runtime quantize"},
      {"tool_version", std::string(quantize_tool_version())},
      {"weight_format", fmt},
      {"bits", o_.scheme.format == WeightFormat::kInt8 ? 8 : 4},
      {"group_size", group},
      {"symmetric", o_.scheme.symmetric},
      {"scale_dtype", scale},
      {"parts", o_.scheme.symmetric ? Json::array({"qweight", "scales"})
                                    : Json::array({"qweight", "scales", "zeros"})},
      {"error_definitions",
       {{"max_rel_error", "max |x - dequant(quant(x))| / max |x| over the tensor"},
        {"rms_rel_error", "sqrt(sum (x - dequant(quant(x)))^2 / sum x^2) over the tensor"}}},
      {"quantized", quantized},
      {"unquantized", unquantized},
      {"totals",
       {{"input_tensor_bytes", report.input_bytes},
        {"output_tensor_bytes", report.output_bytes},
        {"tensors_quantized", report.tensors_quantized},
        {"tensors_copied", report.tensors_copied},
        {"max_rel_error", report.max_rel_error},
        {"mean_rms_rel_error", report.mean_rms_rel_error}}},
  };
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(out / "quantization.json", record.dump(2) + "\n"));

  // Everything else (tokenizer, generation config, licence, ...) byte for byte.
  INFERGATE_ASSIGN_OR_RETURN(std::vector<std::string> names, dir.list());
  std::set<std::string> written = {"config.json", "quantization.json", std::string(kCheckpointIndexName)};
  for (const std::string& s : ckpt.layout().shards) written.insert(s);
  for (const std::string& n : names) {
    if (written.count(n)) continue;
    std::error_code ec;
    fs::path p = o_.model / n;
    if (!fs::is_regular_file(p, ec)) {
      log::warn("quantize: not copying a non-file entry of the model directory", {{"entry", n}});
      continue;
    }
    INFERGATE_RETURN_IF_ERROR(copy_bytes(p, out / n));
  }
  if (is_cancelled()) return cancelled();
  INFERGATE_RETURN_IF_ERROR(staged.commit());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.peak_rss_bytes = peak_rss_bytes();
  return report;
}

}  // namespace

std::string_view quantize_tool_version() { return INFERGATE_VERSION; }

Result<QuantizeReport> quantize_model(const QuantizeOptions& options) {
  Quantizer q(options);
  return q.run();
}

}  // namespace infergate::runtime::model
