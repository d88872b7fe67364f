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
#include <shared_mutex>

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
#define TRY_ACQUIRE(...) KVTIER_TSA(try_acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) KVTIER_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) KVTIER_TSA(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) KVTIER_TSA(release_generic_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) KVTIER_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS KVTIER_TSA(no_thread_safety_analysis)

namespace kvtier {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

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

// A reader-writer mutex: many readers, or one writer.
class CAPABILITY("mutex") SharedMutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void ReaderLock() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void ReaderUnlock() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderLock() RELEASE_GENERIC() { mu_->ReaderUnlock(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* mu_;
};

class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() RELEASE() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* mu_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_THREAD_ANNOTATIONS_H_
