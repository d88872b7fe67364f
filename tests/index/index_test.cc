#include "index/index.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using format::IndexValue;

IndexValue MakeValue(uint32_t segment, uint32_t generation, uint64_t offset, uint64_t seq = 1) {
  IndexValue v;
  v.segment = segment;
  v.generation = generation;
  v.offset = offset;
  v.payload_len = 1000 + offset;
  v.payload_checksum = 0x1234567890abcdefull ^ offset;
  v.sequence = seq;
  v.written_unix_ms = 1700000000000ull;
  v.key_len = 4;
  return v;
}

// "k" + std::to_string(n), spelled so that GCC 12 at -O3 does not raise a
// false -Wrestrict on operator+(const char*, string&&).
std::string Name(const char* prefix, uint64_t n) {
  std::string s(prefix);
  s += std::to_string(n);
  return s;
}

bool SameValue(const IndexValue& a, const IndexValue& b) {
  return a.segment == b.segment && a.generation == b.generation && a.offset == b.offset &&
         a.payload_len == b.payload_len && a.payload_checksum == b.payload_checksum &&
         a.sequence == b.sequence && a.written_unix_ms == b.written_unix_ms &&
         a.key_len == b.key_len && a.flags == b.flags && a.reserved == b.reserved;
}

NamespaceSpec MakeSpec(const std::string& model) {
  NamespaceSpec s;
  s.name = model + "/bf16";
  s.model_id = model;
  s.dtype = "bf16";
  s.layout = "vllm-cross-layer";
  s.block_tokens = 16;
  s.block_bytes = 2 << 20;
  s.tp_size = 1;
  s.hash_scheme = "xxhash";
  return s;
}

class IndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kvtier_index_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    path_ = root_ + "/index";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::unique_ptr<Index> OpenIndex(IndexOpenOptions o = {}) {
    auto r = Index::Open(path_, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return nullptr;
    return std::move(r).value();
  }

  // Writes a raw value into the default column family, as a damaged disk
  // might have left it. The index must be closed.
  void PutRaw(const std::string& key, const std::string& value) {
    rocksdb::DBOptions o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"by_segment", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, path_, cfs, &handles, &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[0], key, value).ok());
    for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    ASSERT_TRUE(db->Close().ok());
    delete db;
  }

  static std::string EntryKey(NamespaceId ns, const std::string& key) {
    std::string k(1, 'K');
    for (int i = 7; i >= 0; --i) k.push_back(static_cast<char>(ns >> (8 * i)));
    return k + key;
  }

  std::string root_;
  std::string path_;
};

TEST_F(IndexTest, PutGetDeleteRoundTrip) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  const IndexValue v = MakeValue(3, 1, 4096);
  IndexBatch b;
  EXPECT_TRUE(b.empty());
  b.Put(7, "alpha", v);
  EXPECT_EQ(b.count(), 1u);
  ASSERT_TRUE(idx->Commit(b, /*sync=*/false).ok());

  auto got = idx->Get(7, "alpha");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_TRUE(SameValue(**got, v));

  auto miss = idx->Get(7, "beta");
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());

  // Replace, then delete.
  const IndexValue v2 = MakeValue(4, 2, 8192, 2);
  IndexBatch b2;
  b2.Delete(7, "alpha", v);
  b2.Put(7, "alpha", v2);
  ASSERT_TRUE(idx->Commit(b2, true).ok());
  got = idx->Get(7, "alpha");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_TRUE(SameValue(**got, v2));

  IndexBatch b3;
  b3.Delete(7, "alpha", v2);
  ASSERT_TRUE(idx->Commit(b3, false).ok());
  got = idx->Get(7, "alpha");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());

  // An empty batch commits as a no-op.
  IndexBatch empty;
  EXPECT_TRUE(idx->Commit(empty, false).ok());
}

TEST_F(IndexTest, FootprintCountsTablesMemtablesAndBytesWritten) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  const Index::Footprint empty = idx->GetFootprint();
  EXPECT_EQ(empty.sst_bytes, 0u);
  EXPECT_EQ(empty.written_bytes, 0u);
  IndexBatch b;
  for (int i = 0; i < 2000; ++i) b.Put(7, "key-" + std::to_string(i), MakeValue(3, 1, 4096 + i));
  ASSERT_TRUE(idx->Commit(b, /*sync=*/false).ok());
  const Index::Footprint before = idx->GetFootprint();
  EXPECT_GT(before.memtable_bytes, empty.memtable_bytes);
  EXPECT_EQ(before.sst_bytes, 0u);
  ASSERT_TRUE(idx->FlushMemtables().ok());
  const Index::Footprint after = idx->GetFootprint();
  EXPECT_GT(after.sst_bytes, 0u);
  // What the flush wrote (the stats keep two decimals of a GiB, so at least one unit of them).
  EXPECT_GT(after.written_bytes, 0u) << "rocksdb.cfstats has no compaction.Sum.WriteGB";
}

