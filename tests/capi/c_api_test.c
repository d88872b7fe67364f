/* Exercises the kvtier C ABI from plain C (C11): every call, and the errors
 * an engine can run into. Exits non-zero on the first failed check. */
#define _GNU_SOURCE
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvtier/c_api.h"

static int failures = 0;

#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n",       \
              __FILE__, __LINE__, #cond, kvtier_last_error());            \
      failures++;                                                         \
    }                                                                     \
  } while (0)
#define CHECK_RC(expr, want)                                              \
  do {                                                                    \
    int rc_ = (expr);                                                     \
    if (rc_ != (want)) {                                                  \
      fprintf(stderr, "%s:%d: %s returned %d (%s), want %s: %s\n",        \
              __FILE__, __LINE__, #expr, rc_, kvtier_code_name(rc_),      \
              #want, kvtier_last_error());                                \
      failures++;                                                         \
    }                                                                     \
  } while (0)

static const char* kOptions =
    "{\"segment_size_bytes\": 1048576, \"capacity_bytes\": 16777216,"
    " \"write_queue_bytes\": 8388608, \"group_commit_bytes\": 2097152,"
    " \"read_threads\": 2, \"queue_depth\": 16}";

enum { kBlock = 8192 };

static void fill(uint8_t* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed * 131u + i * 7u);
}

static int rm_entry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb; (void)flag; (void)ftw;
  return remove(path);
}

static void key_of(char* out, unsigned i) { snprintf(out, 32, "key-%08u", i); }

static int count_keys(void* ctx, kvtier_ns ns, const void* key, size_t key_len, uint64_t size) {
  (void)ns; (void)key; (void)key_len;
  if (size == kBlock) (*(int*)ctx)++;
  return 0;
}

/* A page of at most three keys, and the last of them (where the next resumes). */
struct key_page {
  int n;
  char last[64];
  size_t last_len;
};
static int page_of_three(void* ctx, kvtier_ns ns, const void* key, size_t key_len, uint64_t size) {
  struct key_page* p = (struct key_page*)ctx;
  (void)ns; (void)size;
  memcpy(p->last, key, key_len);
  p->last_len = key_len;
  return ++p->n == 3;
}

static kvtier_ns register_ns(kvtier_store* s) {
  kvtier_namespace_spec spec;
  memset(&spec, 0, sizeof(spec));
  spec.struct_size = sizeof(spec);
  spec.name = "capi-test";
  spec.model_id = "test/model";
  spec.dtype = "bf16";
  spec.layout = "test";
  spec.tp_size = 1;
  kvtier_ns ns = 0;
  CHECK_RC(kvtier_register_namespace(s, &spec, &ns), KVTIER_OK);
  CHECK(ns != 0);
  return ns;
}

static void test_errors_before_open(const char* dir) {
  kvtier_store* s = (kvtier_store*)0x1;
  CHECK_RC(kvtier_open(dir, "{\"no_such_option\": 1}", &s), KVTIER_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK(strstr(kvtier_last_error(), "no_such_option") != NULL);
  CHECK_RC(kvtier_open(dir, "{\"capacity_bytes\": \"big\"}", &s), KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "capacity_bytes") != NULL);
  /* The shared tier's options sit in a nested object, checked field by field. */
  CHECK_RC(kvtier_open(dir, "{\"remote\": {\"pool\": 5}}", &s), KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "remote.pool") != NULL);
  CHECK_RC(kvtier_open(dir, "{\"remote\": {\"no_such\": 1}}", &s), KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "remote.no_such") != NULL);
  CHECK_RC(kvtier_open(dir, "{\"remote\": true}", &s), KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "remote") != NULL);
  {
    kvtier_store* r = NULL;
    char rdir[700];
    snprintf(rdir, sizeof(rdir), "%s-remote", dir);
    CHECK_RC(kvtier_open(rdir, "{\"segment_size_bytes\": 1048576, \"capacity_bytes\": 16777216,"
                              " \"remote\": {\"enabled\": false, \"pool\": \"p\", \"admit_to_ram\": false,"
                              " \"orphan_grace_ms\": 1000, \"upload_write_bytes\": 8388608}}", &r), KVTIER_OK);
    kvtier_free(r);
  }
  CHECK_RC(kvtier_open(dir, "{not json", &s), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_open(NULL, NULL, &s), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_open(dir, NULL, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_put(NULL, 1, "k", 1, "v", 1), KVTIER_INVALID_ARGUMENT);
  kvtier_free(NULL);
  CHECK(kvtier_poll(NULL, NULL, 0, 0) == -KVTIER_INVALID_ARGUMENT);
}

