// A one-line progress bar on stderr for long tasks (loading, writing, quantizing).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace gemmaserve {

class ProgressBar {
 public:
  enum class Unit { kBytes, kItems };
  // `total` in `unit`s (bytes show as MiB); nothing is drawn when disabled.
  ProgressBar(std::string label, size_t total, bool enabled = true, Unit unit = Unit::kBytes);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(size_t done);
  void finish();

 private:
  void draw(size_t done, bool final_line);
  std::string label_;
  size_t total_;
  bool enabled_;
  Unit unit_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace gemmaserve