TEST_F(IndexTest, BatchIsMovable) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  IndexBatch a;
  a.Put(1, "k1", MakeValue(1, 0, 4096));
  IndexBatch b(std::move(a));
  EXPECT_EQ(b.count(), 1u);
  IndexBatch c;
  c = std::move(b);
  c.Put(1, "k2", MakeValue(1, 0, 8192));
  EXPECT_EQ(c.count(), 2u);
  ASSERT_TRUE(idx->Commit(c, false).ok());
  EXPECT_TRUE(idx->Get(1, "k1")->has_value());
  EXPECT_TRUE(idx->Get(1, "k2")->has_value());
}

TEST_F(IndexTest, MultiGetMixesPresentAndAbsent) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  IndexBatch b;
  for (int i = 0; i < 100; i += 2) {
    b.Put(5, Name("key", i), MakeValue(1, 0, 4096ull * (i + 1)));
  }
  b.Put(6, "key1", MakeValue(9, 9, 4096));  // other namespace: must not show up
  ASSERT_TRUE(idx->Commit(b, false).ok());

  std::vector<std::string> names;
  for (int i = 99; i >= 0; --i) names.push_back(Name("key", i));
  std::vector<std::string_view> keys(names.begin(), names.end());
  std::vector<std::optional<IndexValue>> out(3);  // stale contents are replaced
  ASSERT_TRUE(idx->MultiGet(5, keys, &out).ok());
  ASSERT_EQ(out.size(), names.size());
  for (size_t j = 0; j < names.size(); ++j) {
    const int i = 99 - static_cast<int>(j);
    if (i % 2 == 0) {
      ASSERT_TRUE(out[j].has_value()) << names[j];
      EXPECT_EQ(out[j]->offset, 4096ull * (i + 1));
    } else {
      EXPECT_FALSE(out[j].has_value()) << names[j];
    }
  }

  // Duplicate keys and an empty span.
  std::vector<std::string_view> dup = {"key2", "key2", "nope"};
  ASSERT_TRUE(idx->MultiGet(5, dup, &out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].has_value() && out[1].has_value());
  EXPECT_FALSE(out[2].has_value());
  ASSERT_TRUE(idx->MultiGet(5, {}, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST_F(IndexTest, CorruptValueIsReported) {
  {
    auto idx = OpenIndex();
    ASSERT_TRUE(idx);
    IndexBatch b;
    b.Put(5, "good", MakeValue(1, 0, 4096));
    ASSERT_TRUE(idx->Commit(b, false).ok());
  }
  PutRaw(EntryKey(5, "bad"), "short");
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  auto got = idx->Get(5, "bad");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kCorruption) << got.status().ToString();

  std::vector<std::string_view> keys = {"good", "bad", "missing"};
  std::vector<std::optional<IndexValue>> out;
  Status s = idx->MultiGet(5, keys, &out);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].has_value());  // the other slots are still answered
  EXPECT_FALSE(out[1].has_value());
  EXPECT_FALSE(out[2].has_value());

  s = idx->ForEach(5, "", [](NamespaceId, std::string_view, const IndexValue&) { return true; });
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
}

TEST_F(IndexTest, NamespacesAreIsolated) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  IndexBatch b;
  b.Put(1, "same", MakeValue(1, 0, 4096));
  b.Put(2, "same", MakeValue(2, 0, 4096));
  ASSERT_TRUE(idx->Commit(b, false).ok());
  EXPECT_EQ((*idx->Get(1, "same"))->segment, 1u);
  EXPECT_EQ((*idx->Get(2, "same"))->segment, 2u);
  EXPECT_FALSE(idx->Get(3, "same")->has_value());

  IndexBatch d;
  d.Delete(1, "same", MakeValue(1, 0, 4096));
  ASSERT_TRUE(idx->Commit(d, false).ok());
  EXPECT_FALSE(idx->Get(1, "same")->has_value());
  EXPECT_TRUE(idx->Get(2, "same")->has_value());
}

