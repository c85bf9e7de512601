// The media room (src/io/media/): data: URLs, file:// URLs under --allowed-local-media-path, and
// http(s) fetches from a loopback cpp-httplib server (timeout, size cap, allowed domains,
// redirects, the no-network switch); every refusal is an InputError with its exact message.
#include "io/media/media_connector.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "io/media/base64.h"
#include "test_support.h"

namespace gemmaserve::media {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const std::vector<std::uint8_t> kPngMagic = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

std::string error_of(const MediaConnector& m, const std::string& url,
                     MediaKind kind = MediaKind::kImage) {
  try {
    m.fetch(url, kind);
  } catch (const InputError& e) {
    EXPECT_EQ(e.param().value_or(""), "messages") << url;
    return e.what();
  }
  ADD_FAILURE() << "no error for " << url;
  return "";
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

TEST(Base64, DecodesStrictlyAsPythonValidateTrue) {
  EXPECT_EQ(*decode_base64("iVBORw0KGgo="), kPngMagic);
  EXPECT_EQ(decode_base64("")->size(), 0u);
  EXPECT_EQ(*decode_base64("QQ=="), std::vector<std::uint8_t>{'A'});
  EXPECT_EQ(*decode_base64("QUI="), (std::vector<std::uint8_t>{'A', 'B'}));
  EXPECT_FALSE(decode_base64("QQ="));    // length not a multiple of 4
  EXPECT_FALSE(decode_base64("Q Q=="));  // whitespace is not in the alphabet
  EXPECT_FALSE(decode_base64("QQ-_"));   // the URL-safe alphabet is not accepted
  EXPECT_FALSE(decode_base64("Q=Q="));   // padding inside
  EXPECT_FALSE(decode_base64("Q==="));   // three padding characters
}

TEST(MediaConnectorData, Base64ImageUrl) {
  MediaConnector m;
  EXPECT_EQ(m.fetch("data:image/png;base64,iVBORw0KGgo="), kPngMagic);
  EXPECT_EQ(m.fetch("DATA:image/png;charset=x;base64,iVBORw0KGgo="), kPngMagic);
  EXPECT_EQ(m.fetch("data:;base64,iVBORw0KGgo="), kPngMagic);  // no media type: sniffed later
}

TEST(MediaConnectorData, BadDataUrlsGetClearMessages) {
  MediaConnector m;
  EXPECT_EQ(error_of(m, "data:image/png;base64"),
            "Invalid data URL 'data:image/png;base64': missing ',' separator.");
  EXPECT_EQ(error_of(m, "data:image/png,rawbytes"), "Only base64 data URLs are supported for now.");
  EXPECT_EQ(error_of(m, "data:image/png;base64,iVBO!w0KGgo="),
            "Invalid image data URL: the data is not valid base64.");
  EXPECT_EQ(error_of(m, "data:image/png;base64,"),
            "Invalid image data URL: the image data is empty.");
  EXPECT_EQ(error_of(m, "data:text/plain;base64,aGVsbG8="),
            "Invalid image data URL: media type 'text/plain' is not an image type (expected "
            "data:image/...;base64,...).");
  MediaConnectorOptions o;
  o.max_bytes = 4;
  MediaConnector small(o);
  EXPECT_EQ(error_of(small, "data:image/png;base64,iVBORw0KGgo="),
            "Invalid image data URL: the image is larger than the 4-byte media limit.");
}

// A video part takes video/* and the animated image types, under the video size cap.
TEST(MediaConnectorData, VideoDataUrlsHaveTheirOwnTypesAndCap) {
  MediaConnectorOptions o;
  o.max_bytes = 4;
  o.video_max_bytes = 64;
  MediaConnector m(o);
  for (const char* type : {"video/mp4", "video/webm", "image/gif", "image/webp"}) {
    EXPECT_EQ(m.fetch(std::string("data:") + type + ";base64,iVBORw0KGgo=", MediaKind::kVideo),
              kPngMagic)
        << type;
  }
  EXPECT_EQ(error_of(m, "data:image/png;base64,iVBORw0KGgo=", MediaKind::kVideo),
            "Invalid video data URL: media type 'image/png' is not a video type (expected "
            "data:video/...;base64,...).");
  EXPECT_EQ(error_of(m, "data:video/mp4;base64," + std::string(100, 'A'), MediaKind::kVideo),
            "Invalid video data URL: the video is larger than the 64-byte media limit.");
}

TEST(MediaConnector, UnknownSchemeIsRefused) {
  MediaConnector m;
  EXPECT_EQ(error_of(m, "ftp://example.com/a.png"),
            "The URL must be either a HTTP, data or file URL.");
  EXPECT_EQ(error_of(m, "a.png"), "The URL must be either a HTTP, data or file URL.");
}

TEST(MediaConnectorFile, RefusedWithoutAllowedPath) {
  MediaConnector m;
  EXPECT_EQ(error_of(m, "file:///etc/hostname"),
            "Cannot load local files without `--allowed-local-media-path`.");
}

TEST(MediaConnectorFile, AllowedPathMustBeAnExistingDirectory) {
  TempDir tmp;
  write_file(tmp.path() / "f", "x");
  MediaConnectorOptions o;
  o.allowed_local_media_path = (tmp.path() / "missing").string();
  try {
    MediaConnector m(o);
    ADD_FAILURE() << "a missing directory was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "Invalid `--allowed-local-media-path`: The path " +
                                         (tmp.path() / "missing").string() + " does not exist.");
  }
  o.allowed_local_media_path = (tmp.path() / "f").string();
  EXPECT_THROW(MediaConnector{o}, InputError);
}

TEST(MediaConnectorFile, ReadsInsideAndRefusesEscapes) {
  TempDir tmp;
  const fs::path root = fs::weakly_canonical(tmp.path()) / "media";
  fs::create_directories(root / "sub");
  write_file(root / "sub" / "a b.png", "PNGDATA");
  write_file(tmp.path() / "secret.png", "SECRET");
  fs::create_symlink(tmp.path() / "secret.png", root / "link.png");
  MediaConnectorOptions o;
  o.allowed_local_media_path = root.string();
  MediaConnector m(o);
  const std::string inside = "file://" + (root / "sub" / "a%20b.png").string();
  const auto bytes = m.fetch(inside);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "PNGDATA");
  // `..` out of the root, a symlink pointing out of it, and the root itself are refused.
  const std::string dotdot = (root / "sub" / ".." / ".." / "secret.png").string();
  EXPECT_EQ(error_of(m, "file://" + dotdot), "The file path " + dotdot +
                                                 " must be a subpath of "
                                                 "`--allowed-local-media-path " +
                                                 root.string() + "`.");
  EXPECT_NE(error_of(m, "file://" + (root / "link.png").string()).find("must be a subpath"),
            std::string::npos);
  EXPECT_NE(error_of(m, "file://" + root.string()).find("must be a subpath"), std::string::npos);
  EXPECT_EQ(error_of(m, "file://" + (root / "none.png").string()),
            "Cannot read the local media file " + (root / "none.png").string() +
                ": no such regular file.");
  EXPECT_NE(error_of(m, "file://" + (root / "sub").string() + "/").find("no such regular file"),
            std::string::npos);
  o.max_bytes = 3;
  MediaConnector small(o);
  EXPECT_EQ(error_of(small, inside), "The local media file " + (root / "sub" / "a b.png").string() +
                                         " is larger than the 3-byte media limit.");
}

