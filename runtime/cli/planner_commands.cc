// `plan` and `plan-table`: thin flag parsing over runtime/planner (plan.h).
// Exit codes of `plan`: 0 fits, 1 does not fit, 2 bad input (the error names the flag).
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "infergate/common/json.h"
#include "infergate/runtime/planner/plan.h"

namespace infergate::runtime::cli {
namespace {
namespace p = infergate::runtime::planner;

constexpr int kExitFits = 0;
constexpr int kExitDoesNotFit = 1;
constexpr int kExitBadInput = 2;

int bad_input(std::string_view command, const Error& e) {
  std::cerr << "infergate-runtime " << command << ": " << e.to_string() << "\n";
  return kExitBadInput;
}

Error flag_error(const std::string& flag, const std::string& message) {
  Error e(ErrorCode::kInvalidArgument, flag + ": " + message, "InvalidPlanInput");
  e.with_detail("field", flag);
  return e;
}

Result<int64_t> parse_count(const std::string& text, const std::string& flag) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    return flag_error(flag, "expected an integer, got '" + text + "'");
  }
  if (v <= 0) return flag_error(flag, "must be positive, got " + text);
  return static_cast<int64_t>(v);
}

// "2%" or "0.02".
Result<double> parse_fraction(const std::string& text, const std::string& flag) {
  std::string t = text;
  const bool percent = !t.empty() && t.back() == '%';
  if (percent) t.pop_back();
  char* end = nullptr;
  const double v = t.empty() ? NAN : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v)) {
    return flag_error(flag, "expected a fraction (0.02) or a percentage (2%), got '" + text + "'");
  }
  return percent ? v / 100.0 : v;
}

struct PlanFlags {
  std::string model, config, gpu, gpu_memory, weight_format, kv_dtype, context, concurrency;
  std::string tensor_parallel = "1", group_size, scale_dtype, prefill_chunk;
  std::string cuda_context_reserve, cuda_graph_reserve, nccl_reserve, fragmentation_reserve;
  bool symmetric = false, quantize_lm_head = false, json = false, list_gpus = false;
};

Result<p::PlanInput> plan_input(const PlanFlags& f) {
  if (f.model.empty() == f.config.empty()) {
    return flag_error("--model", f.model.empty() ? "give --model DIR or --config config.json"
                                                 : "give --model or --config, not both");
  }
  auto loaded = p::load_model(f.model.empty() ? f.config : f.model);
  if (!loaded.ok()) return Error(loaded.error()).context(f.model.empty() ? "--config" : "--model");
  p::PlanInput in;
  in.config = loaded->config;
  in.model_name = loaded->name;

  if (!f.gpu.empty() && !f.gpu_memory.empty())
    return flag_error("--gpu", "give --gpu or --gpu-memory, not both");
  if (f.gpu.empty() && f.gpu_memory.empty())
    return flag_error("--gpu", "give --gpu NAME or --gpu-memory SIZE");
  if (!f.gpu.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(p::GpuSpec g, p::find_gpu(f.gpu));
    in.gpu = g.name;
  } else {
    INFERGATE_ASSIGN_OR_RETURN(int64_t bytes, p::parse_memory_size(f.gpu_memory, "--gpu-memory"));
    in.gpu_memory_bytes = bytes;
  }

  if (loaded->weights) {
    in.weights = *loaded->weights;
    if (!f.weight_format.empty()) {
      INFERGATE_ASSIGN_OR_RETURN(p::WeightFormat wf, p::parse_weight_format(f.weight_format));
      if (wf != in.weights.format) {
        return flag_error("--weight-format", "the model directory holds " +
                                                 std::string(p::weight_format_name(in.weights.format)) +
                                                 " weights (config.json quantization_config), not " +
                                                 f.weight_format);
      }
    }
    if (!f.group_size.empty() || !f.scale_dtype.empty() || f.symmetric || f.quantize_lm_head) {
      return flag_error("--group-size",
                        "the model directory fixes the quantization scheme; drop the scheme flags");
    }
  } else {
    if (f.weight_format.empty()) return flag_error("--weight-format", "required (fp16, bf16, int8 or int4)");
    INFERGATE_ASSIGN_OR_RETURN(in.weights.format, p::parse_weight_format(f.weight_format));
    if (!f.group_size.empty()) {
      INFERGATE_ASSIGN_OR_RETURN(in.weights.group_size, parse_count(f.group_size, "--group-size"));
    }
    if (!f.scale_dtype.empty()) {
      if (f.scale_dtype != "f16" && f.scale_dtype != "bf16") {
        return flag_error("--scale-dtype", "expected f16 or bf16, got '" + f.scale_dtype + "'");
      }
      in.weights.scale_dtype = f.scale_dtype == "bf16" ? model::DType::kBF16 : model::DType::kF16;
    }
    in.weights.symmetric = f.symmetric;
    in.weights.quantize_lm_head = f.quantize_lm_head;
  }

  if (f.kv_dtype.empty())
    return flag_error("--kv-cache-dtype", "required (fp16, bf16, fp8, int8, int4, int4-kivi)");
  INFERGATE_ASSIGN_OR_RETURN(in.kv_cache_dtype, p::parse_kv_dtype(f.kv_dtype));
  if (f.context.empty()) return flag_error("--max-context-length", "required");
  INFERGATE_ASSIGN_OR_RETURN(in.max_context_length, parse_count(f.context, "--max-context-length"));
  if (f.concurrency.empty()) return flag_error("--max-concurrency", "required");
  INFERGATE_ASSIGN_OR_RETURN(in.max_concurrency, parse_count(f.concurrency, "--max-concurrency"));
  INFERGATE_ASSIGN_OR_RETURN(in.tensor_parallel, parse_count(f.tensor_parallel, "--tensor-parallel"));
  if (!f.prefill_chunk.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(in.workspace.prefill_chunk_tokens,
                               parse_count(f.prefill_chunk, "--prefill-chunk-tokens"));
  }
  auto reserve = [](const std::string& text, const char* flag) -> Result<std::optional<int64_t>> {
    if (text.empty()) return std::optional<int64_t>();
    if (text == "0") return std::optional<int64_t>(0);
    INFERGATE_ASSIGN_OR_RETURN(int64_t v, p::parse_memory_size(text, flag));
    return std::optional<int64_t>(v);
  };
  INFERGATE_ASSIGN_OR_RETURN(in.reserves.cuda_context,
                             reserve(f.cuda_context_reserve, "--cuda-context-reserve"));
  INFERGATE_ASSIGN_OR_RETURN(in.reserves.cuda_graphs, reserve(f.cuda_graph_reserve, "--cuda-graph-reserve"));
  INFERGATE_ASSIGN_OR_RETURN(in.reserves.nccl, reserve(f.nccl_reserve, "--nccl-reserve"));
  if (!f.fragmentation_reserve.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(double frac,
                               parse_fraction(f.fragmentation_reserve, "--fragmentation-reserve"));
    in.reserves.fragmentation_fraction = frac;
  }
  return in;
}

