// Safetensors checkpoints: single files and sharded sets with model.safetensors.index.json,
// memory-mapped; and a writer for generated and converted checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "io/mapped_file.h"
#include "io/streamed_file.h"

namespace gemmaserve {

// A tensor's bytes inside a mapped file (valid while the owning file lives).
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::filesystem::path file;  // for error messages

  int64_t numel() const;
  std::string shape_string() const;  // "[2048, 1536]"
};

// One .safetensors file. The constructor validates the whole header: JSON syntax, dtypes,
// shape × dtype size = byte length, offsets inside the data area, no overlapping tensors.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint folder: model.safetensors, or the shards named by
// model.safetensors.index.json (every shard and every listed tensor must exist), or failing
// both, every *.safetensors in the folder.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::filesystem::path& dir);

  // nullptr when absent.
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, const TensorView*>& all() const { return index_; }
  const std::filesystem::path& dir() const { return dir_; }
  size_t total_bytes() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// Name, dtype and shape of a tensor to be written.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  int64_t numel() const;
  uint64_t nbytes() const;
  std::string shape_string() const;  // "[2048, 1536]"
};

// Produces elements [first, first + count) of tensor `index` (in its dtype) into dst. Called
// concurrently for disjoint ranges, so it must be thread-safe.
using TensorFiller =
    std::function<void(size_t index, int64_t first, int64_t count, std::byte* dst)>;

// Which tensors go into which file; the headers are computed before any data exists.
struct SafetensorsPlan {
  struct File {
    std::string name;             // file name inside the output folder
    std::vector<size_t> tensors;  // indices into the spec list, in file order
    std::string header;           // JSON header, space-padded to a multiple of 8 bytes
    uint64_t data_bytes = 0;
    uint64_t file_bytes() const { return 8 + header.size() + data_bytes; }
  };
  std::vector<File> files;
  bool sharded = false;  // true: files are shards named by model.safetensors.index.json
  uint64_t data_bytes = 0;
  uint64_t disk_bytes = 0;  // every file including headers (index file excluded)
};

// One file, model.safetensors, holding every tensor in spec order.
SafetensorsPlan plan_single_file(const std::vector<TensorSpec>& specs,
                                 const std::map<std::string, std::string>& metadata,
                                 const std::string& file_name = "model.safetensors");
// model.safetensors when the data fits in max_shard_bytes, else shards of at most that size
// (a larger tensor gets a shard of its own), filled in spec order, HF's
// model-0000i-of-0000n.safetensors names.
SafetensorsPlan plan_max_shard_bytes(const std::vector<TensorSpec>& specs, uint64_t max_shard_bytes,
                                     const std::map<std::string, std::string>& metadata);
// Exactly min(n, tensor count) shards of roughly equal size, in spec order (n >= 1).
SafetensorsPlan plan_num_shards(const std::vector<TensorSpec>& specs, int n,
                                const std::map<std::string, std::string>& metadata);

struct StreamWriteOptions {
  ThreadPool* pool = nullptr;      // generate each chunk in parallel when set
  size_t chunk_bytes = 64u << 20;  // bytes per write call (two such buffers are used)
  WriteProgress progress;          // called after every chunk is written
};

// Writes the plan's files into dir (plus model.safetensors.index.json when sharded),
// generating tensor data chunk by chunk with `fill` while the previous chunk is written, so
// memory stays at two chunks whatever the model size. Each file is written to
// "<name>.partial" and renamed when complete; on failure the partial file is removed.
void write_safetensors(const std::filesystem::path& dir, const std::vector<TensorSpec>& specs,
                       const SafetensorsPlan& plan, const TensorFiller& fill,
                       const StreamWriteOptions& options = {});

// Writes tensors to .safetensors files. Data is copied into the writer (small checkpoints
// only; use write_safetensors for large ones).
class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
           size_t nbytes);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  size_t total_bytes() const;
  // Writes one file.
  void write(const std::filesystem::path& path) const;
  // Writes shards of at most max_shard_bytes each (model-0000i-of-0000n.safetensors) plus
  // model.safetensors.index.json in dir; returns the shard count.
  int write_sharded(const std::filesystem::path& dir, size_t max_shard_bytes) const;

 private:
  void write_plan(const std::filesystem::path& dir, const SafetensorsPlan& plan) const;
  std::vector<TensorSpec> specs_;
  std::vector<std::vector<std::byte>> data_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace gemmaserve
