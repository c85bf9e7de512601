#include "io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/json_file.h"
#include "io/streamed_file.h"

namespace gemmaserve {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // safetensors' own limit

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_string() const { return format_shape(shape); }

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  const std::string where = path.string();
  if (file_.size() < 8) throw InputError(where + ": too small to be a safetensors file");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.data(), 8);
  if (header_len > file_.size() - 8) {
    throw InputError(where + ": safetensors header length " + std::to_string(header_len) +
                     " is larger than the file (" + std::to_string(file_.size()) + " bytes)");
  }
  if (header_len > kMaxHeaderBytes) throw InputError(where + ": safetensors header too large");
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(file_.data()) + 8,
                         reinterpret_cast<const char*>(file_.data()) + 8 + header_len);
  } catch (const json::exception& e) {
    throw InputError(where + ": malformed safetensors header: " + e.what());
  }
  if (!header.is_object()) throw InputError(where + ": safetensors header is not a JSON object");
  const std::byte* data_start = file_.data() + 8 + header_len;
  const uint64_t data_size = file_.size() - 8 - header_len;

  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (it->is_object()) {
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
        }
      }
      continue;
    }
    const std::string tw = where + ": tensor '" + name + "'";
    const json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array() ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2) {
      throw InputError(tw + ": header entry needs dtype, shape and two data_offsets");
    }
    TensorView v;
    v.name = name;
    v.file = path;
    const std::string dtype = e["dtype"].get<std::string>();
    if (!parse_dtype(dtype, &v.dtype)) throw InputError(tw + ": unknown dtype '" + dtype + "'");
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) throw InputError(tw + ": shape must hold non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t{1} << 50) / dim) throw InputError(tw + ": shape too large");
      numel *= dim;
      v.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw InputError(tw + ": data_offsets must be non-negative integers");
    }
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (end < begin) throw InputError(tw + ": data_offsets end before they begin");
    if (end > data_size) {
      throw InputError(tw + ": data_offsets [" + std::to_string(begin) + ", " +
                       std::to_string(end) + ") run past the end of the data (" +
                       std::to_string(data_size) + " bytes; file truncated?)");
    }
    uint64_t expected = numel * dtype_size(v.dtype);
    if (end - begin != expected) {
      throw InputError(tw + ": " + std::to_string(end - begin) + " bytes of data but shape " +
                       format_shape(v.shape) + " of " + dtype + " needs " +
                       std::to_string(expected));
    }
    v.data = data_start + begin;
    v.nbytes = end - begin;
    if (begin != end) spans.push_back({begin, end, name});
    tensors_.emplace(name, std::move(v));
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      throw InputError(where + ": tensors '" + spans[i - 1].name + "' and '" + spans[i].name +
                       "' have overlapping data_offsets");
    }
  }
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw InputError(dir.string() + ": not a directory");
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(index_path)) {
    json index = read_json_file(index_path);
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw InputError(index_path.string() + ": missing 'weight_map' object");
    }
    std::map<std::string, SafetensorsFile*> by_shard;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it->is_string()) {
        throw InputError(index_path.string() + ": weight_map['" + it.key() + "'] is not a string");
      }
      const std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..") {
        throw InputError(index_path.string() + ": shard name '" + shard + "' is not a plain file");
      }
      auto found = by_shard.find(shard);
      if (found == by_shard.end()) {
        if (!fs::exists(dir / shard)) {
          throw InputError(index_path.string() + ": shard '" + shard + "' (holding tensor '" +
                           it.key() + "') does not exist");
        }
        files_.push_back(std::make_unique<SafetensorsFile>(dir / shard));
        found = by_shard.emplace(shard, files_.back().get()).first;
      }
      auto t = found->second->tensors().find(it.key());
      if (t == found->second->tensors().end()) {
        throw InputError((dir / shard).string() + ": tensor '" + it.key() +
                         "' listed in the index is missing from the shard");
      }
      index_[it.key()] = &t->second;
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
  } else {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") found.push_back(e.path());
    }
    if (found.empty()) {
      throw InputError(dir.string() +
                       ": no model.safetensors, model.safetensors.index.json or *.safetensors");
    }
    std::sort(found.begin(), found.end());
    for (const auto& p : found) files_.push_back(std::make_unique<SafetensorsFile>(p));
  }
  if (index_.empty()) {
    for (const auto& f : files_) {
      for (const auto& [name, view] : f->tensors()) {
        if (!index_.emplace(name, &view).second) {
          throw InputError(f->path().string() + ": tensor '" + name +
                           "' appears in more than one file");
        }
      }
    }
  }
}