// A loopback image server: /img (the PNG magic), /big (max + 1 bytes), /missing (404),
// /redirect (302 -> /img), /loop (302 -> itself), /away (302 -> the same server by the name
// "localhost"), /ftp (302 -> ftp://), /slow (answers only when released).
class MediaServer {
 public:
  MediaServer() {
    server_.Get("/img", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(kPngMagic.begin(), kPngMagic.end()), "image/png");
    });
    server_.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(65, 'x'), "image/png");
    });
    server_.Get("/missing",
                [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
    server_.Get("/redirect",
                [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/img"); });
    server_.Get("/loop",
                [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/loop"); });
    server_.Get("/away", [this](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("http://localhost:" + std::to_string(port_) + "/img");
    });
    server_.Get("/ftp", [](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("ftp://127.0.0.1/img");
    });
    server_.Get("/slow", [this](const httplib::Request&, httplib::Response& res) {
      std::unique_lock lock(mutex_);
      released_cv_.wait(lock, [this] { return released_; });
      res.set_content("late", "image/png");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the accept loop runs would be lost and the join below would hang.
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~MediaServer() {
    release();
    server_.stop();
    thread_.join();
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    released_cv_.notify_all();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;
};

MediaConnectorOptions http_options() {
  MediaConnectorOptions o;
  o.max_bytes = 64;
  return o;
}

TEST(MediaConnectorHttp, FetchesFollowsRedirectsAndReportsStatus) {
  MediaServer server;
  MediaConnector m(http_options());
  EXPECT_EQ(m.fetch(server.url("/img")), kPngMagic);
  EXPECT_EQ(m.fetch(server.url("/redirect")), kPngMagic);
  EXPECT_EQ(m.fetch(server.url("/away")), kPngMagic);  // no domain list: any host
  EXPECT_EQ(error_of(m, server.url("/missing")), "Failed to fetch media from URL: HTTP 404 error");
  EXPECT_EQ(error_of(m, server.url("/loop")),
            "Failed to fetch media from URL: Exceeded 30 redirects.");
  EXPECT_EQ(error_of(m, server.url("/ftp")),
            "The media URL must remain HTTP(S): 'ftp://127.0.0.1/img'");
}

TEST(MediaConnectorHttp, SizeCap) {
  MediaServer server;
  MediaConnectorOptions o = http_options();
  MediaConnector m(o);
  EXPECT_EQ(error_of(m, server.url("/big")),
            "Failed to fetch media from URL: the response is larger than the 64-byte media "
            "limit.");
}

TEST(MediaConnectorHttp, Timeout) {
  MediaServer server;
  MediaConnectorOptions o = http_options();
  o.fetch_timeout_s = 0.2;
  MediaConnector m(o);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of(m, server.url("/slow")),
            "Failed to fetch media from URL: no complete answer within 0.2 s.");
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 2.0);
  server.release();
}

TEST(MediaConnectorHttp, AllowedDomainsOnEveryHop) {
  MediaServer server;
  MediaConnectorOptions o = http_options();
  o.allowed_media_domains = {"127.0.0.1"};
  MediaConnector m(o);
  EXPECT_EQ(m.fetch(server.url("/redirect")), kPngMagic);
  // The redirect leaves the list (the same server, named "localhost").
  EXPECT_EQ(error_of(m, server.url("/away")),
            "The URL must be from one of the allowed domains: ['127.0.0.1']. Input URL domain: "
            "localhost");
  o.allowed_media_domains = {"example.com", "images.example.org"};
  MediaConnector other(o);
  EXPECT_EQ(error_of(other, server.url("/img")),
            "The URL must be from one of the allowed domains: ['example.com', "
            "'images.example.org']. Input URL domain: 127.0.0.1");
}

TEST(MediaConnectorHttp, RedirectsCanBeRefused) {
  MediaServer server;
  MediaConnectorOptions o = http_options();
  o.allow_redirects = false;
  MediaConnector m(o);
  EXPECT_EQ(m.fetch(server.url("/img")), kPngMagic);
  EXPECT_EQ(error_of(m, server.url("/redirect")),
            "Failed to fetch media from URL: HTTP 302 redirect, and this server follows no media "
            "URL redirects (VLLM_MEDIA_URL_ALLOW_REDIRECTS=0).");
}

TEST(MediaConnectorHttp, NoNetworkSwitch) {
  MediaServer server;
  MediaConnectorOptions o = http_options();
  o.disable_url_fetch = true;
  MediaConnector m(o);
  EXPECT_EQ(error_of(m, server.url("/img")),
            "Fetching media from http(s) URLs is disabled on this server "
            "(--disable-media-url-fetch); send the image inline as a data:image/...;base64, URL.");
  EXPECT_EQ(m.fetch("data:image/png;base64,iVBORw0KGgo="), kPngMagic);  // inline still works
}

TEST(MediaConnectorHttp, PrivateAddressesCanBeBlocked) {
  MediaServer server;
  MediaConnectorOptions o = http_options();
  o.block_private_addresses = true;
  MediaConnector m(o);
  EXPECT_EQ(error_of(m, server.url("/img")),
            "Media URL host resolves to a blocked address: 127.0.0.1. Private, loopback, "
            "link-local and multicast destinations are not allowed (set "
            "VLLM_MEDIA_EGRESS_BLOCK_PRIVATE=0 to disable).");
}

TEST(MediaConnectorHttp, UnreachableHostIsAClearError) {
  // A port nothing listens on: bound by a socket that never listens.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  MediaConnector m(http_options());
  const std::string msg = error_of(m, "http://127.0.0.1:" + std::to_string(port) + "/img");
  EXPECT_EQ(msg, "Failed to fetch media from URL: Couldn't connect to server.");
  close(fd);
}

}  // namespace
}  // namespace gemmaserve::media
