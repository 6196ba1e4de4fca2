// src/tools/version.h - what `--version` prints for both binaries and the server logs at start-up.
#pragma once

#include <string>

namespace tandem::tools {

// "tandem 0.1.0 (commit 1a2b3c4d5e6f, RelWithDebInfo, CUDA archs 90a)".
std::string version_line(const char *program);

}  // namespace tandem::tools
