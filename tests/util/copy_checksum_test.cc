// Xxh3Copy must copy every byte and give XXH3_64bits' value on every vector
// unit, for every length, alignment and way of cutting the payload into pieces
// (RAM-tier chunks on one side, caller fragments on the other).
#include "util/copy_checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <vector>

#include "util/random_bytes.h"

namespace kvtier {
namespace {

TEST(CopyChecksum, TheScalarFormIsAlwaysThere) {
  const std::vector<std::string> isas = Xxh3CopyIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "scalar");
  std::printf("fused copy implementations here: %zu, preferred: %s\n", isas.size(), isas.front().c_str());
}

TEST(CopyChecksum, OnePieceMatchesTheLibraryAtEveryLengthAndAlignment) {
  const std::vector<uint8_t> data = RandomBytes((2u << 20) + 4096, 1);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 2200; ++n) lengths.push_back(n);  // short forms, and two 1 KiB blocks' edges
  for (size_t n : {4095u, 4096u, 4097u, 65535u, 65536u, 65537u, (2u << 20) - 1, 2u << 20, (2u << 20) + 17u})
    lengths.push_back(n);
  std::vector<uint8_t> out_storage(data.size() + 192);
  // 64-byte aligned, so that dst_off 0 takes the streaming stores.
  uint8_t* const out_base = out_storage.data() + (64 - reinterpret_cast<uintptr_t>(out_storage.data()) % 64) % 64;
  for (const std::string& isa : Xxh3CopyIsas()) {
    for (size_t src_off : {0u, 1u, 63u}) {
      for (size_t dst_off : {0u, 5u}) {
        for (size_t n : lengths) {
          const uint8_t* p = data.data() + src_off;
          std::fill(out_base, out_base + n + dst_off + 1, 0xEE);
          // Streaming stores where the destination is aligned (dst_off 0; 5 never is).
          const CopyStores stores = (n % 2 == 0) ? CopyStores::kStreaming : CopyStores::kCached;
          Xxh3Copy c(n, isa, stores);
          c.Copy(out_base + dst_off, p, n);
          ASSERT_EQ(c.Digest(), XXH3_64bits(p, n)) << isa << " length " << n << " offsets " << src_off << "/" << dst_off;
          ASSERT_EQ(0, std::memcmp(out_base + dst_off, p, n)) << isa << " length " << n;
          ASSERT_EQ(out_base[dst_off + n], 0xEE) << "wrote past the end: " << isa << " length " << n;
        }
      }
    }
  }
}

TEST(CopyChecksum, PiecesOfAnySizeGiveTheSameBytesAndDigest) {
  const std::vector<uint8_t> data = RandomBytes(3u << 20, 2);
  std::mt19937_64 r(3);
  std::vector<uint8_t> out(data.size());
  for (const std::string& isa : Xxh3CopyIsas()) {
    for (int round = 0; round < 300; ++round) {
      const size_t n = round < 200 ? r() % 5000 : r() % data.size();
      std::fill(out.begin(), out.end(), 0);
      Xxh3Copy c(n, isa);
      size_t at = 0;
      while (at < n) {
        // 0 bytes, odd sizes around a stripe, and whole 64 KiB chunks.
        size_t piece = 0;
        switch (r() % 4) {
          case 0: piece = 65536; break;
          case 1: piece = r() % 130; break;
          default: piece = r() % 3000;
        }
        piece = std::min(piece, n - at);
        c.Copy(out.data() + at, data.data() + at, piece);
        at += piece;
      }
      ASSERT_EQ(c.Digest(), XXH3_64bits(data.data(), n)) << isa << " length " << n << " round " << round;
      ASSERT_EQ(0, std::memcmp(out.data(), data.data(), n)) << isa << " length " << n;
    }
  }
}

