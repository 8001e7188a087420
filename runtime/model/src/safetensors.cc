// The hardened safetensors reader: a streaming (SAX) parse of the header that enforces the schema
// as it goes, then the offset and size checks of the reference implementation.
#include "infergate/runtime/model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "infergate/common/fs.h"
#include "infergate/runtime/model/unicode.h"

namespace infergate::runtime::model {
namespace {

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

// Builds the tensor table from SAX events. Depth 1 is the root object, depth 2 a tensor entry (or the
// metadata object), depth 3 the shape or data_offsets array. Anything else stops the parse at once,
// so a hostile header cannot make us build a deep or wide structure.
class HeaderSax {
 public:
  HeaderSax(std::string_view file, const SafetensorsLimits& limits) : file_(file), limits_(limits) {}

  bool null() { return fail_value("null"); }
  bool boolean(bool) { return fail_value("a boolean"); }
  bool number_integer(int64_t v) {
    if (v < 0) return fail_value("a negative number");
    return number_unsigned(static_cast<uint64_t>(v));
  }
  bool number_unsigned(uint64_t v) {
    if (depth_ != 3) return fail_value("a number");
    if (field_ == Field::kShape) {
      if (current_.shape.size() >= limits_.max_rank) {
        return fail("BadShape", "shape has more than " + std::to_string(limits_.max_rank) + " dimensions");
      }
      current_.shape.push_back(v);
    } else {
      if (offsets_.size() >= 2) return fail("BadOffsets", "data_offsets must hold exactly two numbers");
      offsets_.push_back(v);
    }
    return true;
  }
  bool number_float(double, const std::string&) {
    return fail_value(
        "a non-integer or out-of-range number (dimensions and offsets are unsigned 64-bit integers)");
  }
  bool binary(nlohmann::json::binary_t&) { return fail_value("binary"); }

  bool string(std::string& s) {
    if (depth_ == 2 && in_metadata_) {
      if (header_.metadata.size() >= limits_.max_metadata_entries) {
        return fail("TooManyEntries", "__metadata__ has more than " +
                                          std::to_string(limits_.max_metadata_entries) + " entries");
      }
      header_.metadata.emplace_back(std::move(key_), std::move(s));
      return true;
    }
    if (depth_ == 2 && field_ == Field::kDtype) {
      auto t = parse_dtype(s);
      if (!t) return fail("BadDtype", "unknown or unsupported dtype '" + printable(s) + "'");
      current_.dtype = *t;
      have_dtype_ = true;
      return true;
    }
    return fail_value("a string");
  }

  bool start_object(size_t) {
    if (depth_ == 0) {
      depth_ = 1;
      return true;
    }
    if (depth_ == 1) {
      depth_ = 2;
      if (key_ == "__metadata__") {
        if (seen_metadata_) return fail("DuplicateTensor", "__metadata__ appears twice");
        seen_metadata_ = true;
        in_metadata_ = true;
        return true;
      }
      current_ = TensorInfo{};
      current_.name = std::move(key_);
      have_dtype_ = have_shape_ = have_offsets_ = false;
      offsets_.clear();
      return true;
    }
    return fail_value("an object");
  }

  bool key(std::string& k) {
    if (depth_ == 1) {
      if (k.size() > limits_.max_name_bytes) {
        return fail("BadName",
                    "a tensor name is longer than " + std::to_string(limits_.max_name_bytes) + " bytes");
      }
      if (!names_.insert(k).second) {
        tensor_ = k;
        return fail("DuplicateTensor", "tensor name appears more than once");
      }
      if (names_.size() > limits_.max_tensors + 1) {
        return fail("TooManyEntries", "more than " + std::to_string(limits_.max_tensors) + " tensors");
      }
      key_ = std::move(k);
      return true;
    }
    if (depth_ == 2 && in_metadata_) {
      key_ = std::move(k);
      return true;
    }
    if (depth_ == 2) {
      tensor_ = current_.name;
      if (k == "dtype") {
        if (have_dtype_) return fail("DuplicateKey", "'dtype' appears twice");
        field_ = Field::kDtype;
      } else if (k == "shape") {
        if (have_shape_) return fail("DuplicateKey", "'shape' appears twice");
        field_ = Field::kShape;
      } else if (k == "data_offsets") {
        if (have_offsets_) return fail("DuplicateKey", "'data_offsets' appears twice");
        field_ = Field::kOffsets;
      } else {
        return fail("UnknownKey", "unknown key '" + printable(k) + "' (expected dtype, shape, data_offsets)");
      }
      return true;
    }
    return fail_value("a key");
  }

