// scripts/mma-bf16-probe/mma_bf16_probe.cu - how mma.sync.m16n8k16 (bf16 in, fp32 accumulate) adds its
// 16 products, on the device (outside the build). The digit products' mins (cuda/matvec_digits_tile.cuh,
// digit_chunk) take sum_j m_j hi_j + m_j lo_j on this instruction with C = 0, and the CPU's digit_mins
// (src/cpu/digits.h) reproduces it as the exact sum rounded toward zero. This checks that model on
// the mins' own operands, then sweeps others (bits kept after aligning every product to the largest,
// each product truncated toward zero or down, the sum rounded to nearest, toward zero or down, in
// blocks of 16, 8 or 4 products) on random bf16 across exponents, with and without C, and prints the
// models that match best, with their mismatches per kind of input.
// Build: nvcc -std=c++17 -arch=sm_90a -O2 -Xcompiler -fopenmp -o mma_bf16_probe scripts/mma-bf16-probe/mma_bf16_probe.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK_CUDA(x)                                                                                       \
    do {                                                                                                    \
        const cudaError_t e_ = (x);                                                                         \
        if (e_ != cudaSuccess) {                                                                            \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
            std::exit(1);                                                                                   \
        }                                                                                                   \
    } while (0)

constexpr int tile_a = 16 * 16, tile_b = 16 * 8, tile_c = 16 * 8;