// A one-pass copy records the hash's state every `every` bytes; copies
// resumed from those states, piece by piece and in any cut, reach the next
// state and, for the last piece, XXH3's digest. A changed byte inside a
// piece, or a piece resumed from the wrong state, misses.
TEST(CopyChecksum, MarksLetPiecesBeVerifiedApart) {
  const std::vector<uint8_t> data = RandomBytes((2u << 20) + 4097, 4);
  std::mt19937_64 r(5);
  for (const std::string& isa : Xxh3CopyIsas()) {
    for (size_t total : {size_t{241}, size_t{4096}, size_t{65536 + 63}, size_t{65536 + 64}, size_t{(1u << 20) + 1}, data.size()}) {
      for (uint64_t every : {uint64_t{64}, uint64_t{4096}, uint64_t{65536}}) {
        if (total / every > 5000) continue;  // enough marks; keeps the test quick
        std::vector<uint8_t> out(total);
        std::vector<Xxh3Mark> marks;
        Xxh3Copy whole(total, isa);
        whole.RecordMarks(every, &marks);
        for (size_t at = 0; at < total;) {  // cut into pieces that cross the marks
          const size_t n = std::min<size_t>(total - at, 1 + r() % (3 * every));
          whole.Copy(out.data() + at, data.data() + at, n);
          at += n;
        }
        ASSERT_EQ(whole.Digest(), XXH3_64bits(data.data(), total)) << isa << " " << total;
        size_t expected = 0;
        for (uint64_t off = every; Xxh3Copy::MarkOffsetOk(total, off); off += every) ++expected;
        ASSERT_EQ(marks.size(), expected) << isa << " " << total << " every " << every;
        std::vector<uint8_t> again(total, 0);
        for (size_t i = 0; i <= marks.size(); ++i) {
          const uint64_t begin = i * every, end = i < marks.size() ? begin + every : total;
          Xxh3Copy piece = i == 0 ? Xxh3Copy(total) : Xxh3Copy(total, begin, marks[i - 1]);
          const size_t half = static_cast<size_t>((end - begin) / 2);
          piece.Copy(again.data() + begin, data.data() + begin, half);
          piece.Copy(again.data() + begin + half, data.data() + begin + half, end - begin - half);
          if (i < marks.size()) {
            ASSERT_TRUE(piece.State() == marks[i]) << isa << " piece " << i;
            if (i > 0) {  // from the wrong state: misses
              Xxh3Copy wrong(total, begin, i >= 2 ? marks[i - 2] : Xxh3Copy::InitialMark());
              wrong.Copy(again.data() + begin, data.data() + begin, end - begin);
              EXPECT_FALSE(wrong.State() == marks[i]) << isa << " piece " << i;
            }
          } else {
            ASSERT_EQ(piece.Digest(), XXH3_64bits(data.data(), total)) << isa << " last piece";
          }
        }
        ASSERT_EQ(again, out);
        if (marks.empty()) continue;
        std::vector<uint8_t> bad(data.begin(), data.begin() + static_cast<long>(total));
        bad[every + 7] ^= 0x10;  // inside the second piece
        Xxh3Copy second(total, every, marks[0]);
        second.Copy(again.data() + every, bad.data() + every, std::min<uint64_t>(every, total - every));
        if (marks.size() > 1) EXPECT_FALSE(second.State() == marks[1]) << isa;
        else EXPECT_NE(second.Digest(), XXH3_64bits(data.data(), total)) << isa;
      }
    }
  }
}

// Hash, in place, in pieces of any size, gives Copy's digest and marks and
// leaves the bytes as they were, short and long payloads alike.
TEST(CopyChecksum, HashingInPlaceGivesTheCopysDigestAndMarks) {
  const std::vector<uint8_t> data = RandomBytes((2u << 20) + 4097, 6);
  std::mt19937_64 r(7);
  for (const std::string& isa : Xxh3CopyIsas()) {
    for (size_t total : {size_t{0}, size_t{17}, size_t{240}, size_t{241}, size_t{65536 + 63}, data.size()}) {
      std::vector<uint8_t> copied(total), in_place(data.begin(), data.begin() + static_cast<long>(total));
      std::vector<Xxh3Mark> copy_marks, hash_marks;
      Xxh3Copy copy(total, isa), hash(total, isa);
      copy.RecordMarks(65536, &copy_marks);
      hash.RecordMarks(65536, &hash_marks);
      copy.Copy(copied.data(), data.data(), total);
      for (size_t at = 0; at < total;) {
        const size_t n = std::min<size_t>(total - at, 1 + r() % 300000);
        hash.Hash(in_place.data() + at, n);
        at += n;
      }
      ASSERT_EQ(hash.Digest(), copy.Digest()) << isa << " " << total;
      ASSERT_EQ(hash.Digest(), XXH3_64bits(data.data(), total)) << isa << " " << total;
      ASSERT_EQ(hash_marks, copy_marks) << isa << " " << total;
      ASSERT_TRUE(std::equal(in_place.begin(), in_place.end(), data.begin())) << isa << " " << total;
    }
  }
}

TEST(CopyChecksum, AChangedByteChangesTheDigest) {
  std::vector<uint8_t> data = RandomBytes(1u << 20, 4);
  std::vector<uint8_t> out(data.size());
  Xxh3Copy a(data.size());
  a.Copy(out.data(), data.data(), data.size());
  for (size_t at : {0ul, 12345ul, data.size() - 70, data.size() - 1}) {
    data[at] ^= 1;
    Xxh3Copy b(data.size());
    b.Copy(out.data(), data.data(), data.size());
    EXPECT_NE(a.Digest(), b.Digest()) << "byte " << at;
    data[at] ^= 1;
  }
}

}  // namespace
}  // namespace kvtier