static void test_blocking(kvtier_store* s, kvtier_ns ns) {
  uint8_t in[kBlock], out[kBlock];
  char key[32];
  for (unsigned i = 0; i < 8; i++) {
    key_of(key, i);
    fill(in, sizeof(in), i);
    CHECK_RC(kvtier_put(s, ns, key, strlen(key), in, sizeof(in)), KVTIER_OK);
  }
  uint64_t size = 0;
  key_of(key, 3);
  fill(in, sizeof(in), 3);
  CHECK_RC(kvtier_get(s, ns, key, strlen(key), out, sizeof(out), &size), KVTIER_OK);
  CHECK(size == kBlock && memcmp(in, out, kBlock) == 0);

  /* Fragments: gather on put, scatter on get. */
  kvtier_fragment f[2] = {{in, 100}, {in + 100, kBlock - 100}};
  CHECK_RC(kvtier_putv(s, ns, "frag", 4, f, 2), KVTIER_OK);
  uint8_t a[5000], b[5000];
  kvtier_mut_fragment mf[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
  CHECK_RC(kvtier_getv(s, ns, "frag", 4, mf, 2, &size), KVTIER_OK);
  CHECK(size == kBlock && memcmp(a, in, 5000) == 0 && memcmp(b, in + 5000, kBlock - 5000) == 0);

  /* Errors. */
  CHECK_RC(kvtier_get(s, ns, "absent", 6, out, sizeof(out), &size), KVTIER_NOT_FOUND);
  CHECK_RC(kvtier_get(s, ns, key, strlen(key), out, 100, &size), KVTIER_BUFFER_TOO_SMALL);
  CHECK_RC(kvtier_put(s, 12345, "k", 1, in, sizeof(in)), KVTIER_NOT_FOUND);
  CHECK(strstr(kvtier_last_error(), "namespace") != NULL);
  char long_key[300];
  memset(long_key, 'x', sizeof(long_key));
  CHECK_RC(kvtier_put(s, ns, long_key, sizeof(long_key), in, sizeof(in)), KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "key length") != NULL);
  CHECK_RC(kvtier_put(s, ns, "", 0, in, sizeof(in)), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_get(s, ns, NULL, 4, out, sizeof(out), &size), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_put(s, ns, "k", 1, NULL, 10), KVTIER_INVALID_ARGUMENT);

  /* Lookups. */
  int present = -1;
  CHECK_RC(kvtier_contains(s, ns, key, strlen(key), &present), KVTIER_OK);
  CHECK(present == 1);
  CHECK_RC(kvtier_contains(s, ns, "absent", 6, &present), KVTIER_OK);
  CHECK(present == 0);
  char k0[32], k1[32], k2[32];
  key_of(k0, 0); key_of(k1, 1); key_of(k2, 2);
  kvtier_key keys[4] = {{k0, strlen(k0)}, {k1, strlen(k1)}, {"absent", 6}, {k2, strlen(k2)}};
  size_t count = 99;
  CHECK_RC(kvtier_lookup_prefix(s, ns, keys, 4, &count), KVTIER_OK);
  CHECK(count == 2);
  CHECK_RC(kvtier_block_size(s, ns, k1, strlen(k1), &size), KVTIER_OK);
  CHECK(size == kBlock);
  CHECK_RC(kvtier_block_size(s, ns, "absent", 6, &size), KVTIER_NOT_FOUND);
  int n = 0;
  CHECK_RC(kvtier_list_keys(s, ns, "key-", 4, count_keys, &n), KVTIER_OK);
  CHECK(n == 8);
  /* Paged: each page resumes after the last key of the one before. */
  struct key_page pg = {0, {0}, 0};
  int listed = 0, pages = 0;
  CHECK_RC(kvtier_list_keys(s, ns, "key-", 4, page_of_three, &pg), KVTIER_OK);
  while (pg.n > 0) {
    char last[64];
    const size_t len = pg.last_len;
    memcpy(last, pg.last, len);
    listed += pg.n;
    pages++;
    pg.n = 0;
    CHECK_RC(kvtier_list_keys_after(s, ns, "key-", 4, ns, last, len, page_of_three, &pg), KVTIER_OK);
  }
  CHECK(listed == 8 && pages == 3);
  CHECK_RC(kvtier_list_keys_after(s, ns, "key-", 4, ns, NULL, 0, count_keys, &n), KVTIER_INVALID_ARGUMENT);

  /* Remove. */
  CHECK_RC(kvtier_remove(s, ns, k1, strlen(k1)), KVTIER_OK);
  CHECK_RC(kvtier_remove(s, ns, k1, strlen(k1)), KVTIER_OK); /* absent is OK */
  CHECK_RC(kvtier_lookup_prefix(s, ns, keys, 4, &count), KVTIER_OK);
  CHECK(count == 1);
  CHECK_RC(kvtier_flush(s), KVTIER_OK);
}

