#include "tier/eviction.h"

#include <algorithm>

namespace kvtier {

const char* RamPolicyName(RamPolicy p) { return p == RamPolicy::kLru ? "lru" : "s3fifo"; }

void NodeList::PushFront(PolicyNode* n) {
  n->prev = nullptr;
  n->next = head_;
  if (head_ != nullptr) head_->prev = n;
  head_ = n;
  if (tail_ == nullptr) tail_ = n;
  units_ += n->units;
  ++size_;
}

void NodeList::Remove(PolicyNode* n) {
  if (n->prev != nullptr) n->prev->next = n->next; else head_ = n->next;
  if (n->next != nullptr) n->next->prev = n->prev; else tail_ = n->prev;
  n->prev = n->next = nullptr;
  units_ -= n->units;
  --size_;
}

namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  void OnInsert(PolicyNode* n) override { list_.PushFront(n); }
  void OnHit(PolicyNode* n) override {
    list_.Remove(n);
    list_.PushFront(n);
  }
  void OnErase(PolicyNode* n) override { list_.Remove(n); }
  PolicyNode* Victim() override {
    // Pinned nodes are passed over (moved to the front) a bounded number of times.
    for (uint64_t tries = list_.size(); tries > 0; --tries) {
      PolicyNode* n = list_.back();
      list_.Remove(n);
      if (n->pins == 0) return n;
      list_.PushFront(n);
    }
    return nullptr;
  }

 private:
  NodeList list_;
};

// S3-FIFO (Yang et al., SOSP'23): new blocks enter a small FIFO (10% of the
// space); those read again before they leave it move to the main FIFO, the
// others leave and are remembered in a ghost FIFO of hashes, so that a block
// that comes back soon goes straight to main. Main evicts FIFO order but
// gives blocks read since their last pass another round (freq capped at 3).
// One-hit blocks (a long prompt read once) thus never push out the reused
// ones (shared system prompts, documents revisited).
class S3FifoPolicy final : public EvictionPolicy {
 public:
  explicit S3FifoPolicy(uint64_t capacity_units)
      : small_target_(std::max<uint64_t>(1, capacity_units / 10)) {}

  void OnInsert(PolicyNode* n) override {
    n->freq = 0;
    auto g = ghost_.find(n->hash);
    if (g != ghost_.end()) {
      if (--g->second == 0) ghost_.erase(g);
      n->queue = kMain;
      main_.PushFront(n);
    } else {
      n->queue = kSmall;
      small_.PushFront(n);
    }
  }
  void OnHit(PolicyNode* n) override {
    if (n->freq < 3) ++n->freq;
  }
  void OnErase(PolicyNode* n) override { (n->queue == kSmall ? small_ : main_).Remove(n); }

  PolicyNode* Victim() override {
    // Every node can be looked at a few times (freq up to 3, plus one move
    // from small to main) before the loop concludes all are pinned.
    for (uint64_t tries = 5 * (small_.size() + main_.size()) + 1; tries > 0; --tries) {
      if (!small_.empty() && (small_.units() >= small_target_ || main_.empty())) {
        PolicyNode* n = small_.back();
        small_.Remove(n);
        if (n->pins != 0) {
          small_.PushFront(n);
        } else if (n->freq > 0) {
          n->freq = 0;
          n->queue = kMain;
          main_.PushFront(n);
        } else {
          RememberGhost(n->hash);
          return n;
        }
        continue;
      }
      if (main_.empty()) return nullptr;
      PolicyNode* n = main_.back();
      main_.Remove(n);
      if (n->pins != 0) {
        main_.PushFront(n);
      } else if (n->freq > 0) {
        --n->freq;
        main_.PushFront(n);
      } else {
        return n;
      }
    }
    return nullptr;
  }

 private:
  static constexpr uint8_t kSmall = 1, kMain = 2;

  void RememberGhost(uint64_t hash) {
    // The ghost remembers as many blocks as main holds (at least 64).
    const uint64_t cap = std::max<uint64_t>(64, main_.size() + small_.size());
    ghost_fifo_.push_back(hash);
    ++ghost_[hash];
    while (ghost_fifo_.size() > cap) {
      auto g = ghost_.find(ghost_fifo_.front());
      if (g != ghost_.end() && --g->second == 0) ghost_.erase(g);
      ghost_fifo_.pop_front();
    }
  }

  const uint64_t small_target_;
  NodeList small_, main_;
  std::deque<uint64_t> ghost_fifo_;
  std::unordered_map<uint64_t, uint32_t> ghost_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(RamPolicy p, uint64_t capacity_units) {
  if (p == RamPolicy::kLru) return std::make_unique<LruPolicy>();
  return std::make_unique<S3FifoPolicy>(capacity_units);
}

}  // namespace kvtier
