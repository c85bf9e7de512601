// A small independent GGUF writer for tests (never the reader under test): the bytes as
// llama.cpp's gguf writer lays them out.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace gemmaserve::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  GgufBuilder& kv(const std::string& key, GgufType type, const std::string& value_bytes) {
    append_string(kvs_, key);
    append<uint32_t>(kvs_, static_cast<uint32_t>(type));
    kvs_ += value_bytes;
    ++n_kv_;
    return *this;
  }
  GgufBuilder& kv_u32(const std::string& key, uint32_t v) {
    return kv(key, GgufType::kUint32, pod(v));
  }
  GgufBuilder& kv_bool(const std::string& key, bool v) {
    return kv(key, GgufType::kBool, pod<uint8_t>(v ? 1 : 0));
  }
  GgufBuilder& kv_str(const std::string& key, const std::string& v) {
    std::string b;
    append_string(b, v);
    return kv(key, GgufType::kString, b);
  }
  GgufBuilder& kv_strings(const std::string& key, const std::vector<std::string>& items) {
    std::string b;
    append<uint32_t>(b, static_cast<uint32_t>(GgufType::kString));
    append<uint64_t>(b, items.size());
    for (const std::string& s : items) append_string(b, s);
    return kv(key, GgufType::kArray, b);
  }
  template <typename T>
  GgufBuilder& kv_array(const std::string& key, GgufType elem, const std::vector<T>& items) {
    std::string b;
    append<uint32_t>(b, static_cast<uint32_t>(elem));
    append<uint64_t>(b, items.size());
    for (T x : items) append<T>(b, x);
    return kv(key, GgufType::kArray, b);
  }
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t ggml_type,
                      uint64_t offset) {
    append_string(tensors_, name);
    append<uint32_t>(tensors_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) append<uint64_t>(tensors_, d);
    append<uint32_t>(tensors_, ggml_type);
    append<uint64_t>(tensors_, offset);
    ++n_tensors_;
    return *this;
  }
  GgufBuilder& data(const std::string& bytes, uint64_t alignment = 32) {
    data_ = bytes;
    alignment_ = alignment;
    return *this;
  }

  std::string bytes() const {
    std::string b = "GGUF";
    append<uint32_t>(b, version_);
    append<uint64_t>(b, n_tensors_);
    append<uint64_t>(b, n_kv_);
    b += kvs_;
    b += tensors_;
    if (!data_.empty()) {
      while (b.size() % alignment_ != 0) b.push_back('\0');
      b += data_;
    }
    return b;
  }

  template <typename T>
  static std::string pod(T v) {
    std::string s(sizeof(T), '\0');
    std::memcpy(s.data(), &v, sizeof(T));
    return s;
  }
  template <typename T>
  static void append(std::string& b, T v) {
    b += pod(v);
  }
  static void append_string(std::string& b, const std::string& s) {
    append<uint64_t>(b, s.size());
    b += s;
  }

 private:
  uint32_t version_;
  uint64_t n_kv_ = 0;
  uint64_t n_tensors_ = 0;
  std::string kvs_;
  std::string tensors_;
  std::string data_;
  uint64_t alignment_ = 32;
};

}  // namespace gemmaserve::testing
