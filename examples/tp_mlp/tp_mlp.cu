/*
 * tp_mlp.cu - a Megatron-style sequence-parallel MLP trained for a few steps
 * on W GPUs with loom's fused tensor-parallel ops, checked against the same
 * layer computed on the host in double precision.
 *
 *   ./build/examples/tp_mlp/tp_mlp [W]        (default: every GPU, at most 8)
 *
 * The layer (tokens m over all ranks, hidden h, FFN f; rank r holds rows
 * [r S, (r+1) S) of the activations, S = m / W, and 1/W of each weight):
 *   forward   H  = gelu(AllGather(X) W1^T + b1)   loom_ag_gemm, GeLU fused (fc1, column-parallel)
 *             Y  = ReduceScatter(H W2^T) + b2      loom_gemm_rs               (fc2, row-parallel)
 *   loss      L  = 1/2 sum Y^2, so dY = Y
 *   backward  dH = AllGather(dY) W2                loom_ag_gemm, the gathered dY kept
 *             dW2 = dY_full^T H, db2 = colsum dY_full            (cuBLAS)
 *             Z  = X_full W1^T + b1 (recomputed), dZ = dH gelu'(Z)  (loom_gemm + a kernel)
 *             dX = ReduceScatter(dZ W1)            loom_gemm_rs
 *             dW1 = dZ^T X_full, db1 = colsum dZ                 (cuBLAS)
 *   update    W -= lr dW (fp32 master weights, bf16 copies for the GEMMs)
 * Each step's Y, dX and weight gradients are compared with the host's
 * (relative error over the whole tensor); the program prints PASS or FAIL
 * and exits 0 or 1. One process per rank (forked before CUDA starts), the
 * NCCL id through a pipe.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <loom.h>

#define M_TOK 512   /* tokens over all ranks */
#define HID 512     /* h */
#define FFN 1024    /* f (over all ranks) */
#define STEPS 3
#define LR 1e-3f
#define TOL 2e-2    /* relative error bound of a bf16 layer against double */

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "rank %d: %s: %s\n", g_rank, #call, cudaGetErrorString(e_));                \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)
#define LK(call)                                                                                  \
  do {                                                                                            \
    loom_result_t r_ = (call);                                                                    \
    if (r_ != LOOM_SUCCESS) {                                                                     \
      fprintf(stderr, "rank %d: %s: %s: %s\n", g_rank, #call, loom_result_string(r_), loom_last_error()); \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)
#define BK(call)                                                                                  \
  do {                                                                                            \
    cublasStatus_t s_ = (call);                                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                            \
      fprintf(stderr, "rank %d: %s: cuBLAS status %d\n", g_rank, #call, (int)s_);                 \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

static int g_rank = 0;

/* ---- host reference (double) ------------------------------------------- */

static double gelu(double v) { return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }
static double gelu_grad(double v) {
  const double u = 0.7978845608028654 * (v + 0.044715 * v * v * v), t = tanh(u);
  return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
}

static double rnd(uint64_t *s) { /* uniform in [-1, 1) */
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static double bf16_round(double v) { return (double)__bfloat162float(__float2bfloat16_rn((float)v)); }

typedef struct ref_model {
  double *x, *w1, *b1, *w2, *b2; /* x [m, h], w1 [f, h], b1 [f], w2 [h, f], b2 [h] */
  double *y, *dx, *dw1, *db1, *dw2, *db2;
} ref_model_t;

/* One step of the whole layer on the host: forward, backward (into the
 * gradients), SGD update. GEMM inputs rounded to bf16 as the GPUs see them. */
static void ref_step(ref_model_t *R) {
  const int m = M_TOK, h = HID, f = FFN;
  double *z = (double *)calloc((size_t)m * f, sizeof(double)), *hh = (double *)calloc((size_t)m * f, sizeof(double));
  double *dh = (double *)calloc((size_t)m * f, sizeof(double)), *dz = (double *)calloc((size_t)m * f, sizeof(double));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < f; ++j) {
      double acc = 0;
      for (int c = 0; c < h; ++c) acc += bf16_round(R->x[i * h + c]) * bf16_round(R->w1[j * h + c]);
      z[i * f + j] = acc + R->b1[j];
      hh[i * f + j] = bf16_round(gelu(z[i * f + j]));
    }
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < h; ++c) {
      double acc = 0;
      for (int j = 0; j < f; ++j) acc += hh[i * f + j] * bf16_round(R->w2[c * f + j]);
      R->y[i * h + c] = acc + R->b2[c];
    }
  /* dY = Y */
  memset(R->db2, 0, sizeof(double) * h);
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < h; ++c) R->db2[c] += bf16_round(R->y[i * h + c]);
  for (int c = 0; c < h; ++c)
    for (int j = 0; j < f; ++j) {
      double acc = 0;
      for (int i = 0; i < m; ++i) acc += bf16_round(R->y[i * h + c]) * hh[i * f + j];
      R->dw2[c * f + j] = acc;
    }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < f; ++j) {
      double acc = 0;
      for (int c = 0; c < h; ++c) acc += bf16_round(R->y[i * h + c]) * bf16_round(R->w2[c * f + j]);
      dh[i * f + j] = acc;
      dz[i * f + j] = bf16_round(bf16_round(acc) * gelu_grad(z[i * f + j]));
    }
  memset(R->db1, 0, sizeof(double) * f);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < f; ++j) R->db1[j] += dz[i * f + j];
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < h; ++c) {
      double acc = 0;
      for (int j = 0; j < f; ++j) acc += dz[i * f + j] * bf16_round(R->w1[j * h + c]);
      R->dx[i * h + c] = acc;
    }
  for (int j = 0; j < f; ++j)
    for (int c = 0; c < h; ++c) {
      double acc = 0;
      for (int i = 0; i < m; ++i) acc += dz[i * f + j] * bf16_round(R->x[i * h + c]);
      R->dw1[j * h + c] = acc;
    }
  for (int k = 0; k < f * h; ++k) R->w1[k] -= LR * R->dw1[k], R->w2[k] -= LR * R->dw2[k];
  for (int j = 0; j < f; ++j) R->b1[j] -= LR * R->db1[j];
  for (int c = 0; c < h; ++c) R->b2[c] -= LR * R->db2[c];
  free(z), free(hh), free(dh), free(dz);
}

