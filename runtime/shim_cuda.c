/*
 * fusec CUDA runtime shim: the fixed C part of every CUDA `model.so`.
 *
 * The generated host code (fusec.compiler.codegen_cuda.host_code) #includes this file, then
 * defines the tables (the kernels' image, the launches in plan order, the buffers) and
 * `fusec_program()`. The library links only libc/libdl/libpthread: libcuda.so.1 is opened with
 * dlopen on the first run, so a model.so loads (and its metadata reads) on a machine with no GPU.
 *
 * C ABI: the same as the CPU artifact (runtime/shim.c, ABI version 1), with device pointers:
 *   int fusec_abi_version(void);
 *   const char *fusec_metadata(void);
 *   int fusec_run_stream(void **inputs, void **outputs, void *stream);
 *       inputs/outputs: CUdeviceptr values (dense, row-major); stream: a CUstream or NULL (the
 *       legacy default stream). Asynchronous: returns once every launch is queued.
 *   int fusec_run(void **inputs, void **outputs);
 *       fusec_run_stream on the default stream, then waits for it.
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

typedef struct {
  int kernel;          /* index into symbols, or -1: copy buffers[0] -> buffers[1] */
  unsigned grid;       /* blocks */
  unsigned block;      /* threads per block */
  unsigned shared;     /* dynamic shared memory bytes */
  int num_buffers;
  const int *buffers;  /* plan buffer ids, in kernel argument order */
} fusec_cuda_launch;

typedef struct {
  int role;            /* 0 input, 1 output, 2 temp, 3 constant (weights, uploaded once) */
  int slot;            /* position in inputs[] / outputs[] (-1 otherwise) */
  unsigned long long bytes;
  const unsigned char *data; /* role 3: the constant's bytes */
} fusec_cuda_buffer;

typedef struct {
  const unsigned char *image;  /* fatbin (cubin + PTX) or NUL-terminated PTX */
  size_t image_size;
  int image_is_fatbin;
  const char *const *symbols;
  int num_symbols;
  const fusec_cuda_launch *launches;
  int num_launches;
  const fusec_cuda_buffer *buffers;
  int num_buffers;
  int num_inputs;
  int num_outputs;
  const char *metadata;
} fusec_cuda_program;

static const fusec_cuda_program *fusec_program(void);

/* ------------------------------------------------------------ the driver API, by hand */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8

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
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
} cu;

/* ------------------------------------------------------------ state and errors */

static pthread_mutex_t fusec_lock = PTHREAD_MUTEX_INITIALIZER;
static int fusec_ready;
static CUcontext fusec_context;
static CUmodule fusec_module;
static CUfunction *fusec_functions;
static CUdeviceptr *fusec_temps;
static __thread char fusec_error[1024];

static void fusec_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fusec_error, sizeof fusec_error, fmt, ap);
  va_end(ap);
}

static void fusec_cuda_error(CUresult r, const char *what) {
  const char *name = "CUDA_ERROR_UNKNOWN", *text = "";
  if (cu.GetErrorName) cu.GetErrorName(r, &name);
  if (cu.GetErrorString) cu.GetErrorString(r, &text);
  fusec_set_error("%s: %s (%d): %s", what, name ? name : "?", r, text ? text : "");
}

