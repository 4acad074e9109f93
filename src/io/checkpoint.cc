#include "io/checkpoint.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace deepinfer::io {
namespace {

using base::InvalidArgumentError;
using base::Status;
using base::StatusOr;
using nlohmann::json;

StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::NotFoundError(fmt::format("{}: cannot open", path.string()));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return base::UnavailableError(fmt::format("{}: read error", path.string()));
  return contents.str();
}

// name -> shard file name, from the index's weight_map.
StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::filesystem::path& path) {
  DI_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path));
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgumentError(fmt::format("{}: malformed JSON: {}", path.string(), e.what()));
  }
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object()) {
    return InvalidArgumentError(fmt::format("{}: missing object 'weight_map'", path.string()));
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, file] : root["weight_map"].items()) {
    if (!file.is_string()) {
      return InvalidArgumentError(
          fmt::format("{}: weight_map['{}'] is not a string", path.string(), name));
    }
    const std::string& shard = file.get_ref<const std::string&>();
    const std::filesystem::path shard_path(shard);
    if (shard.empty() || shard_path.has_parent_path() || shard_path.is_absolute() || shard == "." ||
        shard == "..") {
      return InvalidArgumentError(fmt::format("{}: weight_map['{}'] = '{}' is not a file name",
                                              path.string(), name, shard));
    }
    weight_map[name] = shard;
  }
  return weight_map;
}

}  // namespace

Status Checkpoint::AddShardTensors(const SafetensorsFile& shard) {
  for (const SafetensorsTensorInfo& info : shard.tensors()) {
    const auto [it, inserted] = entries_.emplace(info.name, Entry{&shard, &info});
    if (!inserted) {
      return InvalidArgumentError(fmt::format(
          "{}: tensor '{}' is present in both {} and {}", dir_.string(), info.name,
          it->second.shard->path().filename().string(), shard.path().filename().string()));
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::filesystem::path& dir) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->dir_ = dir;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return base::NotFoundError(fmt::format("{}: not a directory", dir.string()));
  }
  const std::filesystem::path index_path = dir / kIndexFileName;
  if (!std::filesystem::exists(index_path, ec)) {
    const std::filesystem::path single = dir / kSingleShardFileName;
    if (!std::filesystem::exists(single, ec)) {
      return base::NotFoundError(fmt::format("{}: neither {} nor {} found", dir.string(),
                                             kIndexFileName, kSingleShardFileName));
    }
    DI_ASSIGN_OR_RETURN(auto shard, SafetensorsFile::Open(single));
    DI_RETURN_IF_ERROR(checkpoint->AddShardTensors(*shard));
    checkpoint->shards_.push_back(std::move(shard));
    return checkpoint;
  }

  DI_ASSIGN_OR_RETURN(auto weight_map, ReadWeightMap(index_path));
  std::set<std::string> shard_names;
  for (const auto& [name, shard] : weight_map) shard_names.insert(shard);
  for (const std::string& shard_name : shard_names) {
    DI_ASSIGN_OR_RETURN(auto shard, SafetensorsFile::Open(dir / shard_name));
    DI_RETURN_IF_ERROR(checkpoint->AddShardTensors(*shard));
    checkpoint->shards_.push_back(std::move(shard));
  }
  for (const auto& [name, shard_name] : weight_map) {
    const auto it = checkpoint->entries_.find(name);
    if (it == checkpoint->entries_.end() ||
        it->second.shard->path().filename().string() != shard_name) {
      return base::NotFoundError(fmt::format("{}: tensor '{}' listed in {} is not in {}",
                                             dir.string(), name, kIndexFileName, shard_name));
    }
  }
  for (const auto& [name, entry] : checkpoint->entries_) {
    if (!weight_map.contains(name)) checkpoint->unlisted_.push_back(name);
  }
  return checkpoint;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const SafetensorsTensorInfo* Checkpoint::Find(std::string_view name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.info;
}

const SafetensorsFile* Checkpoint::ShardOf(std::string_view name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.shard;
}

StatusOr<const SafetensorsTensorInfo*> Checkpoint::Info(std::string_view name) const {
  const SafetensorsTensorInfo* info = Find(name);
  if (info == nullptr) {
    return base::NotFoundError(
        fmt::format("tensor '{}' not found in checkpoint {}", name, dir_.string()));
  }
  return info;
}

StatusOr<tensor::TensorView> Checkpoint::Get(std::string_view name) const {
  DI_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  return ShardOf(name)->Get(*info);
}

Status Checkpoint::CheckE8M0(std::string_view name) const {
  DI_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  if (info->dtype != tensor::DType::kF8E8M0) return Status::Ok();
  return CheckE8M0Bytes(ShardOf(name)->Bytes(*info), name)
      .WithContext(ShardOf(name)->path().string());
}

Status Checkpoint::CheckAllE8M0() const {
  for (const auto& [name, entry] : entries_) {
    if (entry.info->dtype == tensor::DType::kF8E8M0) DI_RETURN_IF_ERROR(CheckE8M0(name));
  }
  return Status::Ok();
}

StatusOr<std::span<const uint8_t>> Checkpoint::Bytes(std::string_view name) const {
  DI_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, Info(name));
  return ShardOf(name)->Bytes(*info);
}

}  // namespace deepinfer::io