// Entries for the listing tests: `keys` in namespaces 3, 1 and the largest
// id, and `lone` alone in namespace 2.
IndexBatch ListingEntries(std::initializer_list<const char*> keys, const char* lone) {
  IndexBatch b;
  uint64_t off = 4096;
  for (NamespaceId ns : {3ull, 1ull, 0xffffffffffffffffull}) {
    for (const char* k : keys) b.Put(ns, k, MakeValue(1, 0, off += 4096));
  }
  b.Put(2, lone, MakeValue(1, 0, off += 4096));
  return b;
}

TEST_F(IndexTest, ForEachPrefixAndAllNamespaces) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  IndexBatch b = ListingEntries({"a1", "a2", "b1", "ab", "a"}, "zz");
  ASSERT_TRUE(idx->Commit(b, false).ok());
  // Namespace and metadata records must not show up in entry scans.
  ASSERT_TRUE(idx->PutNamespace(1, MakeSpec("m"), false).ok());
  ASSERT_TRUE(idx->WriteCheckpoint(Checkpoint{}, Index::CheckpointFlush::kWait).ok());

  using Seen = std::vector<std::pair<NamespaceId, std::string>>;
  auto collect = [&](NamespaceId ns, std::string_view prefix, Seen* seen) {
    return idx->ForEach(ns, prefix, [&](NamespaceId n, std::string_view k, const IndexValue&) {
      seen->emplace_back(n, std::string(k));
      return true;
    });
  };

  Seen seen;
  ASSERT_TRUE(collect(3, "a", &seen).ok());
  EXPECT_EQ(seen, (Seen{{3, "a"}, {3, "a1"}, {3, "a2"}, {3, "ab"}}));

  seen.clear();
  ASSERT_TRUE(collect(3, "", &seen).ok());
  EXPECT_EQ(seen.size(), 5u);

  seen.clear();
  ASSERT_TRUE(collect(0, "", &seen).ok());
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_EQ(seen.front(), (std::pair<NamespaceId, std::string>{1, "a"}));
  EXPECT_EQ(seen[5], (std::pair<NamespaceId, std::string>{2, "zz"}));
  EXPECT_EQ(seen.back(), (std::pair<NamespaceId, std::string>{0xffffffffffffffffull, "b1"}));

  seen.clear();
  ASSERT_TRUE(collect(0, "a", &seen).ok());
  EXPECT_EQ(seen, (Seen{{1, "a"}, {1, "a1"}, {1, "a2"}, {1, "ab"},
                        {3, "a"}, {3, "a1"}, {3, "a2"}, {3, "ab"},
                        {0xffffffffffffffffull, "a"}, {0xffffffffffffffffull, "a1"},
                        {0xffffffffffffffffull, "a2"}, {0xffffffffffffffffull, "ab"}}));

  seen.clear();
  ASSERT_TRUE(collect(0, "b", &seen).ok());
  EXPECT_EQ(seen, (Seen{{1, "b1"}, {3, "b1"}, {0xffffffffffffffffull, "b1"}}));

  seen.clear();
  ASSERT_TRUE(collect(4, "", &seen).ok());
  EXPECT_TRUE(seen.empty());

  // Stops when fn returns false.
  int calls = 0;
  ASSERT_TRUE(idx->ForEach(0, "", [&](NamespaceId, std::string_view, const IndexValue&) {
    return ++calls < 3;
  }).ok());
  EXPECT_EQ(calls, 3);
}

