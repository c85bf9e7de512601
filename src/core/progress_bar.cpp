#include "core/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace gemmaserve {

ProgressBar::ProgressBar(std::string label, size_t total, bool enabled, Unit unit)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      unit_(unit),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(size_t done) {
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  // Redraw at most 5 times a second; on a pipe, every 10 seconds so logs stay readable.
  auto interval = isatty(STDERR_FILENO) ? std::chrono::milliseconds(200) : std::chrono::seconds(10);
  if (done < total_ && now - last_draw_ < interval) return;
  last_draw_ = now;
  draw(done, false);
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  draw(total_, true);
}

void ProgressBar::draw(size_t done, bool final_line) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  const bool tty = isatty(STDERR_FILENO);
  if (unit_ == Unit::kItems) {
    std::fprintf(stderr, "%s%s [%s] %5.1f%% %zu/%zu %.2f it/s %.1fs%s", tty ? "\r" : "",
                 label_.c_str(), bar.c_str(), frac * 100.0, done, total_,
                 secs > 0 ? static_cast<double>(done) / secs : 0.0, secs,
                 (final_line || !tty) ? "\n" : "");
    std::fflush(stderr);
    return;
  }
  const double mb = static_cast<double>(done) / (1 << 20);
  const double total_mb = static_cast<double>(total_) / (1 << 20);
  std::fprintf(stderr, "%s%s [%s] %5.1f%% %.0f/%.0f MiB %.0f MiB/s %.1fs%s", tty ? "\r" : "",
               label_.c_str(), bar.c_str(), frac * 100.0, mb, total_mb,
               secs > 0 ? mb / secs : 0.0, secs, (final_line || !tty) ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace gemmaserve
