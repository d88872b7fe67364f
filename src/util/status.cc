#include "kvtier/status.h"

#include <cerrno>
#include <cstring>

namespace kvtier {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kCorruption: return "Corruption";
    case Code::kIOError: return "IOError";
    case Code::kNoSpace: return "NoSpace";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kBusy: return "Busy";
    case Code::kNotSupported: return "NotSupported";
    case Code::kTimedOut: return "TimedOut";
    case Code::kNotAdmitted: return "NotAdmitted";
    case Code::kClosed: return "Closed";
    case Code::kBufferTooSmall: return "BufferTooSmall";
    case Code::kAborted: return "Aborted";
  }
  return "Unknown";
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT: return NoSpace(std::move(msg));
    case ENOENT: return NotFound(std::move(msg));
    case EINVAL:
    case ELOOP:   // O_NOFOLLOW met a symlink
    case EISDIR:  // a folder where a file was expected
      return InvalidArgument(std::move(msg));
    case EWOULDBLOCK: return Busy(std::move(msg));
    default: return IOError(std::move(msg));
  }
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = CodeName(code_);
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace kvtier
