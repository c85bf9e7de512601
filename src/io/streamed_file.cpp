#include "io/streamed_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace gemmaserve {

PartialFile::PartialFile(std::filesystem::path partial, std::filesystem::path final_path)
    : partial_(std::move(partial)), final_(std::move(final_path)) {
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create");
}

PartialFile::~PartialFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(partial_, ec);
  }
}

void PartialFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  written_ += n;
  while (n > 0) {
    ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void PartialFile::close() {
  if (fd_ < 0) return;
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("write failed");
}

void PartialFile::commit() {
  close();
  std::error_code ec;
  std::filesystem::rename(partial_, final_, ec);
  if (ec) throw InputError(final_.string() + ": cannot rename into place: " + ec.message());
  committed_ = true;
}

void PartialFile::fail(const char* what) {
  throw InputError(partial_.string() + ": " + what + ": " + std::strerror(errno));
}

ChunkedWriter::ChunkedWriter(PartialFile& out, size_t chunk_bytes, ThreadPool* pool,
                             std::function<void(uint64_t)> on_written)
    : out_(out),
      pool_(pool),
      on_written_(std::move(on_written)),
      capacity_(std::max<size_t>(chunk_bytes, 64)) {
  for (auto& b : bufs_) b = std::make_unique_for_overwrite<std::byte[]>(capacity_);
}

ChunkedWriter::~ChunkedWriter() {
  if (pending_.valid()) pending_.wait();
}

void ChunkedWriter::wait_pending() {
  if (!pending_.valid()) return;
  pending_.get();
  const size_t n = in_flight_;
  in_flight_ = 0;
  if (on_written_) on_written_(n);
}

void ChunkedWriter::flush() {
  wait_pending();
  if (used_ == 0) return;
  const std::byte* data = bufs_[cur_].get();
  const size_t n = used_;
  PartialFile* out = &out_;
  pending_ = std::async(std::launch::async, [out, data, n] { out->write(data, n); });
  in_flight_ = n;
  cur_ ^= 1;
  used_ = 0;
}

void ChunkedWriter::append(int64_t count, size_t item_bytes, const ItemFiller& fill) {
  if (item_bytes > capacity_) {
    // An item larger than a chunk: grow both buffers once (only huge single rows get here).
    flush();
    wait_pending();
    capacity_ = item_bytes;
    for (auto& b : bufs_) b = std::make_unique_for_overwrite<std::byte[]>(capacity_);
  }
  int64_t done = 0;
  while (done < count) {
    const auto room = static_cast<int64_t>((capacity_ - used_) / item_bytes);
    if (room == 0) {
      flush();
      continue;
    }
    const int64_t n = std::min(room, count - done);
    std::byte* dst = bufs_[cur_].get() + used_;
    const int64_t first = done;
    // Small runs are not worth waking the pool for; pieces of about 64 KiB share the work.
    if (pool_ && static_cast<uint64_t>(n) * item_bytes >= (uint64_t{1} << 20)) {
      const size_t grain = std::max<size_t>(1, (size_t{64} << 10) / item_bytes);
      pool_->parallel_for_grain(static_cast<size_t>(n), grain, [&](size_t b, size_t e) {
        fill(first + static_cast<int64_t>(b), static_cast<int64_t>(e - b), dst + b * item_bytes);
      });
    } else {
      fill(first, n, dst);
    }
    used_ += static_cast<size_t>(n) * item_bytes;
    done += n;
  }
}

void ChunkedWriter::append_zeros(size_t n) {
  while (n > 0) {
    if (used_ == capacity_) flush();
    const size_t k = std::min(n, capacity_ - used_);
    std::memset(bufs_[cur_].get() + used_, 0, k);
    used_ += k;
    n -= k;
  }
}

void ChunkedWriter::finish() {
  flush();
  wait_pending();
}

}  // namespace gemmaserve
