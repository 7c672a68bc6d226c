/*
 * fusec runtime shim: the fixed C part of every `model.so`.
 *
 * A `model.so` is this file, the generated host code `plan.c` (fusec.compiler.artifact) and the
 * kernels' object file, linked with `cc -shared`. It needs only libc, libm and libpthread: no MLIR,
 * no LLVM, no Python.
 *
 * C ABI of model.so (ABI version 1)
 * ---------------------------------
 * Only the functions below are exported (a linker version script hides everything else, kernels
 * included, so several models can live in one process).
 *
 *   int fusec_abi_version(void);
 *       The ABI version this artifact implements (1). A loader must refuse any other value.
 *
 *   const char *fusec_metadata(void);
 *       NUL-terminated UTF-8 JSON, valid for the lifetime of the library:
 *         {"format": "fusec-artifact", "abi_version": 1, "fusec_version": "0.1.0",
 *          "target": "cpu" | "cuda",
 *          "inputs":  [{"name": str, "shape": [int, ...], "dtype": str}, ...],
 *          "outputs": [{"name": str, "shape": [int, ...], "dtype": str,
 *                       "scalar": true (optional: a 0-d output the model returns as a
 *                                       number)}, ...],
 *          "states":  [{"name": str, "shape": [int, ...], "dtype": str}, ...],
 *                      -- model globals (an RNG seed) the artifact keeps between runs, in
 *                         its own storage, from their initial value; no caller sees them
 *          "kernels": [{"symbol": str, "kind": str, "ops": [str], "grid": int, "info": {...}}, ...],
 *          "temp_bytes": int,       -- bytes of temporaries the artifact allocates itself
 *          "cpu": str,              -- target "cpu": the LLVM CPU of the kernels ("x86-64-v4"
 *                                      needs AVX-512); fusec.runtime refuses a CPU without it
 *          "plan": {...}}           -- the full fusec.runtime.plan.Plan as JSON
 *       dtypes are numpy names ("float32", "bfloat16", "int64", ...); shapes are static, row-major.
 *
 *   int fusec_run(void **inputs, void **outputs);
 *       Runs the model. inputs[i] / outputs[i] are the data pointers of dense, row-major buffers
 *       of exactly the shapes and dtypes of the metadata (the caller allocates the outputs).
 *       Outputs must not overlap inputs or each other. Returns 0 on success; non-zero on error
 *       (1: invalid arguments, 2: environment or resource failure, 3: an index read from
 *       an input is out of range: a gather, embedding or scatter, named with the index and
 *       the op's source location; the outputs' contents are then undefined), and then
 *       fusec_last_error() says why. Thread-safe: concurrent calls on one library are serialised
 *       (temporaries and the thread pool belong to the library).
 *
 *   int fusec_run_stream(void **inputs, void **outputs, void *stream);
 *       The same with a stream: for target "cuda" the pointers are device pointers and `stream`
 *       a CUstream (NULL: the default stream); the call is asynchronous on that stream. For
 *       target "cpu" `stream` must be NULL and the call is fusec_run.
 *
 *   const char *fusec_last_error(void);
 *       The message of the last failed call on the calling thread ("" after a success);
 *       thread-local, valid until the thread's next call into the library.
 *
 *   int fusec_num_threads(void);
 *       CPU: the number of threads that run tiles (the caller included), or -1 (with
 *       fusec_last_error set) when FUSEC_NUM_THREADS is invalid.
 *
 *   int64_t fusec_profile(int64_t *ns, int64_t capacity, int64_t *runs, int reset);
 *       CPU only: per-launch wall time. Every run adds each launch's nanoseconds (from the
 *       post to the last tile's end) to a slot per launch, in plan order; this copies up to
 *       `capacity` slots into `ns` (if not NULL), the number of runs they sum into `*runs`
 *       (if not NULL), returns the number of launches recorded, and with `reset` clears
 *       both. Two clock reads per launch: always on.
 *
 *   int fusec_run_graph(void **inputs, void **outputs, void *stream);
 *       CUDA only (runtime/shim_cuda.c): fusec_run_stream through a CUDA graph of the whole
 *       launch sequence, captured on the first call and replayed while the pointers are the
 *       same (re-captured when they change).
 *
 * CPU execution: the kernel ABI is `void kernel(void **buffers, int64_t tile_begin,
 * int64_t tile_end)` (see fusec/runtime/plan.py). A launch of `grid` independent tiles is split
 * into chunks that a pool of threads (the calling thread plus FUSEC_NUM_THREADS - 1 workers;
 * default: the online cores this process may run on) take in turn; launches run one after the
 * other. The pool and the temporaries are created on the first run and live as long as the
 * library; FUSEC_NUM_THREADS is read then. Workers sleep on a condition variable between
 * launches. A child process made by fork() re-creates its pool on its first run.
 *
 * Internal interface with the generated plan.c (hidden symbols):
 *   plan.c defines  fusec_plan_metadata[], fusec_plan_num_inputs/outputs,
 *                   fusec_plan_input_bytes[]/output_bytes[], fusec_plan_temp_bytes and
 *                   int fusec_plan_execute(void **inputs, void **outputs, char *temps,
 *                                          void *stream);
 *   this file defines fusec_parallel_for(kernel, buffers, grid) and fusec_set_error(fmt, ...).
 * A CUDA target keeps the exported entry points and the error state, and replaces the pool and
 * the host arena (the FUSEC_TARGET_CPU sections) with stream launches and a device arena.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FUSEC_ABI_VERSION 1
#define FUSEC_API __attribute__((visibility("default")))
#define FUSEC_HIDDEN __attribute__((visibility("hidden")))
#define FUSEC_MAX_THREADS 1024
#define FUSEC_ARENA_ALIGN 64

/* The Python side passes the version it emits in the metadata; they must agree. */
#if defined(FUSEC_EXPECTED_ABI_VERSION) && FUSEC_EXPECTED_ABI_VERSION != FUSEC_ABI_VERSION
#error "runtime/shim.c and fusec.runtime.ABI_VERSION disagree"
#endif

