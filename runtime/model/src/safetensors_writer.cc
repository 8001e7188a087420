// Streaming safetensors writer: header first (from the specs), data by pwrite at computed offsets.
#include "infergate/runtime/model/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::model {

namespace {
std::string quote_json(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }
}  // namespace

Result<SafetensorsWriter> SafetensorsWriter::create(const std::filesystem::path& path,
                                                    std::vector<TensorSpec> tensors,
                                                    const std::map<std::string, std::string>& metadata) {
  std::string what = path.filename().string();
  std::sort(tensors.begin(), tensors.end(), [](const TensorSpec& a, const TensorSpec& b) {
    size_t sa = dtype_size(a.dtype), sb = dtype_size(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  SafetensorsWriter w;
  w.path_ = path;
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool mfirst = true;
    for (const auto& [k, v] : metadata) {
      if (!unicode::is_valid_utf8(k) || !unicode::is_valid_utf8(v)) {
        return invalid_argument(what + ": metadata must be valid UTF-8");
      }
      if (!mfirst) h += ",";
      h += quote_json(k) + ":" + quote_json(v);
      mfirst = false;
    }
    h += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !unicode::is_valid_utf8(t.name)) {
      return invalid_argument(what + ": bad tensor name '" + t.name + "'");
    }
    uint64_t n = dtype_size(t.dtype);
    for (uint64_t d : t.shape) {
      if (__builtin_mul_overflow(n, d, &n))
        return invalid_argument(what + ": tensor '" + t.name + "' is too large");
    }
    if (!w.slots_.emplace(t.name, Slot{offset, n, 0}).second) {
      return invalid_argument(what + ": tensor '" + t.name + "' is given twice");
    }
    if (!first) h += ",";
    first = false;
    h += quote_json(t.name) + ":{\"dtype\":\"" + std::string(dtype_name(t.dtype)) + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) h += ",";
      h += std::to_string(t.shape[i]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + n) + "]}";
    if (__builtin_add_overflow(offset, n, &offset)) return invalid_argument(what + ": tensors are too large");
  }
  h += "}";
  while (h.size() % 8 != 0) h += ' ';
  w.header_ = h;
  w.data_offset_ = 8 + h.size();
  w.file_size_ = w.data_offset_ + offset;

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error("creating " + path.string(), errno);
  w.fd_ = UniqueFd(fd);
  std::string prefix(8, '\0');
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) prefix[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  INFERGATE_RETURN_IF_ERROR(write_all(fd, prefix + h, path.string()));
  if (ftruncate(fd, static_cast<off_t>(w.file_size_)) != 0)
    return errno_error("sizing " + path.string(), errno);
  return w;
}

Status SafetensorsWriter::write(std::string_view name, std::span<const uint8_t> bytes, uint64_t offset) {
  auto it = slots_.find(std::string(name));
  if (it == slots_.end())
    return invalid_argument(path_.string() + ": no tensor '" + std::string(name) + "' declared");
  Slot& s = it->second;
  if (offset > s.size || bytes.size() > s.size - offset) {
    return invalid_argument(path_.string() + ": write past the end of tensor '" + std::string(name) + "'");
  }
  uint64_t pos = data_offset_ + s.begin + offset;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t r = ::pwrite(fd_.get(), bytes.data() + done, bytes.size() - done, static_cast<off_t>(pos + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno_error("writing " + path_.string(), errno);
    }
    done += static_cast<size_t>(r);
  }
  s.written += bytes.size();
  return ok_status();
}

Status SafetensorsWriter::finish() {
  for (const auto& [name, s] : slots_) {
    if (s.written != s.size) {
      return internal_error(path_.string() + ": tensor '" + name + "' received " + std::to_string(s.written) +
                            " of its " + std::to_string(s.size) + " bytes");
    }
  }
  if (fsync(fd_.get()) != 0) return errno_error("fsync " + path_.string(), errno);
  fd_.reset();
  return ok_status();
}

Status write_safetensors(const std::filesystem::path& path, const std::vector<TensorData>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) specs.push_back(t.spec);
  INFERGATE_ASSIGN_OR_RETURN(SafetensorsWriter w,
                             SafetensorsWriter::create(path, std::move(specs), metadata));
  for (const auto& t : tensors) INFERGATE_RETURN_IF_ERROR(w.write(t.spec.name, t.bytes));
  return w.finish();
}

}  // namespace infergate::runtime::model
