// Weight-format detection from the artifact's own metadata.
#include "infergate/agent/manifest/weight_format.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/statement.h"
#include "infergate/common/fs.h"
#include "infergate/common/json.h"

namespace infergate::agent {
namespace {

constexpr size_t kMaxMetadataBytes = 1u << 20;
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

Error metadata_invalid(std::string_view file, const std::string& why) {
  return refusal(Reason::kMetadataInvalid, std::string(file) + ": " + why)
      .with_detail("file", std::string(file));
}

std::optional<std::string> from_dtype(std::string_view dtype) {
  static const std::map<std::string_view, std::string_view> kMap = {
      {"F16", "fp16"}, {"BF16", "bf16"},        {"F32", "fp32"},         {"F64", "fp64"},
      {"I8", "int8"},  {"F8_E4M3", "fp8_e4m3"}, {"F8_E5M2", "fp8_e5m2"}, {"U8", "uint8"}};
  auto it = kMap.find(dtype);
  if (it == kMap.end()) return std::nullopt;
  return std::string(it->second);
}

// Adds each tensor's byte span to its dtype's total.
Status tally_safetensors(int root_fd, const std::string& path, std::map<std::string, uint64_t>* bytes) {
  INFERGATE_ASSIGN_OR_RETURN(UniqueFd fd, open_beneath(root_fd, path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return metadata_invalid(path, "not a regular file");
  unsigned char len_bytes[8];
  auto st1 = read_exact_at(fd.get(), len_bytes, 8, 0, path);
  if (!st1.ok()) return metadata_invalid(path, "shorter than a safetensors header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeader || n > static_cast<uint64_t>(st.st_size) - 8) {
    return metadata_invalid(
        path, "safetensors header length " + std::to_string(n) + " is over the cap or the file");
  }
  std::string header(static_cast<size_t>(n), '\0');
  if (!read_exact_at(fd.get(), header.data(), header.size(), 8, path).ok()) {
    return metadata_invalid(path, "cannot read the safetensors header");
  }
  auto j = parse_json(header, path);
  if (!j.ok() || !j->is_object())
    return metadata_invalid(path, "the safetensors header is not a JSON object");
  for (const auto& [name, info] : j->items()) {
    if (name == "__metadata__") continue;
    if (!info.is_object())
      return metadata_invalid(path, "tensor " + name.substr(0, 100) + " is not an object");
    auto dtype = json_string(info, "dtype");
    auto offsets = json_array(info, "data_offsets");
    if (!dtype.ok() || !offsets.ok() || (*offsets)->size() != 2 || !(**offsets)[0].is_number_unsigned() ||
        !(**offsets)[1].is_number_unsigned()) {
      return metadata_invalid(path, "tensor " + name.substr(0, 100) + " lacks dtype or data_offsets");
    }
    uint64_t begin = (**offsets)[0].get<uint64_t>(), end = (**offsets)[1].get<uint64_t>();
    if (end < begin)
      return metadata_invalid(path, "tensor " + name.substr(0, 100) + " ends before it starts");
    (*bytes)[*dtype] += end - begin;
  }
  return ok_status();
}

}  // namespace

Result<std::optional<std::string>> detect_weight_format(int root_fd, const Manifest& manifest) {
  if (manifest.find("quantization.json") != nullptr) {
    INFERGATE_ASSIGN_OR_RETURN(
        std::string text,
        read_small_file(root_fd, "quantization.json", kMaxMetadataBytes, Reason::kMetadataInvalid));
    auto j = parse_json(text, "quantization.json");
    if (!j.ok() || !j->is_object()) return metadata_invalid("quantization.json", "not a JSON object");
    // "format" (DESIGN.md), or "weight_format" as `infergate-runtime quantize` writes it.
    auto format = json_string(*j, j->contains("format") ? "format" : "weight_format");
    if (!format.ok()) return metadata_invalid("quantization.json", format.error().message());
    if (!validate_weight_format(*format).ok()) {
      return metadata_invalid("quantization.json", "\"format\" is not a weight format name (a-z 0-9 _)");
    }
    return std::optional<std::string>(*format);
  }
  std::map<std::string, uint64_t> bytes;
  bool any = false;
  for (const auto& e : manifest.entries()) {
    if (e.path.size() < 12 || e.path.compare(e.path.size() - 12, 12, ".safetensors") != 0) continue;
    INFERGATE_RETURN_IF_ERROR(tally_safetensors(root_fd, e.path, &bytes));
    any = true;
  }
  if (any && !bytes.empty()) {
    auto top = std::max_element(bytes.begin(), bytes.end(),
                                [](const auto& a, const auto& b) { return a.second < b.second; });
    auto format = from_dtype(top->first);
    if (!format) {
      return metadata_invalid("*.safetensors", "the dominant dtype " + top->first.substr(0, 32) +
                                                   " names no weight format; pass --weight-format");
    }
    return format;
  }
  if (manifest.find("config.json") != nullptr) {
    INFERGATE_ASSIGN_OR_RETURN(std::string text, read_small_file(root_fd, "config.json", kMaxMetadataBytes,
                                                                 Reason::kMetadataInvalid));
    auto j = parse_json(text, "config.json");
    if (j.ok() && j->is_object()) {
      auto dtype = json_string_or(*j, "torch_dtype", "");
      if (dtype.ok()) {
        if (*dtype == "float16") return std::optional<std::string>("fp16");
        if (*dtype == "bfloat16") return std::optional<std::string>("bf16");
        if (*dtype == "float32") return std::optional<std::string>("fp32");
      }
    }
  }
  return std::optional<std::string>();
}

}  // namespace infergate::agent