#if !defined(FUSEC_TARGET_CPU)
#error "only FUSEC_TARGET_CPU is implemented"
#endif

typedef void (*fusec_kernel_fn)(void **buffers, int64_t tile_begin, int64_t tile_end);

/* Defined by the generated plan.c. */
extern const char fusec_plan_metadata[];
extern const int fusec_plan_num_inputs;
extern const int fusec_plan_num_outputs;
extern const int64_t fusec_plan_input_bytes[];
extern const int64_t fusec_plan_output_bytes[];
extern const int64_t fusec_plan_temp_bytes;
FUSEC_HIDDEN int fusec_plan_execute(void **inputs, void **outputs, char *temps, void *stream);

/* ---------------------------------------------------------------- error state */

static __thread char error_message[1024];

FUSEC_HIDDEN void fusec_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_message, sizeof error_message, fmt, ap);
  va_end(ap);
}

/* ---------------------------------------------------------------- index checks */

#include "index_check.h"

/* Defined by plan.c: one message per bounds check a kernel makes on an index it read from
 * data (--fusion-guard-indices), each with "{index}" where the bad index goes. */
extern const int fusec_plan_num_checks;
extern const char *const fusec_plan_checks[];

/* The first failed check of the current run (-1: none) and its index. Kernels run on the
 * pool's threads: the first to fail wins, the others are dropped. */
static _Atomic int failed_check = -1;
static _Atomic int64_t failed_index;

/* Called by a kernel whose index is out of range; the kernel reads index 0 (or skips the
 * write) instead, and fusec_run reports the failure once the launches are done. */
FUSEC_HIDDEN void fusec_index_error(int64_t check, int64_t index) {
  int expected = -1;
  if (atomic_compare_exchange_strong(&failed_check, &expected, (int)check))
    atomic_store(&failed_index, index);
}

/* The failed check's message with the index in place, as the run's error; 0 when none. */
static int report_failed_check(void) {
  int check = atomic_exchange(&failed_check, -1);
  if (check < 0) return 0;
  long long index = (long long)atomic_load(&failed_index);
  return fusec_report_index_error(
      check < fusec_plan_num_checks ? fusec_plan_checks[check] : "", index);
}

/* ---------------------------------------------------------------- thread pool (CPU) */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t wake; /* workers: a new launch was posted, or shutdown */
  pthread_cond_t done; /* caller: every worker finished the launch */
  pthread_t workers[FUSEC_MAX_THREADS];
  int num_workers;
  int ready;
  int shutdown;
  uint64_t launch_id;
  int pending; /* workers yet to finish the current launch */
  fusec_kernel_fn fn;
  void **buffers;
  int64_t grid;
  int64_t chunk;
  _Atomic int64_t next_tile;
} pool_t;

static pool_t pool = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};

/* Serialises fusec_run: the pool runs one launch at a time and the arena is shared. */
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER;
static char *arena;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static int cores_available(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int n = online > 0 ? (int)online : 1;
  cpu_set_t set;
  /* taskset / cgroup cpusets restrict us below the online count. */
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int allowed = CPU_COUNT(&set);
    if (allowed > 0 && allowed < n) n = allowed;
  }
  return n;
}

