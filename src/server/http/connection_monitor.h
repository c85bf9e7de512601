// The open client connections of the HTTP server, one worker thread each: the cap on how many
// are open, which of them are busy with a request (from its first byte to its response's end:
// what a shutdown drains), and, while a request's engine work runs, the watch on its client: a
// client that goes away (FIN/RST on the socket, seen by epoll at once) or passes
// --request-timeout gets its session aborted, so its KV blocks return before the next engine
// step. Shutdown aborts what is left and cuts every connection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "server/shared/engine_session.h"

namespace gemmaserve {

class ConnectionMonitor {
 public:
  // request_timeout_s: 0 = no per-request deadline.
  ConnectionMonitor(int max_connections, double request_timeout_s);
  ~ConnectionMonitor();
  ConnectionMonitor(const ConnectionMonitor&) = delete;
  ConnectionMonitor& operator=(const ConnectionMonitor&) = delete;

  // The calling thread serves socket `fd` until close(). False (nothing registered) when
  // max_connections are open already.
  bool open(int fd);
  void close();
  // The calling thread's client sent the first byte of a request: busy until release().
  void begin_request();
  // Watches the calling thread's client while `session` runs (until release()).
  void watch(const std::shared_ptr<EngineSession>& session);
  // The calling thread's response was written: its client is no longer busy nor watched.
  void release();

  int num_open() const;
  int max_connections() const { return max_connections_; }
  // Requests with engine work whose response is not written yet.
  int num_watched() const;
  // Requests begun whose response is not written yet (engine work or not).
  int num_busy() const;
  // Waits until num_busy() == 0 or `deadline`; true when none is left.
  bool wait_requests_done(std::chrono::steady_clock::time_point deadline);
  // SIGTERM: requests begun from now on are new ones, refused by the drain.
  void start_draining();
  bool draining() const;
  // Whether the calling thread's request began before start_draining() (the drain waits for it).
  bool began_before_drain() const;
  // Aborts every watched session, and any watched from now on, for `reason`.
  void abort_all(AbortReason reason);
  // Shuts down every open socket (blocked reads and writes fail at once).
  void cut_all();

 private:
  struct Connection {
    int fd = -1;
    uint64_t key = 0;  // epoll's handle: stale events after close() find nothing
    std::weak_ptr<EngineSession> session;
    std::chrono::steady_clock::time_point watched_since;
    bool deadline_passed = false;
    bool busy = false;
    bool began_before_drain = false;
  };
  void watch_loop();
  // Sessions past --request-timeout. Under mutex_.
  void collect_expired(std::vector<std::shared_ptr<EngineSession>>* out);

  const int max_connections_;
  const double request_timeout_s_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that stops the watcher
  mutable std::mutex mutex_;
  std::condition_variable released_;
  std::unordered_map<std::thread::id, Connection> by_thread_;
  std::unordered_map<uint64_t, std::thread::id> watched_;  // key -> thread
  uint64_t next_key_ = 1;
  int num_busy_ = 0;
  bool draining_ = false;
  AbortReason abort_new_ = AbortReason::kNone;
  std::thread watcher_;  // last: starts after everything above exists
};

}  // namespace gemmaserve