// A listing resumed after a cursor: pages of any size add up to the whole
// listing, across namespaces too (where a key alone would not say where it
// stopped), and a cursor whose entry is gone resumes at the next one.
TEST_F(IndexTest, ForEachResumesStrictlyAfterACursor) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  IndexBatch b = ListingEntries({"a1", "a2", "b1", "ab", "a", "z"}, "0");
  ASSERT_TRUE(idx->Commit(b, false).ok());

  using Seen = std::vector<std::pair<NamespaceId, std::string>>;
  auto page = [&](NamespaceId ns, std::string_view prefix, const ListCursor* after, size_t max) {
    Seen seen;
    EXPECT_TRUE(idx->ForEach(ns, prefix, after, [&](NamespaceId n, std::string_view k, const IndexValue&) {
      seen.emplace_back(n, std::string(k));
      return seen.size() < max;
    }).ok());
    return seen;
  };
  for (NamespaceId ns : {0ull, 3ull}) {
    for (std::string_view prefix : {"", "a"}) {
      const Seen all = page(ns, prefix, nullptr, 1000);
      for (size_t size : {1, 2, 5}) {
        Seen joined;
        ListCursor cursor;
        for (;;) {
          Seen p = page(ns, prefix, joined.empty() ? nullptr : &cursor, size);
          if (p.empty()) break;
          joined.insert(joined.end(), p.begin(), p.end());
          cursor = ListCursor{p.back().first, p.back().second};
        }
        EXPECT_EQ(joined, all) << ns << " '" << prefix << "' pages of " << size;
      }
    }
  }
  ListCursor gone{1, "a15"};  // between "a1" and "a2"
  EXPECT_EQ(page(1, "", &gone, 2), (Seen{{1, "a2"}, {1, "ab"}}));
  ListCursor before{1, "zzz"};  // past namespace 1: namespace 2 next
  EXPECT_EQ(page(0, "", &before, 2), (Seen{{2, "0"}, {3, "a"}}));
  EXPECT_EQ(page(3, "", &before, 1), (Seen{{3, "a"}}));  // a cursor before the namespace listed
  ListCursor last{0xffffffffffffffffull, "z"};
  EXPECT_TRUE(page(0, "", &last, 10).empty());
  ListCursor beyond{4, "a"};
  EXPECT_TRUE(page(3, "", &beyond, 10).empty());
}

TEST_F(IndexTest, BySegmentRowsFollowPutAndDelete) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  using Rows = std::vector<std::tuple<uint64_t, NamespaceId, std::string>>;
  auto rows = [&](uint32_t seg, uint32_t gen) {
    Rows r;
    EXPECT_TRUE(idx->ForEachInSegment(seg, gen, [&](uint64_t off, NamespaceId ns, std::string_view k) {
      r.emplace_back(off, ns, std::string(k));
      return true;
    }).ok());
    return r;
  };

  const IndexValue a = MakeValue(2, 0, 4096), b = MakeValue(2, 0, 8192);
  IndexBatch put;
  put.Put(9, "a", a);
  put.Put(10, "b", b);
  ASSERT_TRUE(idx->Commit(put, false).ok());
  EXPECT_EQ(rows(2, 0), (Rows{{4096, 9, "a"}, {8192, 10, "b"}}));

  IndexBatch del;
  del.Delete(9, "a", a);
  ASSERT_TRUE(idx->Commit(del, false).ok());
  EXPECT_EQ(rows(2, 0), (Rows{{8192, 10, "b"}}));

  IndexBatch only_row;
  only_row.DeleteSegmentRow(2, 0, 8192);
  ASSERT_TRUE(idx->Commit(only_row, false).ok());
  EXPECT_TRUE(rows(2, 0).empty());
  EXPECT_TRUE(idx->Get(10, "b")->has_value());  // the entry itself stays
}

TEST_F(IndexTest, ForEachInSegmentIsInOffsetOrderAndScoped) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  IndexBatch b;
  // Offsets that sort differently as little-endian or as text.
  for (uint64_t off : {1ull << 33, 4096ull, 256ull * 4096, 8192ull, 0xffffffffffffffffull}) {
    b.Put(1, Name("k", off), MakeValue(5, 3, off));
  }
  b.Put(1, "other-gen-below", MakeValue(5, 2, 4096));
  b.Put(1, "other-gen-above", MakeValue(5, 4, 4096));
  b.Put(1, "other-seg", MakeValue(6, 3, 4096));
  b.Put(1, "max-max", MakeValue(0xffffffff, 0xffffffff, 12288));
  ASSERT_TRUE(idx->Commit(b, false).ok());

  std::vector<uint64_t> offs;
  ASSERT_TRUE(idx->ForEachInSegment(5, 3, [&](uint64_t off, NamespaceId ns, std::string_view k) {
    EXPECT_EQ(ns, 1u);
    EXPECT_EQ(k, Name("k", off));
    offs.push_back(off);
    return true;
  }).ok());
  EXPECT_EQ(offs, (std::vector<uint64_t>{4096, 8192, 256 * 4096, 1ull << 33, 0xffffffffffffffffull}));

  std::vector<std::string> keys;
  ASSERT_TRUE(idx->ForEachInSegment(0xffffffff, 0xffffffff, [&](uint64_t, NamespaceId, std::string_view k) {
    keys.emplace_back(k);
    return true;
  }).ok());
  EXPECT_EQ(keys, std::vector<std::string>{"max-max"});

  int calls = 0;
  ASSERT_TRUE(idx->ForEachInSegment(5, 3, [&](uint64_t, NamespaceId, std::string_view) {
    return ++calls < 2;
  }).ok());
  EXPECT_EQ(calls, 2);
}