/* The configured thread count, or -1 with the error set. */
static int configured_threads(void) {
  const char *text = getenv("FUSEC_NUM_THREADS");
  if (text == NULL || text[0] == '\0') {
    int n = cores_available();
    return n > FUSEC_MAX_THREADS ? FUSEC_MAX_THREADS : n;
  }
  char *end = NULL;
  errno = 0;
  long n = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || n < 1 || n > FUSEC_MAX_THREADS) {
    fusec_set_error("FUSEC_NUM_THREADS='%s' is not an integer in [1, %d]", text,
                    FUSEC_MAX_THREADS);
    return -1;
  }
  return (int)n;
}

static void run_chunks(fusec_kernel_fn fn, void **buffers, int64_t grid, int64_t chunk) {
  for (;;) {
    int64_t begin = atomic_fetch_add_explicit(&pool.next_tile, chunk, memory_order_relaxed);
    if (begin >= grid) return;
    int64_t end = grid - begin < chunk ? grid : begin + chunk;
    fn(buffers, begin, end);
  }
}

static void *worker_main(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.mu);
  for (;;) {
    while (pool.launch_id == seen && !pool.shutdown) pthread_cond_wait(&pool.wake, &pool.mu);
    if (pool.shutdown) break;
    seen = pool.launch_id;
    fusec_kernel_fn fn = pool.fn;
    void **buffers = pool.buffers;
    int64_t grid = pool.grid, chunk = pool.chunk;
    pthread_mutex_unlock(&pool.mu);
    run_chunks(fn, buffers, grid, chunk);
    pthread_mutex_lock(&pool.mu);
    if (--pool.pending == 0) pthread_cond_signal(&pool.done);
  }
  pthread_mutex_unlock(&pool.mu);
  return NULL;
}

/* fork() copies only the calling thread: hold run_mu across it so that no launch is in flight,
 * and make the child start a fresh pool. */
static void atfork_prepare(void) { pthread_mutex_lock(&run_mu); }
static void atfork_parent(void) { pthread_mutex_unlock(&run_mu); }
static void atfork_child(void) {
  pthread_mutex_init(&pool.mu, NULL);
  pthread_cond_init(&pool.wake, NULL);
  pthread_cond_init(&pool.done, NULL);
  pool.num_workers = 0;
  pool.ready = 0;
  pool.launch_id = 0;
  pool.pending = 0;
  pthread_mutex_unlock(&run_mu);
}
static void register_atfork(void) {
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Called with run_mu held. A worker that cannot be created is not an error: fewer run. */
static int pool_start(void) {
  int threads = configured_threads();
  if (threads < 0) return -1;
  pthread_once(&atfork_once, register_atfork);
  pool.shutdown = 0;
  pool.num_workers = 0;
  for (int i = 0; i < threads - 1; ++i) {
    if (pthread_create(&pool.workers[i], NULL, worker_main, NULL) != 0) break;
    pool.num_workers++;
  }
  pool.ready = 1;
  return 0;
}

/* Runs tiles [0, grid) of `fn` over the pool; returns when all are done. */
static void parallel_for(fusec_kernel_fn fn, void **buffers, int64_t grid) {
  if (grid <= 0) return;
  if (pool.num_workers == 0 || grid == 1) {
    fn(buffers, 0, grid);
    return;
  }
  /* Several chunks per thread balance uneven tiles and threads the OS descheduled. */
  int64_t chunk = grid / ((int64_t)(pool.num_workers + 1) * 4);
  if (chunk < 1) chunk = 1;
  pthread_mutex_lock(&pool.mu);
  pool.fn = fn;
  pool.buffers = buffers;
  pool.grid = grid;
  pool.chunk = chunk;
  atomic_store_explicit(&pool.next_tile, 0, memory_order_relaxed);
  pool.pending = pool.num_workers;
  pool.launch_id++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.mu);

  run_chunks(fn, buffers, grid, chunk);

  pthread_mutex_lock(&pool.mu);
  while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.mu);
  pthread_mutex_unlock(&pool.mu);
}

/* Per-launch nanoseconds summed over runs (fusec_profile); guarded by run_mu, as the runs are. */
static int64_t *profile_ns;
static int64_t profile_slots; /* allocated */
static int64_t profile_used;  /* launches recorded */
static int64_t profile_runs;
static int64_t profile_next;  /* the next launch's slot in this run */

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

