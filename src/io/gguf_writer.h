// Writer of GGUF v3 files (llama.cpp's format; io/gguf.h reads them): typed metadata in
// insertion order, tensor infos, and tensor data streamed row by row from a callback (never the
// whole model in memory), optionally split into parts named as llama.cpp's gguf-split names them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "io/streamed_file.h"

namespace gemmaserve {

// The GGUF metadata type of a C++ number type.
template <typename T>
constexpr GgufType gguf_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return GgufType::kUint8;
  if constexpr (std::is_same_v<T, int8_t>) return GgufType::kInt8;
  if constexpr (std::is_same_v<T, uint16_t>) return GgufType::kUint16;
  if constexpr (std::is_same_v<T, int16_t>) return GgufType::kInt16;
  if constexpr (std::is_same_v<T, uint32_t>) return GgufType::kUint32;
  if constexpr (std::is_same_v<T, int32_t>) return GgufType::kInt32;
  if constexpr (std::is_same_v<T, uint64_t>) return GgufType::kUint64;
  if constexpr (std::is_same_v<T, int64_t>) return GgufType::kInt64;
  if constexpr (std::is_same_v<T, float>) return GgufType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return GgufType::kFloat64;
}

// An array value, encoded: element type, count and element bytes (arrays of arrays nest these).
class GgufArray {
 public:
  template <typename T>
  static GgufArray numbers(std::span<const T> values) {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "a GGUF number type");
    GgufArray a(gguf_type_of<T>(), values.size());
    a.bytes_.assign(reinterpret_cast<const char*>(values.data()), values.size_bytes());
    return a;
  }
  template <typename T>
  static GgufArray numbers(const std::vector<T>& values) {
    return numbers(std::span<const T>(values));
  }
  static GgufArray bools(const std::vector<bool>& values);
  static GgufArray strings(std::span<const std::string> values);
  static GgufArray strings(std::span<const std::string_view> values);
  static GgufArray arrays(std::span<const GgufArray> values);

  GgufType element_type() const { return element_; }
  uint64_t size() const { return count_; }
  // Element type, count and elements as they follow the array type tag in a file.
  std::string encoded() const;

 private:
  GgufArray(GgufType element, uint64_t count) : element_(element), count_(count) {}
  GgufType element_;
  uint64_t count_;
  std::string bytes_;
};

// Metadata to write, in insertion order; setting a key again replaces its value in place (as
// gguf-py overwrites a key). "general.alignment" (uint32, a power of two) sets the alignment.
class GgufMetadata {
 public:
  template <typename T>
  void set_number(const std::string& key, T value) {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "a GGUF number type");
    set(key, gguf_type_of<T>(), std::string(reinterpret_cast<const char*>(&value), sizeof value));
  }
  void set_uint32(const std::string& key, uint32_t v) { set_number(key, v); }
  void set_int32(const std::string& key, int32_t v) { set_number(key, v); }
  void set_float32(const std::string& key, float v) { set_number(key, v); }
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, std::string_view v);
  void set_array(const std::string& key, const GgufArray& v);

  bool contains(std::string_view key) const;
  size_t size() const { return entries_.size(); }
  std::vector<std::string> keys() const;
  // The alignment of tensor data: general.alignment when set, else 32 (InputError when that key
  // is not a uint32 power of two).
  uint64_t alignment() const;
  // Every key-value pair as it appears in a file.
  std::string encoded() const;

 private:
  struct Entry {
    std::string key;
    GgufType type;
    std::string value;  // the bytes after the type tag
  };
  void set(const std::string& key, GgufType type, std::string value);
  std::vector<Entry> entries_;
};

// llama.cpp's ggml type code of a DType (io/gguf.h's table: every block type, the integer types
// 24-27, F64 28, BF16 30); InputError for U8 and BOOL, which GGUF has no type for.
uint32_t gguf_ggml_type(DType dtype);

// One tensor to write.
struct GgufTensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first (as in a checkpoint); stored innermost first
  // A row is the innermost dimension: shape.back() elements (1 for a 0-d tensor, stored as [1]).
  int64_t rows() const;
  uint64_t row_bytes() const;
  uint64_t nbytes() const { return static_cast<uint64_t>(rows()) * row_bytes(); }
};

// Produces rows [first, first + count) of tensor `index` (row_bytes() each) into dst; called
// concurrently for disjoint ranges, so it must be thread-safe.
using GgufRowFiller =
    std::function<void(size_t index, int64_t first_row, int64_t count, std::byte* dst)>;

// Which tensors go into which file, with every header computed before any data exists.
struct GgufPlan {
  struct File {
    std::filesystem::path path;
    std::vector<size_t> tensors;  // indices into the spec list, in file order
    std::string header;           // everything before the data, padded to the alignment
    uint64_t data_bytes = 0;      // tensor data with the padding after each tensor
    uint64_t file_bytes() const { return header.size() + data_bytes; }
  };
  std::vector<File> files;
  uint64_t alignment = 32;
  uint64_t disk_bytes = 0;
};

// The file `path` holding every tensor in spec order, or, with split_max_bytes > 0 and more than
// one part needed, parts "<path minus .gguf>-0000i-of-0000n.gguf" of at most that many tensor
// bytes each (a larger tensor gets a part of its own; gguf-py's rule). Parts carry split.no
// (uint16), split.count (uint16) and split.tensors.count (int32); the first part also carries
// all of `metadata`, the others nothing else (as gguf-split writes them). InputError for
// duplicate tensor names or a dtype GGUF cannot hold.
GgufPlan plan_gguf(const std::filesystem::path& path, const GgufMetadata& metadata,
                   const std::vector<GgufTensorSpec>& specs, uint64_t split_max_bytes = 0);

struct GgufWriteOptions {
  ThreadPool* pool = nullptr;      // generate each chunk in parallel when set
  size_t chunk_bytes = 64u << 20;  // bytes per write call (two such buffers are used)
  WriteProgress progress;          // called after every chunk is written
};

// Writes the plan's files, each to "<name>.partial" first; all are renamed into place once every
// one is complete, and removed on failure.
void write_gguf(const GgufPlan& plan, const std::vector<GgufTensorSpec>& specs,
                const GgufRowFiller& fill, const GgufWriteOptions& options = {});

}  // namespace gemmaserve