// Flag names for the library's field names, so an error names what the user typed.
std::string flag_for_field(std::string_view field) {
  static const std::pair<std::string_view, std::string_view> map[] = {
      {"max_context_length", "--max-context-length"},
      {"max_concurrency", "--max-concurrency"},
      {"tensor_parallel", "--tensor-parallel"},
      {"weight_format", "--weight-format"},
      {"kv_cache_dtype", "--kv-cache-dtype"},
      {"gpu", "--gpu"},
      {"gpu_memory", "--gpu-memory"},
      {"group_size", "--group-size"},
      {"prefill_chunk_tokens", "--prefill-chunk-tokens"},
      {"cuda_context_reserve", "--cuda-context-reserve"},
      {"cuda_graph_reserve", "--cuda-graph-reserve"},
      {"nccl_reserve", "--nccl-reserve"},
      {"fragmentation_reserve", "--fragmentation-reserve"},
  };
  for (const auto& [k, v] : map) {
    if (k == field) return std::string(v);
  }
  return std::string(field);
}

// An InvalidPlanInput error from the library names a field ("max_concurrency"); say the flag.
Error name_the_flag(const Error& e) {
  const std::string field(e.detail("field"));
  if (field.empty() || e.reason() != "InvalidPlanInput" || field.rfind("--", 0) == 0) return e;
  const std::string flag = flag_for_field(field);
  std::string message = e.message();
  if (message.rfind(field + ": ", 0) == 0) message = message.substr(field.size() + 2);
  Error out(e.code(), flag + ": " + message, e.reason());
  for (const auto& [k, v] : e.details()) out.with_detail(k, k == "field" ? flag : v);
  return out;
}

