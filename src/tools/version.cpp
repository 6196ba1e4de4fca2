// src/tools/version.cpp - the version line: the project's version, the commit the build was made
// from, the build type and the CUDA architectures compiled in (set by src/tools/CMakeLists.txt).
#include "version.h"

#include <fmt/format.h>

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif
#ifndef TANDEM_GIT_COMMIT
#define TANDEM_GIT_COMMIT "unknown"
#endif
#ifndef TANDEM_BUILD_TYPE
#define TANDEM_BUILD_TYPE "unknown"
#endif

namespace tandem::tools {

std::string version_line(const char *program) {
#ifdef TANDEM_CUDA_ARCHS
    const std::string cuda = fmt::format("CUDA archs {}", TANDEM_CUDA_ARCHS);
#else
    const std::string cuda = "no CUDA";
#endif
    return fmt::format("{} {} (commit {}, {}, {})", program, TANDEM_VERSION, TANDEM_GIT_COMMIT, TANDEM_BUILD_TYPE, cuda);
}

}  // namespace tandem::tools
