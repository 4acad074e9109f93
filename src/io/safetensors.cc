#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace deepinfer::io {
namespace {

using base::InvalidArgumentError;
using base::Status;
using base::StatusOr;
using nlohmann::json;

constexpr int kMaxJsonNesting = 16;  // a valid header nests 3 deep

// Rejects inputs nested deeper than kMaxJsonNesting before handing them to the JSON parser.
bool NestingWithinLimit(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonNesting) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

// Builds the DOM like nlohmann's own parser (linear time, unlike its callback parser, whose
// end_object rescans the parent) and records the first duplicate key of the top-level object.
class DuplicateKeyDomBuilder {
 public:
  using DomParser = nlohmann::detail::json_sax_dom_parser<json>;
  DuplicateKeyDomBuilder(json& root, std::string* duplicate)
      : dom_(root, /*allow_exceptions=*/true), duplicate_(duplicate) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    ++depth_;
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (depth_ == 1 && !top_level_keys_.insert(k).second && duplicate_->empty()) *duplicate_ = k;
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    ++depth_;
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return dom_.parse_error(position, token, e);  // throws
  }

 private:
  DomParser dom_;
  std::string* duplicate_;
  int depth_ = 0;
  std::set<std::string> top_level_keys_;
};

// Parses JSON, reporting duplicate keys of the top-level object in `duplicate`.
StatusOr<json> ParseJsonObject(std::string_view text, std::string_view label,
                               std::string* duplicate) {
  if (!NestingWithinLimit(text)) {
    return InvalidArgumentError(
        fmt::format("{}: malformed JSON header: nested deeper than {}", label, kMaxJsonNesting));
  }
  try {
    json parsed;
    DuplicateKeyDomBuilder builder(parsed, duplicate);
    json::sax_parse(text.begin(), text.end(), &builder);
    if (!parsed.is_object()) {
      return InvalidArgumentError(
          fmt::format("{}: malformed JSON header: top level is not an object", label));
    }
    return parsed;
  } catch (const json::exception& e) {
    return InvalidArgumentError(fmt::format("{}: malformed JSON header: {}", label, e.what()));
  }
}

Status TensorError(std::string_view label, std::string_view name, std::string_view what) {
  return InvalidArgumentError(fmt::format("{}: tensor '{}': {}", label, name, what));
}

StatusOr<std::map<std::string, std::string>> ParseMetadata(const json& value,
                                                           std::string_view label) {
  if (!value.is_object()) {
    return InvalidArgumentError(fmt::format("{}: __metadata__ is not an object", label));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return InvalidArgumentError(
          fmt::format("{}: __metadata__ value of '{}' is not a string", label, key));
    }
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

StatusOr<SafetensorsTensorInfo> ParseTensorEntry(const std::string& name, const json& entry,
                                                 uint64_t data_size, std::string_view label) {
  if (!entry.is_object()) return TensorError(label, name, "entry is not an object");
  for (const auto& [key, unused] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return TensorError(label, name, fmt::format("unknown key '{}'", key));
    }
  }
  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return TensorError(label, name, "missing or non-string 'dtype'");
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  const std::optional<tensor::DType> dtype = tensor::DTypeFromSafetensorsName(dtype_name);
  if (!dtype) return TensorError(label, name, fmt::format("unknown dtype '{}'", dtype_name));

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return TensorError(label, name, "missing or non-array 'shape'");
  }
  if (shape_it->size() > static_cast<size_t>(tensor::kMaxRank)) {
    return TensorError(label, name,
                       fmt::format("rank {} exceeds {}", shape_it->size(), tensor::kMaxRank));
  }
  std::vector<int64_t> dims;
  for (const json& dim : *shape_it) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (1ull << 62)) {
      return TensorError(label, name, fmt::format("invalid shape entry {}", dim.dump()));
    }
    dims.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }
  const int64_t num_elements = tensor::CheckedNumElements(dims);
  const std::optional<uint64_t> needed =
      num_elements < 0 ? std::nullopt : tensor::DTypeStorageBytes(*dtype, num_elements);
  if (!needed) return TensorError(label, name, "shape too large");

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return TensorError(label, name, "'data_offsets' must be two unsigned integers");
  }
  SafetensorsTensorInfo info;
  info.name = name;
  info.dtype = *dtype;
  info.shape = tensor::Shape(std::span<const int64_t>(dims));
  info.begin = (*offsets_it)[0].get<uint64_t>();
  info.end = (*offsets_it)[1].get<uint64_t>();
  if (info.end < info.begin || info.end > data_size) {
    return TensorError(label, name,
                       fmt::format("data_offsets [{}, {}] out of range (data section is {} bytes)",
                                   info.begin, info.end, data_size));
  }
  if (info.size_bytes() != *needed) {
    return TensorError(
        label, name,
        fmt::format("shape {} of {} needs {} bytes but data_offsets span {}", info.shape.ToString(),
                    tensor::DTypeName(*dtype), *needed, info.size_bytes()));
  }
  return info;
}

