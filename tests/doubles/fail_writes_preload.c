/* An LD_PRELOAD library that makes writes and syncs of files under one
 * folder fail with EIO while a trigger file exists: a real process (`kvtier
 * serve`) meets the I/O errors of a failing disk without a fault-injecting
 * FileSystem of its own. Files only (sockets, pipes and io_uring's I/O are
 * untouched).
 *
 *   KVTIER_FAIL_WRITES_UNDER  a path prefix, e.g. /data/store/index/
 *   KVTIER_FAIL_WRITES_WHEN   the trigger: fail only while this file exists
 *
 * Test-only; never installed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int should_fail(int fd) {
  const char* under = getenv("KVTIER_FAIL_WRITES_UNDER");
  const char* when = getenv("KVTIER_FAIL_WRITES_WHEN");
  if (under == NULL || when == NULL || under[0] == '\0') return 0;
  struct stat st;
  if (stat(when, &st) != 0) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strncmp(path, under, strlen(under)) == 0;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t write(int fd, const void* buf, size_t n) {
  if (should_fail(fd)) return errno = EIO, -1;
  return REAL(write)(fd, buf, n);
}
ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  if (should_fail(fd)) return errno = EIO, -1;
  return REAL(pwrite)(fd, buf, n, off);
}
ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  if (should_fail(fd)) return errno = EIO, -1;
  return REAL(pwrite64)(fd, buf, n, off);
}
ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  if (should_fail(fd)) return errno = EIO, -1;
  return REAL(writev)(fd, iov, cnt);
}
ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  if (should_fail(fd)) return errno = EIO, -1;
  return REAL(pwritev)(fd, iov, cnt, off);
}
int fsync(int fd) {
  if (should_fail(fd)) return errno = EIO, -1;
  return REAL(fsync)(fd);
}
int fdatasync(int fd) {
  if (should_fail(fd)) return errno = EIO, -1;
  return REAL(fdatasync)(fd);
}