// One warp a tile: A [16][16] row-major, B [8 columns][16] (column-major), C [16][8]; D = A B + C.
__global__ void mma_tiles(const uint16_t *A, const uint16_t *B, const float *C, float *D, int n_tiles) {
    const int tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (tile >= n_tiles) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint16_t *a = A + tile * tile_a, *b = B + tile * tile_b;
    auto pair = [](uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); };
    const uint32_t ar[4] = {pair(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]), pair(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                            pair(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                            pair(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
    const uint32_t b0 = pair(b[g * 16 + 2 * t], b[g * 16 + 2 * t + 1]), b1 = pair(b[g * 16 + 2 * t + 8], b[g * 16 + 2 * t + 9]);
    const float *c = C + tile * tile_c;
    float d[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(b0), "r"(b1));
    float *o = D + tile * tile_c;
    o[g * 8 + 2 * t] = d[0];
    o[g * 8 + 2 * t + 1] = d[1];
    o[(g + 8) * 8 + 2 * t] = d[2];
    o[(g + 8) * 8 + 2 * t + 1] = d[3];
}

float bf16_value(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
uint16_t bf16_truncated(float f) { return uint16_t(bits(f) >> 16); }
uint16_t bf16_nearest(float f) {
    const uint32_t u = bits(f);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

enum rounding { nearest, toward_zero, down };

// v (exact) to fp32 in the given rounding.
float round_float(long double v, rounding mode) {
    if (v == 0) return 0.0f;
    int e;
    std::frexp(v, &e);
    const long double q = std::ldexp(1.0L, e - 24), n = v / q;
    const long double r = mode == nearest ? std::nearbyint(n) : mode == toward_zero ? std::trunc(n) : std::floor(n);
    return float(r * q);
}

// A model of the sum: in blocks of `block` products (with the running C), every product aligned to
// the largest (exponent E) and cut to a multiple of 2^(E - kept) (toward zero or down), summed exactly,
// rounded to fp32. kept 60: nothing cut (the exact sum).
struct model {
    int kept, block;
    rounding cut, sum;
    bool c_aligned;
};

float predict(const model &m, const long double *p, float c) {
    long double acc = c;
    for (int b0 = 0; b0 < 16; b0 += m.block) {
        int e_max = INT_MIN;
        auto widen = [&](long double v) {
            if (v == 0) return;
            int e;
            std::frexp(v, &e);
            e_max = std::max(e_max, e - 1);
        };
        for (int i = b0; i < b0 + m.block; ++i) widen(p[i]);
        if (m.c_aligned) widen(acc);
        if (e_max == INT_MIN) continue;
        const long double q = std::ldexp(1.0L, e_max - m.kept);
        auto cut = [&](long double v) { return (m.cut == toward_zero ? std::trunc(v / q) : std::floor(v / q)) * q; };
        long double s = m.c_aligned ? cut(acc) : acc;
        for (int i = b0; i < b0 + m.block; ++i) s += cut(p[i]);
        acc = round_float(s, m.sum);
    }
    return float(acc);
}

int main() {
    constexpr int n_kinds = 4, n_tiles = 4096;
    const char *kinds[n_kinds] = {"mins, |S| up to 2^4..2^20", "mins, |S| near 2^20, one sign", "random bf16, C = 0", "random bf16, C != 0"};
    std::mt19937_64 rng(20261207);
    auto uniform = [&](int lo, int hi) { return lo + int(rng() % uint64_t(hi - lo + 1)); };
    std::vector<uint16_t> A(size_t(n_tiles) * tile_a), B(size_t(n_tiles) * tile_b);
    std::vector<float> C(size_t(n_tiles) * tile_c, 0.0f);
    for (int tl = 0; tl < n_tiles; ++tl) {
        const int kind = tl % n_kinds;
        uint16_t *a = A.data() + size_t(tl) * tile_a, *b = B.data() + size_t(tl) * tile_b;
        float *c = C.data() + size_t(tl) * tile_c;
        if (kind <= 1) {
            // The mins' operands: K slots j and 8 + j of a row hold m_j (0..63); of a column, S_j's
            // truncated bf16 hi and the remainder's rounded bf16 lo.
            for (int r = 0; r < 16; ++r)
                for (int j = 0; j < 8; ++j) a[r * 16 + j] = a[r * 16 + 8 + j] = bf16_nearest(float(uniform(0, 63)));
            for (int n = 0; n < 8; ++n)
                for (int j = 0; j < 8; ++j) {
                    const int range = 1 << uniform(4, 20);
                    const int s = kind == 0 ? uniform(-range, range) : uniform((1 << 20) - 40000, (1 << 20) - 1);
                    const float sf = float(s);
                    const uint16_t hi = bf16_truncated(sf);
                    b[n * 16 + j] = hi;
                    b[n * 16 + 8 + j] = bf16_nearest(sf - bf16_value(hi));
                }
        } else {
            auto random_bf16 = [&](bool zeros) {
                const float v = std::ldexp(float(uniform(128, 255)) / 128.0f, uniform(-12, 12)) * (uniform(0, 1) ? -1.0f : 1.0f);
                return bf16_truncated(zeros && uniform(0, 5) == 0 ? 0.0f : v);
            };
            for (int i = 0; i < tile_a; ++i) a[i] = random_bf16(true);
            for (int i = 0; i < tile_b; ++i) b[i] = random_bf16(false);
            if (kind == 3)
                for (int i = 0; i < tile_c; ++i)
                    c[i] = std::ldexp(float(uniform(1 << 23, (1 << 24) - 1)), uniform(-30, -5)) * (uniform(0, 1) ? -1.0f : 1.0f);
        }
    }
    uint16_t *dA, *dB;
    float *dC, *dD;
    CHECK_CUDA(cudaMalloc(&dA, A.size() * 2));
    CHECK_CUDA(cudaMalloc(&dB, B.size() * 2));
    CHECK_CUDA(cudaMalloc(&dC, C.size() * 4));
    CHECK_CUDA(cudaMalloc(&dD, C.size() * 4));
    CHECK_CUDA(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    mma_tiles<<<n_tiles / 4, 128>>>(dA, dB, dC, dD, n_tiles);
    CHECK_CUDA(cudaGetLastError());
    std::vector<float> D(C.size());
    CHECK_CUDA(cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost));

    std::vector<model> models;
    for (int kept : {23, 24, 25, 26, 27, 28, 30, 60})
        for (int block : {16, 8, 4})
            for (rounding cut : {toward_zero, down})
                for (rounding sum : {nearest, toward_zero, down})
                    for (bool c_aligned : {true, false}) models.push_back({kept, block, cut, sum, c_aligned});
    std::vector<std::vector<int>> bad(models.size(), std::vector<int>(n_kinds, 0));
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t mi = 0; mi < models.size(); ++mi)
        for (int tl = 0; tl < n_tiles; ++tl) {
            const uint16_t *a = A.data() + size_t(tl) * tile_a, *b = B.data() + size_t(tl) * tile_b;
            for (int r = 0; r < 16; ++r)
                for (int n = 0; n < 8; ++n) {
                    long double p[16];
                    for (int k = 0; k < 16; ++k) p[k] = (long double)bf16_value(a[r * 16 + k]) * bf16_value(b[n * 16 + k]);
                    const size_t at = size_t(tl) * tile_c + size_t(r) * 8 + size_t(n);
                    if (bits(predict(models[mi], p, C[at])) != bits(D[at])) ++bad[mi][size_t(tl % n_kinds)];
                }
        }
    const char *names[] = {"nearest", "toward zero", "down"};
    auto show = [&](size_t mi) {
        const model &m = models[mi];
        std::printf("kept %2d block %2d cut %-11s sum %-11s C aligned %d: mismatches", m.kept, m.block, names[m.cut], names[m.sum],
                    int(m.c_aligned));
        for (int k = 0; k < n_kinds; ++k) std::printf(" %6d", bad[mi][size_t(k)]);
        std::printf("\n");
    };
    std::printf("%d sums of each kind:", n_tiles / n_kinds * tile_c);
    for (const char *k : kinds) std::printf(" [%s]", k);
    std::printf("\nthe CPU's digit_mins (exact sum, toward zero):\n");
    for (size_t mi = 0; mi < models.size(); ++mi)
        if (models[mi].kept == 60 && models[mi].block == 16 && models[mi].cut == toward_zero && models[mi].sum == toward_zero &&
            models[mi].c_aligned)
            show(mi);
    std::vector<size_t> order(models.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto total = [&](size_t i) { return bad[i][0] + bad[i][1] + bad[i][2] + bad[i][3]; };
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return total(x) < total(y); });
    std::printf("best models:\n");
    for (size_t i = 0; i < 12; ++i) show(order[i]);
    return 0;
}