TEST_F(IndexTest, DropSegmentRowsBelow) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  IndexBatch b;
  for (uint32_t gen = 0; gen < 5; ++gen) {
    b.Put(1, Name("s7g", gen), MakeValue(7, gen, 4096));
    b.Put(1, Name("s8g", gen), MakeValue(8, gen, 4096));
  }
  ASSERT_TRUE(idx->Commit(b, false).ok());
  ASSERT_TRUE(idx->DropSegmentRowsBelow(7, 3).ok());
  ASSERT_TRUE(idx->DropSegmentRowsBelow(8, 0).ok());  // nothing below 0

  auto count = [&](uint32_t seg, uint32_t gen) {
    int n = 0;
    EXPECT_TRUE(idx->ForEachInSegment(seg, gen, [&](uint64_t, NamespaceId, std::string_view) {
      ++n;
      return true;
    }).ok());
    return n;
  };
  for (uint32_t gen = 0; gen < 5; ++gen) {
    EXPECT_EQ(count(7, gen), gen < 3 ? 0 : 1) << gen;
    EXPECT_EQ(count(8, gen), 1) << gen;
  }
  // Entries are untouched: only by_segment rows go.
  EXPECT_TRUE(idx->Get(1, "s7g0")->has_value());
}

TEST_F(IndexTest, CheckpointRoundTrip) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  auto none = idx->ReadCheckpoint();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  Checkpoint cp;
  cp.epoch = 0x0102030405060708ull;
  cp.offset = 123 * 4096;
  cp.next_sequence = 987654321;
  cp.clean = true;
  ASSERT_TRUE(idx->WriteCheckpoint(cp, Index::CheckpointFlush::kWait).ok());
  auto got = idx->ReadCheckpoint();
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->epoch, cp.epoch);
  EXPECT_EQ((*got)->offset, cp.offset);
  EXPECT_EQ((*got)->next_sequence, cp.next_sequence);
  EXPECT_TRUE((*got)->clean);

  cp.clean = false;
  cp.epoch = 9;
  ASSERT_TRUE(idx->WriteCheckpoint(cp, Index::CheckpointFlush::kWait).ok());
  idx.reset();
  idx = OpenIndex();
  ASSERT_TRUE(idx);
  got = idx->ReadCheckpoint();
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->epoch, 9u);
  EXPECT_FALSE((*got)->clean);
}

TEST_F(IndexTest, CorruptCheckpointIsCorruption) {
  std::string good;
  {
    auto idx = OpenIndex();
    ASSERT_TRUE(idx);
    ASSERT_TRUE(idx->WriteCheckpoint(Checkpoint{1, 2, 3, true}, Index::CheckpointFlush::kWait).ok());
  }
  {  // Read the encoded record back to damage it.
    rocksdb::DBOptions o;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"by_segment", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(o, path_, cfs, &handles, &db).ok());
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), handles[0], "Mcheckpoint", &good).ok());
    for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    delete db;
  }
  ASSERT_FALSE(good.empty());

  std::string flipped = good;
  flipped[3] ^= 0x40;
  std::string bad_flag = good;
  bad_flag[25] = 7;  // checksum no longer matches either
  for (const std::string& bad : {flipped, good.substr(0, good.size() - 1), good + "x",
                                 std::string(), bad_flag}) {
    PutRaw("Mcheckpoint", bad);
    auto idx = OpenIndex();
    ASSERT_TRUE(idx);
    auto got = idx->ReadCheckpoint();
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), Code::kCorruption) << got.status().ToString();
  }
}

TEST_F(IndexTest, ReopenPersistsUnsyncedCommits) {
  {
    auto idx = OpenIndex();
    ASSERT_TRUE(idx);
    IndexBatch b;
    b.Put(4, "persist", MakeValue(1, 0, 4096));
    ASSERT_TRUE(idx->Commit(b, /*sync=*/false).ok());
    ASSERT_TRUE(idx->PutNamespace(4, MakeSpec("m"), /*sync=*/false).ok());
  }
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  auto got = idx->Get(4, "persist");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->has_value());
  auto spec = idx->GetNamespace(4);
  ASSERT_TRUE(spec.ok() && spec->has_value());
  EXPECT_EQ((*spec)->model_id, "m");
  int rows = 0;
  ASSERT_TRUE(idx->ForEachInSegment(1, 0, [&](uint64_t, NamespaceId, std::string_view) {
    ++rows;
    return true;
  }).ok());
  EXPECT_EQ(rows, 1);
}