/* ||got - ref|| / ||ref|| over n elements; got is strided into ref by a row
 * map: element e of got compares with ref[idx(e)]. */
static double rel_err(const float *got, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = (double)got[i] - ref[i];
    if (!isfinite(got[i])) return INFINITY;
    num += d * d, den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- device helpers ------------------------------------------------------ */

__global__ void gelu_backward(const __nv_bfloat16 *dh, const __nv_bfloat16 *z, __nv_bfloat16 *dz, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float v = __bfloat162float(z[i]);
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v), t = tanhf(u);
    const float g = 0.5f * (1 + t) + 0.5f * v * (1 - t * t) * 0.7978845608028654f * (1 + 3 * 0.044715f * v * v);
    dz[i] = __float2bfloat16_rn(__bfloat162float(dh[i]) * g);
  }
}

__global__ void col_sum(const __nv_bfloat16 *x, int rows, int cols, float *out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0;
  for (int i = 0; i < rows; ++i) acc += __bfloat162float(x[(size_t)i * cols + c]);
  out[c] = acc;
}

/* master (fp32) -= lr g; copy (bf16) = master */
__global__ void sgd(float *master, const float *g, __nv_bfloat16 *copy, size_t n, float lr) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    master[i] -= lr * g[i];
    copy[i] = __float2bfloat16_rn(master[i]);
  }
}

