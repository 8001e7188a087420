// The header reader of safetensors_header.h.
#include "infergate/weights/safetensors_header.h"

#include <sys/stat.h>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"

namespace infergate::weights {
namespace {

Error header_error(std::string_view file, std::string_view tensor, const std::string& why) {
  std::string msg = std::string(file) + ": ";
  if (!tensor.empty()) msg += "tensor " + std::string(tensor.substr(0, 200)) + ": ";
  Error e(ErrorCode::kInvalidArgument, msg + why, std::string(kInvalidSafetensors));
  e.with_detail("file", std::string(file));
  if (!tensor.empty()) e.with_detail("tensor", std::string(tensor.substr(0, 200)));
  return e;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

uint64_t TensorHeader::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

Result<std::vector<TensorHeader>> parse_safetensors_header(std::string_view json, uint64_t data_offset,
                                                           uint64_t data_bytes, std::string_view file,
                                                           const HeaderLimits& limits) {
  // Object order matters (it is the order of the data); nlohmann's ordered_json keeps it.
  auto j = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return header_error(file, {}, "the header is not a JSON object");
  if (j.size() > limits.max_tensors + 1)
    return header_error(file, {},
                        "the header lists more than " + std::to_string(limits.max_tensors) + " tensors");
  std::vector<TensorHeader> out;
  out.reserve(j.size());
  for (const auto& [name, info] : j.items()) {
    if (name == "__metadata__") continue;
    if (name.empty() || name.size() > limits.max_name_bytes)
      return header_error(file, name,
                          "a tensor name must be 1 to " + std::to_string(limits.max_name_bytes) + " bytes");
    if (!info.is_object()) return header_error(file, name, "the entry is not an object");
    auto dt = info.find("dtype");
    auto sh = info.find("shape");
    auto off = info.find("data_offsets");
    if (dt == info.end() || !dt->is_string() || sh == info.end() || !sh->is_array() || off == info.end() ||
        !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return header_error(file, name,
                          "needs dtype (a string), shape (a list) and data_offsets ([begin, end])");
    }
    TensorHeader t;
    t.name = name;
    t.file = std::string(file);
    auto dtype = parse_dtype(dt->get<std::string>());
    if (!dtype) return header_error(file, name, "unknown dtype " + dt->get<std::string>().substr(0, 32));
    t.dtype = *dtype;
    if (sh->size() > limits.max_rank)
      return header_error(file, name, "rank above " + std::to_string(limits.max_rank));
    uint64_t n = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        return header_error(file, name, "a shape dimension is not a non-negative integer");
      t.shape.push_back(d.get<uint64_t>());
      if (mul_overflows(n, t.shape.back(), &n)) return header_error(file, name, "the shape's size overflows");
    }
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    uint64_t bytes = 0;
    if (mul_overflows(n, dtype_bytes(t.dtype), &bytes))
      return header_error(file, name, "the byte size overflows");
    if (end < begin || end - begin != bytes || end > data_bytes) {
      return header_error(file, name,
                          "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                              ") do not hold shape x dtype = " + std::to_string(bytes) +
                              " bytes inside the " + std::to_string(data_bytes) + "-byte data section");
    }
    t.offset = data_offset + begin;
    t.bytes = bytes;
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<TensorHeader>> read_safetensors_header(int fd, std::string_view file,
                                                          const HeaderLimits& limits) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return header_error(file, {}, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char prefix[8];
  if (size < 8 || !read_exact_at(fd, prefix, 8, 0, file).ok())
    return header_error(file, {}, "shorter than a safetensors header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > limits.max_header_bytes || n > size - 8) {
    return header_error(file, {}, "header length " + std::to_string(n) + " is over the cap or the file");
  }
  std::string header(static_cast<size_t>(n), '\0');
  if (!read_exact_at(fd, header.data(), header.size(), 8, file).ok())
    return header_error(file, {}, "cannot read the header");
  return parse_safetensors_header(header, 8 + n, size - 8 - n, file, limits);
}

}  // namespace infergate::weights
