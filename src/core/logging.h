// Minimal leveled logger to stderr; the only global in the project.
#pragma once

#include <sstream>
#include <string>

namespace gemmaserve::log {

enum class Level { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void set_level(Level level);
Level level();
// Parses debug|info|warning|error|critical|off (uvicorn's names too); throws InputError otherwise.
Level parse_level(const std::string& name);
void write(Level level, const std::string& message);

// Streams a message and writes it on destruction: LogLine(Level::kInfo) << "x=" << x;
class LogLine {
 public:
  explicit LogLine(Level level) : level_(level) {}
  ~LogLine() { write(level_, stream_.str()); }
  template <typename T>
  LogLine& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};

}  // namespace gemmaserve::log

#define GS_LOG(lvl)                                                   \
  if (::gemmaserve::log::Level::lvl < ::gemmaserve::log::level()) {   \
  } else                                                              \
    ::gemmaserve::log::LogLine(::gemmaserve::log::Level::lvl)
#define GS_LOG_DEBUG GS_LOG(kDebug)
#define GS_LOG_INFO GS_LOG(kInfo)
#define GS_LOG_WARNING GS_LOG(kWarning)
#define GS_LOG_ERROR GS_LOG(kError)
