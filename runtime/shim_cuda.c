/*
 * fusec CUDA runtime shim: the fixed C part of every CUDA `model.so`.
 *
 * The generated host code (fusec.compiler.targets.cuda.artifact.host_code) #includes
 * runtime/shim_cuda.h, then defines the tables (the kernels' image, the launches in plan order,
 * the buffers) and `fusec_program()`; this file is compiled once into an object in fusec's
 * cache folder (compiler/artifact.py, shim_object) and linked with it. The library links only
 * libc/libdl/libpthread: libcuda.so.1 is opened with dlopen on the first run, so a model.so
 * loads (and its metadata reads) on a machine with no GPU.
 *
 * C ABI: the same as the CPU artifact (runtime/shim.c, ABI version 1), with device pointers:
 *   int fusec_abi_version(void);
 *   const char *fusec_metadata(void);
 *   int fusec_run_stream(void **inputs, void **outputs, void *stream);
 *       inputs/outputs: CUdeviceptr values (dense, row-major); stream: a CUstream or NULL (the
 *       legacy default stream). Asynchronous: returns once every launch is queued.
 *   int fusec_run(void **inputs, void **outputs);
 *       fusec_run_stream on the default stream, then waits for it.
 *   int fusec_run_graph(void **inputs, void **outputs, void *stream);
 *       the same launches through a CUDA graph, captured once and replayed while the pointers
 *       are the same (fusec_graph_captures_count() says how many captures were made).
 * Gemm launches call cuBLASLt (opened at run time, see fusec_load_cublaslt). Kernels that read
 * operands through TMA (the tensor-core GEMM family) take 128-byte tensor maps by value
 * (`__grid_constant__` parameters): the shim encodes them (cuTensorMapEncodeTiled) from the
 * launch's `maps` table and the run's pointers, again only when a pointer changes.
 *   void fusec_profile_enable(int on);
 *   int64_t fusec_profile(int64_t *ns, int64_t capacity, int64_t *runs, int reset);
 *       while enabled, each run records a CUDA event before every launch and after the last
 *       and waits for the stream at its end (so runs are no longer asynchronous); the
 *       nanoseconds between consecutive events are summed per launch, as the CPU artifact's
 *       fusec_profile sums wall time (runtime/shim.c). Graph runs are not profiled.
 *   const char *fusec_last_error(void);   thread-local; "" after a success
 *   int fusec_num_threads(void);          1 (the host thread only queues launches)
 * Return codes: 0 ok, 1 invalid arguments, 2 driver or resource failure.
 *
 * The module is loaded into the calling thread's current context (PyTorch's and CuPy's are the
 * device's primary context), or, if there is none, into device 0's primary context, which is
 * then made current. Temporaries are allocated once, on the first run, and reused.
 * Errors name the CUDA error (cuGetErrorName), its text and the kernel. Launch errors inside a
 * kernel are asynchronous; with FUSEC_CUDA_SYNC=1 every launch is followed by a synchronisation,
 * so that a fault names the kernel that caused it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUSEC_CUDA_ABI_VERSION 1
#define FUSEC_API __attribute__((visibility("default")))
#define FUSEC_MAX_ARGS 64

/* ------------------------------------------------------------ the tables' types */

#include "shim_cuda.h"

/* One tensor map parameter of rank 1..5 (wgmma.map_entry): the kernel parameter it replaces
 * (its buffer's position in `buffers`), CUtensorMapDataType, the rank, the global dims
 * (innermost first, 5), the byte strides of dims 1..4, the box (innermost first, 5),
 * CUtensorMapSwizzle, and the byte offset of the operand in its buffer. */
#define FUSEC_MAP_FIELDS 19
#define FUSEC_MAP_RANK 5

/* ------------------------------------------------------------ the driver API, by hand */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUevent_st *CUevent;
#define CU_STREAM_NON_BLOCKING 1
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT 9
#define CUDA_ERROR_NOT_FOUND 500
/* cuLaunchKernelEx's configuration (cuda.h's layout), for the one attribute fusec sets. */
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
typedef struct {
  int id;
  char pad[4];
  union {
    char pad[64];
    int programmatic_stream_serialization_allowed;
  } value;
} CUlaunchAttribute;
typedef struct {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared;
  CUstream stream;
  CUlaunchAttribute *attrs;
  unsigned num_attrs;
} CUlaunchConfig;
_Static_assert(sizeof(CUlaunchAttribute) == 72, "cuda.h's CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(CUlaunchConfig, attrs) == 40 && sizeof(CUlaunchConfig) == 56,
               "cuda.h's CUlaunchConfig layout");

static struct {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, CUstream, void **, void **);
  CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*ModuleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamBeginCapture)(CUstream, int);
  CUresult (*StreamEndCapture)(CUstream, CUgraph *);
  CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*GraphDestroy)(CUgraph);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*TensorMapEncodeTiled)(void *, int, unsigned, void *, const uint64_t *,
                                   const uint64_t *, const unsigned *, const unsigned *, int,
                                   int, int, int);
} cu;

/* ------------------------------------------------------------ state and errors */

static pthread_mutex_t fusec_lock = PTHREAD_MUTEX_INITIALIZER;
static int fusec_ready;
static CUcontext fusec_context;
static CUmodule fusec_module;
static CUfunction *fusec_functions;
static CUdeviceptr *fusec_temps;
/* Per launch with tensor maps: the encoded maps (64-byte aligned, as CUtensorMap is) and the
 * global address each was encoded for. */
typedef struct {
  _Alignas(64) unsigned char bytes[128];
  CUdeviceptr address;
} fusec_tensor_map;
static fusec_tensor_map **fusec_maps;
/* The kernels' index-check status (codegen_cuda.INDEX_STATUS: [check + 1, index]; 0: none). */
static CUdeviceptr fusec_index_status_ptr;
static __thread char fusec_error[1024];

static void fusec_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fusec_error, sizeof fusec_error, fmt, ap);
  va_end(ap);
}

#include "index_check.h"

