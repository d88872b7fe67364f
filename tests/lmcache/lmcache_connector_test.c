/* Loads libkvtier_lmcache.so with dlopen and resolves LMCache's connector
 * symbols exactly as LMCache's rust_remote backend does, then runs
 * put/get/exists/remove/file_size/list_keys across process restarts:
 *   phase "write" stores chunks and dies without connector_destroy (a crash),
 *   phase "read" finds them all, removes some, destroys cleanly,
 *   phase "check" sees the removals and the rest.
 * Usage: lmcache_connector_test <path/to/libkvtier_lmcache.so> */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void* ConnectorHandle;
typedef ConnectorHandle (*create_fn)(const char*, size_t);
typedef void (*destroy_fn)(ConnectorHandle);
typedef int32_t (*exists_fn)(ConnectorHandle, const char*);
typedef int32_t (*put_fn)(ConnectorHandle, const char*, const uint8_t*, size_t);
typedef int32_t (*get_fn)(ConnectorHandle, const char*, uint8_t*, size_t, size_t*);
typedef int32_t (*remove_fn)(ConnectorHandle, const char*);
typedef int32_t (*file_size_fn)(ConnectorHandle, const char*, uint64_t*);
typedef int32_t (*list_fn)(ConnectorHandle, char*, size_t, size_t*);

static struct {
  create_fn create;
  destroy_fn destroy;
  exists_fn exists;
  put_fn put;
  get_fn get;
  remove_fn remove;
  file_size_fn file_size;
  list_fn list_keys;
} api;

static int failures = 0;
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
      failures++;                                                                \
    }                                                                            \
  } while (0)

enum { kChunks = 12, kChunkBytes = 64 * 1024 };

static void chunk_key(char* out, int i) {
  /* LMCache-style key: fmt@model@world_size@worker_id@chunk_hash@dtype */
  snprintf(out, 128, "vllm@Qwen/Qwen3-0.6B@1@0@%016llx@bfloat16", 0x9e3779b97f4a7c15ull * (unsigned long long)(i + 1));
}

static void fill(uint8_t* p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 31 + i * 13 + (i >> 9));
}

static int load(const char* lib) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return -1;
  }
#define SYM(field, name)                                   \
  *(void**)(&api.field) = dlsym(h, name);                  \
  if (api.field == NULL) {                                 \
    fprintf(stderr, "missing symbol %s\n", name);          \
    return -1;                                             \
  }
  SYM(create, "connector_create");
  SYM(destroy, "connector_destroy");
  SYM(exists, "connector_exists");
  SYM(put, "connector_put");
  SYM(get, "connector_get");
  SYM(remove, "connector_remove");
  SYM(file_size, "connector_file_size");
  SYM(list_keys, "connector_list_keys");
#undef SYM
  return 0;
}

static ConnectorHandle open_connector(const char* dir) {
  /* What LMCache builds from extra_config rust_remote.connector.* keys. */
  char cfg[1024];
  int n = snprintf(cfg, sizeof(cfg),
                   "{\"path\": \"%s\", \"capacity_gb\": 0.03125, \"segment_size_bytes\": 1048576,"
                   " \"model_id\": \"Qwen/Qwen3-0.6B\", \"dtype\": \"bfloat16\", \"use_odirect\": true}",
                   dir);
  return api.create(cfg, (size_t)n);
}

static int count_lines(const char* buf, size_t len) {
  if (len == 0) return 0;
  int n = 1;
  for (size_t i = 0; i < len; i++) n += buf[i] == '\n';
  return n;
}

static void phase_write(const char* dir) {
  /* Bad configs give NULL, not a crash. */
  CHECK(api.create("{}", 2) == NULL);
  CHECK(api.create("{\"path\": \"/tmp/x\", \"bogus\": 1}", 31) == NULL);
  CHECK(api.create("not json", 8) == NULL);

  ConnectorHandle c = open_connector(dir);
  CHECK(c != NULL);
  if (c == NULL) return;
  CHECK(open_connector(dir) == NULL); /* folder in use */
  static uint8_t buf[kChunkBytes];
  char key[128];
  for (int i = 0; i < kChunks; i++) {
    chunk_key(key, i);
    CHECK(api.exists(c, key) == 0);
    fill(buf, sizeof(buf), i);
    CHECK(api.put(c, key, buf, sizeof(buf)) == 0);
    CHECK(api.exists(c, key) == 1);
  }
  static uint8_t out[kChunkBytes];
  size_t out_len = 0;
  chunk_key(key, 0);
  CHECK(api.get(c, key, out, sizeof(out), &out_len) == 0);
  fill(buf, sizeof(buf), 0);
  CHECK(out_len == kChunkBytes && memcmp(out, buf, kChunkBytes) == 0);
  CHECK(api.get(c, key, out, 100, &out_len) == -1); /* too small */
  CHECK(out_len == kChunkBytes);
  CHECK(api.get(c, "vllm@absent", out, sizeof(out), &out_len) == 1);
  char long_key[400];
  memset(long_key, 'k', sizeof(long_key) - 1);
  long_key[sizeof(long_key) - 1] = '\0';
  CHECK(api.put(c, long_key, buf, sizeof(buf)) == -1);
  CHECK(api.exists(c, long_key) == 0);
  fflush(NULL);
  _exit(failures ? 1 : 0); /* no connector_destroy: the process dies */
}

