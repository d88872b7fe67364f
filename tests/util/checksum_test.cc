// Every XXH3 implementation this CPU runs must give XXH3_64bits' value
// (stores written on one machine are read on another), for every length,
// alignment and split of a stream.
#include "util/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <vector>

#include "util/random_bytes.h"

namespace kvtier {
namespace {

TEST(Checksum, TheBaselineIsAlwaysThereAndThePreferredIsChosen) {
  const std::vector<std::string> isas = Xxh3Isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "sse2");
  EXPECT_EQ(isas.front(), Xxh3Isa());
  std::printf("XXH3 implementations here: %zu, in use: %s\n", isas.size(), Xxh3Isa());
}

TEST(Checksum, OneShotMatchesTheLibraryAtEveryLengthAndAlignment) {
  const std::vector<uint8_t> data = RandomBytes((5u << 20) + 64, 1);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 1100; ++n) lengths.push_back(n);  // every short-input branch
  for (size_t n : {4095u, 4096u, 4097u, 65536u, 65537u, 262143u, (2u << 20) + 17u, 5u << 20}) lengths.push_back(n);
  for (const std::string& isa : Xxh3Isas()) {
    for (size_t off : {0u, 1u, 7u, 63u}) {
      for (size_t n : lengths) {
        const uint8_t* p = data.data() + off;
        ASSERT_EQ(Xxh3On(isa, p, n), XXH3_64bits(p, n)) << isa << " length " << n << " offset " << off;
      }
    }
  }
  EXPECT_EQ(Xxh3(data.data(), data.size()), XXH3_64bits(data.data(), data.size()));
}

TEST(Checksum, StreamsMatchTheLibraryWhateverTheSplits) {
  const std::vector<uint8_t> data = RandomBytes(3u << 20, 2);
  std::mt19937_64 r(3);
  for (const std::string& isa : Xxh3Isas()) {
    for (int round = 0; round < 40; ++round) {
      const size_t n = round < 20 ? r() % 5000 : r() % data.size();
      Xxh3Stream s(isa);
      size_t at = 0;
      while (at < n) {
        // Pieces from 0 bytes to a whole 64 KiB RAM-tier chunk and beyond.
        const size_t piece = std::min<size_t>(n - at, (r() % 4 == 0) ? 65536 : r() % 3000);
        s.Update(data.data() + at, piece);
        at += piece;
      }
      ASSERT_EQ(s.Digest(), XXH3_64bits(data.data(), n)) << isa << " length " << n;
    }
  }
  Xxh3Stream chosen;
  chosen.Update(data.data(), data.size());
  EXPECT_EQ(chosen.Digest(), XXH3_64bits(data.data(), data.size()));
}

}  // namespace
}  // namespace kvtier