const TensorView* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

size_t SafetensorsCheckpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, v] : index_) n += v->nbytes;
  return n;
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t TensorSpec::nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }

std::string TensorSpec::shape_string() const { return format_shape(shape); }

namespace {

std::string shard_name(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

// Fills in the header and sizes of a planned file from its tensor list.
void finish_file(const std::vector<TensorSpec>& specs,
                 const std::map<std::string, std::string>& metadata, SafetensorsPlan::File* f) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : f->tensors) {
    const TensorSpec& s = specs[i];
    if (s.name == "__metadata__" || header.contains(s.name)) {
      throw InputError("safetensors writer: duplicate or reserved tensor name '" + s.name + "'");
    }
    header[s.name] = {{"dtype", dtype_name(s.dtype)},
                      {"shape", s.shape},
                      {"data_offsets", {offset, offset + s.nbytes()}}};
    offset += s.nbytes();
  }
  f->header = header.dump();
  while (f->header.size() % 8) f->header.push_back(' ');  // keeps tensor data 8-byte aligned
  f->data_bytes = offset;
}

SafetensorsPlan make_plan(const std::vector<TensorSpec>& specs,
                          std::vector<std::vector<size_t>> groups, bool sharded,
                          const std::map<std::string, std::string>& metadata,
                          const std::string& single_name) {
  SafetensorsPlan plan;
  plan.sharded = sharded;
  std::set<std::string> names;
  for (const auto& s : specs) {
    if (!names.insert(s.name).second) {
      throw InputError("safetensors writer: duplicate tensor name '" + s.name + "'");
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    SafetensorsPlan::File f;
    f.name = sharded ? shard_name(g, groups.size()) : single_name;
    f.tensors = std::move(groups[g]);
    finish_file(specs, metadata, &f);
    plan.data_bytes += f.data_bytes;
    plan.disk_bytes += f.file_bytes();
    plan.files.push_back(std::move(f));
  }
  return plan;
}

std::vector<std::vector<size_t>> group_by_max_bytes(const std::vector<TensorSpec>& specs,
                                                    uint64_t max_bytes) {
  std::vector<std::vector<size_t>> groups(1);
  uint64_t current = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t n = specs[i].nbytes();
    if (current > 0 && current + n > max_bytes) {
      groups.emplace_back();
      current = 0;
    }
    groups.back().push_back(i);
    current += n;
  }
  return groups;
}

std::vector<size_t> all_indices(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace

SafetensorsPlan plan_single_file(const std::vector<TensorSpec>& specs,
                                 const std::map<std::string, std::string>& metadata,
                                 const std::string& file_name) {
  return make_plan(specs, {all_indices(specs.size())}, false, metadata, file_name);
}

SafetensorsPlan plan_max_shard_bytes(const std::vector<TensorSpec>& specs, uint64_t max_shard_bytes,
                                     const std::map<std::string, std::string>& metadata) {
  auto groups = group_by_max_bytes(specs, max_shard_bytes);
  if (groups.size() == 1) return plan_single_file(specs, metadata);
  return make_plan(specs, std::move(groups), true, metadata, "");
}

SafetensorsPlan plan_num_shards(const std::vector<TensorSpec>& specs, int n,
                                const std::map<std::string, std::string>& metadata) {
  if (n < 1) throw InputError("safetensors writer: shard count must be at least 1");
  const size_t count = specs.size();
  const size_t shards = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(n), count));
  uint64_t total = 0;
  for (const auto& s : specs) total += s.nbytes();
  std::vector<std::vector<size_t>> groups;
  size_t t = 0;
  uint64_t done = 0;
  for (size_t k = 0; k < shards && t < count; ++k) {
    const size_t shards_after = shards - k - 1;
    const long double target = static_cast<long double>(total) * (k + 1) / shards;
    groups.emplace_back();
    // Every shard gets at least one tensor and leaves one for each later shard.
    do {
      groups.back().push_back(t);
      done += specs[t].nbytes();
      ++t;
    } while (t < count && count - t > shards_after &&
             (k + 1 == shards || done + specs[t].nbytes() / 2 <= target));
  }
  return make_plan(specs, std::move(groups), true, metadata, "");
}