// Runs `body` in a child process that ends with _exit() (as if killed: no
// destructor, so no flush of the memtables); returns its exit code, or -1
// when it did not exit by itself within 30 s.
int InAKilledChild(const std::function<int()>& body) {
  const pid_t child = fork();
  if (child == 0) {
    alarm(30);  // a hang fails the test instead of holding the suite
    _exit(body());
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The index writes no WAL: a process killed after committing loses what its
// memtables held, and keeps exactly what a flush made durable. A checkpoint
// written with a flush waited for is durable with every entry before it;
// one written without a flush is lost with them (recovery then starts from
// the older one, and re-indexes from the segments).
TEST_F(IndexTest, AKilledProcessKeepsWhatTheLastFlushMadeDurable) {
  {
    auto idx = OpenIndex();  // this process had an index open before it forked
    ASSERT_TRUE(idx);
  }
  const int rc = InAKilledChild([this] {
    auto idx = OpenIndex();
    if (!idx) return 2;
    IndexBatch a;
    for (int i = 0; i < 100; ++i) a.Put(4, Name("flushed", i), MakeValue(1, 0, 4096u * i));
    if (!idx->Commit(a, false).ok()) return 3;
    // Waits for a flush, which runs on the index's own threads: the child has
    // none of the parent's.
    if (!idx->WriteCheckpoint(Checkpoint{1, 409600, 101, false}, Index::CheckpointFlush::kWait).ok()) return 4;
    IndexBatch b;
    for (int i = 0; i < 100; ++i) b.Put(4, Name("lost", i), MakeValue(1, 0, 409600 + 4096u * i));
    if (!idx->Commit(b, false).ok()) return 5;
    if (!idx->WriteCheckpoint(Checkpoint{1, 819200, 201, false}, Index::CheckpointFlush::kNone).ok()) return 6;
    (void)idx.release();  // never closed: _exit follows, as a kill
    return 0;
  });
  ASSERT_EQ(rc, 0);
  int wal_bytes = 0;
  for (const auto& e : fs::directory_iterator(path_))
    if (e.path().extension() == ".log") wal_bytes += static_cast<int>(fs::file_size(e.path()));
  EXPECT_EQ(wal_bytes, 0);
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  auto cp = idx->ReadCheckpoint();
  ASSERT_TRUE(cp.ok() && cp->has_value());
  EXPECT_EQ((*cp)->offset, 409600u);
  EXPECT_EQ((*cp)->next_sequence, 101u);
  for (int i = 0; i < 100; i += 11) {
    EXPECT_TRUE(idx->Get(4, Name("flushed", i))->has_value()) << i;
    EXPECT_FALSE(idx->Get(4, Name("lost", i))->has_value()) << i;
  }
}

TEST_F(IndexTest, ReadOnlyOpenSeesDataAndRejectsWrites) {
  auto writer = OpenIndex();
  ASSERT_TRUE(writer);
  IndexBatch b;
  b.Put(4, "ro", MakeValue(1, 0, 4096));
  ASSERT_TRUE(writer->Commit(b, false).ok());
  ASSERT_TRUE(writer->PutNamespace(4, MakeSpec("m"), false).ok());
  ASSERT_TRUE(writer->WriteCheckpoint(Checkpoint{5, 6, 7, false}, Index::CheckpointFlush::kWait).ok());

  // Opens while the writer holds the LOCK.
  IndexOpenOptions ro;
  ro.read_only = true;
  auto reader = OpenIndex(ro);
  ASSERT_TRUE(reader);
  EXPECT_TRUE(reader->Get(4, "ro")->has_value());
  EXPECT_TRUE(reader->GetNamespace(4)->has_value());
  EXPECT_EQ((*reader->ReadCheckpoint())->epoch, 5u);
  std::vector<std::string_view> keys = {"ro", "nope"};
  std::vector<std::optional<IndexValue>> out;
  ASSERT_TRUE(reader->MultiGet(4, keys, &out).ok());
  EXPECT_TRUE(out[0].has_value());
  EXPECT_FALSE(out[1].has_value());

  IndexBatch w;
  w.Put(4, "x", MakeValue(1, 0, 8192));
  Status s = reader->Commit(w, false);
  EXPECT_EQ(s.code(), Code::kNotSupported);
  EXPECT_NE(s.message().find("read-only"), std::string::npos) << s.ToString();
  EXPECT_EQ(reader->PutNamespace(5, MakeSpec("n"), false).code(), Code::kNotSupported);
  EXPECT_EQ(reader->DeleteNamespace(4, false).code(), Code::kNotSupported);
  EXPECT_EQ(reader->WriteCheckpoint(Checkpoint{}, Index::CheckpointFlush::kWait).code(), Code::kNotSupported);
  EXPECT_EQ(reader->DropAllEntries().code(), Code::kNotSupported);
  EXPECT_EQ(reader->DropSegmentRowsBelow(1, 1).code(), Code::kNotSupported);
  EXPECT_EQ(reader->FlushMemtables().code(), Code::kNotSupported);
  EXPECT_TRUE(writer->Get(4, "ro")->has_value());
}

TEST_F(IndexTest, ReadOnlyOpenOfMissingIndexIsNotFound) {
  IndexOpenOptions ro;
  ro.read_only = true;
  auto r = Index::Open(path_, ro);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();
  EXPECT_FALSE(fs::exists(path_));  // a read-only open creates nothing

  ASSERT_TRUE(fs::create_directory(path_));
  r = Index::Open(path_, ro);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();

  IndexOpenOptions no_create;
  no_create.create_if_missing = false;
  r = Index::Open(path_, no_create);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();
}

TEST_F(IndexTest, SecondReadWriteOpenIsBusy) {
  auto first = OpenIndex();
  ASSERT_TRUE(first);
  auto second = Index::Open(path_, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kBusy) << second.status().ToString();
  EXPECT_NE(second.status().message().find(path_), std::string::npos);
  first.reset();
  auto third = Index::Open(path_, {});
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

// Child half of LockHeldByAnotherProcessIsBusy: runs only in the process that
// test starts, and prints the code of its open attempt.
TEST(IndexChildProcess, OpenAndReport) {
  const char* path = std::getenv("KVTIER_INDEX_TEST_CHILD_OPEN");
  if (path == nullptr) GTEST_SKIP() << "helper for LockHeldByAnotherProcessIsBusy";
  auto r = Index::Open(path, {});
  std::printf("CHILD_OPEN=%s\n", r.ok() ? "OK" : CodeName(r.status().code()));
}

TEST_F(IndexTest, LockHeldByAnotherProcessIsBusy) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string cmd = "KVTIER_INDEX_TEST_CHILD_OPEN='" + path_ + "' '" + self +
                          "' --gtest_filter=IndexChildProcess.OpenAndReport 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  ::pclose(p);
  EXPECT_NE(out.find("CHILD_OPEN=Busy"), std::string::npos) << out;
}

TEST_F(IndexTest, FolderModeIsApplied) {
  IndexOpenOptions o;
  o.dir_mode = 0750;
  {
    auto idx = OpenIndex(o);
    ASSERT_TRUE(idx);
  }
  struct stat st;
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  o.dir_mode = 0700;  // an existing folder keeps the bits it has: nobody is locked out
  {
    auto idx = OpenIndex(o);
    ASSERT_TRUE(idx);
  }
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  o.dir_mode = 0770;  // and gains the ones it lacks
  auto idx = OpenIndex(o);
  ASSERT_TRUE(idx);
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0770u);
}

TEST_F(IndexTest, OpenOnAFileFails) {
  { std::FILE* f = std::fopen(path_.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  auto r = Index::Open(path_, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
}

TEST_F(IndexTest, NamespaceRecords) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  EXPECT_FALSE(idx->GetNamespace(11)->has_value());
  ASSERT_TRUE(idx->PutNamespace(0xff00000000000011ull, MakeSpec("b"), true).ok());
  ASSERT_TRUE(idx->PutNamespace(11, MakeSpec("a"), false).ok());
  auto list = idx->ListNamespaces();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].first, 11u);
  EXPECT_EQ((*list)[0].second.model_id, "a");
  EXPECT_EQ((*list)[1].first, 0xff00000000000011ull);
  EXPECT_EQ((*list)[1].second.model_id, "b");

  auto got = idx->GetNamespace(11);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->block_bytes, 2u << 20);

  ASSERT_TRUE(idx->DeleteNamespace(11, false).ok());
  EXPECT_FALSE(idx->GetNamespace(11)->has_value());
  EXPECT_EQ(idx->ListNamespaces()->size(), 1u);
}