  bool end_object() {
    if (depth_ == 2 && in_metadata_) {
      in_metadata_ = false;
      depth_ = 1;
      return true;
    }
    if (depth_ == 2) {
      tensor_ = current_.name;
      if (!have_dtype_) return fail("MissingKey", "missing 'dtype'");
      if (!have_shape_) return fail("MissingKey", "missing 'shape'");
      if (!have_offsets_) return fail("MissingKey", "missing 'data_offsets'");
      if (header_.tensors.size() >= limits_.max_tensors) {
        return fail("TooManyEntries", "more than " + std::to_string(limits_.max_tensors) + " tensors");
      }
      header_.tensors.push_back(std::move(current_));
      tensor_.clear();
      depth_ = 1;
      return true;
    }
    if (depth_ == 1) {
      depth_ = 0;
      done_ = true;
      return true;
    }
    return fail_value("'}'");
  }

  bool start_array(size_t) {
    if (depth_ == 2 && !in_metadata_ && (field_ == Field::kShape || field_ == Field::kOffsets)) {
      depth_ = 3;
      return true;
    }
    return fail_value("an array");
  }

  bool end_array() {
    if (depth_ != 3) return fail_value("']'");
    depth_ = 2;
    if (field_ == Field::kShape) {
      have_shape_ = true;
    } else {
      if (offsets_.size() != 2) return fail("BadOffsets", "data_offsets must hold exactly two numbers");
      current_.begin = offsets_[0];
      current_.end = offsets_[1];
      have_offsets_ = true;
    }
    return true;
  }

  bool parse_error(size_t position, const std::string&, const nlohmann::json::exception&) {
    if (!error_) {
      error_ = safetensors_error(
          file_, {}, "HeaderNotJson",
          "header is not valid JSON (at byte " + std::to_string(position) + " of the header)");
    }
    return false;
  }

  std::optional<Error>& error() { return error_; }
  bool done() const { return done_; }
  SafetensorsHeader& header() { return header_; }

 private:
  enum class Field { kDtype, kShape, kOffsets };

  static std::string printable(std::string_view s) {
    std::string out;
    for (char c : s.substr(0, 64)) out.push_back(static_cast<unsigned char>(c) < 0x20 ? '?' : c);
    if (s.size() > 64) out += "...";
    return out;
  }

  bool fail(std::string_view problem, std::string message) {
    if (!error_) error_ = safetensors_error(file_, tensor_, problem, std::move(message));
    return false;
  }
  bool fail_value(std::string_view what) {
    std::string where = depth_ == 0                   ? "the header must be a JSON object"
                        : depth_ == 1                 ? "each entry must be an object"
                        : depth_ == 2 && in_metadata_ ? "__metadata__ values must be strings"
                        : depth_ == 2                 ? "unexpected value in the tensor entry"
                                                      : "shape and data_offsets must hold unsigned integers";
    return fail(depth_ == 0 ? "HeaderNotObject" : "BadEntry", where + " (found " + std::string(what) + ")");
  }

