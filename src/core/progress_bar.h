// A one-line progress bar on stderr for long tasks (loading, writing, quantizing).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace gemmaserve {

class ProgressBar {
 public:
  // `total` in bytes; nothing is drawn when disabled.
  ProgressBar(std::string label, size_t total, bool enabled = true);
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
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace gemmaserve