int run_plan(const PlanFlags& f) {
  if (f.list_gpus) {
    for (const p::GpuSpec& g : p::gpu_catalog()) {
      std::cout << g.name << "\t" << g.product << "\t" << g.marketed << " marketed\t"
                << p::format_bytes(g.usable_bytes) << " usable (" << g.usable_bytes << " bytes)\n";
    }
    return kExitFits;
  }
  auto in = plan_input(f);
  if (!in.ok()) return bad_input("plan", name_the_flag(in.error()));
  auto pl = p::plan(*in);
  if (!pl.ok()) return bad_input("plan", name_the_flag(pl.error()));
  if (!f.model.empty() &&
      (in->weights.format == p::WeightFormat::kInt8 || in->weights.format == p::WeightFormat::kInt4)) {
    auto loaded = p::load_model(f.model);
    if (loaded.ok() && !loaded->weights) {
      pl->notes.push_back(
          "the directory holds uncompressed weights: run `infergate-runtime quantize --weight-format " +
          std::string(p::weight_format_name(in->weights.format)) + "` before serving it in this format");
    }
  }
  if (f.json) {
    std::cout << dump_json(p::plan_json(*pl)) << "\n";
  } else {
    std::cout << p::plan_text(*pl);
  }
  return pl->fits ? kExitFits : kExitDoesNotFit;
}

const bool kPlan = register_command(
    {"plan",
     "will a model fit a GPU: weights, KV cache, workspace and reserves, exactly as the runtime allocates",
     [](CLI::App& app) {
       auto f = std::make_shared<PlanFlags>();
       app.add_option("--model", f->model, "model directory (reads its config.json)");
       app.add_option("--config", f->config, "a config.json file");
       app.add_option("--gpu", f->gpu,
                      "GPU from the catalogue: h100, h200, a100-40gb, a100-80gb, l40s, rtx-4090");
       app.add_option("--gpu-memory", f->gpu_memory,
                      "usable memory per GPU instead: 141GB (10^9), 131GiB (2^30), ...");
       app.add_option("--weight-format", f->weight_format, "fp16, bf16, int8 or int4");
       app.add_option("--kv-cache-dtype", f->kv_dtype, "fp16, bf16, fp8, int8, int4 or int4-kivi");
       app.add_option("--max-context-length", f->context, "tokens per sequence");
       app.add_option("--max-concurrency", f->concurrency, "sequences at once");
       app.add_option("--tensor-parallel", f->tensor_parallel, "GPUs the model is split over (default 1)");
       app.add_option("--group-size", f->group_size, "int4 group size: 32, 64 or 128 (default 128)");
       app.add_flag("--symmetric", f->symmetric,
                    "int4 without zero points (default: asymmetric, as quantize)");
       app.add_option("--scale-dtype", f->scale_dtype, "f16 or bf16 weight scales (default f16)");
       app.add_flag("--quantize-lm-head", f->quantize_lm_head,
                    "lm_head compressed too (quantize --quantize-lm-head)");
       app.add_option("--prefill-chunk-tokens", f->prefill_chunk,
                      "tokens of prefill per step (default 2048)");
       app.add_option("--cuda-context-reserve", f->cuda_context_reserve, "default 512MiB");
       app.add_option("--cuda-graph-reserve", f->cuda_graph_reserve, "default 512MiB");
       app.add_option("--nccl-reserve", f->nccl_reserve, "default 1GiB with --tensor-parallel > 1, else 0");
       app.add_option("--fragmentation-reserve", f->fragmentation_reserve,
                      "fraction of GPU memory (default 2%)");
       app.add_flag("--json", f->json, "print the plan as one JSON object");
       app.add_flag("--list-gpus", f->list_gpus, "print the GPU catalogue and exit");
       return [f]() { return run_plan(*f); };
     }});

const bool kPlanTable = register_command(
    {"plan-table",
     "print the Markdown table of what fits where (every weight format x KV dtype on every catalogue GPU)",
     [](CLI::App& app) {
       auto configs = std::make_shared<std::vector<std::string>>();
       auto context = std::make_shared<std::string>("32768");
       auto concurrency = std::make_shared<std::string>("16");
       app.add_option("--config", *configs, "config.json files or model directories (repeat)")->required();
       app.add_option("--max-context-length", *context, "tokens per sequence")->capture_default_str();
       app.add_option("--max-concurrency", *concurrency, "sequences at once")->capture_default_str();
       return [configs, context, concurrency]() {
         std::vector<p::LoadedModel> models;
         for (const std::string& c : *configs) {
           auto m = p::load_model(c);
           if (!m.ok()) return bad_input("plan-table", Error(m.error()).context("--config"));
           models.push_back(std::move(*m));
         }
         auto ctx = parse_count(*context, "--max-context-length");
         if (!ctx.ok()) return bad_input("plan-table", ctx.error());
         auto conc = parse_count(*concurrency, "--max-concurrency");
         if (!conc.ok()) return bad_input("plan-table", conc.error());
         auto table = p::fit_table_markdown(models, *ctx, *conc);
         if (!table.ok()) return bad_input("plan-table", table.error());
         std::cout << *table;
         return 0;
       };
     }});

}  // namespace
}  // namespace infergate::runtime::cli
