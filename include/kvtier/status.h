// Status and Result<T>: how every kvtier call reports success or failure.
//
// Contract
// - No exception ever crosses the kvtier API. Every fallible call returns a
//   Status or a Result<T>; both are [[nodiscard]] so an ignored error is a
//   compile error under -Werror.
// - A Status carries a Code (what kind of failure, for programs) and a message
//   (what happened, with the path or key involved, for people).
// - Status and Result are plain values: copyable, movable, not thread-shared.
#ifndef KVTIER_STATUS_H_
#define KVTIER_STATUS_H_

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtier {

enum class Code : uint8_t {
  kOk = 0,
  kNotFound = 1,         // key, namespace or file absent (a cache miss too)
  kCorruption = 2,       // bytes on disk failed a check; nothing wrong was returned
  kIOError = 3,          // the operating system reported an I/O failure
  kNoSpace = 4,          // ENOSPC or the capacity cannot hold the request
  kInvalidArgument = 5,  // the caller passed something out of range
  kBusy = 6,             // the store is locked by another process
  kNotSupported = 7,     // feature or format version not available here
  kTimedOut = 8,         // a deadline passed before the operation could finish
  kNotAdmitted = 9,      // a put was declined (queue full, admission policy)
  kClosed = 10,          // the store was closed
  kBufferTooSmall = 11,  // the caller's buffer cannot hold the payload
  kAborted = 12,         // the operation was cancelled (e.g. by Close)
};

// Short stable name of a code, e.g. "NotFound".
const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
  static Status NoSpace(std::string m) { return {Code::kNoSpace, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status Busy(std::string m) { return {Code::kBusy, std::move(m)}; }
  static Status NotSupported(std::string m) { return {Code::kNotSupported, std::move(m)}; }
  static Status TimedOut(std::string m) { return {Code::kTimedOut, std::move(m)}; }
  static Status NotAdmitted(std::string m) { return {Code::kNotAdmitted, std::move(m)}; }
  static Status Closed(std::string m) { return {Code::kClosed, std::move(m)}; }
  static Status BufferTooSmall(std::string m) { return {Code::kBufferTooSmall, std::move(m)}; }
  static Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
  // From an errno value: ENOSPC/EDQUOT -> NoSpace, ENOENT -> NotFound, EINVAL ->
  // InvalidArgument, EWOULDBLOCK -> Busy, else IOError.
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }

  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

  // Explicitly drops a status the caller has decided not to act on.
  void IgnoreError() const {}

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Result<T> holds either a T or a non-OK Status (never an OK status without a
// value). Accessing value() of an error Result aborts: check ok() first.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                     // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {               // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInvalidArgument, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }

  T& value() & { Check(); return std::get<T>(v_); }
  const T& value() const& { Check(); return std::get<T>(v_); }
  T&& value() && { Check(); return std::get<T>(std::move(v_)); }
  T value_or(T fallback) const { return ok() ? std::get<T>(v_) : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Check() const {
    if (!ok()) std::abort();  // programming error: value() of a failed Result
  }
  std::variant<T, Status> v_;
};

}  // namespace kvtier

// Propagate a non-OK Status (or the Status of a failed Result) to the caller.
#define KVTIER_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::kvtier::Status _kv_st = (expr);             \
    if (!_kv_st.ok()) return _kv_st;              \
  } while (0)

#define KVTIER_CONCAT_INNER_(a, b) a##b
#define KVTIER_CONCAT_(a, b) KVTIER_CONCAT_INNER_(a, b)
#define KVTIER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
// KVTIER_ASSIGN_OR_RETURN(auto x, SomethingReturningResult());
#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_CONCAT_(_kv_res_, __LINE__), lhs, expr)

#endif  // KVTIER_STATUS_H_
