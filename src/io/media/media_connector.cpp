#include "io/media/media_connector.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <system_error>

#include "core/error.h"
#include "io/media/base64.h"

namespace gemmaserve::media {
namespace {

namespace fs = std::filesystem;

// requests' Session.max_redirects, which vLLM's HTTP client runs with.
constexpr int kMaxRedirects = 30;

[[noreturn]] void fail(const std::string& message) { throw InputError(message, "messages"); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool starts_with_ci(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && lower(s.substr(0, prefix.size())) == prefix;
}

// Python's repr() of a short str, as vLLM's messages print URLs.
std::string py_repr(const std::string& s) {
  const bool double_quotes = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = double_quotes ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == '\\' || c == q) out += '\\';
    out += c;
  }
  return out + q;
}

// Python's repr() of a list of str: ['a', 'b'].
std::string py_list_repr(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + py_repr(items[i]);
  return out + "]";
}

std::string percent_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string format_seconds(double s) {
  if (s == std::floor(s)) return std::to_string(static_cast<long long>(s)) + " s";
  std::string t = std::to_string(s);
  while (t.back() == '0') t.pop_back();
  return t + " s";
}

struct CurlUrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
struct CurlEasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct CurlStringDeleter {
  void operator()(char* p) const { curl_free(p); }
};

struct HttpUrl {
  std::string scheme;  // lower case
  std::string host;    // lower case, IPv6 without brackets
};

// The scheme and host of an absolute URL, or nullopt when curl's parser refuses it.
std::optional<HttpUrl> parse_http_url(const std::string& url) {
  std::unique_ptr<CURLU, CurlUrlDeleter> u(curl_url());
  if (!u ||
      curl_url_set(u.get(), CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
    return std::nullopt;
  }
  auto part = [&](CURLUPart which) -> std::optional<std::string> {
    char* raw = nullptr;
    if (curl_url_get(u.get(), which, &raw, 0) != CURLUE_OK || raw == nullptr) return std::nullopt;
    std::unique_ptr<char, CurlStringDeleter> owned(raw);
    return std::string(raw);
  };
  auto scheme = part(CURLUPART_SCHEME);
  auto host = part(CURLUPART_HOST);
  if (!scheme || !host) return std::nullopt;
  std::string h = lower(*host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return HttpUrl{lower(*scheme), h};
}

struct Download {
  std::vector<std::uint8_t> body;
  std::size_t max_bytes = 0;
  bool over_limit = false;
  bool block_private = false;
  std::string blocked_address;  // the address refused, when one was
};

bool in_v4(uint32_t addr, uint32_t net, int bits) {
  const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  return (addr & mask) == (net & mask);
}

// Python's ipaddress is_private / is_loopback / is_link_local / is_reserved / is_multicast /
// is_unspecified for IPv4, plus the shared address space (RFC 6598), as vLLM blocks them.
bool blocked_v4(uint32_t a) {
  static constexpr struct {
    uint32_t net;
    int bits;
  } kBlocked[] = {{0x00000000, 8},  {0x0A000000, 8},  {0x64400000, 10}, {0x7F000000, 8},
                  {0xA9FE0000, 16}, {0xAC100000, 12}, {0xC0000000, 24}, {0xC0000200, 24},
                  {0xC0A80000, 16}, {0xC6120000, 15}, {0xC6336400, 24}, {0xCB007100, 24},
                  {0xE0000000, 4},  {0xF0000000, 4}};
  for (const auto& b : kBlocked) {
    if (in_v4(a, b.net, b.bits)) return true;
  }
  return false;
}

bool blocked_v6(const in6_addr& a) {
  const uint8_t* b = a.s6_addr;
  static constexpr uint8_t kZero[16] = {};
  const bool mapped = std::memcmp(b, kZero, 10) == 0 && b[10] == 0xFF && b[11] == 0xFF;
  if (mapped)
    return blocked_v4(static_cast<uint32_t>(b[12]) << 24 | b[13] << 16 | b[14] << 8 | b[15]);
  if (std::memcmp(b, kZero, 15) == 0 && b[15] <= 1) return true;  // :: and ::1
  if (b[0] == 0xFE && (b[1] & 0xC0) == 0x80) return true;         // fe80::/10 link-local
  if ((b[0] & 0xFE) == 0xFC) return true;                         // fc00::/7 unique local
  if (b[0] == 0xFF) return true;                                  // ff00::/8 multicast
  if (b[0] == 0x20 && b[1] == 0x02) return true;                  // 2002::/16 6to4
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8) return true;  // documentation
  static constexpr uint8_t kNat64[12] = {0, 0x64, 0xFF, 0x9B};
  return std::memcmp(b, kNat64, 12) == 0;  // 64:ff9b::/96 NAT64
}

// curl's socket opener: refuses blocked destinations before connecting (each hop, each address).
curl_socket_t open_socket(void* user, curlsocktype purpose, curl_sockaddr* address) {
  auto* d = static_cast<Download*>(user);
  if (d->block_private && purpose == CURLSOCKTYPE_IPCXN) {
    char text[INET6_ADDRSTRLEN] = {};
    bool blocked = false;
    if (address->family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&address->addr);
      blocked = blocked_v4(ntohl(in->sin_addr.s_addr));
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    } else if (address->family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address->addr);
      blocked = blocked_v6(in6->sin6_addr);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    }
    if (blocked) {
      d->blocked_address = text;
      return CURL_SOCKET_BAD;
    }
  }
  return socket(address->family, address->socktype, address->protocol);
}