Status CheckNoOverlap(const std::vector<SafetensorsTensorInfo>& tensors, std::string_view label) {
  std::vector<const SafetensorsTensorInfo*> sorted;
  for (const auto& t : tensors) {
    if (t.size_bytes() > 0) sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end) {
      return InvalidArgumentError(fmt::format("{}: tensors '{}' and '{}' overlap", label,
                                              sorted[i - 1]->name, sorted[i]->name));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<SafetensorsHeader> ParseSafetensorsHeaderJson(std::string_view text, uint64_t data_size,
                                                       std::string_view label) {
  std::string duplicate;
  DI_ASSIGN_OR_RETURN(json root, ParseJsonObject(text, label, &duplicate));
  if (!duplicate.empty()) {
    return InvalidArgumentError(fmt::format("{}: duplicate tensor name '{}'", label, duplicate));
  }
  SafetensorsHeader header;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      DI_ASSIGN_OR_RETURN(header.metadata, ParseMetadata(entry, label));
      continue;
    }
    DI_ASSIGN_OR_RETURN(SafetensorsTensorInfo info,
                        ParseTensorEntry(name, entry, data_size, label));
    header.tensors.push_back(std::move(info));
  }
  DI_RETURN_IF_ERROR(CheckNoOverlap(header.tensors, label));
  return header;
}

StatusOr<SafetensorsHeader> ParseSafetensors(std::span<const uint8_t> file_bytes,
                                             std::string_view label) {
  if (file_bytes.size() < 8) {
    return InvalidArgumentError(fmt::format(
        "{}: file too small for a safetensors header ({} bytes)", label, file_bytes.size()));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file_bytes[i];
  if (header_len > file_bytes.size() - 8) {
    return InvalidArgumentError(fmt::format("{}: header length {} larger than file ({} bytes)",
                                            label, header_len, file_bytes.size()));
  }
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return InvalidArgumentError(fmt::format("{}: header length {} exceeds the {} byte limit", label,
                                            header_len, kMaxSafetensorsHeaderBytes));
  }
  const std::string_view text(reinterpret_cast<const char*>(file_bytes.data() + 8), header_len);
  const uint64_t data_size = file_bytes.size() - 8 - header_len;
  DI_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeaderJson(text, data_size, label));
  header.data_offset = 8 + header_len;
  return header;
}

Status CheckE8M0Bytes(std::span<const uint8_t> bytes, std::string_view name) {
  const auto it = std::find(bytes.begin(), bytes.end(), tensor::kE8M0NaN);
  if (it == bytes.end()) return Status::Ok();
  return InvalidArgumentError(fmt::format("tensor '{}': F8_E8M0 scale byte 255 (NaN) at element {}",
                                          name, it - bytes.begin()));
}

// ---- SafetensorsFile ------------------------------------------------------------------------

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::filesystem::path& path) {
  const std::string label = path.string();
  const int fd = ::open(label.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message = fmt::format("{}: cannot open: {}", label, std::strerror(err));
    return err == ENOENT ? base::NotFoundError(message) : base::UnavailableError(message);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(fmt::format("{}: not a regular file", label));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* map = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return base::UnavailableError(fmt::format("{}: mmap failed: {}", label, std::strerror(err)));
    }
    file->map_ = static_cast<const uint8_t*>(map);
  }
  ::close(fd);
  DI_ASSIGN_OR_RETURN(file->header_, ParseSafetensors({file->map_, file->size_}, label));
  for (size_t i = 0; i < file->header_.tensors.size(); ++i) {
    file->index_.emplace(file->header_.tensors[i].name, i);
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), size_);
}

const SafetensorsTensorInfo* SafetensorsFile::Find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

StatusOr<const SafetensorsTensorInfo*> SafetensorsFile::Info(std::string_view name) const {
  const SafetensorsTensorInfo* info = Find(name);
  if (info == nullptr) {
    return base::NotFoundError(fmt::format("{}: tensor '{}' not found", path_.string(), name));
  }
  return info;
}

std::span<const uint8_t> SafetensorsFile::Bytes(const SafetensorsTensorInfo& info) const {
  if (info.size_bytes() == 0) return {};
  return {map_ + header_.data_offset + info.begin, static_cast<size_t>(info.size_bytes())};
}

StatusOr<std::span<const uint8_t>> SafetensorsFile::Bytes(std::string_view name) const {
  DI_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  return Bytes(*info);
}

StatusOr<tensor::TensorView> SafetensorsFile::Get(const SafetensorsTensorInfo& info) const {
  const uint64_t element_bytes = std::max(1, tensor::DTypeBits(info.dtype) / 8);
  const uint64_t offset = header_.data_offset + info.begin;
  if (offset % element_bytes != 0) {
    return base::FailedPreconditionError(
        fmt::format("{}: tensor '{}': data at file offset {} is not aligned to {} bytes",
                    path_.string(), info.name, offset, element_bytes));
  }
  if (info.dtype == tensor::DType::kFP4E2M1 && info.shape.rank() > 0 &&
      info.shape[info.shape.rank() - 1] % 2 != 0) {
    return base::FailedPreconditionError(fmt::format(
        "{}: tensor '{}': FP4 tensor with an odd innermost dim", path_.string(), info.name));
  }
  // The mapping is read-only; TensorView carries a mutable pointer by design (see tensor.h).
  void* data = const_cast<uint8_t*>(map_ == nullptr ? nullptr : map_ + offset);
  return tensor::TensorView(data, info.dtype, info.shape);
}

StatusOr<tensor::TensorView> SafetensorsFile::Get(std::string_view name) const {
  DI_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  return Get(*info);
}

}  // namespace deepinfer::io
