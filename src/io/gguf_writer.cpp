#include "io/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "core/error.h"
#include "io/gguf.h"

namespace gemmaserve {

static_assert(std::endian::native == std::endian::little,
              "GGUF writing assumes a little-endian host");

namespace {

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

uint64_t pad_to(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

constexpr std::string_view kAlignmentKey = "general.alignment";

}  // namespace

GgufArray GgufArray::bools(const std::vector<bool>& values) {
  GgufArray a(GgufType::kBool, values.size());
  for (bool b : values) a.bytes_.push_back(b ? '\1' : '\0');
  return a;
}

GgufArray GgufArray::strings(std::span<const std::string> values) {
  GgufArray a(GgufType::kString, values.size());
  for (const std::string& s : values) put_string(a.bytes_, s);
  return a;
}

GgufArray GgufArray::strings(std::span<const std::string_view> values) {
  GgufArray a(GgufType::kString, values.size());
  for (std::string_view s : values) put_string(a.bytes_, s);
  return a;
}

GgufArray GgufArray::arrays(std::span<const GgufArray> values) {
  GgufArray a(GgufType::kArray, values.size());
  for (const GgufArray& v : values) a.bytes_ += v.encoded();
  return a;
}

std::string GgufArray::encoded() const {
  std::string out;
  put<uint32_t>(out, static_cast<uint32_t>(element_));
  put<uint64_t>(out, count_);
  out += bytes_;
  return out;
}

void GgufMetadata::set(const std::string& key, GgufType type, std::string value) {
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.type = type;
      e.value = std::move(value);
      return;
    }
  }
  entries_.push_back({key, type, std::move(value)});
}

void GgufMetadata::set_bool(const std::string& key, bool v) {
  set(key, GgufType::kBool, std::string(1, v ? '\1' : '\0'));
}

void GgufMetadata::set_string(const std::string& key, std::string_view v) {
  std::string bytes;
  put_string(bytes, v);
  set(key, GgufType::kString, std::move(bytes));
}

void GgufMetadata::set_array(const std::string& key, const GgufArray& v) {
  set(key, GgufType::kArray, v.encoded());
}

bool GgufMetadata::contains(std::string_view key) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const Entry& e) { return e.key == key; });
}

std::vector<std::string> GgufMetadata::keys() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.key);
  return out;
}

uint64_t GgufMetadata::alignment() const {
  for (const Entry& e : entries_) {
    if (e.key != kAlignmentKey) continue;
    uint32_t a = 0;
    if (e.type == GgufType::kUint32) std::memcpy(&a, e.value.data(), sizeof a);
    if (a == 0 || !std::has_single_bit(a)) {
      throw InputError(std::string(kAlignmentKey) + " must be a uint32 power of two");
    }
    return a;
  }
  return 32;
}

std::string GgufMetadata::encoded() const {
  std::string out;
  for (const Entry& e : entries_) {
    put_string(out, e.key);
    put<uint32_t>(out, static_cast<uint32_t>(e.type));
    out += e.value;
  }
  return out;
}

uint32_t gguf_ggml_type(DType dtype) {
  if (const std::optional<uint32_t> code = ggml_type_of_dtype(dtype)) return *code;
  throw InputError(std::string("GGUF has no tensor type for ") + dtype_name(dtype));
}

int64_t GgufTensorSpec::rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) n *= shape[i];
  return n;
}

uint64_t GgufTensorSpec::row_bytes() const {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  if (cols % dtype_block_elems(dtype) != 0) {
    throw InputError("tensor '" + name + "': rows of " + std::to_string(cols) +
                     " elements are not whole " + dtype_name(dtype) + " blocks of " +
                     std::to_string(dtype_block_elems(dtype)));
  }
  return dtype_row_bytes(dtype, cols);
}

namespace {

// Header of one file: magic, version, counts, key-value pairs, tensor infos, padding.
std::string file_header(const std::string& kv, uint64_t n_kv,
                        const std::vector<GgufTensorSpec>& specs,
                        const std::vector<size_t>& tensors, uint64_t alignment) {
  std::string h = "GGUF";
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors.size());
  put<uint64_t>(h, n_kv);
  h += kv;
  uint64_t offset = 0;
  for (size_t t : tensors) {
    const GgufTensorSpec& s = specs[t];
    put_string(h, s.name);
    const std::vector<int64_t> dims = s.shape.empty() ? std::vector<int64_t>{1} : s.shape;
    put<uint32_t>(h, static_cast<uint32_t>(dims.size()));
    for (auto d = dims.rbegin(); d != dims.rend(); ++d) put<uint64_t>(h, static_cast<uint64_t>(*d));
    put<uint32_t>(h, gguf_ggml_type(s.dtype));
    put<uint64_t>(h, offset);
    offset += pad_to(s.nbytes(), alignment);
  }
  h.resize(pad_to(h.size(), alignment), '\0');
  return h;
}