static void phase_read(const char* dir) {
  ConnectorHandle c = open_connector(dir);
  CHECK(c != NULL);
  if (c == NULL) return;
  static uint8_t buf[kChunkBytes], out[kChunkBytes];
  char key[128];
  for (int i = 0; i < kChunks; i++) {
    chunk_key(key, i);
    CHECK(api.exists(c, key) == 1);
    uint64_t size = 0;
    CHECK(api.file_size(c, key, &size) == 0 && size == kChunkBytes);
    size_t out_len = 0;
    CHECK(api.get(c, key, out, sizeof(out), &out_len) == 0);
    fill(buf, sizeof(buf), i);
    CHECK(out_len == kChunkBytes && memcmp(out, buf, kChunkBytes) == 0);
  }
  uint64_t size = 0;
  CHECK(api.file_size(c, "vllm@absent", &size) == 1);

  char list[64 * 1024];
  size_t len = 0;
  CHECK(api.list_keys(c, list, 10, &len) == -1); /* too small: says how much */
  CHECK(len > 10);
  CHECK(api.list_keys(c, list, sizeof(list), &len) == 0);
  CHECK(count_lines(list, len) == kChunks);
  chunk_key(key, 5);
  CHECK(memmem(list, len, key, strlen(key)) != NULL);

  for (int i = 0; i < kChunks; i += 3) {
    chunk_key(key, i);
    CHECK(api.remove(c, key) == 1);
    CHECK(api.remove(c, key) == 0);
    CHECK(api.exists(c, key) == 0);
  }
  api.destroy(c);
}

/* Every kvtier option reaches the store: a RAM tier's keys open it (a chunk
   size out of range is refused by the store's own check, so the key was
   read), and an unknown key is refused. */
static void check_option_keys(const char* dir) {
  char cfg[1024];
  int n = snprintf(cfg, sizeof(cfg),
                   "{\"path\": \"%s-ram\", \"capacity_gb\": 0.03125, \"segment_size_bytes\": 1048576,"
                   " \"ram_tier_bytes\": 8388608, \"ram_tier_chunk_bytes\": %d,"
                   " \"ram_tier_shared_memory\": false, \"reinsert_min_hits\": 3}",
                   dir, 5000);
  CHECK(api.create(cfg, (size_t)n) == NULL);
  n = snprintf(cfg, sizeof(cfg),
               "{\"path\": \"%s-ram\", \"capacity_gb\": 0.03125, \"segment_size_bytes\": 1048576,"
               " \"ram_tier_bytes\": 8388608, \"ram_tier_chunk_bytes\": %d,"
               " \"ram_tier_shared_memory\": false, \"reinsert_min_hits\": 3}",
               dir, 8192);
  ConnectorHandle c = api.create(cfg, (size_t)n);
  CHECK(c != NULL);
  if (c == NULL) return;
  static uint8_t buf[kChunkBytes], out[kChunkBytes];
  size_t out_len = 0;
  fill(buf, sizeof(buf), 7);
  CHECK(api.put(c, "vllm@ram", buf, sizeof(buf)) == 0);
  CHECK(api.get(c, "vllm@ram", out, sizeof(out), &out_len) == 0);
  CHECK(out_len == kChunkBytes && memcmp(out, buf, kChunkBytes) == 0);
  api.destroy(c);
  n = snprintf(cfg, sizeof(cfg), "{\"path\": \"%s-ram\", \"ram_tier_byte\": 8388608}", dir);
  CHECK(api.create(cfg, (size_t)n) == NULL);
}

static void phase_check(const char* dir) {
  check_option_keys(dir);
  ConnectorHandle c = open_connector(dir);
  CHECK(c != NULL);
  if (c == NULL) return;
  char key[128];
  for (int i = 0; i < kChunks; i++) {
    chunk_key(key, i);
    CHECK(api.exists(c, key) == (i % 3 == 0 ? 0 : 1));
  }
  char list[64 * 1024];
  size_t len = 0;
  CHECK(api.list_keys(c, list, sizeof(list), &len) == 0);
  CHECK(count_lines(list, len) == kChunks - (kChunks + 2) / 3);
  api.destroy(c);
  api.destroy(NULL);
}

static int rm_entry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb; (void)flag; (void)ftw;
  return remove(path);
}

static int run_phase(const char* self, const char* lib, const char* phase, const char* dir) {
  pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, lib, phase, dir, (char*)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "phase %s failed (status %d)\n", phase, st);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <libkvtier_lmcache.so>\n", argv[0]);
    return 2;
  }
  if (argc == 4) { /* a child: one phase */
    if (load(argv[1]) != 0) return 1;
    if (strcmp(argv[2], "write") == 0) phase_write(argv[3]);
    else if (strcmp(argv[2], "read") == 0) phase_read(argv[3]);
    else phase_check(argv[3]);
    return failures ? 1 : 0;
  }
  const char* tmp = getenv("TMPDIR");
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/kvtier_lmcache_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  char store[600];
  snprintf(store, sizeof(store), "%s/store", dir);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 2;
  self[n] = '\0';
  int bad = run_phase(self, argv[1], "write", store);
  if (!bad) bad = run_phase(self, argv[1], "read", store);
  if (!bad) bad = run_phase(self, argv[1], "check", store);
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (bad) return 1;
  printf("lmcache_connector_test: all phases passed\n");
  return 0;
}