static void test_batches(kvtier_store* s, kvtier_ns ns) {
  enum { N = 6 };
  static uint8_t in[N][kBlock], out[N][kBlock];
  char keys[N][32];
  kvtier_fragment frags[N];
  kvtier_put_item puts[N];
  for (unsigned i = 0; i < N; i++) {
    snprintf(keys[i], 32, "batch-%u", i);
    fill(in[i], kBlock, 100 + i);
    frags[i].data = in[i];
    frags[i].size = kBlock;
    puts[i].key.data = keys[i];
    puts[i].key.size = strlen(keys[i]);
    puts[i].frags = &frags[i];
    puts[i].num_frags = 1;
  }
  int32_t st[N + 1];
  CHECK_RC(kvtier_put_batch(s, ns, puts, N - 1, st), KVTIER_OK); /* the last is left out */
  for (unsigned i = 0; i < N - 1; i++) CHECK(st[i] == KVTIER_OK);

  kvtier_mut_fragment mf[N];
  kvtier_get_item gets[N];
  for (unsigned i = 0; i < N; i++) {
    mf[i].data = out[i];
    mf[i].size = kBlock;
    gets[i].key = puts[i].key;
    gets[i].frags = &mf[i];
    gets[i].num_frags = 1;
  }
  uint64_t sizes[N];
  CHECK_RC(kvtier_get_batch(s, ns, gets, N, st, sizes), KVTIER_NOT_FOUND);
  for (unsigned i = 0; i < N - 1; i++) {
    CHECK(st[i] == KVTIER_OK && sizes[i] == kBlock);
    CHECK(memcmp(in[i], out[i], kBlock) == 0);
  }
  CHECK(st[N - 1] == KVTIER_NOT_FOUND);
  /* With a deadline its reads easily make (and one too far to count, which
   * is none), the same answers. */
  memset(out, 0, sizeof(out));
  CHECK_RC(kvtier_get_batch_timeout(s, ns, gets, N, 60u * 1000 * 1000, st, sizes), KVTIER_NOT_FOUND);
  for (unsigned i = 0; i < N - 1; i++) CHECK(st[i] == KVTIER_OK && memcmp(in[i], out[i], kBlock) == 0);
  CHECK(st[N - 1] == KVTIER_NOT_FOUND);
  CHECK_RC(kvtier_get_batch_timeout(s, ns, gets, N, UINT64_MAX, st, NULL), KVTIER_NOT_FOUND);
  CHECK(st[0] == KVTIER_OK);

  /* One bad item fails alone. */
  puts[0].key.size = 0;
  CHECK_RC(kvtier_put_batch(s, ns, puts, 2, st), KVTIER_INVALID_ARGUMENT);
  CHECK(st[0] == KVTIER_INVALID_ARGUMENT && st[1] == KVTIER_OK);
  CHECK_RC(kvtier_put_batch(s, ns, NULL, 3, st), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_get_batch(s, ns, gets, 0, NULL, NULL), KVTIER_OK);

  /* Lookups and removes in one call: which keys have (had) a block. */
  kvtier_key rm[3] = {{keys[1], strlen(keys[1])}, {"absent", 6}, {keys[3], strlen(keys[3])}};
  uint8_t present[3] = {9, 9, 9};
  CHECK_RC(kvtier_contains_batch(s, ns, rm, 3, present), KVTIER_OK);
  CHECK(present[0] == 1 && present[1] == 0 && present[2] == 1);
  CHECK_RC(kvtier_contains_batch(s, ns, rm, 3, NULL), KVTIER_INVALID_ARGUMENT);
  memset(present, 9, sizeof(present));
  CHECK_RC(kvtier_touch_batch(s, ns, rm, 3, present), KVTIER_OK);
  CHECK(present[0] == 1 && present[1] == 0 && present[2] == 1);
  CHECK_RC(kvtier_touch_batch(s, ns, rm, 3, NULL), KVTIER_OK);
  CHECK_RC(kvtier_touch_batch(s, ns, NULL, 3, NULL), KVTIER_INVALID_ARGUMENT);
  memset(present, 9, sizeof(present));
  CHECK_RC(kvtier_remove_batch(s, ns, rm, 3, present), KVTIER_OK);
  CHECK(present[0] == 1 && present[1] == 0 && present[2] == 1);
  CHECK_RC(kvtier_remove_batch(s, ns, rm, 3, NULL), KVTIER_OK); /* absent now, and no output */
  CHECK_RC(kvtier_contains_batch(s, ns, rm, 3, present), KVTIER_OK);
  CHECK(present[0] == 0 && present[1] == 0 && present[2] == 0);
  CHECK_RC(kvtier_get_batch(s, ns, gets + 1, 4, st, sizes), KVTIER_NOT_FOUND);
  CHECK(st[0] == KVTIER_NOT_FOUND && st[1] == KVTIER_OK && st[2] == KVTIER_NOT_FOUND && st[3] == KVTIER_OK);
  /* A bad key refuses the list: nothing removed. */
  kvtier_key bad[2] = {{keys[2], strlen(keys[2])}, {keys[2], 0}};
  CHECK_RC(kvtier_remove_batch(s, ns, bad, 2, present), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_remove_batch(s, ns, NULL, 2, present), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_get(s, ns, keys[2], strlen(keys[2]), out[2], kBlock, &sizes[2]), KVTIER_OK);
}

