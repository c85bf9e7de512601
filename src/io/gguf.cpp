#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include "core/error.h"

namespace gemmaserve {

static_assert(std::endian::native == std::endian::little,
              "GGUF reading assumes a little-endian host");

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxTensorDims = 4;

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Byte size of one element of a fixed-size type, 0 for strings/arrays/unknown codes.
size_t scalar_size(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool known_type(uint32_t type) { return type <= static_cast<uint32_t>(GgufType::kFloat64); }

// llama.cpp's ggml_type codes (ggml.h). Block sizes come from the DType; the two without one
// (Q8_1, Q8_K: activation formats) carry theirs, the removed interleaved types none.
struct GgmlType {
  uint32_t code;
  std::string_view name;
  std::optional<DType> dtype;
  uint64_t block_elems = 0;
  uint64_t block_bytes = 0;
};
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", DType::kF32},
    {1, "F16", DType::kF16},
    {2, "Q4_0", DType::kQ4_0},
    {3, "Q4_1", DType::kQ4_1},
    {4, "Q4_2", {}},
    {5, "Q4_3", {}},
    {6, "Q5_0", DType::kQ5_0},
    {7, "Q5_1", DType::kQ5_1},
    {8, "Q8_0", DType::kQ8_0},
    {9, "Q8_1", {}, 32, 36},
    {10, "Q2_K", DType::kQ2_K},
    {11, "Q3_K", DType::kQ3_K},
    {12, "Q4_K", DType::kQ4_K},
    {13, "Q5_K", DType::kQ5_K},
    {14, "Q6_K", DType::kQ6_K},
    {15, "Q8_K", {}, 256, 292},
    {16, "IQ2_XXS", DType::kIQ2_XXS},
    {17, "IQ2_XS", DType::kIQ2_XS},
    {18, "IQ3_XXS", DType::kIQ3_XXS},
    {19, "IQ1_S", DType::kIQ1_S},
    {20, "IQ4_NL", DType::kIQ4_NL},
    {21, "IQ3_S", DType::kIQ3_S},
    {22, "IQ2_S", DType::kIQ2_S},
    {23, "IQ4_XS", DType::kIQ4_XS},
    {24, "I8", DType::kI8},
    {25, "I16", DType::kI16},
    {26, "I32", DType::kI32},
    {27, "I64", DType::kI64},
    {28, "F64", DType::kF64},
    {29, "IQ1_M", DType::kIQ1_M},
    {30, "BF16", DType::kBF16},
    {31, "Q4_0_4_4", {}},
    {32, "Q4_0_4_8", {}},
    {33, "Q4_0_8_8", {}},
    {34, "TQ1_0", DType::kTQ1_0},
    {35, "TQ2_0", DType::kTQ2_0},
    {36, "IQ4_NL_4_4", {}},
    {37, "IQ4_NL_4_8", {}},
    {38, "IQ4_NL_8_8", {}},
    {39, "MXFP4", DType::kMXFP4},
    {40, "NVFP4", DType::kNVFP4},
    {41, "Q1_0", DType::kQ1_0},
    {42, "Q2_0", DType::kQ2_0},
};

// Indexed by code.
static_assert([] {
  for (uint32_t i = 0; i < std::size(kGgmlTypes); ++i) {
    if (kGgmlTypes[i].code != i) return false;
  }
  return true;
}());

const GgmlType* find_ggml_type(uint32_t code) {
  return code < std::size(kGgmlTypes) ? &kGgmlTypes[code] : nullptr;
}

}  // namespace

std::optional<DType> dtype_of_ggml_type(uint32_t ggml_type) {
  const GgmlType* t = find_ggml_type(ggml_type);
  return t != nullptr ? t->dtype : std::nullopt;
}

std::optional<uint32_t> ggml_type_of_dtype(DType dtype) {
  for (const GgmlType& t : kGgmlTypes) {
    if (t.dtype == dtype) return t.code;
  }
  return std::nullopt;
}

