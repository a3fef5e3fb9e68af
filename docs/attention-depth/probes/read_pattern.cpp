//   g++ -O2 -mavx512f -pthread read_pattern.cpp && ./a.out MODE
// Read bandwidth of attention's access pattern without compute: 2 threads,
// 48 layers x (K,V) of 4096 rows x 1 KB; each thread reads its 2 KV heads'
// 256 B slices (strided) vs a head-major layout (contiguous 64 KB runs).
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <algorithm>
int main(int argc, char** argv) {
    const int mode = atoi(argv[1]);  // 0 strided, 1 head-major, 2 strided + prefetch 48 rows
    const size_t rows = 4096, row = 1024, layer = rows * row;
    std::vector<char*> buf;
    for (int l = 0; l < 96; l++) { char* p = (char*)aligned_alloc(4096, layer); memset(p, l, layer); buf.push_back(p); }
    auto work = [&](int t, int l, __m512i* acc) {
        for (int kv = 0; kv < 2; kv++) {
            const char* base = buf[2 * l + kv];
            for (int g = 2 * t; g < 2 * t + 2; g++) {
                for (size_t j = 0; j < rows; j++) {
                    const char* r = mode == 1 ? base + g * (rows * 256) + j * 256 : base + j * row + g * 256;
                    if (mode == 2) for (int c = 0; c < 256; c += 64) _mm_prefetch(r + 48 * row + c, _MM_HINT_T0);
                    for (int c = 0; c < 256; c += 64) *acc = _mm512_add_epi32(*acc, _mm512_load_si512(r + c));
                }
            }
        }
    };
    std::vector<double> ts;
    for (int it = 0; it < 96; it++) {
        const int l = it % 48;
        __m512i a0 = _mm512_setzero_si512(), a1 = a0;
        auto t0 = std::chrono::steady_clock::now();
        std::thread th([&] { work(1, l, &a1); });
        work(0, l, &a0);
        th.join();
        ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (_mm512_reduce_add_epi32(_mm512_add_epi32(a0, a1)) == 12345) puts("x");
    }
    std::sort(ts.begin(), ts.end());
    printf("mode %d: %.3f ms/layer %.1f GB/s\n", mode, ts[ts.size() / 2] * 1e3, 2.0 * layer / ts[ts.size() / 2] / 1e9);
}