static void test_async(kvtier_store* s, kvtier_ns ns) {
  enum { N = 16 };
  static uint8_t in[N][kBlock], out[N][kBlock];
  char keys[N][32];
  int efd = kvtier_event_fd(s);
  CHECK(efd >= 0);
  for (unsigned i = 0; i < N; i++) {
    snprintf(keys[i], 32, "async-%u", i);
    fill(in[i], kBlock, 200 + i);
    kvtier_fragment f = {in[i], kBlock};
    CHECK_RC(kvtier_put_async(s, ns, keys[i], strlen(keys[i]), &f, 1, 1000 + i), KVTIER_OK);
  }
  /* Wait on the eventfd the way an engine's event loop would. */
  int seen[N];
  memset(seen, 0, sizeof(seen));
  int got = 0;
  while (got < N) {
    struct pollfd p = {efd, POLLIN, 0};
    int pr = poll(&p, 1, 10000);
    CHECK(pr == 1);
    if (pr != 1) break;
    kvtier_completion c[4];
    int n = kvtier_poll(s, c, 4, 0);
    CHECK(n >= 0);
    for (int i = 0; i < n; i++) {
      CHECK(c[i].op == KVTIER_OP_PUT && c[i].status == KVTIER_OK && c[i].size == kBlock);
      CHECK(c[i].user_data >= 1000 && c[i].user_data < 1000 + N);
      if (c[i].user_data >= 1000 && c[i].user_data < 1000 + N) seen[c[i].user_data - 1000]++;
    }
    got += n;
  }
  for (unsigned i = 0; i < N; i++) CHECK(seen[i] == 1);
  CHECK(kvtier_pending(s) == 0);

  /* Async gets, one a miss; wait inside kvtier_poll. */
  for (unsigned i = 0; i < N; i++) {
    kvtier_mut_fragment f = {out[i], kBlock};
    const char* k = i == N - 1 ? "async-absent" : keys[i];
    CHECK_RC(kvtier_get_async(s, ns, k, strlen(k), &f, 1, 0, i), KVTIER_OK);
  }
  got = 0;
  while (got < N) {
    kvtier_completion c[N];
    int n = kvtier_poll(s, c, N, 10000);
    CHECK(n > 0);
    if (n <= 0) break;
    for (int i = 0; i < n; i++) {
      unsigned idx = (unsigned)c[i].user_data;
      CHECK(c[i].op == KVTIER_OP_GET);
      if (idx == N - 1) {
        CHECK(c[i].status == KVTIER_NOT_FOUND);
      } else {
        CHECK(c[i].status == KVTIER_OK && c[i].size == kBlock && memcmp(in[idx], out[idx], kBlock) == 0);
      }
    }
    got += n;
  }
  /* A deadline: the completion is OK or TimedOut, never anything else. */
  kvtier_mut_fragment f = {out[0], kBlock};
  CHECK_RC(kvtier_get_async(s, ns, keys[0], strlen(keys[0]), &f, 1, 1, 77), KVTIER_OK);
  kvtier_completion c;
  CHECK(kvtier_poll(s, &c, 1, 10000) == 1);
  CHECK(c.user_data == 77 && (c.status == KVTIER_OK || c.status == KVTIER_TIMED_OUT));
  CHECK(kvtier_poll(s, &c, 1, 0) == 0); /* nothing left */
  CHECK_RC(kvtier_put_async(s, ns, "", 0, NULL, 0, 1), KVTIER_INVALID_ARGUMENT);
}