size_t write_body(char* data, size_t size, size_t count, void* user) {
  auto* d = static_cast<Download*>(user);
  const size_t n = size * count;
  if (d->body.size() + n > d->max_bytes) {
    d->over_limit = true;
    return 0;  // makes curl stop with CURLE_WRITE_ERROR
  }
  d->body.insert(d->body.end(), data, data + n);
  return n;
}

}  // namespace

MediaConnector::MediaConnector(MediaConnectorOptions options) : options_(std::move(options)) {
  curl_global_init(CURL_GLOBAL_DEFAULT);  // reference-counted by libcurl; paired below
  if (!options_.allowed_local_media_path.empty()) {
    std::error_code ec;
    const fs::path root = fs::weakly_canonical(options_.allowed_local_media_path, ec);
    if (ec || !fs::exists(root)) {
      throw InputError("Invalid `--allowed-local-media-path`: The path " +
                       (ec ? options_.allowed_local_media_path : root.string()) +
                       " does not exist.");
    }
    if (!fs::is_directory(root)) {
      throw InputError("Invalid `--allowed-local-media-path`: The path " + root.string() +
                       " must be a directory.");
    }
    local_root_ = root;
  }
  if (!(options_.fetch_timeout_s > 0)) throw InputError("the media fetch timeout must be positive");
}

MediaConnector::~MediaConnector() { curl_global_cleanup(); }

std::size_t MediaConnector::max_bytes_for(MediaKind kind) const {
  return kind == MediaKind::kVideo ? options_.video_max_bytes : options_.max_bytes;
}

const char* MediaConnector::kind_name(MediaKind kind) {
  switch (kind) {
    case MediaKind::kAudio:
      return "audio";
    case MediaKind::kVideo:
      return "video";
    case MediaKind::kImage:
      break;
  }
  return "image";
}

std::vector<std::uint8_t> MediaConnector::fetch(const std::string& url, MediaKind kind) const {
  if (starts_with_ci(url, "data:")) return load_data_url(url, kind);
  if (starts_with_ci(url, "http://") || starts_with_ci(url, "https://")) {
    return load_http_url(url, kind);
  }
  if (starts_with_ci(url, "file:")) return load_file_url(url, kind);
  fail("The URL must be either a HTTP, data or file URL.");
}

// RFC 2397: data:[<mediatype>][;<param>=<value>]*[;base64],<data>
std::vector<std::uint8_t> MediaConnector::load_data_url(const std::string& url,
                                                        MediaKind kind) const {
  const std::string what = kind_name(kind);
  const std::size_t max_bytes = max_bytes_for(kind);
  const std::string rest = url.substr(5);
  const size_t comma = rest.find(',');
  if (comma == std::string::npos) {
    fail("Invalid data URL " + py_repr(url.substr(0, 32)) + ": missing ',' separator.");
  }
  const std::string spec = rest.substr(0, comma);
  const size_t semi = spec.rfind(';');
  if (semi == std::string::npos || spec.substr(semi + 1) != "base64") {
    fail("Only base64 data URLs are supported for now.");
  }
  const std::string media_type = lower(spec.substr(0, std::min(spec.find(';'), semi)));
  // Animated GIF and WebP are videos too when a video part brings them.
  const bool animated_image =
      kind == MediaKind::kVideo && (media_type == "image/gif" || media_type == "image/webp");
  if (!media_type.empty() && media_type.rfind(what + "/", 0) != 0 && !animated_image) {
    fail("Invalid " + what + " data URL: media type '" + media_type + "' is not " +
         (what == "image" || what == "audio" ? "an " : "a ") + what +
         " type (expected data:" + what + "/...;base64,...).");
  }
  const std::string_view data = std::string_view(rest).substr(comma + 1);
  if (data.size() / 4 * 3 > max_bytes + 2) {
    fail("Invalid " + what + " data URL: the " + what + " is larger than the " +
         std::to_string(max_bytes) + "-byte media limit.");
  }
  auto bytes = decode_base64(data);
  if (!bytes) fail("Invalid " + what + " data URL: the data is not valid base64.");
  if (bytes->empty()) fail("Invalid " + what + " data URL: the " + what + " data is empty.");
  return std::move(*bytes);
}