std::optional<std::string_view> ggml_type_name(uint32_t ggml_type) {
  const GgmlType* t = find_ggml_type(ggml_type);
  return t != nullptr ? std::optional<std::string_view>(t->name) : std::nullopt;
}

std::string_view gguf_type_name(GgufType type) {
  constexpr std::string_view kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                         "int32",  "float32", "bool",   "string", "array",
                                         "uint64", "int64",   "float64"};
  const auto index = static_cast<uint32_t>(type);
  return index < std::size(kNames) ? kNames[index] : "unknown";
}

// Sequential reader over the mapped bytes; every read is bounds-checked.
class GgufParser {
 public:
  GgufParser(const std::byte* data, size_t size, std::string file)
      : data_(data), size_(size), file_(std::move(file)) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& message) const {
    throw InputError(file_ + ": " + message);
  }
  [[noreturn]] void truncated(std::string_view what) const {
    fail("truncated GGUF file (" + std::string(what) + " at byte offset " + std::to_string(pos_) +
         ")");
  }

  const std::byte* take(size_t n, std::string_view what) {
    if (n > remaining()) truncated(what);
    const std::byte* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  uint32_t u32(std::string_view what) { return load<uint32_t>(take(4, what)); }
  uint64_t u64(std::string_view what) { return load<uint64_t>(take(8, what)); }
  std::string_view str(std::string_view what) {
    size_t start = pos_;
    uint64_t n = u64(what);
    if (n > remaining()) {
      pos_ = start;
      truncated(what);
    }
    const char* p = reinterpret_cast<const char*>(take(static_cast<size_t>(n), what));
    return {p, static_cast<size_t>(n)};
  }

  GgufValue value(uint32_t type, const std::string& key, int depth) {
    GgufValue v;
    v.key_ = key;
    v.file_ = file_;
    if (!known_type(type)) {
      fail("unknown GGUF metadata value type " + std::to_string(type) + " for key '" + key + "'");
    }
    v.type_ = static_cast<GgufType>(type);
    const std::string what = "value of '" + key + "'";
    if (v.type_ == GgufType::kString) {
      v.string_ = str(what);
    } else if (v.type_ == GgufType::kArray) {
      read_array(v, key, depth, what);
    } else {
      v.scalar_ = take(scalar_size(type), what);
    }
    return v;
  }

 private:
  void read_array(GgufValue& v, const std::string& key, int depth, const std::string& what) {
    if (depth >= kMaxArrayDepth) fail("array for key '" + key + "' is nested too deeply");
    uint32_t elem = u32(what);
    if (!known_type(elem)) {
      fail("unknown GGUF array element type " + std::to_string(elem) + " for key '" + key + "'");
    }
    uint64_t count = u64(what);
    v.array_type_ = static_cast<GgufType>(elem);
    v.array_size_ = static_cast<size_t>(count);
    if (size_t esize = scalar_size(elem); esize > 0) {
      if (count > remaining() / esize) truncated(what);
      v.array_data_ = take(static_cast<size_t>(count) * esize, what);
      return;
    }
    // Strings and arrays take at least 8 bytes each: reject absurd counts before reserving.
    if (count > remaining() / 8) truncated(what);
    if (v.array_type_ == GgufType::kString) {
      v.array_strings_.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) v.array_strings_.push_back(str(what));
    } else {
      v.array_values_.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) {
        v.array_values_.push_back(value(static_cast<uint32_t>(GgufType::kArray), key, depth + 1));
      }
    }
  }

  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string file_;
};

