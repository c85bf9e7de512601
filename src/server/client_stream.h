// httplib's Stream over one client socket, with the time limits cpp-httplib 0.11 lacks: a whole
// request (headers and body) must arrive before a deadline, however slowly it trickles
// (slowloris), and each write must be taken by the client within the I/O timeout, so a client
// that stops reading its stream is cut once the socket buffers are full.
#pragma once

#include <httplib.h>

#include <array>
#include <chrono>
#include <functional>
#include <string>

namespace gemmaserve {

class ClientStream : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  ClientStream(int fd, std::chrono::milliseconds io_timeout);

  // Waits up to `timeout` for the first byte of the next request (keep-alive), giving up early
  // once `keep_waiting` says so. True when there is something to read (or the peer closed).
  bool wait_for_request(std::chrono::milliseconds timeout,
                        const std::function<bool()>& keep_waiting);
  // Starts a request: all of it must be read within the I/O timeout from now.
  void start_request() { read_deadline_ = Clock::now() + io_timeout_; }
  // Whether a read timed out, failed or met the end: the connection cannot carry another request
  // (httplib answers a body it could not read with a 400 but would keep the connection).
  bool read_failed() const { return read_failed_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  // poll() for `events` until `deadline`; true when ready.
  bool wait(short events, Clock::time_point deadline) const;

  int fd_;
  std::chrono::milliseconds io_timeout_;
  Clock::time_point read_deadline_;
  // httplib reads request lines a byte at a time: buffer the socket.
  std::array<char, 4096> buffer_{};
  size_t begin_ = 0, end_ = 0;
  bool read_failed_ = false;
};

}  // namespace gemmaserve
