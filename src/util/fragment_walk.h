// Pairs a byte stream laid out in one list of runs with the runs of
// another, in order: the walk every scatter and gather copy takes (the RAM
// tier's chunks against a caller's fragments, a staging extent against a
// caller's fragments).
#ifndef KVTIER_SRC_UTIL_FRAGMENT_WALK_H_
#define KVTIER_SRC_UTIL_FRAGMENT_WALK_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier {

// Calls fn(to_bytes, from_bytes, n) for each overlap of a `from` run with a
// `to` run, cut to at most max_unit bytes, until `from` is used up or `to`
// is full. Runs are anything with `data` (a pointer) and `size`.
template <class From, class To, class Fn>
void ForEachOverlap(std::span<const From> from, std::span<const To> to, size_t max_unit, Fn&& fn) {
  size_t ti = 0, to_off = 0;
  for (const From& f : from) {
    const uint8_t* src = static_cast<const uint8_t*>(f.data);
    size_t left = f.size;
    while (left > 0) {
      if (ti == to.size()) return;
      const To& t = to[ti];
      const size_t n = std::min({left, t.size - to_off, max_unit});
      if (n != 0) fn(static_cast<uint8_t*>(t.data) + to_off, src, n);
      src += n;
      left -= n;
      to_off += n;
      if (to_off == t.size) ++ti, to_off = 0;
    }
  }
}

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_FRAGMENT_WALK_H_
