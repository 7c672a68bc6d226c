/*
 * fusec CUDA runtime: what the generated host code of a CUDA `model.so` and runtime/shim_cuda.c
 * share. The generated code (fusec.compiler.targets.cuda.artifact.host_code) includes only
 * this header and defines the tables and `fusec_program()`; the shim is compiled once into an
 * object (kept in fusec's cache folder) and linked with it, so its 1,000 lines are not compiled
 * again for every model.
 */
#ifndef FUSEC_SHIM_CUDA_H
#define FUSEC_SHIM_CUDA_H

#include <stddef.h>

typedef struct {
  int kernel;          /* index into symbols; -1: copy buffers[0] -> buffers[1]; -2: gemm */
  unsigned grid;       /* blocks */
  unsigned block;      /* threads per block */
  unsigned shared;     /* dynamic shared memory bytes */
  int num_buffers;
  const int *buffers;  /* plan buffer ids, in kernel argument order (gemm: A, B, D[, bias]) */
  const long long *gemm; /* kernel -2: FUSEC_GEMM_FIELDS numbers (codegen_cuda.gemm_table) */
  int num_maps;        /* kernel >= 0: tensor-map parameters (FUSEC_MAP_FIELDS numbers each) */
  const long long *maps;
} fusec_cuda_launch;

typedef struct {
  int role;            /* 0 input, 1 output, 2 temp, 3 constant (weights, uploaded once) */
  int slot;            /* position in inputs[] / outputs[] (-1 otherwise) */
  unsigned long long bytes;
  const unsigned char *data; /* role 3: the constant's bytes */
  int view_of;         /* >= 0: no storage; the bytes of buffer view_of from `offset` */
  unsigned long long offset;
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
  unsigned long long gemm_workspace; /* bytes of cuBLASLt workspace (0: no gemm launches) */
  const char *const *index_messages; /* one per index check, "{index}" where the index goes */
  int num_index_checks;
  int dependent_launch; /* 1: kernels start with griddepcontrol (launched with the programmatic
                           stream serialization attribute, dependent_launch.py) */
} fusec_cuda_program;

/* The model's tables, defined by the generated code. Hidden: the shim's object calls it
 * across the link, but model.so exports only the C ABI (the version script's names). */
__attribute__((visibility("hidden"))) const fusec_cuda_program *fusec_program(void);

#endif
