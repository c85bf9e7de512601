// httplib's Stream over one client socket, with the time limits cpp-httplib 0.11 lacks: a whole
// request (headers and body) must arrive before a deadline, however slowly it trickles
// (slowloris), and each write must be taken by the client within the I/O timeout, so a client
// that stops reading its stream is cut once the socket buffers are full. It also bounds a request's
// size, which 0.11 leaves unbounded for header lines, chunked bodies and bodies without a length.
#pragma once

#include <httplib.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>

namespace gemmaserve {

// Bytes a request may take on the wire: its request line and headers, then its body (chunk
// framing included).
struct RequestLimits {
  size_t header_bytes = std::numeric_limits<size_t>::max();
  size_t body_bytes = std::numeric_limits<size_t>::max();
};

class ClientStream : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  // Which of a request's limits it passed: its reads fail from then on.
  enum class Overflow { kNone, kHeaders, kBody };

  ClientStream(int fd, std::chrono::milliseconds io_timeout, RequestLimits limits = {});

  // Waits up to `timeout` for the first byte of the next request (keep-alive), giving up early
  // once `keep_waiting` says so. True when there is something to read (or the peer closed).
  bool wait_for_request(std::chrono::milliseconds timeout,
                        const std::function<bool()>& keep_waiting);
  // Starts a request: all of it must be read within the I/O timeout from now, and its headers
  // within the header limit.
  void start_request();
  // The headers were read: the body limit counts from here.
  void start_body();
  Overflow overflow() const { return overflow_; }
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
  RequestLimits limits_;
  bool in_body_ = false;
  size_t part_bytes_ = 0;  // read of the current part (headers or body)
  Overflow overflow_ = Overflow::kNone;
  // httplib reads request lines a byte at a time: buffer the socket.
  std::array<char, 4096> buffer_{};
  size_t begin_ = 0, end_ = 0;
  bool read_failed_ = false;
};

}  // namespace gemmaserve
