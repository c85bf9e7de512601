// Long audio cut into pieces as vLLM's split_audio cuts it: at most max_samples each, each cut
// at the start of the quietest window in the stretch before the mark, contiguous and complete.
#include "io/audio/audio_split.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace gemmaserve::audio {
namespace {

std::vector<float> loud(size_t n) {
  std::vector<float> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = 0.5f * std::sin(0.05f * static_cast<float>(i));
  return s;
}

TEST(AudioSplit, AClipThatFitsIsOnePiece) {
  const std::vector<float> s = loud(480000);
  const std::vector<SampleRange> pieces = split_audio(s);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].begin, 0u);
  EXPECT_EQ(pieces[0].end, 480000u);
  EXPECT_TRUE(split_audio(std::vector<float>{}).empty());
}

// A silent window just before the 30 s mark is where the cut falls; the next piece starts there.
TEST(AudioSplit, CutsAtTheQuietestWindowBeforeTheMark) {
  std::vector<float> s = loud(70 * 16000);
  const size_t quiet = 480000 - 16000 + 5 * 1600;  // the sixth window of the last second
  for (size_t i = quiet; i < quiet + 1600; ++i) s[i] = 0.0f;
  const std::vector<SampleRange> pieces = split_audio(s);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].begin, 0u);
  EXPECT_EQ(pieces[0].end, quiet);
  EXPECT_EQ(pieces[1].begin, quiet);
  for (size_t i = 1; i < pieces.size(); ++i) EXPECT_EQ(pieces[i].begin, pieces[i - 1].end);
  EXPECT_EQ(pieces.back().end, s.size());
  for (const SampleRange& p : pieces) EXPECT_LE(p.size(), 480000u);
}

// Equal energy everywhere: the first window of the stretch wins (a strict minimum), and the
// window that would end exactly at the mark is not looked at (vLLM's range).
TEST(AudioSplit, TiesKeepTheFirstWindow) {
  const std::vector<float> s(100, 1.0f);
  AudioSplitOptions o;
  o.max_samples = 40;
  o.search_samples = 10;
  o.window = 5;
  const std::vector<SampleRange> pieces = split_audio(s, o);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].end, 30u);
  EXPECT_EQ(pieces[1].end, 60u);
  EXPECT_EQ(pieces[2].end, 100u);  // the last 40 fit in one piece
}

TEST(AudioSplit, RefusesAStretchAsLongAsAPiece) {
  AudioSplitOptions o;
  o.max_samples = 10;
  o.search_samples = 10;
  EXPECT_THROW(split_audio(std::vector<float>(20), o), std::invalid_argument);
}

}  // namespace
}  // namespace gemmaserve::audio