TEST_F(IndexTest, DropAllEntriesKeepsNamespacesAndMetadata) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  IndexBatch b;
  for (int i = 0; i < 1000; ++i) b.Put(1 + i % 3, Name("k", i), MakeValue(i % 7, 0, 4096ull * i));
  b.Put(1, "max-row", MakeValue(0xffffffff, 0xffffffff, 0xffffffffffffffffull));
  ASSERT_TRUE(idx->Commit(b, false).ok());
  ASSERT_TRUE(idx->FlushMemtables().ok());  // some in SST files, some in memtables
  IndexBatch b2;
  b2.Put(2, "late", MakeValue(1, 1, 4096));
  ASSERT_TRUE(idx->Commit(b2, false).ok());
  ASSERT_TRUE(idx->PutNamespace(1, MakeSpec("m"), false).ok());
  ASSERT_TRUE(idx->WriteCheckpoint(Checkpoint{3, 4, 5, false}, Index::CheckpointFlush::kWait).ok());
  EXPECT_GT(idx->ApproximateEntries(), 0u);

  ASSERT_TRUE(idx->DropAllEntries().ok());
  int entries = 0;
  ASSERT_TRUE(idx->ForEach(0, "", [&](NamespaceId, std::string_view, const IndexValue&) {
    ++entries;
    return true;
  }).ok());
  EXPECT_EQ(entries, 0);
  for (uint32_t seg : {0u, 1u, 6u, 0xffffffffu}) {
    for (uint32_t gen : {0u, 1u, 0xffffffffu}) {
      ASSERT_TRUE(idx->ForEachInSegment(seg, gen, [&](uint64_t, NamespaceId, std::string_view) {
        ADD_FAILURE() << "row left in " << seg << "/" << gen;
        return true;
      }).ok());
    }
  }
  EXPECT_TRUE(idx->GetNamespace(1)->has_value());
  EXPECT_EQ((*idx->ReadCheckpoint())->epoch, 3u);

  // The index is usable afterwards (repair re-fills it).
  IndexBatch again;
  again.Put(1, "k5", MakeValue(1, 2, 4096));
  ASSERT_TRUE(idx->Commit(again, false).ok());
  EXPECT_EQ((*idx->Get(1, "k5"))->generation, 2u);
}

