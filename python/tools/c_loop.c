/*
 * c_loop.c - the C side of the binding-overhead benchmark (bench_overhead.py).
 *
 * n loom_gemm calls back to back, issued from C: what a C program pays per
 * call, against which the Python binding's cost is measured. The function to
 * call is passed in (the binding's own loom_gemm from the libloom it loaded),
 * so this file needs no header and links nothing: `cc -O2 -shared -fPIC`.
 */
typedef int (*loom_gemm_fn)(const void *desc, const void *a, const void *b, void *c, const void *bias,
                            void *stream);

/* Returns the first failed call's result, or 0 (LOOM_SUCCESS). */
int loom_c_loop_gemm(loom_gemm_fn gemm, const void *desc, const void *a, const void *b, void *c,
                     const void *bias, void *stream, int n) {
  for (int i = 0; i < n; ++i) {
    int r = gemm(desc, a, b, c, bias, stream);
    if (r != 0) return r;
  }
  return 0;
}