std::vector<std::uint8_t> MediaConnector::load_file_url(const std::string& url,
                                                        MediaKind kind) const {
  const std::size_t max_bytes = max_bytes_for(kind);
  if (!local_root_) fail("Cannot load local files without `--allowed-local-media-path`.");
  // file://NETLOC/PATH -> NETLOC/PATH (urllib's url2pathname), query and fragment dropped.
  std::string rest = url.substr(starts_with_ci(url, "file://") ? 7 : 5);
  rest = rest.substr(0, rest.find_first_of("?#"));
  const fs::path filepath(percent_decode(rest));
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(filepath, ec);
  bool inside = false;
  if (!ec) {
    for (fs::path p = resolved.parent_path(); !p.empty(); p = p.parent_path()) {
      if (p == *local_root_) {
        inside = true;
        break;
      }
      if (p == p.parent_path()) break;
    }
  }
  if (!inside) {
    fail("The file path " + filepath.string() +
         " must be a subpath of `--allowed-local-media-path " + local_root_->string() + "`.");
  }
  std::ifstream in(resolved, std::ios::binary);
  if (!in || !fs::is_regular_file(resolved, ec)) {
    fail("Cannot read the local media file " + filepath.string() + ": no such regular file.");
  }
  const auto size = fs::file_size(resolved, ec);
  if (ec || size > max_bytes) {
    fail("The local media file " + filepath.string() + " is larger than the " +
         std::to_string(max_bytes) + "-byte media limit.");
  }
  std::vector<std::uint8_t> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) {
    fail("Cannot read the local media file " + filepath.string() + ".");
  }
  return bytes;
}

void MediaConnector::check_allowed_domain(const std::string& host) const {
  const auto& allowed = options_.allowed_media_domains;
  if (allowed.empty()) return;
  if (std::find(allowed.begin(), allowed.end(), host) == allowed.end()) {
    fail("The URL must be from one of the allowed domains: " + py_list_repr(allowed) +
         ". Input URL domain: " + host);
  }
}

std::vector<std::uint8_t> MediaConnector::load_http_url(const std::string& url,
                                                        MediaKind kind) const {
  const std::size_t max_bytes = max_bytes_for(kind);
  const double timeout_s =
      kind == MediaKind::kVideo ? options_.video_fetch_timeout_s : options_.fetch_timeout_s;
  if (options_.disable_url_fetch) {
    fail(
        "Fetching media from http(s) URLs is disabled on this server (--disable-media-url-fetch); "
        "send the " +
        std::string(kind_name(kind)) + " inline as a data:" + kind_name(kind) +
        "/...;base64, URL.");
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  const std::string timeout_message = "Failed to fetch media from URL: no complete answer within " +
                                      format_seconds(timeout_s) + ".";
  std::string current = url;
  for (int hop = 0;; ++hop) {
    const auto parts = parse_http_url(current);
    if (!parts) fail("Failed to fetch media from URL: Invalid URL");
    if (parts->scheme != "http" && parts->scheme != "https") {
      fail("The media URL must remain HTTP(S): " + py_repr(current.substr(0, 32)));
    }
    check_allowed_domain(parts->host);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) fail(timeout_message);

    std::unique_ptr<CURL, CurlEasyDeleter> curl(curl_easy_init());
    if (!curl) fail("Failed to fetch media from URL: cannot start an HTTP client.");
    Download download;
    download.max_bytes = max_bytes;
    download.block_private = options_.block_private_addresses;
    CURL* c = curl.get();
    curl_easy_setopt(c, CURLOPT_URL, current.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: many threads fetch
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);  // each hop is checked here instead
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(left));
    curl_easy_setopt(c, CURLOPT_USERAGENT, "gemmaserve/" GEMMASERVE_VERSION);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(max_bytes));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &download);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &download);
    const CURLcode rc = curl_easy_perform(c);
    if (download.over_limit || rc == CURLE_FILESIZE_EXCEEDED) {
      fail("Failed to fetch media from URL: the response is larger than the " +
           std::to_string(max_bytes) + "-byte media limit.");
    }
    if (!download.blocked_address.empty()) {
      fail("Media URL host resolves to a blocked address: " + download.blocked_address +
           ". Private, loopback, link-local and multicast destinations are not allowed (set "
           "VLLM_MEDIA_EGRESS_BLOCK_PRIVATE=0 to disable).");
    }
    if (rc == CURLE_OPERATION_TIMEDOUT) fail(timeout_message);
    if (rc != CURLE_OK) {
      fail(std::string("Failed to fetch media from URL: ") + curl_easy_strerror(rc) + ".");
    }
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    char* location = nullptr;
    curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &location);
    if (status >= 300 && status < 400 && location != nullptr) {
      if (!options_.allow_redirects) {
        fail("Failed to fetch media from URL: HTTP " + std::to_string(status) +
             " redirect, and this server follows no media URL redirects "
             "(VLLM_MEDIA_URL_ALLOW_REDIRECTS=0).");
      }
      if (hop >= kMaxRedirects) {
        fail("Failed to fetch media from URL: Exceeded " + std::to_string(kMaxRedirects) +
             " redirects.");
      }
      current = location;
      continue;
    }
    if (status >= 400) {
      fail("Failed to fetch media from URL: HTTP " + std::to_string(status) + " error");
    }
    if (download.body.empty()) fail("Failed to fetch media from URL: the response is empty.");
    return std::move(download.body);
  }
}

}  // namespace gemmaserve::media
