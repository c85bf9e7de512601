// Core utilities: dtype conversions, the thread pool's static split, the flag parser, huge-page
// buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "cli/arg_parser.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"

namespace gemmaserve {
namespace {

TEST(DType, Bf16RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-39.25f)), -39.25f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16ConvertsNormalsSubnormalsAndInfinities) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips exactly
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);  // overflow saturates to infinity
}

TEST(DType, ParsesSafetensorsNames) {
  DType d;
  ASSERT_TRUE(parse_dtype("BF16", &d));
  EXPECT_EQ(d, DType::kBF16);
  EXPECT_EQ(dtype_size(d), 2u);
  EXPECT_FALSE(parse_dtype("Q4_0", &d));
}

TEST(ThreadPool, CoversRangeOnceWithStaticChunks) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3u);
  for (size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    std::vector<std::atomic<int>> hits(n);
    std::mutex m;
    std::set<std::pair<size_t, size_t>> chunks;
    pool.parallel_for(n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
      std::lock_guard<std::mutex> lock(m);
      chunks.insert({b, e});
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    // The split depends only on n: running again yields the same chunks.
    std::set<std::pair<size_t, size_t>> again;
    pool.parallel_for(n, [&](size_t b, size_t e) {
      std::lock_guard<std::mutex> lock(m);
      again.insert({b, e});
    });
    EXPECT_EQ(chunks, again);
  }
}

TEST(ThreadPool, GrainKeepsChunkBoundariesAligned) {
  ThreadPool pool(2);
  std::mutex m;
  std::vector<std::pair<size_t, size_t>> chunks;
  pool.parallel_for_grain(100, 16, [&](size_t b, size_t e) {
    std::lock_guard<std::mutex> lock(m);
    chunks.push_back({b, e});
  });
  for (auto [b, e] : chunks) {
    EXPECT_EQ(b % 16, 0u);
    EXPECT_TRUE(e == 100 || e % 16 == 0);
  }
}

// The THPeligible field of the mapping that holds `p` in /proc/self/smaps ("" if not found).
std::string thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return line.substr(line.find_last_of(' ') + 1);
    }
  }
  return "";
}

bool thp_available() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(f, modes);
  return !modes.empty() && modes.find("[never]") == std::string::npos;
}

class HugePageBuffer : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("GEMMASERVE_HUGE_PAGES"); }
};

TEST_F(HugePageBuffer, IsAlignedWritableAndAdvisedForHugePages) {
  const size_t bytes = (size_t{5} << 20) + 123;
  std::shared_ptr<std::byte> buf = allocate_huge_page_buffer(bytes);
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.get()) % (size_t{2} << 20), 0u);
  for (size_t i = 0; i < bytes; i += 4096) buf.get()[i] = static_cast<std::byte>(i >> 12);
  buf.get()[bytes - 1] = std::byte{7};
  for (size_t i = 0; i < bytes; i += 4096) ASSERT_EQ(buf.get()[i], static_cast<std::byte>(i >> 12));
  EXPECT_EQ(buf.get()[bytes - 1], std::byte{7});
  if (thp_available()) {
    EXPECT_EQ(thp_eligible(buf.get()), "1");
  }
}

TEST_F(HugePageBuffer, OffKeepsSmallPagesAndOtherValuesAreRejected) {
  setenv("GEMMASERVE_HUGE_PAGES", "off", 1);
  std::shared_ptr<std::byte> buf = allocate_huge_page_buffer(size_t{4} << 20);
  buf.get()[0] = std::byte{1};
  if (thp_available()) {
    EXPECT_EQ(thp_eligible(buf.get()), "0");
  }
  setenv("GEMMASERVE_HUGE_PAGES", "yes", 1);
  try {
    allocate_huge_page_buffer(64);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "GEMMASERVE_HUGE_PAGES must be auto or off, got 'yes'");
  }
}

TEST(ArgParser, ParsesValuesFlagsAliasesAndDashes) {
  ArgParser p;
  p.value("--max-tokens")
      .value("--prompt-ids")
      .value("--kv-cache-memory-bytes", {"--kv-cache-memory"});
  p.flag("--json").flag("--enable-prefix-caching");
  p.parse({"model", "--max-tokens=5", "--prompt-ids", "1,2", "--prompt-ids", "3",
           "--kv-cache-memory", "100", "--json", "--no-enable-prefix-caching", "--", "--x"},
          1);
  EXPECT_EQ(p.positionals(), std::vector<std::string>{"model"});
  EXPECT_EQ(p.get_int("--max-tokens", 0), 5);
  EXPECT_EQ(p.all("--prompt-ids"), (std::vector<std::string>{"1,2", "3"}));
  EXPECT_EQ(p.get("--kv-cache-memory-bytes"), "100");
  EXPECT_TRUE(p.get_flag("--json"));
  EXPECT_FALSE(p.get_flag("--enable-prefix-caching", true));
  EXPECT_EQ(p.after_dashes(), std::vector<std::string>{"--x"});
}

TEST(ArgParser, SingleDashAliasesAreFlagsOtherDashWordsPositionals) {
  ArgParser p;
  p.value("--quantization", {"-q"}).flag("--help", {"-h"});
  p.parse({"-q", "q8_0", "-h", "-1"}, 1);
  EXPECT_EQ(p.get("--quantization"), "q8_0");
  EXPECT_TRUE(p.get_flag("--help"));
  EXPECT_EQ(p.positionals(), std::vector<std::string>{"-1"});
  ArgParser q;
  q.value("--quantization", {"-q"});
  q.parse({"-q=q4_0"}, 0);
  EXPECT_EQ(q.get("--quantization"), "q4_0");
}

TEST(ArgParser, RejectsBadInputWithClearMessages) {
  auto message = [](std::vector<std::string> args) {
    ArgParser p;
    p.value("--max-tokens").flag("--json");
    try {
      p.parse(args, 1);
      (void)p.get_int("--max-tokens", 0);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({"--bogus"}), "unknown flag --bogus");
  EXPECT_EQ(message({"--max-tokens"}), "flag --max-tokens needs a value");
  EXPECT_EQ(message({"--max-tokens", "ten"}), "flag --max-tokens expects an integer, got 'ten'");
  EXPECT_EQ(message({"a", "b"}), "unexpected argument 'b'");
  EXPECT_EQ(message({"--json=maybe"}), "flag --json expects true or false, got 'maybe'");
}

TEST(ArgParser, ParsesIdLists) {
  EXPECT_EQ(parse_int_list("2, 45,67", "ids"), (std::vector<int>{2, 45, 67}));
  try {
    parse_int_list("2,,3", "--prompt-ids");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--prompt-ids: '' is not an integer (expected a list like 2,45,67)");
  }
}

}  // namespace
}  // namespace gemmaserve