  std::string file_;
  const SafetensorsLimits& limits_;
  int depth_ = 0;
  bool done_ = false;
  bool in_metadata_ = false;
  bool seen_metadata_ = false;
  Field field_ = Field::kDtype;
  bool have_dtype_ = false, have_shape_ = false, have_offsets_ = false;
  std::string key_;
  std::string tensor_;
  TensorInfo current_;
  std::vector<uint64_t> offsets_;
  std::unordered_set<std::string> names_;
  SafetensorsHeader header_;
  std::optional<Error> error_;
};

}  // namespace

uint64_t TensorInfo::num_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // validated not to overflow when the header was parsed
  return n;
}

Error safetensors_error(std::string_view file, std::string_view tensor, std::string_view problem,
                        std::string message) {
  std::string m(file);
  if (!tensor.empty()) m += ": tensor '" + std::string(tensor) + "'";
  m += ": " + message;
  Error e(ErrorCode::kInvalidArgument, std::move(m), "InvalidSafetensors");
  e.with_detail("file", std::string(file)).with_detail("problem", std::string(problem));
  if (!tensor.empty()) e.with_detail("tensor", std::string(tensor));
  return e;
}

Result<uint64_t> safetensors_header_length(std::span<const uint8_t> prefix, uint64_t file_size,
                                           std::string_view file_name, const SafetensorsLimits& limits) {
  if (file_size < 8 || prefix.size() < 8) {
    return safetensors_error(
        file_name, {}, "HeaderTooSmall",
        "file is " + std::to_string(file_size) + " bytes, too small for the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[static_cast<size_t>(i)];
  if (n > limits.max_header_bytes) {
    return safetensors_error(file_name, {}, "HeaderTooLarge",
                             "header length " + std::to_string(n) + " exceeds the limit of " +
                                 std::to_string(limits.max_header_bytes) + " bytes");
  }
  if (n > file_size - 8) {
    return safetensors_error(file_name, {}, "HeaderBeyondFile",
                             "header length " + std::to_string(n) + " is larger than the " +
                                 std::to_string(file_size - 8) + " bytes that follow it");
  }
  if (n < 2)
    return safetensors_error(file_name, {}, "HeaderNotObject", "header is too short to be a JSON object");
  return n;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> header_json, uint64_t data_bytes,
                                                   std::string_view file_name,
                                                   const SafetensorsLimits& limits) {
  std::string_view text(reinterpret_cast<const char*>(header_json.data()), header_json.size());
  if (!unicode::is_valid_utf8(text)) {
    return safetensors_error(file_name, {}, "HeaderNotUtf8", "header is not valid UTF-8");
  }
  if (text.empty() || text.front() != '{') {
    return safetensors_error(file_name, {}, "HeaderNotObject", "header does not start with '{'");
  }
  HeaderSax sax(file_name, limits);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                                   /*strict=*/true);
  } catch (const std::exception&) {
    ok = false;
  }
  if (!ok || !sax.done()) {
    if (sax.error()) return std::move(*sax.error());
    return safetensors_error(file_name, {}, "HeaderNotJson", "header is not a complete JSON object");
  }
  SafetensorsHeader header = std::move(sax.header());
  header.header_bytes = header_json.size();
  header.data_offset = 8 + header_json.size();
  header.data_bytes = data_bytes;

  // Each tensor on its own: offsets in order, element count and byte size without overflow.
  for (const TensorInfo& t : header.tensors) {
    if (t.name.empty()) return safetensors_error(file_name, {}, "BadName", "a tensor has an empty name");
    if (t.end < t.begin) {
      return safetensors_error(
          file_name, t.name, "BadOffsets",
          "data_offsets end " + std::to_string(t.end) + " is before begin " + std::to_string(t.begin));
    }
    uint64_t n = 1;
    for (uint64_t d : t.shape) {
      if (mul_overflows(n, d, &n)) {
        return safetensors_error(file_name, t.name, "Overflow", "the number of elements overflows 64 bits");
      }
    }
    uint64_t bytes;
    if (mul_overflows(n, dtype_size(t.dtype), &bytes)) {
      return safetensors_error(file_name, t.name, "Overflow",
                               "the byte size (shape x dtype) overflows 64 bits");
    }
    if (bytes != t.end - t.begin) {
      return safetensors_error(file_name, t.name, "SizeMismatch",
                               "shape x dtype is " + std::to_string(bytes) + " bytes but data_offsets span " +
                                   std::to_string(t.end - t.begin));
    }
  }
  // Together: sorted by offset they must tile [0, data_bytes) exactly.
  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : header.tensors) {
    if (t.begin < expected) {
      return safetensors_error(file_name, t.name, "Overlap",
                               "bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                   ") overlap tensor '" + (prev ? prev->name : std::string()) + "'");
    }
    if (t.begin > expected) {
      return safetensors_error(file_name, t.name, "Gap",
                               "starts at byte " + std::to_string(t.begin) + ", leaving a gap after byte " +
                                   std::to_string(expected));
    }
    expected = t.end;
    prev = &t;
  }
  if (expected != data_bytes) {
    return safetensors_error(file_name, expected > data_bytes && prev ? prev->name : std::string(),
                             "DataNotCovered",
                             "tensors cover " + std::to_string(expected) +
                                 " bytes of data but the file has " + std::to_string(data_bytes));
  }
  return header;
}

Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file, std::string_view file_name,
                                            const SafetensorsLimits& limits) {
  INFERGATE_ASSIGN_OR_RETURN(uint64_t n, safetensors_header_length(file, file.size(), file_name, limits));
  return parse_safetensors_header(file.subspan(8, n), file.size() - 8 - n, file_name, limits);
}

