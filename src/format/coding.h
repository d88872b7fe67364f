// Fixed-width little-endian integer coding.
//
// The on-disk format is little-endian whatever the host is, so every field is
// written byte by byte instead of memcpy'ing structs (whose padding and byte
// order are the compiler's business). Callers are responsible for bounds: the
// Get functions read exactly 2/4/8 bytes at `p`.
#ifndef KVTIER_SRC_FORMAT_CODING_H_
#define KVTIER_SRC_FORMAT_CODING_H_

#include <cstdint>
#include <string>

namespace kvtier::format {

inline void PutFixed16(uint8_t* dst, uint16_t v) {
  dst[0] = static_cast<uint8_t>(v);
  dst[1] = static_cast<uint8_t>(v >> 8);
}

inline void PutFixed32(uint8_t* dst, uint32_t v) {
  for (int i = 0; i < 4; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void PutFixed64(uint8_t* dst, uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline uint16_t GetFixed16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}

inline uint32_t GetFixed32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline uint64_t GetFixed64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Appending forms, for variable-length encodings built in a std::string.
inline void AppendFixed16(std::string* dst, uint16_t v) {
  uint8_t b[2];
  PutFixed16(b, v);
  dst->append(reinterpret_cast<const char*>(b), sizeof(b));
}

inline void AppendFixed32(std::string* dst, uint32_t v) {
  uint8_t b[4];
  PutFixed32(b, v);
  dst->append(reinterpret_cast<const char*>(b), sizeof(b));
}

inline void AppendFixed64(std::string* dst, uint64_t v) {
  uint8_t b[8];
  PutFixed64(b, v);
  dst->append(reinterpret_cast<const char*>(b), sizeof(b));
}

}  // namespace kvtier::format

#endif  // KVTIER_SRC_FORMAT_CODING_H_
