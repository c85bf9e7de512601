#include "engine/stop_checker.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {

namespace {

size_t code_points(const std::string& s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// Byte offset where the last `n` code points of `s` begin (0 when `s` has fewer).
size_t last_code_points_start(const std::string& s, size_t n) {
  size_t at = s.size();
  while (n > 0 && at > 0) {
    --at;
    if ((s[at] & 0xC0) != 0x80) --n;
  }
  return n > 0 ? 0 : at;
}

}  // namespace

StopChecker::StopChecker(const SamplingParams& params, std::set<int32_t> stop_ids,
                         const Tokenizer* tokenizer, int prompt_len, int max_total_tokens)
    : params_(params),
      stop_ids_(std::move(stop_ids)),
      prompt_len_(prompt_len),
      max_total_tokens_(max_total_tokens) {
  if (tokenizer == nullptr) return;
  detok_ = std::make_unique<IncrementalDetokenizer>(*tokenizer, params_.skip_special_tokens,
                                                    params_.spaces_between_special_tokens);
  if (!params_.ignore_eos)
    primary_eos_.insert(tokenizer->eos_ids().begin(), tokenizer->eos_ids().end());
  for (const std::string& s : params_.stop) {
    max_stop_bytes_ = std::max(max_stop_bytes_, s.size());
    // vLLM holds back as many characters as the longest stop string has, less one.
    if (!params_.include_stop_str_in_output && !s.empty()) {
      hold_chars_ = std::max(hold_chars_, code_points(s) - 1);
    }
  }
}

StopChecker::~StopChecker() = default;

StopUpdate StopChecker::append(int32_t token) {
  if (finished_) throw std::logic_error("StopChecker: token appended after the sequence ended");
  StopUpdate u;
  ++generated_;

  // Token-level checks in vLLM v1's check_stop order; min_tokens holds off every stop, except
  // the model length, which cannot be exceeded.
  const bool gated = generated_ < params_.min_tokens;
  bool stop_token = false;
  if (!gated && stop_ids_.count(token) != 0) {
    stop_token = true;
    u.finished = true;
    u.finish_reason = "stop";
    if (primary_eos_.count(token) == 0) u.stop_reason_token = token;
  } else if (generated_ >= params_.max_tokens ||
             (max_total_tokens_ > 0 && prompt_len_ + generated_ >= max_total_tokens_)) {
    u.finished = true;
    u.finish_reason = "length";
  }

  if (detok_) {
    const size_t prev_len = text_.size() + pending_.size();
    // vLLM leaves the stop token out of the text unless include_stop_str_in_output.
    if (!stop_token || params_.include_stop_str_in_output) pending_ += detok_->feed(token);
    if (u.finished) pending_ += detok_->finish();  // an unfinished byte run renders as decode()

    // Stop strings: only matches that end in the new text; none while min_tokens is unmet
    // (vLLM searches only text of tokens past min_tokens, but a match may start earlier).
    if (!params_.stop.empty() && generated_ > params_.min_tokens &&
        text_.size() + pending_.size() > prev_len) {
      const size_t from = prev_len + 1 > max_stop_bytes_ ? prev_len + 1 - max_stop_bytes_ : 0;
      const size_t base = std::min(from, text_.size());
      const std::string window = text_.substr(base) + pending_;  // full text from `base`
      const std::string* best = nullptr;
      size_t best_at = 0;
      size_t best_end = std::numeric_limits<size_t>::max();
      for (const std::string& s : params_.stop) {
        if (s.empty()) continue;
        const size_t start = prev_len + 1 > s.size() ? prev_len + 1 - s.size() : 0;
        const size_t at = window.find(s, start - base);
        // The earliest-ending match wins; ties go to the earlier stop string (as vLLM).
        if (at != std::string::npos && base + at + s.size() < best_end) {
          best = &s;
          best_at = base + at;
          best_end = base + at + s.size();
        }
      }
      if (best != nullptr) {
        const size_t cut = params_.include_stop_str_in_output ? best_end : best_at;
        // The hold-back keeps every possible match start unsent, so the cut is never in text_.
        pending_.resize(std::max(cut, text_.size()) - text_.size());
        u.finished = true;
        u.finish_reason = "stop";
        u.stop_reason_text = *best;
        u.stop_reason_token.reset();
      }
    }

    // Everything is final once finished; before that the last hold_chars_ characters wait.
    const size_t emit =
        u.finished ? pending_.size() : last_code_points_start(pending_, hold_chars_);
    u.text_delta = pending_.substr(0, emit);
    text_ += u.text_delta;
    pending_.erase(0, emit);
  }
  finished_ = u.finished;
  return u;
}

}  // namespace gemmaserve
