// SHA-256 of a byte string, as 64 lowercase hex digits (FIPS 180-4). The module cache records it for
// every object it builds and checks it before loading one (toolchain.h).
#pragma once

#include <string>

namespace trident::codegen {

std::string sha256_hex(const std::string& data);

}  // namespace trident::codegen