void write_safetensors(const std::filesystem::path& dir_in, const std::vector<TensorSpec>& specs,
                       const SafetensorsPlan& plan, const TensorFiller& fill,
                       const StreamWriteOptions& options) {
  namespace fs = std::filesystem;
  const fs::path dir = dir_in.empty() ? fs::path(".") : dir_in;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw InputError(dir.string() + ": cannot create directory");
  uint64_t largest = 0;
  for (const auto& f : plan.files) largest = std::max(largest, f.data_bytes);
  // No bigger than the largest file: small checkpoints should not pay for 64 MiB buffers.
  const size_t chunk =
      static_cast<size_t>(std::max<uint64_t>(std::min<uint64_t>(options.chunk_bytes, largest), 64));
  uint64_t written = 0;
  for (const auto& file : plan.files) {
    PartialFile out(dir / (file.name + ".partial"), dir / file.name);
    const uint64_t len = file.header.size();
    out.write(&len, 8);
    out.write(file.header.data(), file.header.size());
    written += 8 + file.header.size();
    {
      ChunkedWriter writer(out, chunk, options.pool, [&](uint64_t n) {
        written += n;
        if (options.progress) options.progress(written, plan.disk_bytes, file.name);
      });
      for (size_t t : file.tensors) {
        const TensorSpec& spec = specs.at(t);
        writer.append(
            spec.numel(), dtype_size(spec.dtype),
            [&](int64_t first, int64_t count, std::byte* dst) { fill(t, first, count, dst); });
      }
      writer.finish();
    }
    out.commit();
  }
  if (plan.sharded) {
    json weight_map = json::object();
    for (const auto& file : plan.files) {
      for (size_t t : file.tensors) weight_map[specs[t].name] = file.name;
    }
    json index = {{"metadata", {{"total_size", plan.data_bytes}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    PartialFile out(dir / "model.safetensors.index.json.partial",
                    dir / "model.safetensors.index.json");
    out.write(text.data(), text.size());
    out.commit();
  }
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            const void* data, size_t nbytes) {
  TensorSpec spec{name, dtype, std::move(shape)};
  if (spec.nbytes() != nbytes) {
    throw InputError("safetensors writer: tensor '" + name + "' has " + std::to_string(nbytes) +
                     " bytes but shape " + spec.shape_string() + " of " + dtype_name(dtype) +
                     " needs " + std::to_string(spec.nbytes()));
  }
  std::vector<std::byte> bytes(nbytes);
  if (nbytes) std::memcpy(bytes.data(), data, nbytes);
  specs_.push_back(std::move(spec));
  data_.push_back(std::move(bytes));
}

size_t SafetensorsWriter::total_bytes() const {
  size_t n = 0;
  for (const auto& d : data_) n += d.size();
  return n;
}

void SafetensorsWriter::write_plan(const std::filesystem::path& dir,
                                   const SafetensorsPlan& plan) const {
  write_safetensors(
      dir, specs_, plan, [this](size_t t, int64_t first, int64_t count, std::byte* dst) {
        const size_t esize = dtype_size(specs_[t].dtype);
        std::memcpy(dst, data_[t].data() + first * esize, static_cast<size_t>(count) * esize);
      });
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  write_plan(path.parent_path(), plan_single_file(specs_, metadata_, path.filename().string()));
}

int SafetensorsWriter::write_sharded(const std::filesystem::path& dir,
                                     size_t max_shard_bytes) const {
  SafetensorsPlan plan =
      make_plan(specs_, group_by_max_bytes(specs_, max_shard_bytes), true, metadata_, "");
  write_plan(dir, plan);
  return static_cast<int>(plan.files.size());
}

}  // namespace gemmaserve
