// CUDA test corpus for the PTX dynamic analysis (src/ptx). Compiled to PTX by build_fixtures.sh.
// Every kernel is extern "C" so its PTX name is the C name.

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void grid_stride(const float* x, float* y, float alpha, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = alpha * x[i] + y[i];
    }
}

extern "C" __global__ void nested_const(float* out) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    for (int i = 0; i < 7; ++i)
        for (int j = 0; j < 5; ++j)
            s += (float)(i * j + t);
    out[t] = s;
}

extern "C" __global__ void nested_param(float* out, int m, int k) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < k; ++j)
            s = s * 0.5f + (float)(i ^ j ^ t);
    out[t] = s;
}

extern "C" __global__ void triangle(int* out, int n) {
    // thread-dependent trip count: thread t iterates t % 8 times per outer step
    int t = threadIdx.x;
    int acc = 0;
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < (t + i) % 8; ++j)
            acc += j * i;
    out[blockIdx.x * blockDim.x + t] = acc;
}

extern "C" __global__ void stencil2d(const float* in, float* out, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float c = in[y * w + x];
    float s = 4.0f * c;
    if (x > 0) s -= in[y * w + x - 1]; else s -= c;
    if (x < w - 1) s -= in[y * w + x + 1]; else s -= c;
    if (y > 0) s -= in[(y - 1) * w + x]; else s -= c;
    if (y < h - 1) s -= in[(y + 1) * w + x]; else s -= c;
    out[y * w + x] = s;
}

extern "C" __global__ void reduce_shared(const float* in, float* out, int n) {
    extern __shared__ float sdata[];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

extern "C" __global__ void warp_reduce(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = (i < n) ? in[i] : 0.0f;
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}

extern "C" __global__ void early_return(const int* in, int* out, int n, int limit) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int v = i * 3;
    if (threadIdx.x % 3 == 0) return;
    for (int k = 0; k < limit; ++k) {
        if (v > 1000 + k) return;
        v += k;
    }
    out[i] = v + in[i];
}

#define TILE 16
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + threadIdx.x;
        int bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" __global__ void conv2d_direct(const float* in, const float* wgt, float* out,
                                         int C, int H, int W, int K, int R, int pad) {
    // NCHW, N=1, stride 1; one thread per output element (k, y, x)
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = K * H * W;
    if (idx >= total) return;
    int x = idx % W;
    int y = (idx / W) % H;
    int k = idx / (W * H);
    float acc = 0.0f;
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r) {
            int iy = y + r - pad;
            if (iy < 0 || iy >= H) continue;
            for (int s = 0; s < R; ++s) {
                int ix = x + s - pad;
                if (ix < 0 || ix >= W) continue;
                acc += in[(c * H + iy) * W + ix] * wgt[((k * C + c) * R + r) * R + s];
            }
        }
    out[idx] = fmaxf(acc, 0.0f);
}

extern "C" __global__ void data_branch(const float* x, float* y, int n) {
    // the branch depends on loaded data: the analyzer must flag it
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        if (v > 0.0f) y[i] = sqrtf(v) * __expf(v) + 1.0f / v;
        else y[i] = 0.0f;
    }
}

extern "C" __global__ void mixed_math(const double* a, double* b, const int* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        double v = a[i];
        float f = (float)v;
        f = __sinf(f) + rsqrtf(fabsf(f) + 1.0f) + __log2f(f * f + 1.0f);
        int q = c[i] / 7 + c[i] % 5;
        b[i] = v * v + (double)f + (double)q;
        __syncwarp();
        unsigned bal = __ballot_sync(0xffffffffu, q & 1);
        if ((threadIdx.x & 31) == 0) atomicAdd((int*)c, __popc(bal));
    }
}