bool GgufValue::is_integer() const {
  switch (type_) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

void GgufValue::type_error(std::string_view expected) const {
  std::string actual(gguf_type_name(type_));
  if (type_ == GgufType::kArray) actual += " of " + std::string(gguf_type_name(array_type_));
  throw InputError(file_ + ": metadata key '" + key_ + "' is " + actual + ", expected " +
                   std::string(expected));
}

namespace {

// Reads an integer element of `type` at `p`; false when a uint64 does not fit in int64.
bool read_int(GgufType type, const std::byte* p, int64_t& out) {
  switch (type) {
    case GgufType::kUint8:
      out = load<uint8_t>(p);
      return true;
    case GgufType::kInt8:
      out = load<int8_t>(p);
      return true;
    case GgufType::kUint16:
      out = load<uint16_t>(p);
      return true;
    case GgufType::kInt16:
      out = load<int16_t>(p);
      return true;
    case GgufType::kUint32:
      out = load<uint32_t>(p);
      return true;
    case GgufType::kInt32:
      out = load<int32_t>(p);
      return true;
    case GgufType::kInt64:
      out = load<int64_t>(p);
      return true;
    case GgufType::kUint64: {
      uint64_t u = load<uint64_t>(p);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      out = static_cast<int64_t>(u);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

int64_t GgufValue::as_int() const {
  if (!is_integer()) type_error("an integer");
  int64_t v = 0;
  if (!read_int(type_, scalar_, v)) {
    throw InputError(file_ + ": metadata key '" + key_ +
                     "' does not fit in a signed 64-bit integer");
  }
  return v;
}

double GgufValue::as_float() const {
  if (type_ == GgufType::kFloat32) return load<float>(scalar_);
  if (type_ == GgufType::kFloat64) return load<double>(scalar_);
  if (is_integer()) return static_cast<double>(as_int());
  type_error("a number");
}

bool GgufValue::as_bool() const {
  if (type_ != GgufType::kBool) type_error("bool");
  return load<uint8_t>(scalar_) != 0;
}

std::string_view GgufValue::as_string() const {
  if (type_ != GgufType::kString) type_error("string");
  return string_;
}

GgufType GgufValue::array_type() const {
  if (type_ != GgufType::kArray) type_error("array");
  return array_type_;
}

size_t GgufValue::array_size() const {
  if (type_ != GgufType::kArray) type_error("array");
  return array_size_;
}

const std::byte* GgufValue::element(size_t i) const {
  return array_data_ + i * scalar_size(static_cast<uint32_t>(array_type_));
}

std::vector<std::string_view> GgufValue::as_string_array() const {
  if (type_ != GgufType::kArray || array_type_ != GgufType::kString) type_error("array of string");
  return array_strings_;
}

std::vector<int64_t> GgufValue::as_int_array() const {
  if (type_ != GgufType::kArray) type_error("array of integers");
  GgufValue probe;
  probe.type_ = array_type_;
  if (!probe.is_integer()) type_error("array of integers");
  std::vector<int64_t> out(array_size_);
  for (size_t i = 0; i < array_size_; ++i) {
    if (!read_int(array_type_, element(i), out[i])) {
      throw InputError(file_ + ": metadata key '" + key_ + "' element " + std::to_string(i) +
                       " does not fit in a signed 64-bit integer");
    }
  }
  return out;
}

std::vector<double> GgufValue::as_float_array() const {
  if (type_ != GgufType::kArray) type_error("array of numbers");
  std::vector<double> out(array_size_);
  if (array_type_ == GgufType::kFloat32) {
    for (size_t i = 0; i < array_size_; ++i) out[i] = load<float>(element(i));
  } else if (array_type_ == GgufType::kFloat64) {
    for (size_t i = 0; i < array_size_; ++i) out[i] = load<double>(element(i));
  } else {
    std::vector<int64_t> ints = as_int_array();
    std::transform(ints.begin(), ints.end(), out.begin(),
                   [](int64_t x) { return static_cast<double>(x); });
  }
  return out;
}

std::vector<bool> GgufValue::as_bool_array() const {
  if (type_ != GgufType::kArray || array_type_ != GgufType::kBool) type_error("array of bool");
  std::vector<bool> out(array_size_);
  for (size_t i = 0; i < array_size_; ++i) out[i] = load<uint8_t>(element(i)) != 0;
  return out;
}

const std::vector<GgufValue>& GgufValue::as_nested_array() const {
  if (type_ != GgufType::kArray || array_type_ != GgufType::kArray) type_error("array of array");
  return array_values_;
}

GgufFile::GgufFile(const std::filesystem::path& path) : file_(path) {
  const std::string name = path.string();
  GgufParser p(file_.data(), file_.size(), name);
  if (file_.size() < 4 || std::memcmp(file_.data(), kMagic, 4) != 0) {
    throw InputError(name + ": not a GGUF file (bad magic)");
  }
  p.take(4, "magic");
  version_ = p.u32("version");
  if (version_ != 2 && version_ != 3) {
    throw InputError(name + ": unsupported GGUF version " + std::to_string(version_) +
                     " (expected 2 or 3)");
  }
  uint64_t n_tensors = p.u64("tensor count");
  uint64_t n_kv = p.u64("metadata count");
  // Each key-value pair takes at least 12 bytes and each tensor info at least 24.
  if (n_kv > p.remaining() / 12) p.truncated("metadata");
  metadata_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key(p.str("metadata key"));
    if (find(key) != nullptr) p.fail("duplicate metadata key '" + key + "'");
    uint32_t type = p.u32("type of '" + key + "'");
    metadata_.push_back(p.value(type, key, 0));
  }

  if (const GgufValue* a = find("general.alignment")) {
    int64_t align = a->as_int();
    if (align <= 0 || !std::has_single_bit(static_cast<uint64_t>(align))) {
      p.fail("general.alignment " + std::to_string(align) + " is not a power of two");
    }
    alignment_ = static_cast<uint64_t>(align);
  }

  if (n_tensors > p.remaining() / 24) p.truncated("tensor infos");
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = std::string(p.str("tensor name"));
    const std::string what = "info of tensor '" + t.name + "'";
    uint32_t n_dims = p.u32(what);
    if (n_dims > kMaxTensorDims) {
      p.fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (at most " +
             std::to_string(kMaxTensorDims) + ")");
    }
    for (uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(p.u64(what));
    t.ggml_type = p.u32(what);
    t.offset = p.u64(what);
    if (t.offset % alignment_ != 0) {
      p.fail("tensor '" + t.name + "' offset " + std::to_string(t.offset) +
             " is not a multiple of the alignment " + std::to_string(alignment_));
    }
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (p.pos() + alignment_ - 1) / alignment_ * alignment_;
  for (GgufTensorInfo& t : tensors_) {
    uint64_t elements = 1;
    for (uint64_t d : t.dims) {
      if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / d) {
        p.fail("tensor '" + t.name + "' has too many elements");
      }
      elements *= d;
    }
    if (const GgmlType* type = find_ggml_type(t.ggml_type)) {
      const uint64_t block = type->dtype ? dtype_block_elems(*type->dtype) : type->block_elems;
      const uint64_t bytes = type->dtype ? dtype_size(*type->dtype) : type->block_bytes;
      if (block != 0) {
        if (elements % block != 0) {
          p.fail("tensor '" + t.name + "' has " + std::to_string(elements) +
                 " elements, not a multiple of its block size " + std::to_string(block));
        }
        t.byte_size = elements / block * bytes;
      }
    }
    const uint64_t size = t.byte_size.value_or(0);
    if (data_start > file_.size() || t.offset > file_.size() - data_start ||
        size > file_.size() - data_start - t.offset) {
      p.fail("tensor '" + t.name + "' data extends past the end of the file (truncated GGUF file)");
    }
    t.data = file_.data() + data_start + t.offset;
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const GgufValue& v : metadata_) {
    if (v.key() == key) return &v;
  }
  return nullptr;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  if (const GgufValue* v = find(key)) return *v;
  throw InputError(path().string() + ": missing metadata key '" + std::string(key) + "'");
}

bool GgufFile::has_gguf_magic(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char buf[4] = {};
  if (!in.read(buf, 4)) return false;
  return std::memcmp(buf, kMagic, 4) == 0;
}

}  // namespace gemmaserve
