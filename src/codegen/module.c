/*
 * module.c - compiled images loaded as CUDA libraries (cudaLibraryLoadData:
 * context-independent, loaded into every context), each once per process
 * and kept loaded for its life: the ranks of a one-GPU world and the plans
 * of one program share them, and nothing unloads a module while another
 * rank's kernels run (unloading may wait for the device).
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>

#include "codegen/emit.h"
#include "codegen/prog.h"
#include "core/error.h"

typedef struct cg_module {
  uint64_t key;
  const void *image;
  cudaLibrary_t lib;
  cudaKernel_t kernel;
} cg_module_t;

static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;
static cg_module_t *modules;
static int nmodules, capmodules;

/* Under the lock: the image loaded and its kernel appended. */
static loom_result_t load(const void *image, uint64_t key, cudaKernel_t *out) {
  if (nmodules == capmodules) {
    const int cap = capmodules ? 2 * capmodules : 16;
    cg_module_t *m = realloc(modules, sizeof *m * (size_t)cap);
    if (!m) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loading a generated kernel: out of host memory");
    modules = m, capmodules = cap;
  }
  cg_module_t *m = &modules[nmodules];
  m->key = key, m->image = image;
  LOOM_CUDA(cudaLibraryLoadData(&m->lib, image, NULL, NULL, 0, NULL, NULL, 0));
  const cudaError_t e = cudaLibraryGetKernel(&m->kernel, m->lib, LOOM_CG_KERNEL);
  if (e != cudaSuccess) {
    (void)cudaLibraryUnload(m->lib);
    return loom__cuda_fail((int)e, "cudaLibraryGetKernel (a generated kernel)", __FILE__, __LINE__);
  }
  nmodules++;
  *out = m->kernel;
  return LOOM_SUCCESS;
}

loom_result_t loom__cg_module_kernel(const void *image, uint64_t key, const void **func) {
  pthread_mutex_lock(&module_lock);
  cudaKernel_t k = NULL;
  for (int i = 0; i < nmodules && !k; ++i)
    if (modules[i].key == key && modules[i].image == image) k = modules[i].kernel;
  const loom_result_t r = k ? LOOM_SUCCESS : load(image, key, &k);
  pthread_mutex_unlock(&module_lock);
  *func = (const void *)k;
  return r;
}
