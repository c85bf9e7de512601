#include "server/http/client_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

namespace gemmaserve {
namespace {

void socket_name(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return;
  std::array<char, NI_MAXHOST> host{};
  std::array<char, NI_MAXSERV> serv{};
  if (getnameinfo(sa, len, host.data(), host.size(), serv.data(), serv.size(),
                  NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host.data();
    port = std::atoi(serv.data());
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void ChunkedBodyScanner::feed(const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    if (state_ == State::kData) {  // chunk data in one step
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_left_, size - i));
      chunk_left_ -= n;
      i += n - 1;
      if (chunk_left_ == 0) state_ = State::kDataCr;
      continue;
    }
    step(data[i]);
  }
}

void ChunkedBodyScanner::skip_line(char c, State at_lf) {
  if (c == '\r') state_ = at_lf;
  if (c == '\n') state_ = State::kBroken;  // a bare LF
}

void ChunkedBodyScanner::step(char c) {
  switch (state_) {
    case State::kSize:
      if (const int digit = hex_digit(c); digit >= 0) {
        if (chunk_left_ > (std::numeric_limits<uint64_t>::max() >> 4)) {
          state_ = State::kBroken;
          return;
        }
        chunk_left_ = chunk_left_ * 16 + static_cast<uint64_t>(digit);
        size_digits_ = true;
      } else if (!size_digits_) {
        state_ = State::kBroken;
      } else if (c == ';' || c == ' ' || c == '\t') {
        state_ = State::kExtension;
      } else {
        state_ = c == '\r' ? State::kSizeLf : State::kBroken;
      }
      return;
    case State::kExtension:
      skip_line(c, State::kSizeLf);
      return;
    case State::kSizeLf:
      state_ = c != '\n' ? State::kBroken : chunk_left_ > 0 ? State::kData : State::kTrailerStart;
      return;
    case State::kDataCr:
      state_ = c == '\r' ? State::kDataLf : State::kBroken;
      return;
    case State::kDataLf:
      state_ = c == '\n' ? State::kSize : State::kBroken;
      size_digits_ = false;
      return;
    case State::kTrailerStart:
      state_ = c == '\r' ? State::kEndLf : c == '\n' ? State::kBroken : State::kTrailerLine;
      return;
    case State::kTrailerLine:
      skip_line(c, State::kTrailerLineLf);
      return;
    case State::kTrailerLineLf:
      state_ = c == '\n' ? State::kTrailerStart : State::kBroken;
      return;
    case State::kEndLf:
      state_ = c == '\n' ? State::kDone : State::kBroken;
      return;
    case State::kData:  // handled by feed()
      return;
    case State::kDone:  // a read past the body's end: the framing is not what was read
    case State::kBroken:
      state_ = State::kBroken;
      return;
  }
}

ClientStream::ClientStream(int fd, std::chrono::milliseconds io_timeout, RequestLimits limits)
    : fd_(fd),
      io_timeout_(io_timeout),
      read_deadline_(Clock::now() + io_timeout),
      limits_(limits) {}

void ClientStream::start_request() {
  read_deadline_ = Clock::now() + io_timeout_;
  in_body_ = false;
  part_bytes_ = 0;
  overflow_ = Overflow::kNone;
  framing_ = BodyFraming{};
  chunks_ = ChunkedBodyScanner{};
  keep_alive_ = true;
}

void ClientStream::start_body(BodyFraming framing) {
  in_body_ = true;
  part_bytes_ = 0;
  framing_ = std::move(framing);
}

bool ClientStream::body_complete() const {
  if (!in_body_ || !framing_.error.empty()) return false;  // headers unread or unreliable
  return framing_.chunked ? chunks_.done() : part_bytes_ == framing_.length;
}

bool ClientStream::discard_body(size_t max_bytes) {
  if (body_complete()) return true;
  if (!in_body_ || !framing_.error.empty() || framing_.chunked || read_failed_ ||
      part_bytes_ > framing_.length || framing_.length - part_bytes_ > max_bytes) {
    return false;
  }
  std::array<char, 16384> sink{};
  while (part_bytes_ < framing_.length) {
    const size_t want =
        static_cast<size_t>(std::min<uint64_t>(sink.size(), framing_.length - part_bytes_));
    if (read(sink.data(), want) <= 0) return false;
  }
  return true;
}

bool ClientStream::wait(short events, Clock::time_point deadline) const {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd_, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool ClientStream::wait_for_request(std::chrono::milliseconds timeout,
                                    const std::function<bool()>& keep_waiting) {
  if (begin_ < end_) return true;
  const Clock::time_point deadline = Clock::now() + timeout;
  // Slices, so a stopping server does not wait out the keep-alive timeout.
  constexpr std::chrono::milliseconds kSlice{100};
  while (keep_waiting()) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (wait(POLLIN, std::min(deadline, now + kSlice))) return true;
  }
  return false;
}

bool ClientStream::is_readable() const { return begin_ < end_ || wait(POLLIN, read_deadline_); }

bool ClientStream::is_writable() const { return wait(POLLOUT, Clock::now() + io_timeout_); }

ssize_t ClientStream::read(char* ptr, size_t size) {
  if (overflow_ != Overflow::kNone) return -1;
  const size_t limit = in_body_ ? limits_.body_bytes : limits_.header_bytes;
  if (part_bytes_ >= limit) {
    overflow_ = in_body_ ? Overflow::kBody : Overflow::kHeaders;
    return -1;
  }
  size = std::min(size, limit - part_bytes_);
  if (begin_ == end_) {
    if (!wait(POLLIN, read_deadline_)) {  // too slow: the request is cut
      read_failed_ = true;
      return -1;
    }
    ssize_t n;
    do {
      n = recv(fd_, buffer_.data(), buffer_.size(), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
      read_failed_ = true;
      return n;
    }
    begin_ = 0;
    end_ = static_cast<size_t>(n);
  }
  const size_t n = std::min(size, end_ - begin_);
  std::memcpy(ptr, buffer_.data() + begin_, n);
  begin_ += n;
  part_bytes_ += n;
  if (in_body_ && framing_.chunked) chunks_.feed(ptr, n);
  return static_cast<ssize_t>(n);
}

ssize_t ClientStream::write(const char* ptr, size_t size) {
  const Clock::time_point deadline = Clock::now() + io_timeout_;
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd_, ptr + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait(POLLOUT, deadline)) return -1;  // the client stopped reading
    } else {
      return -1;
    }
  }
  return static_cast<ssize_t>(size);
}

void ClientStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  socket_name(fd_, true, ip, port);
}

void ClientStream::get_local_ip_and_port(std::string& ip, int& port) const {
  socket_name(fd_, false, ip, port);
}

}  // namespace gemmaserve
