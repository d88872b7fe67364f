#include "index/presence_map.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace kvtier {
namespace {

TEST(PresenceMapTest, MatchesAModelUnderRandomOperations) {
  PresenceMap m;
  m.FinishLoad();
  std::unordered_map<uint64_t, uint64_t> model;
  std::mt19937_64 rng(7);
  // Hashes drawn from a small pool so probe chains collide and wrap, and
  // erasures have to shift neighbours back.
  std::vector<uint64_t> pool;
  for (int i = 0; i < 5000; ++i) pool.push_back(rng() | 1);
  for (int op = 0; op < 200000; ++op) {
    uint64_t h = pool[rng() % pool.size()];
    if (rng() % 3 == 0) {
      m.Erase(h);
      model.erase(h);
    } else {
      uint64_t loc = rng() % 1000;
      m.Set(h, loc);
      model[h] = loc;
    }
  }
  EXPECT_EQ(m.size(), model.size());
  for (uint64_t h : pool) {
    auto it = model.find(h);
    EXPECT_EQ(m.Find(h), it == model.end() ? PresenceMap::kAbsent : it->second);
  }
}

TEST(PresenceMapTest, LoaderNeverResurrectsOrOverridesWriterChanges) {
  PresenceMap m;
  m.BeginLoad();
  EXPECT_FALSE(m.Ready());
  m.Set(1, 10);     // the writer set key 1 after the loader's snapshot
  m.Set(2, 20);
  m.Erase(2);       // and removed key 2
  m.LoadIfAbsent(1, 99);  // the loader's older views
  m.LoadIfAbsent(2, 99);
  m.LoadIfAbsent(3, 30);  // a key only the loader knows
  m.FinishLoad();
  EXPECT_TRUE(m.Ready());
  EXPECT_EQ(m.Find(1), 10u);
  EXPECT_EQ(m.Find(2), PresenceMap::kAbsent);
  EXPECT_EQ(m.Find(3), 30u);
  m.Clear();
  EXPECT_EQ(m.Find(1), PresenceMap::kAbsent);
  EXPECT_EQ(m.size(), 0u);
}

TEST(PresenceMapTest, HashSeparatesNamespaces) {
  EXPECT_NE(PresenceMap::Hash(1, "key"), PresenceMap::Hash(2, "key"));
  EXPECT_EQ(PresenceMap::Hash(1, "key"), PresenceMap::Hash(1, "key"));
  EXPECT_EQ(PresenceMap::Location(3, 4), (uint64_t{3} << 32) | 4);
}

}  // namespace
}  // namespace kvtier