static void fusec_cuda_error(CUresult r, const char *what) {
  const char *name = "CUDA_ERROR_UNKNOWN", *text = "";
  if (cu.GetErrorName) cu.GetErrorName(r, &name);
  if (cu.GetErrorString) cu.GetErrorString(r, &text);
  fusec_set_error("%s: %s (%d): %s", what, name ? name : "?", r, text ? text : "");
}

/* table.field = the symbol `name` of the dlopen'ed `lib` (named `library` in the error). */
#define FUSEC_DLSYM(table, library, field, name)                     \
  do {                                                               \
    *(void **)&table.field = dlsym(lib, name);                       \
    if (!table.field) {                                              \
      fusec_set_error("%s has no symbol %s", library, name);         \
      return 2;                                                      \
    }                                                                \
  } while (0)
#define FUSEC_SYM(field, name) FUSEC_DLSYM(cu, "libcuda.so.1", field, name)
#define FUSEC_LT_SYM(field, name) FUSEC_DLSYM(lt, "cuBLASLt", field, name)

static int fusec_load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fusec_set_error("cannot open libcuda.so.1 (no NVIDIA driver?): %s", dlerror());
    return 2;
  }
  FUSEC_SYM(GetErrorName, "cuGetErrorName");
  FUSEC_SYM(GetErrorString, "cuGetErrorString");
  FUSEC_SYM(Init, "cuInit");
  FUSEC_SYM(DeviceGet, "cuDeviceGet");
  FUSEC_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  FUSEC_SYM(CtxGetCurrent, "cuCtxGetCurrent");
  FUSEC_SYM(CtxSetCurrent, "cuCtxSetCurrent");
  FUSEC_SYM(ModuleLoadData, "cuModuleLoadData");
  FUSEC_SYM(ModuleGetFunction, "cuModuleGetFunction");
  FUSEC_SYM(FuncSetAttribute, "cuFuncSetAttribute");
  FUSEC_SYM(LaunchKernel, "cuLaunchKernel");
  FUSEC_SYM(MemAlloc, "cuMemAlloc_v2");
  FUSEC_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
  FUSEC_SYM(ModuleGetGlobal, "cuModuleGetGlobal_v2");
  FUSEC_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  FUSEC_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
  FUSEC_SYM(StreamSynchronize, "cuStreamSynchronize");
  FUSEC_SYM(StreamCreate, "cuStreamCreate");
  FUSEC_SYM(StreamBeginCapture, "cuStreamBeginCapture_v2");
  FUSEC_SYM(StreamEndCapture, "cuStreamEndCapture");
  FUSEC_SYM(GraphInstantiate, "cuGraphInstantiateWithFlags");
  FUSEC_SYM(GraphLaunch, "cuGraphLaunch");
  FUSEC_SYM(GraphExecDestroy, "cuGraphExecDestroy");
  FUSEC_SYM(GraphDestroy, "cuGraphDestroy");
  /* Programmatic dependent launch (CUDA 12+ drivers); without it, ordinary launches. */
  *(void **)&cu.LaunchKernelEx = dlsym(lib, "cuLaunchKernelEx");
  /* The profiler's (fusec_profile_enable); a run without it never needs them. */
  *(void **)&cu.EventCreate = dlsym(lib, "cuEventCreate");
  *(void **)&cu.EventRecord = dlsym(lib, "cuEventRecord");
  *(void **)&cu.EventSynchronize = dlsym(lib, "cuEventSynchronize");
  *(void **)&cu.EventElapsedTime = dlsym(lib, "cuEventElapsedTime");
  /* CUDA 12 drivers and later; only kernels with tensor maps need it. */
  *(void **)&cu.TensorMapEncodeTiled = dlsym(lib, "cuTensorMapEncodeTiled");
  return 0;
}

#define FUSEC_CHECK(call, what)          \
  do {                                   \
    CUresult r_ = (call);                \
    if (r_ != 0) {                       \
      fusec_cuda_error(r_, what);        \
      return 2;                          \
    }                                    \
  } while (0)

/* ------------------------------------------------------------ cuBLASLt, by hand (gemm launches)
 *
 * Opened at run time like the driver: $FUSEC_CUBLASLT (a path) if set, else a libcublasLt
 * already loaded in the process (PyTorch's), else the loader's search path. The enum values
 * below are cuBLASLt's (cublasLt.h, stable across CUDA 12 and 13).
 */

#define FUSEC_GEMM_FIELDS 23
#define LT_DESC_TRANSA 3
#define LT_DESC_TRANSB 4
#define LT_DESC_EPILOGUE 7
#define LT_DESC_BIAS_POINTER 8
#define LT_DESC_BIAS_DATA_TYPE 26
#define LT_LAYOUT_BATCH_COUNT 5
#define LT_LAYOUT_STRIDED_BATCH_OFFSET 6
#define LT_PREF_MAX_WORKSPACE_BYTES 1
#define LT_PREF_MIN_ALIGNMENT_A 5 /* ..._B 6, _C 7, _D 8 */
#define LT_PREF_REDUCTION_SCHEME_MASK 3 /* 0 = CUBLASLT_REDUCTION_SCHEME_NONE: no split-K */
#define CUDA_R_32F 0

typedef int cublasStatus_t;
typedef struct { uint64_t data[8]; } lt_algo;
typedef struct {
  lt_algo algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} lt_heuristic;

static struct {
  cublasStatus_t (*Create)(void **);
  cublasStatus_t (*DescCreate)(void **, int, int);
  cublasStatus_t (*DescSetAttribute)(void *, int, const void *, size_t);
  cublasStatus_t (*LayoutCreate)(void **, int, uint64_t, uint64_t, int64_t);
  cublasStatus_t (*LayoutSetAttribute)(void *, int, const void *, size_t);
  cublasStatus_t (*PrefCreate)(void **);
  cublasStatus_t (*PrefSetAttribute)(void *, int, const void *, size_t);
  cublasStatus_t (*Heuristic)(void *, void *, void *, void *, void *, void *, void *, int,
                              lt_heuristic *, int *);
  cublasStatus_t (*Matmul)(void *, void *, const void *, const void *, void *, const void *,
                           void *, const void *, const void *, void *, void *, void *,
                           const lt_algo *, void *, size_t, CUstream);
  const char *(*StatusName)(cublasStatus_t);
} lt;

