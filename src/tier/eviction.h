// Eviction policies of the RAM tier: LRU and S3-FIFO over intrusive entries.
//
// A policy orders the entries of one shard and picks victims. It is not
// thread-safe: the shard's mutex guards every call. Sizes are in chunks (the
// tier's allocation unit), so a policy's notion of "full" matches the bytes
// the shard actually holds.
#ifndef KVTIER_SRC_TIER_EVICTION_H_
#define KVTIER_SRC_TIER_EVICTION_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>

namespace kvtier {

enum class RamPolicy : uint8_t {
  kS3Fifo,  // small FIFO + main FIFO with reinsertion + ghost FIFO (default)
  kLru,
};
const char* RamPolicyName(RamPolicy p);

// The policy-visible part of a cached block. The tier embeds it in its entry.
struct PolicyNode {
  PolicyNode* prev = nullptr;
  PolicyNode* next = nullptr;
  uint64_t hash = 0;      // of (namespace, key)
  uint32_t units = 0;     // chunks held
  uint32_t pins = 0;      // > 0: in use, must not be evicted now
  uint8_t queue = 0;      // policy-private (which list)
  uint8_t freq = 0;       // policy-private (S3-FIFO access count, capped)
};

// A doubly linked list of nodes; head = newest.
class NodeList {
 public:
  void PushFront(PolicyNode* n);
  void Remove(PolicyNode* n);
  PolicyNode* back() const { return tail_; }
  bool empty() const { return head_ == nullptr; }
  uint64_t units() const { return units_; }
  uint64_t size() const { return size_; }

 private:
  PolicyNode* head_ = nullptr;
  PolicyNode* tail_ = nullptr;
  uint64_t units_ = 0, size_ = 0;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // A node enters the cache (after its units were allocated).
  virtual void OnInsert(PolicyNode* n) = 0;
  virtual void OnHit(PolicyNode* n) = 0;
  // The node leaves for another reason (erase, replace).
  virtual void OnErase(PolicyNode* n) = 0;
  // Unlinks and returns the node to evict, or nullptr when every node is
  // pinned (or there is none).
  virtual PolicyNode* Victim() = 0;
};

// capacity_units: the shard's size in chunks (S3-FIFO sizes its small queue
// and ghost from it).
std::unique_ptr<EvictionPolicy> NewEvictionPolicy(RamPolicy p, uint64_t capacity_units);

}  // namespace kvtier

#endif  // KVTIER_SRC_TIER_EVICTION_H_