Result<SafetensorsHeader> read_safetensors_header(int fd, uint64_t file_size, std::string_view file_name,
                                                  const SafetensorsLimits& limits) {
  uint8_t prefix[8] = {};
  if (file_size >= 8) INFERGATE_RETURN_IF_ERROR(read_exact_at(fd, prefix, 8, 0, file_name));
  INFERGATE_ASSIGN_OR_RETURN(uint64_t n, safetensors_header_length(prefix, file_size, file_name, limits));
  std::vector<uint8_t> json(n);
  INFERGATE_RETURN_IF_ERROR(read_exact_at(fd, json.data(), n, 8, file_name));
  return parse_safetensors_header(json, file_size - 8 - n, file_name, limits);
}

Result<SafetensorsFile> SafetensorsFile::open(const ModelDirectory& dir, std::string_view name,
                                              const SafetensorsLimits& limits) {
  return open(dir, name, limits, dir.hasher());
}

Result<SafetensorsFile> SafetensorsFile::open(const ModelDirectory& dir, std::string_view name,
                                              const SafetensorsLimits& limits, LoadHasher* hasher) {
  SafetensorsFile f;
  f.name_ = std::string(name);
  INFERGATE_ASSIGN_OR_RETURN(f.file_, dir.map(name, hasher));
  INFERGATE_ASSIGN_OR_RETURN(f.header_, parse_safetensors(f.file_.bytes(), name, limits));
  f.index_.reserve(f.header_.tensors.size());
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.index_.emplace(f.header_.tensors[i].name, i);
  return f;
}

Result<SafetensorsFile> SafetensorsFile::open_path(const std::filesystem::path& path,
                                                   const SafetensorsLimits& limits) {
  std::filesystem::path parent = path.parent_path();
  if (parent.empty()) parent = ".";
  INFERGATE_ASSIGN_OR_RETURN(ModelDirectory dir,
                             ModelDirectory::open(parent, DirectoryOptions{false, nullptr}));
  return open(dir, path.filename().string(), limits);
}

const TensorInfo* SafetensorsFile::find(std::string_view tensor) const {
  auto it = index_.find(tensor);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const uint8_t> SafetensorsFile::data(const TensorInfo& t) const {
  return file_.bytes().subspan(header_.data_offset + t.begin, t.nbytes());
}

}  // namespace infergate::runtime::model