#define FUSEC_SYM(field, name)                                       \
  do {                                                               \
    *(void **)&cu.field = dlsym(lib, name);                          \
    if (!cu.field) {                                                 \
      fusec_set_error("libcuda.so.1 has no symbol %s", name);        \
      return 2;                                                      \
    }                                                                \
  } while (0)

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
  FUSEC_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  FUSEC_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
  FUSEC_SYM(StreamSynchronize, "cuStreamSynchronize");
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
  fusec_functions = calloc((size_t)p->num_symbols + 1, sizeof *fusec_functions);
  fusec_temps = calloc((size_t)p->num_buffers + 1, sizeof *fusec_temps);
  if (!fusec_functions || !fusec_temps) {
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
    if (l->kernel >= 0 && l->shared > 48 * 1024)
      FUSEC_CHECK(cu.FuncSetAttribute(fusec_functions[l->kernel],
                                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      (int)l->shared),
                  "cuFuncSetAttribute(max dynamic shared memory)");
  }
  for (int b = 0; b < p->num_buffers; ++b) {
    const fusec_cuda_buffer *buf = &p->buffers[b];
    if (buf->role < 2 || buf->bytes == 0) continue;
    FUSEC_CHECK(cu.MemAlloc(&fusec_temps[b], buf->bytes),
                buf->role == 2 ? "cuMemAlloc(temporary)" : "cuMemAlloc(constant)");
    if (buf->role == 3)
      FUSEC_CHECK(cu.MemcpyHtoD(fusec_temps[b], buf->data, buf->bytes), "cuMemcpyHtoD(constant)");
  }
  fusec_ready = 1;
  return 0;
}

static int fusec_launch_all(const fusec_cuda_program *p, void **inputs, void **outputs,
                            CUstream stream) {
  const char *env = getenv("FUSEC_CUDA_SYNC");
  int sync_each = env && env[0] && env[0] != '0';
  CUdeviceptr ptrs[FUSEC_MAX_ARGS];
  void *params[FUSEC_MAX_ARGS];
  for (int k = 0; k < p->num_launches; ++k) {
    const fusec_cuda_launch *l = &p->launches[k];
    if (l->num_buffers > FUSEC_MAX_ARGS) {
      fusec_set_error("launch %d has %d buffers (at most %d)", k, l->num_buffers, FUSEC_MAX_ARGS);
      return 1;
    }
    for (int i = 0; i < l->num_buffers; ++i) {
      const fusec_cuda_buffer *b = &p->buffers[l->buffers[i]];
      ptrs[i] = b->role == 0   ? (CUdeviceptr)(uintptr_t)inputs[b->slot]
                : b->role == 1 ? (CUdeviceptr)(uintptr_t)outputs[b->slot]
                               : fusec_temps[l->buffers[i]];
      params[i] = &ptrs[i];
    }
    char what[320];
    if (l->kernel < 0) {
      snprintf(what, sizeof what, "cuMemcpyDtoDAsync (launch %d: output copy)", k);
      FUSEC_CHECK(cu.MemcpyDtoDAsync(ptrs[1], ptrs[0], p->buffers[l->buffers[0]].bytes, stream),
                  what);
      continue;
    }
    const char *name = p->symbols[l->kernel];
    snprintf(what, sizeof what, "cuLaunchKernel(%s, launch %d, grid %u, block %u)", name, k,
             l->grid, l->block);
    FUSEC_CHECK(cu.LaunchKernel(fusec_functions[l->kernel], l->grid, 1, 1, l->block, 1, 1,
                                l->shared, stream, params, NULL),
                what);
    if (sync_each) {
      snprintf(what, sizeof what, "kernel %s (launch %d) failed", name, k);
      FUSEC_CHECK(cu.StreamSynchronize(stream), what);
    }
  }
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
  if (!rc) rc = fusec_launch_all(p, inputs, outputs, (CUstream)stream);
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

/* ------------------------------------------------------------ exported ABI */

FUSEC_API int fusec_abi_version(void) { return FUSEC_CUDA_ABI_VERSION; }

FUSEC_API const char *fusec_metadata(void) { return fusec_program()->metadata; }

FUSEC_API const char *fusec_last_error(void) { return fusec_error; }

FUSEC_API int fusec_num_threads(void) { return 1; }

FUSEC_API int fusec_run_stream(void **inputs, void **outputs, void *stream) {
  return fusec_run_impl(inputs, outputs, stream, 0);
}

FUSEC_API int fusec_run(void **inputs, void **outputs) {
  return fusec_run_impl(inputs, outputs, NULL, 1);
}
