// Reader for GGUF files (versions 2 and 3): header, typed metadata and tensor infos, over an mmap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/mapped_file.h"

namespace gemmaserve {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", "array", ...
std::string_view gguf_type_name(GgufType type);

// The DType holding a tensor of llama.cpp's ggml_type code in the same byte layout; nullopt for
// codes ggml does not define and for the few it does that are no weight formats (Q8_1, Q8_K,
// the removed interleaved Q4_0_4_4 ... IQ4_NL_8_8).
std::optional<DType> dtype_of_ggml_type(uint32_t ggml_type);
// The inverse; nullopt for U8 and BOOL, which ggml lacks.
std::optional<uint32_t> ggml_type_of_dtype(DType dtype);
// ggml's name of a type code, upper-cased ("Q6_K", "Q8_1", "Q4_0_4_4"); nullopt when unknown.
std::optional<std::string_view> ggml_type_name(uint32_t ggml_type);

// One metadata value. Strings point into the mapped file, so a value lives as long as its GgufFile.
class GgufValue {
 public:
  GgufType type() const { return type_; }
  bool is_integer() const;
  bool is_float() const { return type_ == GgufType::kFloat32 || type_ == GgufType::kFloat64; }

  // Scalar accessors; each throws InputError naming `key_` and the file when the type differs
  // (integers of any width convert to int64 when they fit).
  int64_t as_int() const;
  double as_float() const;  // integers are accepted too
  bool as_bool() const;
  std::string_view as_string() const;

  // Array accessors: the element type and count, and typed copies of the elements.
  GgufType array_type() const;
  size_t array_size() const;
  std::vector<std::string_view> as_string_array() const;
  std::vector<int64_t> as_int_array() const;
  std::vector<double> as_float_array() const;
  std::vector<bool> as_bool_array() const;
  const std::vector<GgufValue>& as_nested_array() const;  // arrays of arrays

  const std::string& key() const { return key_; }

 private:
  friend class GgufParser;
  [[noreturn]] void type_error(std::string_view expected) const;
  const std::byte* element(size_t i) const;

  std::string key_;
  std::string file_;
  GgufType type_ = GgufType::kUint8;
  const std::byte* scalar_ = nullptr;  // little-endian scalar bytes in the file
  std::string_view string_;
  GgufType array_type_ = GgufType::kUint8;
  size_t array_size_ = 0;
  const std::byte* array_data_ = nullptr;        // packed numeric elements
  std::vector<std::string_view> array_strings_;  // string elements
  std::vector<GgufValue> array_values_;          // nested array elements
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first, as stored
  uint32_t ggml_type = 0;
  uint64_t offset = 0;  // relative to the data section
  const std::byte* data = nullptr;
  std::optional<uint64_t> byte_size;  // known for every type ggml_type_name knows but the removed
                                      // interleaved ones
};

class GgufFile {
 public:
  // Maps and parses `path`; throws InputError "<path>: ..." for any malformed or truncated content.
  explicit GgufFile(const std::filesystem::path& path);

  uint32_t version() const { return version_; }
  const std::filesystem::path& path() const { return file_.path(); }
  const std::vector<GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  uint64_t alignment() const { return alignment_; }

  // nullptr when the key is absent.
  const GgufValue* find(std::string_view key) const;
  // Throws InputError "<path>: missing metadata key '<key>'" when absent.
  const GgufValue& get(std::string_view key) const;

  // True when `path` starts with the GGUF magic (false for unreadable or short files).
  static bool has_gguf_magic(const std::filesystem::path& path);

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace gemmaserve