FUSEC_HIDDEN void fusec_parallel_for(fusec_kernel_fn fn, void **buffers, int64_t grid) {
  int64_t start = now_ns();
  parallel_for(fn, buffers, grid);
  int64_t elapsed = now_ns() - start;
  int64_t slot = profile_next++;
  if (slot >= profile_slots) {
    int64_t grown = profile_slots ? profile_slots * 2 : 64;
    while (grown <= slot) grown *= 2;
    int64_t *p = realloc(profile_ns, (size_t)grown * sizeof *p);
    if (p == NULL) return; /* the profile is best effort: the run goes on */
    memset(p + profile_slots, 0, (size_t)(grown - profile_slots) * sizeof *p);
    profile_ns = p;
    profile_slots = grown;
  }
  profile_ns[slot] += elapsed;
  if (slot >= profile_used) profile_used = slot + 1;
}

/* Joins the workers before the code they run is unmapped (dlclose, process exit). */
__attribute__((destructor)) static void fusec_shutdown(void) {
  if (pool.ready) {
    pthread_mutex_lock(&pool.mu);
    pool.shutdown = 1;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < pool.num_workers; ++i) pthread_join(pool.workers[i], NULL);
    pool.num_workers = 0;
    pool.ready = 0;
  }
  free(arena);
  arena = NULL;
}

/* ---------------------------------------------------------------- exported ABI */

FUSEC_API int fusec_abi_version(void) { return FUSEC_ABI_VERSION; }

FUSEC_API const char *fusec_metadata(void) { return fusec_plan_metadata; }

FUSEC_API const char *fusec_last_error(void) { return error_message; }

FUSEC_API int fusec_num_threads(void) {
  error_message[0] = '\0';
  pthread_mutex_lock(&run_mu);
  int n = pool.ready ? pool.num_workers + 1 : configured_threads();
  pthread_mutex_unlock(&run_mu);
  return n;
}

static int check_pointers(const char *what, void **ptrs, int count, const int64_t *bytes) {
  if (count == 0) return 0;
  if (ptrs == NULL) {
    fusec_set_error("%s is NULL but the model has %d of them", what, count);
    return 1;
  }
  for (int i = 0; i < count; ++i) {
    if (ptrs[i] == NULL && bytes[i] > 0) {
      fusec_set_error("%s[%d] is NULL", what, i);
      return 1;
    }
  }
  return 0;
}

FUSEC_API int fusec_run_stream(void **inputs, void **outputs, void *stream) {
  error_message[0] = '\0';
  if (stream != NULL) {
    fusec_set_error("this artifact targets the CPU: stream must be NULL");
    return 1;
  }
  if (check_pointers("inputs", inputs, fusec_plan_num_inputs, fusec_plan_input_bytes) ||
      check_pointers("outputs", outputs, fusec_plan_num_outputs, fusec_plan_output_bytes))
    return 1;

  pthread_mutex_lock(&run_mu);
  if (!pool.ready && pool_start() != 0) {
    pthread_mutex_unlock(&run_mu);
    return 2;
  }
  if (fusec_plan_temp_bytes > 0 && arena == NULL) {
    void *p = NULL;
    if (posix_memalign(&p, FUSEC_ARENA_ALIGN, (size_t)fusec_plan_temp_bytes) != 0) {
      fusec_set_error("cannot allocate %lld bytes of temporaries",
                      (long long)fusec_plan_temp_bytes);
      pthread_mutex_unlock(&run_mu);
      return 2;
    }
    arena = p;
  }
  atomic_store(&failed_check, -1);
  profile_next = 0;
  int status = fusec_plan_execute(inputs, outputs, arena, stream);
  profile_runs++;
  int failed = report_failed_check();
  pthread_mutex_unlock(&run_mu);
  return status != 0 ? status : failed;
}

FUSEC_API int fusec_run(void **inputs, void **outputs) {
  return fusec_run_stream(inputs, outputs, NULL);
}

FUSEC_API int64_t fusec_profile(int64_t *ns, int64_t capacity, int64_t *runs, int reset) {
  error_message[0] = '\0';
  pthread_mutex_lock(&run_mu);
  int64_t used = profile_used;
  if (ns != NULL)
    for (int64_t i = 0; i < capacity && i < used; ++i) ns[i] = profile_ns[i];
  if (runs != NULL) *runs = profile_runs;
  if (reset) {
    if (profile_ns != NULL) memset(profile_ns, 0, (size_t)profile_slots * sizeof *profile_ns);
    profile_used = 0;
    profile_runs = 0;
  }
  pthread_mutex_unlock(&run_mu);
  return used;
}
