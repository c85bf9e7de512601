// A media URL -> its bytes, as vLLM's MediaConnector loads them: base64 data: URLs, file:// URLs
// only under --allowed-local-media-path, http(s):// fetched with a timeout, a size cap, the
// --allowed-media-domains list (checked on every redirect hop) and vLLM's redirect switch.
// Every failure is an InputError with param "messages" (a 400 at the API), never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gemmaserve::media {

struct MediaConnectorOptions {
  // file:// URLs are refused unless this directory is set (vLLM's --allowed-local-media-path).
  std::string allowed_local_media_path;
  // When non-empty, http(s) URLs (and every redirect target) must have one of these hosts.
  std::vector<std::string> allowed_media_domains;
  // vLLM's VLLM_IMAGE_FETCH_TIMEOUT (5 s): the whole fetch, redirects included.
  double fetch_timeout_s = 5.0;
  // vLLM's VLLM_MEDIA_URL_ALLOW_REDIRECTS (on by default).
  bool allow_redirects = true;
  // gemmaserve's --disable-media-url-fetch: no network access at all (data: and file:// only).
  bool disable_url_fetch = false;
  // vLLM's VLLM_MEDIA_EGRESS_BLOCK_PRIVATE: refuse to connect to loopback, private, link-local,
  // multicast and reserved addresses (judged on the address actually dialed, every hop).
  bool block_private_addresses = false;
  // The most bytes one media item may have, however it arrives.
  std::size_t max_bytes = std::size_t{20} << 20;
  // Videos are larger: their own cap, and vLLM's VLLM_VIDEO_FETCH_TIMEOUT (30 s).
  std::size_t video_max_bytes = std::size_t{256} << 20;
  double video_fetch_timeout_s = 30.0;
};

// What a URL is expected to hold: a data: URL's media type must be of this kind (image/...,
// audio/..., video/...), and messages name it. Videos have their own size cap and timeout.
enum class MediaKind { kImage, kAudio, kVideo };

class MediaConnector {
 public:
  // Throws InputError when allowed_local_media_path is set but is not an existing directory.
  explicit MediaConnector(MediaConnectorOptions options = {});
  ~MediaConnector();
  MediaConnector(const MediaConnector&) = delete;
  MediaConnector& operator=(const MediaConnector&) = delete;

  // The bytes `url` names. Throws InputError (param "messages") for any URL it cannot load.
  std::vector<std::uint8_t> fetch(const std::string& url, MediaKind kind = MediaKind::kImage) const;

  const MediaConnectorOptions& options() const { return options_; }

 private:
  std::vector<std::uint8_t> load_data_url(const std::string& url, MediaKind kind) const;
  std::vector<std::uint8_t> load_file_url(const std::string& url, MediaKind kind) const;
  std::vector<std::uint8_t> load_http_url(const std::string& url, MediaKind kind) const;
  std::size_t max_bytes_for(MediaKind kind) const;
  static const char* kind_name(MediaKind kind);
  void check_allowed_domain(const std::string& host) const;

  MediaConnectorOptions options_;
  std::optional<std::filesystem::path> local_root_;  // the resolved allowed_local_media_path
};

}  // namespace gemmaserve::media