// Not a timed assertion: checks a bulk load and batched lookups that span an
// SST file and the memtable, and prints the rate for a feel (the real
// measurement is bench/index_bench.cc).
TEST_F(IndexTest, BulkLoadAndBatchedLookupSanity) {
  auto idx = OpenIndex();
  ASSERT_TRUE(idx);
  constexpr int kKeys = 100000;
  constexpr int kBatch = 1000;
  auto key_of = [](int i) {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", 0x9e3779b97f4a7c15ull * (i + 1),
                  static_cast<unsigned long long>(i));
    return std::string(buf, 32);
  };
  std::vector<std::string> names;
  names.reserve(kKeys);
  for (int i = 0; i < kKeys; ++i) names.push_back(key_of(i));

  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kKeys; i += kBatch) {
    IndexBatch b;
    for (int j = i; j < i + kBatch; ++j) b.Put(42, names[j], MakeValue(j / 4096, 0, 4096ull * (j % 4096), j));
    ASSERT_TRUE(idx->Commit(b, false).ok());
    if (i == kKeys / 2) {
      ASSERT_TRUE(idx->FlushMemtables().ok());
    }
  }
  auto t1 = std::chrono::steady_clock::now();

  std::vector<std::string_view> keys;
  std::vector<std::optional<IndexValue>> out;
  int found = 0;
  for (int i = 0; i < kKeys; i += 1024) {
    keys.clear();
    for (int j = i; j < std::min(kKeys, i + 1024); ++j) keys.push_back(names[j]);
    ASSERT_TRUE(idx->MultiGet(42, keys, &out).ok());
    for (size_t j = 0; j < keys.size(); ++j) {
      ASSERT_TRUE(out[j].has_value());
      ASSERT_EQ(out[j]->sequence, static_cast<uint64_t>(i + j));
      ++found;
    }
  }
  auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(found, kKeys);
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  std::printf("[   INFO   ] %d puts: %.0f keys/s; MultiGet: %.0f keys/s\n", kKeys,
              kKeys / secs(t1 - t0), kKeys / secs(t2 - t1));
}

}  // namespace
}  // namespace kvtier
