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
#include <cstdint>
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

// How a request's headers frame its body (RFC 9112 6.3).
struct BodyFraming {
  bool chunked = false;
  uint64_t length = 0;  // when not chunked
  std::string error;    // not empty: the headers frame no body reliably (400, then close)
};

// Follows a chunked body (RFC 9112 7.1) strictly as it is read, to tell where it ends: httplib's
// reader is lenient (a chunk not followed by CRLF ends its body early, "0x5" is a size).
class ChunkedBodyScanner {
 public:
  void feed(const char* data, size_t size);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State {
    kSize,
    kExtension,
    kSizeLf,
    kData,
    kDataCr,
    kDataLf,
    kTrailerStart,
    kTrailerLine,
    kTrailerLineLf,
    kEndLf,
    kDone,
    kBroken
  };
  void step(char c);
  // A byte inside a line whose content is not checked (a chunk extension, a trailer field): its
  // CR moves to `at_lf`.
  void skip_line(char c, State at_lf);

  State state_ = State::kSize;
  uint64_t chunk_left_ = 0;
  bool size_digits_ = false;
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
  // The headers were read and frame the body so: the body limit counts from here.
  void start_body(BodyFraming framing);
  // The body is over the limit by its declared length: its reads fail at once (a 413 without
  // waiting for bytes that are refused anyway).
  void refuse_body() { overflow_ = Overflow::kBody; }
  // The framing error of the request's headers, "" when none (or not read yet).
  const std::string& framing_error() const { return framing_.error; }
  // Whether all of the request's body was read (httplib answers some requests before reading it).
  bool body_complete() const;
  // Reads and drops the rest of a body of known length when at most `max_bytes` are left, within
  // the request's deadline; true when all of the body has been read then.
  bool discard_body(size_t max_bytes);
  // The answer being written closes the connection; keep_alive() says so to the connection loop.
  void end_keep_alive() { keep_alive_ = false; }
  bool keep_alive() const { return keep_alive_; }
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
  BodyFraming framing_;
  ChunkedBodyScanner chunks_;
  bool keep_alive_ = true;
  Overflow overflow_ = Overflow::kNone;
  // httplib reads request lines a byte at a time: buffer the socket.
  std::array<char, 4096> buffer_{};
  size_t begin_ = 0, end_ = 0;
  bool read_failed_ = false;
};

}  // namespace gemmaserve