typedef struct {
  void *desc, *layout_a, *layout_b, *layout_d;
  lt_algo algo;         /* for 256-byte aligned pointers (cuBLASLt's default assumption) */
  lt_algo algo_16;      /* for pointers aligned to 16 bytes only */
  int have_algo_16;
} fusec_gemm_state;

static void *fusec_lt_handle;
static fusec_gemm_state *fusec_gemms;
static CUdeviceptr fusec_workspace;

static void fusec_lt_error(cublasStatus_t st, const char *what) {
  const char *name = lt.StatusName ? lt.StatusName(st) : NULL;
  fusec_set_error("%s: %s (%d)", what, name ? name : "CUBLAS_STATUS_?", st);
}

#define FUSEC_LT(call, what)             \
  do {                                   \
    cublasStatus_t s_ = (call);          \
    if (s_ != 0) {                       \
      fusec_lt_error(s_, what);          \
      return 2;                          \
    }                                    \
  } while (0)

static int fusec_load_cublaslt(void) {
  static const char *names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
  void *lib = NULL;
  const char *env = getenv("FUSEC_CUBLASLT");
  if (env && env[0]) {
    lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      fusec_set_error("cannot open cuBLASLt at FUSEC_CUBLASLT=%s: %s", env, dlerror());
      return 2;
    }
  }
  for (int i = 0; !lib && i < 3; ++i) lib = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
  for (int i = 0; !lib && i < 3; ++i) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fusec_set_error("this model calls cuBLASLt for its matmuls, and no libcublasLt.so.13/.12 "
                    "was found: set FUSEC_CUBLASLT to its path (pip package nvidia-cublas: "
                    "site-packages/nvidia/cu13/lib or nvidia/cublas/lib)");
    return 2;
  }
  FUSEC_LT_SYM(StatusName, "cublasLtGetStatusName");
  FUSEC_LT_SYM(Create, "cublasLtCreate");
  FUSEC_LT_SYM(DescCreate, "cublasLtMatmulDescCreate");
  FUSEC_LT_SYM(DescSetAttribute, "cublasLtMatmulDescSetAttribute");
  FUSEC_LT_SYM(LayoutCreate, "cublasLtMatrixLayoutCreate");
  FUSEC_LT_SYM(LayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  FUSEC_LT_SYM(PrefCreate, "cublasLtMatmulPreferenceCreate");
  FUSEC_LT_SYM(PrefSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  FUSEC_LT_SYM(Heuristic, "cublasLtMatmulAlgoGetHeuristic");
  FUSEC_LT_SYM(Matmul, "cublasLtMatmul");
#undef FUSEC_LT_SYM
  return 0;
}

/* A column-major rows x cols matrix with leading dimension ld; `batch` of them, `stride`
 * elements apart (0: the same matrix for every batch, operands only). */
static int fusec_layout(void **layout, int type, long long rows, long long cols, long long ld,
                        long long batch, long long batch_stride) {
  FUSEC_LT(lt.LayoutCreate(layout, type, (uint64_t)rows, (uint64_t)cols, ld),
           "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    int64_t stride = batch_stride;
    FUSEC_LT(lt.LayoutSetAttribute(*layout, LT_LAYOUT_BATCH_COUNT, &count, sizeof count),
             "cublasLtMatrixLayoutSetAttribute(batch count)");
    FUSEC_LT(lt.LayoutSetAttribute(*layout, LT_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                   sizeof stride),
             "cublasLtMatrixLayoutSetAttribute(batch stride)");
  }
  return 0;
}

/* The heuristic's best algorithm for gemm launch k (`*count` 0 if none), for pointers aligned
 * to `alignment` bytes (0: default), with or without split-K reductions. */
static int fusec_gemm_heuristic(const fusec_cuda_program *p, fusec_gemm_state *g,
                                uint32_t alignment, int allow_split, lt_heuristic *result,
                                int *count, cublasStatus_t *status) {
  void *pref;
  uint64_t ws = p->gemm_workspace;
  FUSEC_LT(lt.PrefCreate(&pref), "cublasLtMatmulPreferenceCreate");
  FUSEC_LT(lt.PrefSetAttribute(pref, LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
           "cublasLtMatmulPreferenceSetAttribute(workspace)");
  for (int i = 0; alignment && i < 4; ++i)
    FUSEC_LT(lt.PrefSetAttribute(pref, LT_PREF_MIN_ALIGNMENT_A + i, &alignment, sizeof alignment),
             "cublasLtMatmulPreferenceSetAttribute(alignment)");
  if (!allow_split) {
    uint32_t none = 0;
    FUSEC_LT(lt.PrefSetAttribute(pref, LT_PREF_REDUCTION_SCHEME_MASK, &none, sizeof none),
             "cublasLtMatmulPreferenceSetAttribute(reduction scheme)");
  }
  *count = 0;
  *status = lt.Heuristic(fusec_lt_handle, g->desc, g->layout_a, g->layout_b, g->layout_d,
                         g->layout_d, pref, 1, result, count);
  return 0;
}

/* One algorithm for gemm launch k, for pointers aligned to `alignment` bytes (0: default).
 * No split-K reduction unless K dwarfs M and N (or FUSEC_GEMM_SPLIT_K=1), or no algorithm is
 * found without one: one kernel per gemm and one summation order. Measured on the H200
 * (bench/RESULTS.md run 11): the batch-1 TransformerEncoderLayer's gemms (M=16) ran a second,
 * reduction kernel for 4 of 6 gemms when split-K was allowed (13 GPU kernels, graph replay
 * 0.055-0.056 ms; without: 9 kernels, 0.053 ms). */
static int fusec_gemm_algo(const fusec_cuda_program *p, int k, fusec_gemm_state *g,
                           uint32_t alignment, lt_algo *algo, int *found) {
  const long long *t = p->launches[k].gemm;
  long long m = t[11], n = t[10], depth = t[5 - (int)t[2]];
  const char *split = getenv("FUSEC_GEMM_SPLIT_K");
  int allow_split = (split && split[0] == '1') || depth >= 8 * (m > n ? m : n);
  lt_heuristic result;
  int count = 0;
  cublasStatus_t st;
  int rc = fusec_gemm_heuristic(p, g, alignment, allow_split, &result, &count, &st);
  if (!rc && (st != 0 || count == 0) && !allow_split)
    rc = fusec_gemm_heuristic(p, g, alignment, 1, &result, &count, &st);
  if (rc) return rc;
  *found = st == 0 && count > 0;
  if (*found) *algo = result.algo;
  else if (!alignment) {
    fusec_set_error("cuBLASLt has no algorithm for gemm launch %d (m=%lld n=%lld k=%lld "
                    "batch=%lld, epilogue %lld): %s", k, m, n, depth, t[12], t[13],
                    lt.StatusName ? lt.StatusName(st) : "");
    return 2;
  }
  return 0;
}

static int fusec_setup_gemms(const fusec_cuda_program *p) {
  int rc = fusec_load_cublaslt();
  if (rc) return rc;
  FUSEC_LT(lt.Create(&fusec_lt_handle), "cublasLtCreate");
  FUSEC_CHECK(cu.MemAlloc(&fusec_workspace, p->gemm_workspace), "cuMemAlloc(cuBLASLt workspace)");
  fusec_gemms = calloc((size_t)p->num_launches, sizeof *fusec_gemms);
  if (!fusec_gemms) {
    fusec_set_error("out of host memory");
    return 2;
  }
  for (int k = 0; k < p->num_launches; ++k) {
    const long long *t = p->launches[k].gemm;
    if (p->launches[k].kernel != -2) continue;
    fusec_gemm_state *g = &fusec_gemms[k];
    /* t: in type, out type, opA, opB, rowsA, colsA, ldA, rowsB, colsB, ldB, rowsD, colsD,
     * batch, epilogue, has bias, compute type, batch strides of A, B, D, ldD, byte offsets
     * of our A, B, D (codegen_cuda.gemm_table). */
    FUSEC_LT(lt.DescCreate(&g->desc, (int)t[15], CUDA_R_32F), "cublasLtMatmulDescCreate");
    int32_t op_a = (int32_t)t[2], op_b = (int32_t)t[3], epilogue = (int32_t)t[13];
    int32_t bias_type = (int32_t)t[1];
    FUSEC_LT(lt.DescSetAttribute(g->desc, LT_DESC_TRANSA, &op_a, sizeof op_a), "transa");
    FUSEC_LT(lt.DescSetAttribute(g->desc, LT_DESC_TRANSB, &op_b, sizeof op_b), "transb");
    FUSEC_LT(lt.DescSetAttribute(g->desc, LT_DESC_EPILOGUE, &epilogue, sizeof epilogue),
             "cublasLtMatmulDescSetAttribute(epilogue)");
    if (t[14])
      FUSEC_LT(lt.DescSetAttribute(g->desc, LT_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type),
               "cublasLtMatmulDescSetAttribute(bias type)");
    rc = fusec_layout(&g->layout_a, (int)t[0], t[4], t[5], t[6], t[12], t[16]);
    if (!rc) rc = fusec_layout(&g->layout_b, (int)t[0], t[7], t[8], t[9], t[12], t[17]);
    if (!rc) rc = fusec_layout(&g->layout_d, (int)t[1], t[10], t[11], t[19], t[12], t[18]);
    if (rc) return rc;
    int found;
    rc = fusec_gemm_algo(p, k, g, 0, &g->algo, &found);
    if (!rc) rc = fusec_gemm_algo(p, k, g, 16, &g->algo_16, &g->have_algo_16);
    if (rc) return rc;
  }
  return 0;
}

static int fusec_launch_gemm(const fusec_cuda_program *p, int k, const CUdeviceptr *buffers,
                             CUstream stream) {
  const fusec_cuda_launch *l = &p->launches[k];
  fusec_gemm_state *g = &fusec_gemms[k];
  char what[160];
  /* Our A, B, D through their strided views: the byte offsets of gemm_table's last fields. */
  CUdeviceptr ptrs[4];
  for (int i = 0; i < l->num_buffers && i < 4; ++i)
    ptrs[i] = buffers[i] + (i < 3 ? (CUdeviceptr)l->gemm[20 + i] : 0);
  int aligned = 1;
  for (int i = 0; i < l->num_buffers; ++i) aligned &= (ptrs[i] % 256) == 0;
  const lt_algo *algo = &g->algo;
  if (!aligned) {
    for (int i = 0; i < l->num_buffers; ++i)
      if (ptrs[i] % 16) {
        fusec_set_error("gemm launch %d: buffer %d (plan buffer %d) is not 16-byte aligned", k,
                        i, l->buffers[i]);
        return 1;
      }
    if (!g->have_algo_16) {
      fusec_set_error("gemm launch %d: cuBLASLt has no algorithm for pointers aligned to "
                      "less than 256 bytes", k);
      return 2;
    }
    algo = &g->algo_16;
  }
  if (l->gemm[14]) {
    void *bias = (void *)(uintptr_t)ptrs[3];
    FUSEC_LT(lt.DescSetAttribute(g->desc, LT_DESC_BIAS_POINTER, &bias, sizeof bias),
             "cublasLtMatmulDescSetAttribute(bias pointer)");
  }
  const float one = 1.0f, zero = 0.0f;
  snprintf(what, sizeof what, "cublasLtMatmul (launch %d: gemm)", k);
  /* cuBLASLt's A is our B (ptrs[1]), its B our A (ptrs[0]): see codegen_cuda.gemm_table. */
  FUSEC_LT(lt.Matmul(fusec_lt_handle, g->desc, &one, (void *)(uintptr_t)ptrs[1], g->layout_a,
                     (void *)(uintptr_t)ptrs[0], g->layout_b, &zero, (void *)(uintptr_t)ptrs[2],
                     g->layout_d, (void *)(uintptr_t)ptrs[2], g->layout_d, algo,
                     (void *)(uintptr_t)fusec_workspace, p->gemm_workspace, stream),
           what);
  return 0;
}

/* Load the driver, pick the context, load the module, allocate temporaries. Under the lock. */
static int fusec_setup(const fusec_cuda_program *p) {
  if (fusec_ready) {
    /* The module belongs to one context; refuse to launch from another. */
    CUcontext current = NULL;
    FUSEC_CHECK(cu.CtxGetCurrent(&current), "cuCtxGetCurrent");
    if (current == NULL) FUSEC_CHECK(cu.CtxSetCurrent(fusec_context), "cuCtxSetCurrent");
    else if (current != fusec_context) {
      fusec_set_error("the current CUDA context is not the one this model was loaded in");
      return 2;
    }
    return 0;
  }
  int rc = fusec_load_driver();
  if (rc) return rc;
  FUSEC_CHECK(cu.Init(0), "cuInit");
  CUcontext current = NULL;
  FUSEC_CHECK(cu.CtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current == NULL) {
    CUdevice dev;
    FUSEC_CHECK(cu.DeviceGet(&dev, 0), "cuDeviceGet");
    FUSEC_CHECK(cu.DevicePrimaryCtxRetain(&current, dev), "cuDevicePrimaryCtxRetain");
    FUSEC_CHECK(cu.CtxSetCurrent(current), "cuCtxSetCurrent");
  }
  fusec_context = current;
  FUSEC_CHECK(cu.ModuleLoadData(&fusec_module, p->image),
              p->image_is_fatbin ? "cuModuleLoadData(fatbin)" : "cuModuleLoadData(ptx)");
  if (p->num_index_checks) {
    size_t bytes = 0;
    CUresult r = cu.ModuleGetGlobal(&fusec_index_status_ptr, &bytes, fusec_module,
                                    "fusec_index_status");
    if (r == CUDA_ERROR_NOT_FOUND) fusec_index_status_ptr = 0; /* no kernel records one */
    else FUSEC_CHECK(r, "cuModuleGetGlobal(fusec_index_status)");
  }
  fusec_functions = calloc((size_t)p->num_symbols + 1, sizeof *fusec_functions);
  fusec_temps = calloc((size_t)p->num_buffers + 1, sizeof *fusec_temps);
  fusec_maps = calloc((size_t)p->num_launches + 1, sizeof *fusec_maps);
  for (int k = 0; fusec_maps && k < p->num_launches; ++k)
    if (p->launches[k].num_maps) {
      fusec_maps[k] = aligned_alloc(64, sizeof(fusec_tensor_map) * p->launches[k].num_maps);
      if (!fusec_maps[k]) {
        fusec_set_error("out of host memory");
        return 2;
      }
      memset(fusec_maps[k], 0, sizeof(fusec_tensor_map) * p->launches[k].num_maps);
    }
  if (!fusec_functions || !fusec_temps || !fusec_maps) {
    fusec_set_error("out of host memory");
    return 2;
  }
  for (int i = 0; i < p->num_symbols; ++i) {
    char what[256];
    snprintf(what, sizeof what, "cuModuleGetFunction(%s)", p->symbols[i]);
    FUSEC_CHECK(cu.ModuleGetFunction(&fusec_functions[i], fusec_module, p->symbols[i]), what);
  }
  for (int k = 0; k < p->num_launches; ++k) {
    const fusec_cuda_launch *l = &p->launches[k];
    /* Opt in past the default 48 KB when the dynamic part with the kernel's static shared
     * memory (mbarriers) could pass it: an attention kernel with exactly 48 KB of dynamic
     * shared memory failed to launch without it (run 127). */
    if (l->kernel >= 0 && l->shared + 1024 > 48 * 1024) {
      FUSEC_CHECK(cu.FuncSetAttribute(fusec_functions[l->kernel],
                                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)l->shared),
                  "cuFuncSetAttribute(max dynamic shared memory)");
      /* All of the unified L1 / shared memory as shared: the occupancy the compiler planned
       * with (two tensor-core GEMM CTAs of 97 KB per SM) needs more than the default. */
      FUSEC_CHECK(cu.FuncSetAttribute(fusec_functions[l->kernel],
                                      CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100),
                  "cuFuncSetAttribute(shared memory carveout)");
    }
  }
  for (int b = 0; b < p->num_buffers; ++b) {
    const fusec_cuda_buffer *buf = &p->buffers[b];
    if (buf->role < 2 || buf->bytes == 0 || buf->view_of >= 0) continue;
    FUSEC_CHECK(cu.MemAlloc(&fusec_temps[b], buf->bytes),
                buf->role == 2 ? "cuMemAlloc(temporary)" : "cuMemAlloc(constant)");
    if (buf->role == 3)
      FUSEC_CHECK(cu.MemcpyHtoD(fusec_temps[b], buf->data, buf->bytes), "cuMemcpyHtoD(constant)");
  }
  if (p->gemm_workspace) {
    rc = fusec_setup_gemms(p);
    if (rc) return rc;
  }
  fusec_ready = 1;
  return 0;
}

/* The device pointer of plan buffer `id` for this run (a view: its base's plus the offset). */
static CUdeviceptr fusec_buffer_pointer(const fusec_cuda_program *p, int id, void **inputs,
                                        void **outputs) {
  const fusec_cuda_buffer *b = &p->buffers[id];
  if (b->view_of >= 0) return fusec_buffer_pointer(p, b->view_of, inputs, outputs) + b->offset;
  return b->role == 0   ? (CUdeviceptr)(uintptr_t)inputs[b->slot]
         : b->role == 1 ? (CUdeviceptr)(uintptr_t)outputs[b->slot]
                        : fusec_temps[id];
}

/* Tensor map j of launch k for this run's pointers (encoded again only when its address
 * changed since the last run). */
static int fusec_encode_map(const fusec_cuda_launch *l, int k, int j, const CUdeviceptr *ptrs) {
  const long long *f = &l->maps[j * FUSEC_MAP_FIELDS];
  fusec_tensor_map *m = &fusec_maps[k][j];
  CUdeviceptr address = ptrs[f[0]] + (CUdeviceptr)f[FUSEC_MAP_FIELDS - 1];
  if (m->address == address) return 0;
  if (!cu.TensorMapEncodeTiled) {
    fusec_set_error("launch %d reads through TMA and this driver has no cuTensorMapEncodeTiled "
                    "(CUDA 12 or later is needed)", k);
    return 2;
  }
  if (address % 16) {
    fusec_set_error("launch %d: tensor-map operand %d at %#llx is not 16-byte aligned (TMA)", k,
                    (int)f[0], (unsigned long long)address);
    return 1;
  }
  const int rank = (int)f[2];
  uint64_t dims[FUSEC_MAP_RANK], strides[FUSEC_MAP_RANK - 1];
  unsigned box[FUSEC_MAP_RANK], element_strides[FUSEC_MAP_RANK];
  for (int d = 0; d < FUSEC_MAP_RANK; ++d) {
    dims[d] = (uint64_t)f[3 + d];
    box[d] = (unsigned)f[3 + FUSEC_MAP_RANK + FUSEC_MAP_RANK - 1 + d];
    element_strides[d] = 1;
    if (d < FUSEC_MAP_RANK - 1) strides[d] = (uint64_t)f[3 + FUSEC_MAP_RANK + d];
  }
  /* interleave none (0), L2 promotion 256 B (3), out-of-range elements read as zeros (0) */
  CUresult r = cu.TensorMapEncodeTiled(m->bytes, (int)f[1], rank, (void *)(uintptr_t)address,
                                       dims, strides, box, element_strides, 0,
                                       (int)f[FUSEC_MAP_FIELDS - 2], 3, 0);
  if (r != 0) {
    char what[128];
    snprintf(what, sizeof what, "cuTensorMapEncodeTiled (launch %d, map %d)", k, j);
    fusec_cuda_error(r, what);
    return 2;
  }
  m->address = address;
  return 0;
}

/* ------------------------------------------------------------ the profiler
 *
 * Per-launch GPU time between CUDA events (fusec_profile_enable, fusec_profile); guarded by
 * fusec_lock, as the runs are. */

static int fusec_profiling;
static CUevent *fusec_events;   /* num_launches + 1, created on the first profiled run */
static double *fusec_profile_ms;
static int64_t fusec_profile_runs;

static int fusec_profile_setup(const fusec_cuda_program *p) {
  if (fusec_events) return 0;
  if (!cu.EventCreate || !cu.EventRecord || !cu.EventSynchronize || !cu.EventElapsedTime) {
    fusec_set_error("the profiler needs cuEventCreate/Record/Synchronize/ElapsedTime, which "
                    "this driver lacks");
    return 2;
  }
  CUevent *events = calloc((size_t)p->num_launches + 1, sizeof *events);
  double *ms = calloc((size_t)p->num_launches + 1, sizeof *ms);
  if (!events || !ms) {
    free(events);
    free(ms);
    fusec_set_error("out of host memory for the profiler");
    return 2;
  }
  for (int k = 0; k <= p->num_launches; ++k)
    FUSEC_CHECK(cu.EventCreate(&events[k], 0), "cuEventCreate (profiler)");
  fusec_events = events;
  fusec_profile_ms = ms;
  return 0;
}

/* After a profiled run's launches: wait for the last event, add each launch's time. */
static int fusec_profile_collect(const fusec_cuda_program *p) {
  int n = p->num_launches;
  FUSEC_CHECK(cu.EventSynchronize(fusec_events[n]), "a kernel failed (profiled run)");
  for (int k = 0; k < n; ++k) {
    float ms = 0;
    FUSEC_CHECK(cu.EventElapsedTime(&ms, fusec_events[k], fusec_events[k + 1]),
                "cuEventElapsedTime (profiler)");
    fusec_profile_ms[k] += ms;
  }
  fusec_profile_runs++;
  return 0;
}

FUSEC_API void fusec_profile_enable(int on) {
  pthread_mutex_lock(&fusec_lock);
  fusec_profiling = on != 0;
  pthread_mutex_unlock(&fusec_lock);
}

FUSEC_API int64_t fusec_profile(int64_t *ns, int64_t capacity, int64_t *runs, int reset) {
  const fusec_cuda_program *p = fusec_program();
  pthread_mutex_lock(&fusec_lock);
  int64_t used = fusec_profile_ms ? p->num_launches : 0;
  for (int64_t k = 0; k < used && k < capacity; ++k)
    ns[k] = (int64_t)(fusec_profile_ms[k] * 1e6);
  if (runs) *runs = fusec_profile_runs;
  if (reset) {
    if (fusec_profile_ms) memset(fusec_profile_ms, 0, (size_t)p->num_launches * sizeof(double));
    fusec_profile_runs = 0;
  }
  pthread_mutex_unlock(&fusec_lock);
  return used;
}

static int fusec_launch_all(const fusec_cuda_program *p, void **inputs, void **outputs,
                            CUstream stream, int capturing) {
  int profile = fusec_profiling && !capturing;
  if (profile) {
    int rc = fusec_profile_setup(p);
    if (rc) return rc;
  }
#define FUSEC_MARK(k)                                                             \
  do {                                                                            \
    if (profile) FUSEC_CHECK(cu.EventRecord(fusec_events[k], stream), "cuEventRecord"); \
  } while (0)
  const char *env = getenv("FUSEC_CUDA_SYNC");
  int sync_each = !capturing && env && env[0] && env[0] != '0';
  CUdeviceptr ptrs[FUSEC_MAX_ARGS];
  void *params[FUSEC_MAX_ARGS];
  for (int k = 0; k < p->num_launches; ++k) {
    const fusec_cuda_launch *l = &p->launches[k];
    if (l->num_buffers > FUSEC_MAX_ARGS) {
      fusec_set_error("launch %d has %d buffers (at most %d)", k, l->num_buffers, FUSEC_MAX_ARGS);
      return 1;
    }
    for (int i = 0; i < l->num_buffers; ++i) {
      ptrs[i] = fusec_buffer_pointer(p, l->buffers[i], inputs, outputs);
      params[i] = &ptrs[i];
    }
    char what[320];
    FUSEC_MARK(k);
    if (l->kernel == -2) {
      int rc = fusec_launch_gemm(p, k, ptrs, stream);
      if (rc) return rc;
      if (sync_each) {
        snprintf(what, sizeof what, "gemm (launch %d, cublasLtMatmul) failed", k);
        FUSEC_CHECK(cu.StreamSynchronize(stream), what);
      }
      continue;
    }
    if (l->kernel < 0) {
      snprintf(what, sizeof what, "cuMemcpyDtoDAsync (launch %d: output copy)", k);
      FUSEC_CHECK(cu.MemcpyDtoDAsync(ptrs[1], ptrs[0], p->buffers[l->buffers[0]].bytes, stream),
                  what);
      continue;
    }
    const char *name = p->symbols[l->kernel];
    for (int i = 0; l->num_maps && i < l->num_buffers; ++i) {
      /* A launch with tensor maps reads and writes its other buffers 16 bytes at a time: the
       * compiler checked the views' offsets, here the caller's pointers. */
      const fusec_cuda_buffer *root = &p->buffers[l->buffers[i]];
      while (root->view_of >= 0) root = &p->buffers[root->view_of];
      if (root->role < 2) {
        void *given = root->role == 0 ? inputs[root->slot] : outputs[root->slot];
        if ((uintptr_t)given % 16) {
          fusec_set_error("%s %d is not 16-byte aligned (launch %d, %s, reads and writes it "
                          "16 bytes at a time)", root->role == 0 ? "input" : "output",
                          root->slot, k, p->symbols[l->kernel]);
          return 1;
        }
      }
    }
    for (int j = 0; j < l->num_maps; ++j) {
      int rc = fusec_encode_map(l, k, j, ptrs);
      if (rc) return rc;
      params[l->maps[j * FUSEC_MAP_FIELDS]] = fusec_maps[k][j].bytes;
    }
    snprintf(what, sizeof what, "cuLaunchKernel(%s, launch %d, grid %u, block %u)", name, k,
             l->grid, l->block);
    if (p->dependent_launch && cu.LaunchKernelEx) {
      /* The kernel waits for the one before it itself (griddepcontrol.wait, its first
       * instruction): it may launch while that one finishes. */
      CUlaunchAttribute attr;
      memset(&attr, 0, sizeof attr);
      attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr.value.programmatic_stream_serialization_allowed = 1;
      CUlaunchConfig config = {l->grid, 1, 1, l->block, 1, 1, l->shared, stream, &attr, 1};
      FUSEC_CHECK(cu.LaunchKernelEx(&config, fusec_functions[l->kernel], params, NULL), what);
    } else {
      FUSEC_CHECK(cu.LaunchKernel(fusec_functions[l->kernel], l->grid, 1, 1, l->block, 1, 1,
                                  l->shared, stream, params, NULL),
                  what);
    }
    if (sync_each) {
      snprintf(what, sizeof what, "kernel %s (launch %d) failed", name, k);
      FUSEC_CHECK(cu.StreamSynchronize(stream), what);
    }
  }
  FUSEC_MARK(p->num_launches);
#undef FUSEC_MARK
  if (profile) return fusec_profile_collect(p);
  return 0;
}

static int fusec_check_pointers(const char *what, void **ptrs, int count) {
  if (count == 0) return 0;
  if (!ptrs) {
    fusec_set_error("%s is NULL but the model has %d of them", what, count);
    return 1;
  }
  for (int i = 0; i < count; ++i)
    if (!ptrs[i]) {
      fusec_set_error("%s[%d] is NULL", what, i);
      return 1;
    }
  return 0;
}

static int fusec_run_impl(void **inputs, void **outputs, void *stream, int wait) {
  const fusec_cuda_program *p = fusec_program();
  fusec_error[0] = 0;
  int rc = fusec_check_pointers("inputs", inputs, p->num_inputs);
  if (!rc) rc = fusec_check_pointers("outputs", outputs, p->num_outputs);
  if (rc) return rc;
  pthread_mutex_lock(&fusec_lock);
  rc = fusec_setup(p);
  if (!rc) rc = fusec_launch_all(p, inputs, outputs, (CUstream)stream, 0);
  pthread_mutex_unlock(&fusec_lock);
  if (!rc && wait) {
    CUresult r = cu.StreamSynchronize((CUstream)stream);
    if (r != 0) {
      fusec_cuda_error(r, "a kernel failed (set FUSEC_CUDA_SYNC=1 to name it)");
      rc = 2;
    }
  }
  return rc;
}

/* ------------------------------------------------------------ index checks
 *
 * A kernel whose index (read from data: an embedding, a gather) is out of range reads index 0
 * instead (or skips the write) and records the first failure in the device global
 * fusec_index_status. fusec_index_status() waits for `stream`, reads it, clears it and, when a
 * check failed, sets the error (the check's message, the index in place) and returns 3: as
 * torch's device-side assert, the error is known once the launches have run. */

static int fusec_index_status_impl(const fusec_cuda_program *p, void *stream) {
  if (!fusec_index_status_ptr) return 0;
  CUresult r = cu.StreamSynchronize((CUstream)stream);
  if (r != 0) {
    fusec_cuda_error(r, "a kernel failed (set FUSEC_CUDA_SYNC=1 to name it)");
    return 2;
  }
  long long status[2] = {0, 0};
  FUSEC_CHECK(cu.MemcpyDtoH(status, fusec_index_status_ptr, sizeof status),
              "cuMemcpyDtoH(fusec_index_status)");
  if (status[0] == 0) return 0;
  const long long zero[2] = {0, 0};
  FUSEC_CHECK(cu.MemcpyHtoD(fusec_index_status_ptr, zero, sizeof zero),
              "cuMemcpyHtoD(fusec_index_status)");
  long long check = status[0] - 1;
  return fusec_report_index_error(
      check >= 0 && check < p->num_index_checks ? p->index_messages[check] : "", status[1]);
}

/* ------------------------------------------------------------ CUDA graphs
 *
 * fusec_run_graph captures the whole launch sequence (kernels, cuBLASLt calls, output copies)
 * into a CUDA graph on a private stream, once, and replays it with one cuGraphLaunch on the
 * caller's stream while the pointers stay the same; new pointers mean a new capture.
 */

static CUstream fusec_capture_stream;
static CUgraphExec fusec_graph_exec;
static void **fusec_graph_pointers;
static int fusec_graph_count;
static int fusec_graph_captures;

static int fusec_capture(const fusec_cuda_program *p, void **inputs, void **outputs) {
  if (!fusec_capture_stream)
    FUSEC_CHECK(cu.StreamCreate(&fusec_capture_stream, CU_STREAM_NON_BLOCKING),
                "cuStreamCreate(capture stream)");
  if (fusec_graph_exec) {
    cu.GraphExecDestroy(fusec_graph_exec);
    fusec_graph_exec = NULL;
  }
  FUSEC_CHECK(cu.StreamBeginCapture(fusec_capture_stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
              "cuStreamBeginCapture");
  int rc = fusec_launch_all(p, inputs, outputs, fusec_capture_stream, 1);
  CUgraph graph = NULL;
  CUresult r = cu.StreamEndCapture(fusec_capture_stream, &graph);
  if (rc) {
    if (graph) cu.GraphDestroy(graph);
    return rc;
  }
  if (r != 0) {
    fusec_cuda_error(r, "cuStreamEndCapture");
    return 2;
  }
  r = cu.GraphInstantiate(&fusec_graph_exec, graph, 0);
  cu.GraphDestroy(graph);
  if (r != 0) {
    fusec_cuda_error(r, "cuGraphInstantiateWithFlags");
    fusec_graph_exec = NULL;
    return 2;
  }
  int n = p->num_inputs + p->num_outputs;
  if (!fusec_graph_pointers) fusec_graph_pointers = calloc((size_t)n + 1, sizeof(void *));
  if (!fusec_graph_pointers) {
    fusec_set_error("out of host memory");
    return 2;
  }
  for (int i = 0; i < p->num_inputs; ++i) fusec_graph_pointers[i] = inputs[i];
  for (int i = 0; i < p->num_outputs; ++i) fusec_graph_pointers[p->num_inputs + i] = outputs[i];
  fusec_graph_count = n;
  fusec_graph_captures += 1;
  return 0;
}

static int fusec_same_pointers(const fusec_cuda_program *p, void **inputs, void **outputs) {
  if (!fusec_graph_exec || fusec_graph_count != p->num_inputs + p->num_outputs) return 0;
  for (int i = 0; i < p->num_inputs; ++i)
    if (fusec_graph_pointers[i] != inputs[i]) return 0;
  for (int i = 0; i < p->num_outputs; ++i)
    if (fusec_graph_pointers[p->num_inputs + i] != outputs[i]) return 0;
  return 1;
}

static int fusec_run_graph_impl(void **inputs, void **outputs, void *stream) {
  const fusec_cuda_program *p = fusec_program();
  fusec_error[0] = 0;
  int rc = fusec_check_pointers("inputs", inputs, p->num_inputs);
  if (!rc) rc = fusec_check_pointers("outputs", outputs, p->num_outputs);
  if (rc) return rc;
  pthread_mutex_lock(&fusec_lock);
  rc = fusec_setup(p);
  if (!rc && !fusec_same_pointers(p, inputs, outputs)) rc = fusec_capture(p, inputs, outputs);
  if (!rc) {
    CUresult r = cu.GraphLaunch(fusec_graph_exec, (CUstream)stream);
    if (r != 0) {
      fusec_cuda_error(r, "cuGraphLaunch");
      rc = 2;
    }
  }
  pthread_mutex_unlock(&fusec_lock);
  return rc;
}

/* ------------------------------------------------------------ exported ABI */

FUSEC_API int fusec_abi_version(void) { return FUSEC_CUDA_ABI_VERSION; }

FUSEC_API const char *fusec_metadata(void) { return fusec_program()->metadata; }

FUSEC_API const char *fusec_last_error(void) { return fusec_error; }

FUSEC_API int fusec_num_threads(void) { return 1; }

FUSEC_API int fusec_run_stream(void **inputs, void **outputs, void *stream) {
  return fusec_run_impl(inputs, outputs, stream, 0);
}

/* Like fusec_run_stream, through a CUDA graph captured on the first call and replayed while
 * the pointers are the same (asynchronous on `stream`). */
FUSEC_API int fusec_run_graph(void **inputs, void **outputs, void *stream) {
  return fusec_run_graph_impl(inputs, outputs, stream);
}

/* How many times fusec_run_graph captured a graph (1 + pointer changes). */
FUSEC_API int fusec_graph_captures_count(void) { return fusec_graph_captures; }

/* 3 (and the error set) when an index check of the runs on `stream` so far failed; waits
 * for the stream. 0: none failed (or the model checks no index). */
FUSEC_API int fusec_index_status(void *stream) {
  fusec_error[0] = 0;
  pthread_mutex_lock(&fusec_lock);
  int rc = fusec_ready ? fusec_index_status_impl(fusec_program(), stream) : 0;
  pthread_mutex_unlock(&fusec_lock);
  return rc;
}

FUSEC_API int fusec_run(void **inputs, void **outputs) {
  int rc = fusec_run_impl(inputs, outputs, NULL, 1);
  return rc ? rc : fusec_index_status(NULL);
}
