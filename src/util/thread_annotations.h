// Clang's thread-safety analysis (-Wthread-safety): which mutex guards which
// field, said to the compiler. tools/thread_safety.sh builds the library
// with clang and the warnings as errors (a CI stage); other compilers ignore
// the annotations.
//
// Mutex and MutexLock wrap std::mutex and std::unique_lock so the analysis
// can see them (libstdc++'s are not annotated). A condition variable waits
// through the MutexLock that holds the mutex.
#ifndef KVTIER_SRC_UTIL_THREAD_ANNOTATIONS_H_
#define KVTIER_SRC_UTIL_THREAD_ANNOTATIONS_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define KVTIER_TSA(x) __attribute__((x))
#else
#define KVTIER_TSA(x)
#endif

#define CAPABILITY(x) KVTIER_TSA(capability(x))
#define SCOPED_CAPABILITY KVTIER_TSA(scoped_lockable)
#define GUARDED_BY(x) KVTIER_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) KVTIER_TSA(pt_guarded_by(x))
#define REQUIRES(...) KVTIER_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) KVTIER_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) KVTIER_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) KVTIER_TSA(release_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) KVTIER_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS KVTIER_TSA(no_thread_safety_analysis)

namespace kvtier {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope (or until Unlock).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }
  // Waits on `cv`, the mutex released meanwhile and held again on return.
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  // As Wait, until `when` at the latest; false when it timed out.
  template <typename Clock, typename Duration>
  bool WaitUntil(std::condition_variable& cv, const std::chrono::time_point<Clock, Duration>& when) {
    return cv.wait_until(lock_, when) == std::cv_status::no_timeout;
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_THREAD_ANNOTATIONS_H_
