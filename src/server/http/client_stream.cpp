#include "server/http/client_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

}  // namespace

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
}

void ClientStream::start_body() {
  in_body_ = true;
  part_bytes_ = 0;
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
