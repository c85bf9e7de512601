#include "core/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "core/error.h"

namespace gemmaserve::log {
namespace {

struct Logger {
  std::atomic<Level> level{Level::kInfo};
  std::mutex mutex;
};

Logger& logger() {
  static Logger instance;
  return instance;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug: return "DEBUG";
    case Level::kInfo: return "INFO";
    case Level::kWarning: return "WARNING";
    case Level::kError: return "ERROR";
    case Level::kOff: return "OFF";
  }
  return "?";
}

}  // namespace

void set_level(Level level) { logger().level = level; }
Level level() { return logger().level; }

Level parse_level(const std::string& name) {
  if (name == "debug" || name == "trace") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warning" || name == "warn") return Level::kWarning;
  if (name == "error" || name == "critical") return Level::kError;
  if (name == "off") return Level::kOff;
  throw InputError("unknown log level '" + name + "' (expected debug, info, warning, error, off)");
}

void write(Level level, const std::string& message) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%m-%d %H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(logger().mutex);
  std::fprintf(stderr, "%s %s %s\n", level_name(level), stamp, message.c_str());
}

}  // namespace gemmaserve::log