__global__ void to_bf16(const float *x, __nv_bfloat16 *y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void from_bf16(const __nv_bfloat16 *x, float *y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}

/* ---- one rank ------------------------------------------------------------ */

static int run_rank(int rank, int W, ncclUniqueId id) {
  g_rank = rank;
  const int m = M_TOK, h = HID, f = FFN, S = m / W, fl = f / W;
  CK(cudaSetDevice(rank));
  ncclComm_t nccl;
  if (ncclCommInitRank(&nccl, W, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
    return 1;
  }
  loom_comm_t comm;
  LK(loom_comm_create(nccl, NULL, &comm));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t cb;
  BK(cublasCreate(&cb));
  BK(cublasSetStream(cb, s));

  /* the whole model on the host (every rank builds the same one) */
  ref_model_t R;
  double **fields[] = {&R.x, &R.w1, &R.b1, &R.w2, &R.b2, &R.y, &R.dx, &R.dw1, &R.db1, &R.dw2, &R.db2};
  const size_t sizes[] = {(size_t)m * h, (size_t)f * h, (size_t)f, (size_t)h * f, (size_t)h, (size_t)m * h,
                          (size_t)m * h, (size_t)f * h, (size_t)f, (size_t)h * f, (size_t)h};
  for (int i = 0; i < 11; ++i) *fields[i] = (double *)calloc(sizes[i], sizeof(double));
  uint64_t seed = 42;
  for (size_t i = 0; i < sizes[0]; ++i) R.x[i] = rnd(&seed);
  for (size_t i = 0; i < sizes[1]; ++i) R.w1[i] = rnd(&seed) * 0.06;
  for (size_t i = 0; i < sizes[2]; ++i) R.b1[i] = rnd(&seed) * 0.1;
  for (size_t i = 0; i < sizes[3]; ++i) R.w2[i] = rnd(&seed) * 0.04;
  for (size_t i = 0; i < sizes[4]; ++i) R.b2[i] = rnd(&seed) * 0.1;

  /* this rank's shards, fp32 masters: W1 rows [r fl, (r+1) fl) ([fl, h]),
   * b1 the same, W2 columns [r fl, (r+1) fl) ([h, fl]), b2 whole */
  float *hx = (float *)malloc(sizeof(float) * S * h), *hw1 = (float *)malloc(sizeof(float) * fl * h);
  float *hb1 = (float *)malloc(sizeof(float) * fl), *hw2 = (float *)malloc(sizeof(float) * h * fl);
  float *hb2 = (float *)malloc(sizeof(float) * h);
  for (int i = 0; i < S * h; ++i) hx[i] = (float)R.x[(size_t)rank * S * h + i];
  for (int j = 0; j < fl; ++j)
    for (int c = 0; c < h; ++c) hw1[j * h + c] = (float)R.w1[(size_t)(rank * fl + j) * h + c];
  for (int j = 0; j < fl; ++j) hb1[j] = (float)R.b1[rank * fl + j];
  for (int c = 0; c < h; ++c)
    for (int j = 0; j < fl; ++j) hw2[c * fl + j] = (float)R.w2[(size_t)c * f + rank * fl + j];
  for (int c = 0; c < h; ++c) hb2[c] = (float)R.b2[c];

  /* device buffers: fp32 masters and gradients, bf16 copies for the GEMMs */
  float *mw1, *mb1, *mw2, *mb2, *gw1, *gb1, *gw2, *gb2, *fx;
  __nv_bfloat16 *x, *w1, *b1, *w2, *b2, *hact, *y, *dh, *z, *dz, *dx, *x_full, *dy_full;
  CK(cudaMalloc(&mw1, sizeof(float) * fl * h));
  CK(cudaMalloc(&gw1, sizeof(float) * fl * h));
  CK(cudaMalloc(&mw2, sizeof(float) * h * fl));
  CK(cudaMalloc(&gw2, sizeof(float) * h * fl));
  CK(cudaMalloc(&mb1, sizeof(float) * fl));
  CK(cudaMalloc(&gb1, sizeof(float) * fl));
  CK(cudaMalloc(&mb2, sizeof(float) * h));
  CK(cudaMalloc(&gb2, sizeof(float) * h));
  CK(cudaMalloc(&fx, sizeof(float) * S * h));
  CK(cudaMalloc(&x, 2 * S * h));
  CK(cudaMalloc(&w1, 2 * fl * h));
  CK(cudaMalloc(&b1, 2 * fl));
  CK(cudaMalloc(&w2, 2 * h * fl));
  CK(cudaMalloc(&b2, 2 * h));
  CK(cudaMalloc(&hact, 2 * (size_t)m * fl));
  CK(cudaMalloc(&y, 2 * S * h));
  CK(cudaMalloc(&dh, 2 * (size_t)m * fl));
  CK(cudaMalloc(&z, 2 * (size_t)m * fl));
  CK(cudaMalloc(&dz, 2 * (size_t)m * fl));
  CK(cudaMalloc(&dx, 2 * S * h));
  /* the gathered activations are kept for the weight gradients: symmetric memory */
  LK(loom_malloc(comm, 2 * (size_t)m * h, (void **)&x_full));
  LK(loom_malloc(comm, 2 * (size_t)m * h, (void **)&dy_full));
  CK(cudaMemcpy(mw1, hw1, sizeof(float) * fl * h, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(mw2, hw2, sizeof(float) * h * fl, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(mb1, hb1, sizeof(float) * fl, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(mb2, hb2, sizeof(float) * h, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(fx, hx, sizeof(float) * S * h, cudaMemcpyHostToDevice));
  to_bf16<<<64, 256, 0, s>>>(mw1, w1, (size_t)fl * h);
  to_bf16<<<64, 256, 0, s>>>(mw2, w2, (size_t)h * fl);
  to_bf16<<<4, 256, 0, s>>>(mb1, b1, fl);
  to_bf16<<<4, 256, 0, s>>>(mb2, b2, h);
  to_bf16<<<64, 256, 0, s>>>(fx, x, (size_t)S * h);
  CK(cudaGetLastError());

  /* four plans: fc1 forward (AG, GeLU fused), fc2 forward (RS), fc2's input
   * gradient (AG, W2 as [k, n] = [h, fl]), fc1's input gradient (RS, W1 as
   * [k, n] = [fl, h]) */
  loom_plan_t p_fc1, p_fc2, p_dh, p_dx;
  /* the fused transfers by name: at this small size AUTO would take the
   * sequential path (a 256-row shard is memory-bound on the weight, the
   * GEMM+RS tiles fit one wave), and the example is here to run the fused ops */
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.world_size = W;
  d.m = m, d.n = fl, d.k = h, d.b_layout = LOOM_B_NK, d.has_bias = 1, d.activation = LOOM_ACT_GELU_TANH;
  d.transfer = LOOM_TP_COPY_ENGINE;
  LK(loom_plan_ag_gemm(comm, &d, &p_fc1));
  d.m = m, d.n = h, d.k = fl, d.b_layout = LOOM_B_NK, d.has_bias = 1, d.activation = LOOM_ACT_NONE;
  d.transfer = LOOM_TP_SM_COPY;
  LK(loom_plan_gemm_rs(comm, &d, &p_fc2));
  d.m = m, d.n = fl, d.k = h, d.b_layout = LOOM_B_KN, d.has_bias = 0;
  d.transfer = LOOM_TP_COPY_ENGINE;
  LK(loom_plan_ag_gemm(comm, &d, &p_dh));
  d.m = m, d.n = h, d.k = fl, d.b_layout = LOOM_B_KN, d.has_bias = 0;
  d.transfer = LOOM_TP_SM_COPY;
  LK(loom_plan_gemm_rs(comm, &d, &p_dx));
  loom_gemm_desc_t dz_desc = LOOM_GEMM_DESC(m, fl, h, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
  loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
  LK(loom_tp_plan_info(p_fc1, &info));
  if (rank == 0) printf("tp_mlp: W=%d, m=%d h=%d f=%d, transfer %d, %d steps\n", W, m, h, f, (int)info.transfer, STEPS);

  float *gy = (float *)malloc(sizeof(float) * S * h), *gdx = (float *)malloc(sizeof(float) * S * h);
  float *gw1h = (float *)malloc(sizeof(float) * fl * h), *gw2h = (float *)malloc(sizeof(float) * h * fl);
  float *gb1h = (float *)malloc(sizeof(float) * fl), *gb2h = (float *)malloc(sizeof(float) * h);
  double *r1 = (double *)malloc(sizeof(double) * fl * h), *r2 = (double *)malloc(sizeof(double) * h * fl);
  const float one = 1.f, zero = 0.f;
  int bad = 0;
  float *tmp;
  CK(cudaMalloc(&tmp, sizeof(float) * S * h));
  for (int step = 0; step < STEPS; ++step) {
    /* forward */
    LK(loom_ag_gemm(p_fc1, x, w1, hact, x_full, b1, s));
    LK(loom_gemm_rs(p_fc2, hact, w2, y, b2, s));
    /* backward: dY = Y */
    LK(loom_ag_gemm(p_dh, y, w2, dh, dy_full, NULL, s));
    /* dW2 [h, fl] = dY_full^T [h, m] x H [m, fl]  (column-major: dW2^T = H^T dY) */
    BK(cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_T, fl, h, m, &one, hact, CUDA_R_16BF, fl, dy_full, CUDA_R_16BF, h,
                    &zero, gw2, CUDA_R_32F, fl, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    col_sum<<<(h + 127) / 128, 128, 0, s>>>(dy_full, m, h, gb2);
    LK(loom_gemm(&dz_desc, x_full, w1, z, b1, s)); /* Z recomputed */
    gelu_backward<<<256, 256, 0, s>>>(dh, z, dz, (size_t)m * fl);
    LK(loom_gemm_rs(p_dx, dz, w1, dx, NULL, s));
    /* dW1 [fl, h] = dZ^T [fl, m] x X_full [m, h]  (column-major: dW1^T = X_full^T dZ) */
    BK(cublasGemmEx(cb, CUBLAS_OP_N, CUBLAS_OP_T, h, fl, m, &one, x_full, CUDA_R_16BF, h, dz, CUDA_R_16BF, fl, &zero,
                    gw1, CUDA_R_32F, h, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    col_sum<<<(fl + 127) / 128, 128, 0, s>>>(dz, m, fl, gb1);
    CK(cudaGetLastError());
    /* read this step's results before the update */
    from_bf16<<<64, 256, 0, s>>>(y, tmp, (size_t)S * h);
    CK(cudaMemcpyAsync(gy, tmp, sizeof(float) * S * h, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    from_bf16<<<64, 256, 0, s>>>(dx, tmp, (size_t)S * h);
    CK(cudaMemcpyAsync(gdx, tmp, sizeof(float) * S * h, cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(gw1h, gw1, sizeof(float) * fl * h, cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(gw2h, gw2, sizeof(float) * h * fl, cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(gb1h, gb1, sizeof(float) * fl, cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(gb2h, gb2, sizeof(float) * h, cudaMemcpyDeviceToHost, s));
    /* update */
    sgd<<<64, 256, 0, s>>>(mw1, gw1, w1, (size_t)fl * h, LR);
    sgd<<<64, 256, 0, s>>>(mw2, gw2, w2, (size_t)h * fl, LR);
    sgd<<<4, 256, 0, s>>>(mb1, gb1, b1, fl, LR);
    sgd<<<4, 256, 0, s>>>(mb2, gb2, b2, h, LR);
    CK(cudaStreamSynchronize(s));
    LK(loom_comm_get_async_error(comm));

    ref_step(&R); /* the same step on the host (it updates R's weights after its gradients) */
    for (int j = 0; j < fl; ++j)
      for (int c = 0; c < h; ++c) r1[j * h + c] = R.dw1[(size_t)(rank * fl + j) * h + c];
    for (int c = 0; c < h; ++c)
      for (int j = 0; j < fl; ++j) r2[c * fl + j] = R.dw2[(size_t)c * f + rank * fl + j];
    const double e_y = rel_err(gy, R.y + (size_t)rank * S * h, (size_t)S * h);
    const double e_dx = rel_err(gdx, R.dx + (size_t)rank * S * h, (size_t)S * h);
    const double e_w1 = rel_err(gw1h, r1, (size_t)fl * h), e_w2 = rel_err(gw2h, r2, (size_t)h * fl);
    const double e_b1 = rel_err(gb1h, R.db1 + rank * fl, fl), e_b2 = rel_err(gb2h, R.db2, h);
    const int ok = e_y < TOL && e_dx < TOL && e_w1 < TOL && e_w2 < TOL && e_b1 < TOL && e_b2 < TOL;
    printf("rank %d step %d: relative error Y %.2e dX %.2e dW1 %.2e dW2 %.2e db1 %.2e db2 %.2e %s\n", rank, step, e_y,
           e_dx, e_w1, e_w2, e_b1, e_b2, ok ? "ok" : "TOO LARGE");
    bad += !ok;
  }
  LK(loom_plan_destroy(p_fc1));
  LK(loom_plan_destroy(p_fc2));
  LK(loom_plan_destroy(p_dh));
  LK(loom_plan_destroy(p_dx));
  LK(loom_free(comm, x_full));
  LK(loom_free(comm, dy_full));
  LK(loom_comm_destroy(comm));
  cublasDestroy(cb);
  ncclCommDestroy(nccl);
  return bad ? 1 : 0;
}

int main(int argc, char **argv) {
  int W = argc > 1 ? atoi(argv[1]) : 0;
  if (W <= 0) {
    /* count GPUs in a child: the parent must not start CUDA before forking */
    int fd[2];
    if (pipe(fd)) return 1;
    pid_t c = fork();
    if (c == 0) {
      int n = 0;
      if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
      if (write(fd[1], &n, sizeof n) != sizeof n) _exit(1);
      _exit(0);
    }
    if (read(fd[0], &W, sizeof W) != sizeof W) W = 0;
    waitpid(c, NULL, 0);
    if (W > 8) W = 8;
  }
  if (W < 1 || M_TOK % W || FFN % W) {
    printf("tp_mlp: needs 1..8 GPUs dividing m=%d and f=%d (found %d)\nFAIL\n", M_TOK, FFN, W);
    return 1;
  }
  int fd[2];
  if (pipe(fd)) return 1;
  pid_t kids[8];
  for (int r = 0; r < W; ++r) {
    kids[r] = fork();
    if (kids[r] == 0) {
      ncclUniqueId id;
      if (r == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) _exit(1);
        for (int q = 1; q < W; ++q)
          if (write(fd[1], &id, sizeof id) != sizeof id) _exit(1);
      } else if (read(fd[0], &id, sizeof id) != sizeof id) {
        _exit(1);
      }
      const int rc = run_rank(r, W, id);
      fflush(stdout); /* _exit does not flush stdio */
      fflush(stderr);
      _exit(rc);
    }
  }
  int fails = 0;
  for (int r = 0; r < W; ++r) {
    int st = 0;
    waitpid(kids[r], &st, 0);
    fails += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  printf("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
