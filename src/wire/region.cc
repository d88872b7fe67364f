#include "wire/region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace kvtier::wire {

namespace {

constexpr uint64_t kRegionAlign = 2ull << 20;

}  // namespace

// A sealed memfd of `bytes`, mapped; huge pages or not. Huge pages are
// faulted in at once: a hugetlb reservation the host cannot honour must fail
// here (ENOMEM), not as a SIGBUS later. 4 KiB pages come lazily.
Result<std::shared_ptr<SharedRegion>> SharedRegion::CreateMemfdOf(const std::string& name, uint64_t bytes, bool huge) {
  UniqueFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0)));
  if (!fd) return Status::FromErrno(errno, "memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return Status::FromErrno(errno, "sizing a shared region of " + std::to_string(bytes) + " bytes");
  // The service maps it: it must never shrink under that mapping.
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return Status::FromErrno(errno, "sealing a shared region");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (huge ? MAP_POPULATE : 0), fd.get(), 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping a shared region of " + std::to_string(bytes) + " bytes");
  if (!huge) ::madvise(p, bytes, MADV_HUGEPAGE);  // best effort: shmem THP may be off
  return std::shared_ptr<SharedRegion>(new SharedRegion(std::move(fd), static_cast<uint8_t*>(p), bytes));
}

Result<std::shared_ptr<SharedRegion>> SharedRegion::CreateMemfd(const std::string& name, uint64_t bytes) {
  bytes = (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign;
  if (bytes == 0) return Status::InvalidArgument("a shared region needs a size");
  // Huge pages where the host reserved enough of them (vm.nr_hugepages):
  // shared memory is otherwise on 4 KiB pages (shmem THP is off by default),
  // which costs the copies in and out of it and keeps disk reads from
  // landing in it directly (docs/service.md).
  auto huge = CreateMemfdOf(name, bytes, /*huge=*/true);
  if (huge.ok()) return huge;
  return CreateMemfdOf(name, bytes, /*huge=*/false);
}

Result<std::shared_ptr<SharedRegion>> SharedRegion::Map(int fd, bool trusted, uint64_t max_bytes) {
  UniqueFd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!own) return Status::FromErrno(errno, "taking a region's descriptor");
  struct stat st {};
  if (::fstat(own.get(), &st) != 0) return Status::FromErrno(errno, "fstat of a region");
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument("a region must be a memfd or a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0 || size > max_bytes)
    return Status::InvalidArgument("a region of " + std::to_string(size) + " bytes is outside 1.." +
                                   std::to_string(max_bytes));
  if (!trusted) {
    const int seals = ::fcntl(own.get(), F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
      return Status::InvalidArgument(
          "a region from another user must be a memfd sealed against shrinking (F_SEAL_SHRINK)");
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, own.get(), 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping a region of " + std::to_string(size) + " bytes");
  return std::shared_ptr<SharedRegion>(new SharedRegion(std::move(own), static_cast<uint8_t*>(p), size));
}

bool SharedRegion::PopulateStep(uint64_t offset, uint64_t* populated) const {
  // mincore says which pages the file holds (a shared mapping reports the
  // page cache): only their runs are populated, since populating a hole
  // would allocate it.
  if (offset >= size_) return true;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t n = std::min(kPopulateStep, size_ - offset);
  const uint64_t pages = (n + page - 1) / page;
  std::vector<unsigned char> present(pages);
  if (::mincore(data_ + offset, n, present.data()) != 0) return false;
  for (uint64_t i = 0; i < pages;) {
    if ((present[i] & 1) == 0) {
      ++i;
      continue;
    }
    uint64_t j = i;
    while (j < pages && (present[j] & 1) != 0) ++j;
    const uint64_t len = std::min(j * page, n) - i * page;
    if (::madvise(data_ + offset + i * page, len, MADV_POPULATE_WRITE) != 0) return false;
    *populated += len;
    i = j;
  }
  return true;
}

SharedRegion::~SharedRegion() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace kvtier::wire
