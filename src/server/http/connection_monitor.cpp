#include "server/http/connection_monitor.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/logging.h"

namespace gemmaserve {

using Clock = std::chrono::steady_clock;

ConnectionMonitor::ConnectionMonitor(int max_connections, double request_timeout_s)
    : max_connections_(max_connections), request_timeout_s_(request_timeout_s) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw std::runtime_error(std::string("connection monitor: ") + std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // key 0: the wake-up
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  watcher_ = std::thread([this] { watch_loop(); });
}

ConnectionMonitor::~ConnectionMonitor() {
  const uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) {
    GS_LOG_WARNING << "connection monitor: no wake-up";
  }
  watcher_.join();
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

bool ConnectionMonitor::open(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (static_cast<int>(by_thread_.size()) >= max_connections_) return false;
  Connection& c = by_thread_[std::this_thread::get_id()];
  c = Connection{};
  c.fd = fd;
  return true;
}

void ConnectionMonitor::close() {
  release();
  std::lock_guard<std::mutex> lock(mutex_);
  by_thread_.erase(std::this_thread::get_id());
}

void ConnectionMonitor::begin_request() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_thread_.find(std::this_thread::get_id());
  if (it == by_thread_.end() || it->second.busy) return;
  it->second.busy = true;
  it->second.began_before_drain = !draining_;
  ++num_busy_;
}

void ConnectionMonitor::watch(const std::shared_ptr<EngineSession>& session) {
  AbortReason abort_now = AbortReason::kNone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_thread_.find(std::this_thread::get_id());
    if (it == by_thread_.end()) return;  // not a connection thread (tests calling in)
    Connection& c = it->second;
    c.session = session;
    c.watched_since = Clock::now();
    c.deadline_passed = false;
    c.key = next_key_++;
    watched_[c.key] = it->first;
    // EPOLLRDHUP: the peer closed its side; HUP and ERR are always reported.
    epoll_event ev{};
    ev.events = EPOLLRDHUP;
    ev.data.u64 = c.key;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev) != 0) {
      GS_LOG_WARNING << "connection monitor: cannot watch a client: " << std::strerror(errno);
    }
    abort_now = abort_new_;
  }
  if (abort_now != AbortReason::kNone) session->abort(abort_now);
}

void ConnectionMonitor::release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_thread_.find(std::this_thread::get_id());
    if (it == by_thread_.end()) return;
    Connection& c = it->second;
    if (!c.busy && c.key == 0) return;
    if (c.busy) --num_busy_;
    c.busy = false;
    if (c.key != 0) {
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
      watched_.erase(c.key);
      c.key = 0;
      c.session.reset();
    }
  }
  released_.notify_all();
}

int ConnectionMonitor::num_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(by_thread_.size());
}

int ConnectionMonitor::num_watched() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(watched_.size());
}

int ConnectionMonitor::num_busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return num_busy_;
}

bool ConnectionMonitor::wait_requests_done(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return released_.wait_until(lock, deadline, [&] { return num_busy_ == 0; });
}

void ConnectionMonitor::start_draining() {
  std::lock_guard<std::mutex> lock(mutex_);
  draining_ = true;
}

bool ConnectionMonitor::draining() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return draining_;
}

bool ConnectionMonitor::began_before_drain() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_thread_.find(std::this_thread::get_id());
  return it != by_thread_.end() && it->second.busy && it->second.began_before_drain;
}

void ConnectionMonitor::abort_all(AbortReason reason) {
  std::vector<std::shared_ptr<EngineSession>> sessions;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_new_ = reason;
    for (const auto& [key, thread] : watched_) {
      if (auto s = by_thread_.at(thread).session.lock()) sessions.push_back(std::move(s));
    }
  }
  for (const auto& s : sessions) s->abort(reason);
}

void ConnectionMonitor::cut_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [thread, c] : by_thread_) ::shutdown(c.fd, SHUT_RDWR);
}

void ConnectionMonitor::collect_expired(std::vector<std::shared_ptr<EngineSession>>* out) {
  if (request_timeout_s_ <= 0) return;
  const Clock::time_point now = Clock::now();
  for (const auto& [key, thread] : watched_) {
    Connection& c = by_thread_.at(thread);
    if (c.deadline_passed ||
        std::chrono::duration<double>(now - c.watched_since).count() < request_timeout_s_) {
      continue;
    }
    c.deadline_passed = true;
    if (auto s = c.session.lock()) out->push_back(std::move(s));
  }
}

void ConnectionMonitor::watch_loop() {
  std::array<epoll_event, 64> events{};
  // Deadlines are checked every tick; disconnects wake the loop at once.
  constexpr int kTickMs = 50;
  for (;;) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), kTickMs);
    std::vector<std::shared_ptr<EngineSession>> gone, expired;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int i = 0; i < n; ++i) {
        const uint64_t key = events[static_cast<size_t>(i)].data.u64;
        if (key == 0) return;  // stop
        auto w = watched_.find(key);
        if (w == watched_.end()) continue;  // released meanwhile
        Connection& c = by_thread_.at(w->second);
        // Reported once: the client cannot come back.
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
        ::shutdown(c.fd, SHUT_RDWR);
        if (auto s = c.session.lock()) gone.push_back(std::move(s));
      }
      collect_expired(&expired);
    }
    for (const auto& s : gone) s->abort(AbortReason::kClientGone);
    for (const auto& s : expired) s->abort(AbortReason::kDeadline);
    if (!expired.empty()) {
      GS_LOG_WARNING << expired.size() << " request(s) passed --request-timeout and were aborted";
    }
  }
}

}  // namespace gemmaserve