std::string split_keys(uint16_t no, uint16_t count, int32_t tensors) {
  GgufMetadata m;
  m.set_number<uint16_t>("split.no", no);
  m.set_number<uint16_t>("split.count", count);
  m.set_number<int32_t>("split.tensors.count", tensors);
  return m.encoded();
}

}  // namespace

GgufPlan plan_gguf(const std::filesystem::path& path, const GgufMetadata& metadata,
                   const std::vector<GgufTensorSpec>& specs, uint64_t split_max_bytes) {
  GgufPlan plan;
  plan.alignment = metadata.alignment();
  std::set<std::string_view> names;
  for (const GgufTensorSpec& s : specs) {
    if (!names.insert(s.name).second) {
      throw InputError(path.string() + ": tensor '" + s.name + "' is written twice");
    }
    if (s.shape.size() > 4) {
      throw InputError(path.string() + ": tensor '" + s.name + "' has " +
                       std::to_string(s.shape.size()) + " dimensions (GGUF holds at most 4)");
    }
    gguf_ggml_type(s.dtype);
  }
  // Parts by gguf-py's rule: a tensor starts a new part when it would push the current one past
  // the limit, unless the part is still empty.
  std::vector<std::vector<size_t>> parts(1);
  uint64_t part_bytes = 0;
  for (size_t t = 0; t < specs.size(); ++t) {
    const uint64_t n = specs[t].nbytes();
    if (split_max_bytes > 0 && !parts.back().empty() && part_bytes + n > split_max_bytes) {
      parts.emplace_back();
      part_bytes = 0;
    }
    parts.back().push_back(t);
    part_bytes += n;
  }
  const size_t count = parts.size();
  if (count > 99999) throw InputError(path.string() + ": more than 99999 split parts");
  std::string stem = path.string();
  if (stem.ends_with(".gguf")) stem.resize(stem.size() - 5);
  for (size_t i = 0; i < count; ++i) {
    GgufPlan::File f;
    f.tensors = std::move(parts[i]);
    std::string kv;
    uint64_t n_kv = 0;
    if (i == 0) {
      kv = metadata.encoded();
      n_kv = metadata.size();
    }
    if (count > 1) {
      char suffix[64];
      std::snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu.gguf", i + 1, count);
      f.path = stem + suffix;
      kv += split_keys(static_cast<uint16_t>(i), static_cast<uint16_t>(count),
                       static_cast<int32_t>(specs.size()));
      n_kv += 3;
    } else {
      f.path = path;
    }
    f.header = file_header(kv, n_kv, specs, f.tensors, plan.alignment);
    for (size_t t : f.tensors) f.data_bytes += pad_to(specs[t].nbytes(), plan.alignment);
    plan.disk_bytes += f.file_bytes();
    plan.files.push_back(std::move(f));
  }
  return plan;
}

void write_gguf(const GgufPlan& plan, const std::vector<GgufTensorSpec>& specs,
                const GgufRowFiller& fill, const GgufWriteOptions& options) {
  uint64_t largest = 0;
  for (const auto& f : plan.files) largest = std::max(largest, f.data_bytes);
  // No bigger than the largest file: small models should not pay for 64 MiB buffers.
  const size_t chunk =
      static_cast<size_t>(std::max<uint64_t>(std::min<uint64_t>(options.chunk_bytes, largest), 64));
  uint64_t written = 0;
  std::vector<std::unique_ptr<PartialFile>> done;
  for (const GgufPlan::File& file : plan.files) {
    const std::string name = file.path.filename().string();
    auto out = std::make_unique<PartialFile>(file.path.string() + ".partial", file.path);
    out->write(file.header.data(), file.header.size());
    written += file.header.size();
    {
      ChunkedWriter writer(*out, chunk, options.pool, [&](uint64_t n) {
        written += n;
        if (options.progress) options.progress(written, plan.disk_bytes, name);
      });
      for (size_t t : file.tensors) {
        const GgufTensorSpec& spec = specs.at(t);
        const uint64_t bytes = spec.nbytes();
        writer.append(
            spec.rows(), spec.row_bytes(),
            [&](int64_t first, int64_t count, std::byte* dst) { fill(t, first, count, dst); });
        writer.append_zeros(static_cast<size_t>(pad_to(bytes, plan.alignment) - bytes));
      }
      writer.finish();
    }
    out->close();
    if (out->size() != file.file_bytes()) {
      throw InputError(file.path.string() + ": wrote " + std::to_string(out->size()) +
                       " bytes, planned " + std::to_string(file.file_bytes()));
    }
    done.push_back(std::move(out));
  }
  for (auto& f : done) f->commit();
}

}  // namespace gemmaserve
