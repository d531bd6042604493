// StreamHash: the digest depends on the bytes and their order only; any
// change is seen. ProgressBar's text: rate, percentage and ETA.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "convert/checksum.h"
#include "convert/progress.h"

namespace nibble {
namespace {

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng() & 0xFF);
  return s;
}

uint64_t digest_in_pieces(const std::string& s, const std::vector<size_t>& cuts) {
  StreamHash h;
  size_t prev = 0;
  for (size_t c : cuts) {
    h.update(s.data() + prev, c - prev);
    prev = c;
  }
  h.update(s.data() + prev, s.size() - prev);
  return h.digest();
}

TEST(StreamHash, DoesNotDependOnHowTheStreamIsSplit) {
  const std::string s = random_bytes(10007, 1);
  const uint64_t whole = digest_in_pieces(s, {});
  std::mt19937 rng(2);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> cuts;
    size_t at = 0;
    while (true) {
      at += rng() % 97;
      if (at >= s.size()) break;
      cuts.push_back(at);
    }
    EXPECT_EQ(digest_in_pieces(s, cuts), whole);
  }
}

TEST(StreamHash, SeesEveryChange) {
  const std::string s = random_bytes(4096, 3);
  const uint64_t base = digest_in_pieces(s, {});
  for (size_t i : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(2000), size_t(4095)}) {
    for (int bit = 0; bit < 8; bit += 3) {
      std::string t = s;
      t[i] = char(t[i] ^ (1 << bit));
      EXPECT_NE(digest_in_pieces(t, {}), base) << "byte " << i << " bit " << bit;
    }
  }
  // Swapped halves, an appended zero byte, a truncated stream.
  EXPECT_NE(digest_in_pieces(s.substr(2048) + s.substr(0, 2048), {}), base);
  EXPECT_NE(digest_in_pieces(s + std::string(1, '\0'), {}), base);
  EXPECT_NE(digest_in_pieces(s.substr(0, 4095), {}), base);
  EXPECT_NE(digest_in_pieces(std::string(), {}), digest_in_pieces(std::string(1, '\0'), {}));
}

TEST(ProgressBar, FormatsEta) {
  EXPECT_EQ(ProgressBar::format_eta(7.4), "0:07");
  EXPECT_EQ(ProgressBar::format_eta(62), "1:02");
  EXPECT_EQ(ProgressBar::format_eta(3723), "1:02:03");
  EXPECT_EQ(ProgressBar::format_eta(-1), "--:--");
  EXPECT_EQ(ProgressBar::format_eta(NAN), "--:--");
}

TEST(ProgressBar, LineShowsPercentBytesRateAndEta) {
  // 1 GB of 4 GB in 10 s: 100 MB/s, 30 s left.
  std::string line = ProgressBar::format_line("write", 1000000000, 4000000000, 10.0, 100);
  EXPECT_NE(line.find(" 25%"), std::string::npos) << line;
  EXPECT_NE(line.find("1.00/4.00 GB"), std::string::npos) << line;
  EXPECT_NE(line.find("100.0 MB/s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 0:30"), std::string::npos) << line;
  EXPECT_NE(line.find("[====="), std::string::npos) << line;
  EXPECT_LE(line.size(), 100u);
  // No room: no bar, the numbers stay.
  std::string narrow = ProgressBar::format_line("write", 5, 10, 1.0, 0);
  EXPECT_EQ(narrow.find('['), std::string::npos) << narrow;
  EXPECT_NE(narrow.find(" 50%"), std::string::npos) << narrow;
}

}  // namespace
}  // namespace nibble
