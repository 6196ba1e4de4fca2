// scripts/kernel-trace/cupti_trace.cpp - a CUPTI injection library that records every kernel the
// process runs (CUDA graph nodes included) with its GPU start and end timestamps, so the time a
// launch adds to a step's critical path can be read inside a replayed graph with PDL, which ncu
// (kernels serialised) cannot show. Built on a machine with CUPTI (the GPU machine), not by CMake:
//   g++ -O2 -shared -fPIC -DKREC=CUpti_ActivityKernel10 -I$CUDA/include cupti_trace.cpp \
//       -L$CUDA/lib -lcupti -Wl,-rpath,$CUDA/lib -o libtrace.so
// (KREC: the newest CUpti_ActivityKernelN in cupti_activity.h; scripts/device-run.sh trace finds it).
// Use: CUDA_INJECTION64_PATH=$PWD/libtrace.so TRACE_OUT=trace.txt tandem bench ...
// Output: one line a kernel, "start_ns end_ns graph_node grid_x grid_y block_x mangled_name";
// analyze.py reads it.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>

#ifndef KREC
#define KREC CUpti_ActivityKernel10
#endif

namespace {

FILE *out = nullptr;

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = size_t(32) << 20;
    *buffer = static_cast<uint8_t *>(aligned_alloc(8, *size));
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
    CUpti_Activity *rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const KREC *k = reinterpret_cast<const KREC *>(rec);
        std::fprintf(out, "%llu %llu %llu %u %u %u %s\n", static_cast<unsigned long long>(k->start),
                     static_cast<unsigned long long>(k->end), static_cast<unsigned long long>(k->graphNodeId), k->gridX,
                     k->gridY, k->blockX, k->name ? k->name : "?");
    }
    std::free(buffer);
}

void flush_at_exit() {
    cuptiActivityFlushAll(1);
    if (out) std::fclose(out);
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection(void) {
    const char *path = std::getenv("TRACE_OUT");
    out = std::fopen(path ? path : "trace.txt", "w");
    if (!out) return 0;
    cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    std::atexit(flush_at_exit);
    return 1;
}