/* A child forked after the open gets Busy for every call on the parent's
 * handle, never the parent's eventfd, and lets go of its copy without
 * harming the parent's store, whose async completions still arrive. */
static void test_fork(kvtier_store* s, kvtier_ns ns) {
  uint8_t in[kBlock], out[kBlock];
  fill(in, kBlock, 77);
  CHECK_RC(kvtier_put(s, ns, "fork-key", 8, in, kBlock), KVTIER_OK);
  kvtier_fragment f = {in, kBlock};
  CHECK_RC(kvtier_put_async(s, ns, "fork-async", 10, &f, 1, 4242), KVTIER_OK);
  pid_t pid = fork();
  if (pid == 0) {
    uint64_t size = 0;
    int bad = 0;
    bad |= kvtier_get(s, ns, "fork-key", 8, out, kBlock, &size) != KVTIER_BUSY;
    bad |= strstr(kvtier_last_error(), "forked") == NULL;
    bad |= kvtier_put(s, ns, "fork-child", 10, in, kBlock) != KVTIER_BUSY;
    bad |= kvtier_event_fd(s) != -1;
    kvtier_completion c;
    bad |= kvtier_poll(s, &c, 1, 0) != -KVTIER_BUSY;
    bad |= kvtier_close(s) != KVTIER_OK;
    kvtier_free(s);
    _exit(bad ? 3 : 0);
  }
  CHECK(pid > 0);
  int status = -1;
  pid_t done = 0;
  for (int waited_ms = 0; done == 0 && waited_ms < 30000; waited_ms += 10) {
    done = waitpid(pid, &status, WNOHANG);
    if (done == 0) usleep(10000);
  }
  if (done == 0) { /* hung on the parent's store: fail, don't hang */
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CHECK(done == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* The parent's store carries on: its completion is still there to poll. */
  kvtier_completion c;
  int n = 0;
  for (int tries = 0; tries < 100 && n == 0; tries++) n = kvtier_poll(s, &c, 1, 100);
  CHECK(n == 1 && c.user_data == 4242 && c.status == KVTIER_OK);
  uint64_t size = 0;
  CHECK_RC(kvtier_get(s, ns, "fork-key", 8, out, kBlock, &size), KVTIER_OK);
  CHECK(size == kBlock && memcmp(in, out, kBlock) == 0);
  CHECK_RC(kvtier_get(s, ns, "fork-child", 10, out, kBlock, &size), KVTIER_NOT_FOUND);
}

static void test_stats(kvtier_store* s) {
  size_t len = 0;
  char tiny[8];
  CHECK_RC(kvtier_stats_json(s, tiny, sizeof(tiny), &len), KVTIER_BUFFER_TOO_SMALL);
  CHECK(len > sizeof(tiny));
  char* buf = malloc(len + 1);
  CHECK_RC(kvtier_stats_json(s, buf, len + 1, &len), KVTIER_OK);
  CHECK(buf[0] == '{' && strstr(buf, "\"puts\":") != NULL && strstr(buf, "\"io_backend\":") != NULL);
  free(buf);
}


/* The GPU path's entry points: without a usable device (CI) each says why;
 * argument errors come first either way. The round trips run on the H200
 * through Python (tests/python/test_gpu_path.py). */
static void test_gpu_entry_points(kvtier_store* s, kvtier_ns ns) {
  CHECK_RC(kvtier_gpu_status(NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_gpu_bind(s, -1), KVTIER_INVALID_ARGUMENT);
  int32_t st[1] = {0};
  uint64_t sz[1] = {0};
  kvtier_get_item item;
  memset(&item, 0, sizeof(item));
  item.key.data = "k";
  item.key.size = 1;
  CHECK_RC(kvtier_get_to_device(s, ns, &item, 1, 0, 0, NULL, sz), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_get_to_device(s, ns, NULL, 1, 0, 0, st, sz), KVTIER_INVALID_ARGUMENT);
  item.key.size = 300;
  CHECK_RC(kvtier_get_to_device(s, ns, &item, 1, 0, 0, st, sz), KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "key length") != NULL);
  CHECK_RC(kvtier_gpu_set_copy_method(NULL, "auto"), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_gpu_set_copy_method(s, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_gpu_set_copy_method(s, "fast"), KVTIER_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_last_error(), "auto, batch, loop, kernel") != NULL);
  size_t len = 0;
  CHECK_RC(kvtier_gpu_stats_json(s, NULL, 0, NULL), KVTIER_INVALID_ARGUMENT);
  if (kvtier_gpu_status(s) == KVTIER_OK) { /* a device is usable here */
    char buf[2048];
    CHECK_RC(kvtier_gpu_set_copy_method(s, "kernel"), KVTIER_OK);
    CHECK_RC(kvtier_gpu_stats_json(s, NULL, 0, &len), KVTIER_BUFFER_TOO_SMALL);
    CHECK_RC(kvtier_gpu_stats_json(s, buf, sizeof(buf), &len), KVTIER_OK);
    CHECK(strstr(buf, "\"method\":\"kernel\"") != NULL && strlen(buf) == len);
    CHECK_RC(kvtier_gpu_set_copy_method(s, "auto"), KVTIER_OK);
    return;
  }
  CHECK(strstr(kvtier_last_error(), "GPU path") != NULL || strstr(kvtier_last_error(), "CUDA") != NULL);
  item.key.size = 1;
  kvtier_mut_fragment frag = {(void*)0x7f0000000000ull, 4096};
  item.frags = &frag;
  item.num_frags = 1;
  CHECK_RC(kvtier_get_to_device(s, ns, &item, 1, 0, 0, st, sz), KVTIER_NOT_SUPPORTED);
  CHECK_RC(kvtier_gpu_bind(s, 0), KVTIER_NOT_SUPPORTED);
  kvtier_put_item put;
  kvtier_fragment cfrag = {(const void*)0x7f0000000000ull, 4096};
  put.key = item.key;
  put.frags = &cfrag;
  put.num_frags = 1;
  CHECK_RC(kvtier_put_from_device(s, ns, &put, 1, 0, 1, st), KVTIER_NOT_SUPPORTED);
  CHECK_RC(kvtier_put_from_device_async(s, ns, &put, 1, 0, st, 7), KVTIER_NOT_SUPPORTED);
  CHECK(kvtier_pending(s) == 0); /* a refused submission leaves no completion owed */
  CHECK_RC(kvtier_gpu_set_copy_method(s, "kernel"), KVTIER_NOT_SUPPORTED);
  CHECK_RC(kvtier_gpu_stats_json(s, NULL, 0, &len), KVTIER_NOT_SUPPORTED);
}

int main(void) {
  CHECK((kvtier_abi_version() >> 16) == (KVTIER_ABI_VERSION >> 16));
  CHECK(strcmp(kvtier_code_name(KVTIER_NOT_FOUND), "NotFound") == 0);
  CHECK(strcmp(kvtier_code_name(999), "Unknown") == 0);

  const char* tmp = getenv("TMPDIR");
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/kvtier_capi_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  char store_dir[600];
  snprintf(store_dir, sizeof(store_dir), "%s/store", dir);

  test_errors_before_open(store_dir);

  kvtier_store* s = NULL;
  CHECK_RC(kvtier_open(store_dir, kOptions, &s), KVTIER_OK);
  if (s == NULL) return 1;
  kvtier_store* s2 = NULL;
  CHECK_RC(kvtier_open(store_dir, kOptions, &s2), KVTIER_BUSY); /* store in use */
  CHECK(s2 == NULL);
  CHECK(strstr(kvtier_last_error(), "in use") != NULL);

  kvtier_ns ns = register_ns(s);
  kvtier_ns again = 0, found = 0, by_json = 0;
  CHECK_RC(kvtier_register_namespace_json(
               s, "{\"name\": \"capi-test\", \"model_id\": \"test/model\", \"dtype\": \"bf16\", \"layout\": \"test\"}",
               &by_json),
           KVTIER_OK);
  CHECK(by_json == ns); /* same identity, same id */
  again = register_ns(s);
  CHECK(again == ns);
  CHECK_RC(kvtier_find_namespace(s, "capi-test", &found), KVTIER_OK);
  CHECK(found == ns);
  CHECK_RC(kvtier_find_namespace(s, "nobody", &found), KVTIER_NOT_FOUND);
  CHECK_RC(kvtier_register_namespace_json(s, "{\"tp_rank\": 3, \"tp_size\": 2}", &found),
           KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_register_namespace_json(s, "{\"colour\": \"red\"}", &found), KVTIER_INVALID_ARGUMENT);
  kvtier_namespace_spec small;
  memset(&small, 0, sizeof(small));
  small.struct_size = 4;
  CHECK_RC(kvtier_register_namespace(s, &small, &found), KVTIER_INVALID_ARGUMENT);

  test_blocking(s, ns);
  test_batches(s, ns);
  test_async(s, ns);
  test_fork(s, ns);
  test_stats(s);
  test_gpu_entry_points(s, ns);

  /* A closed store answers Closed, and can be closed twice. */
  CHECK_RC(kvtier_close(s), KVTIER_OK);
  CHECK_RC(kvtier_close(s), KVTIER_OK);
  uint8_t buf[kBlock];
  uint64_t size = 0;
  CHECK_RC(kvtier_get(s, ns, "key-00000000", 12, buf, sizeof(buf), &size), KVTIER_CLOSED);
  CHECK_RC(kvtier_put(s, ns, "k", 1, buf, sizeof(buf)), KVTIER_CLOSED);
  CHECK_RC(kvtier_flush(s), KVTIER_CLOSED);
  kvtier_free(s);

  /* Reopen: the data and the namespace survive. */
  CHECK_RC(kvtier_open(store_dir, kOptions, &s), KVTIER_OK);
  if (s == NULL) return 1;
  CHECK_RC(kvtier_find_namespace(s, "capi-test", &found), KVTIER_OK);
  CHECK(found == ns);
  uint8_t want[kBlock];
  fill(want, sizeof(want), 0);
  CHECK_RC(kvtier_get(s, ns, "key-00000000", 12, buf, sizeof(buf), &size), KVTIER_OK);
  CHECK(size == kBlock && memcmp(buf, want, kBlock) == 0);
  CHECK_RC(kvtier_get(s, ns, "key-00000001", 12, buf, sizeof(buf), &size), KVTIER_NOT_FOUND);
  CHECK_RC(kvtier_remove_namespace(s, ns), KVTIER_OK);
  CHECK_RC(kvtier_get(s, ns, "key-00000000", 12, buf, sizeof(buf), &size), KVTIER_NOT_FOUND);
  /* Destroy refuses an open store, then removes a closed one (its RAM tier too). */
  CHECK_RC(kvtier_destroy_store(store_dir), KVTIER_BUSY);
  kvtier_free(s); /* frees without an explicit close */
  CHECK_RC(kvtier_destroy_store(store_dir), KVTIER_OK);
  CHECK(access(store_dir, F_OK) != 0);
  CHECK_RC(kvtier_destroy_store(store_dir), KVTIER_NOT_FOUND);
  CHECK_RC(kvtier_destroy_store(""), KVTIER_INVALID_ARGUMENT);
  CHECK_RC(kvtier_destroy_store(NULL), KVTIER_INVALID_ARGUMENT);

  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
