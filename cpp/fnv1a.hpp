// 64-bit FNV-1a over token ids: the context key of the n-gram tables.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ngramspec {

inline constexpr std::uint64_t kFnvOffsetBasis = 14695981039346656037ULL;
inline constexpr std::uint64_t kFnvPrime = 1099511628211ULL;

// Hashes `count` tokens starting at `tokens`. Each token is folded in whole, as its
// uint32 value (one xor-then-multiply per token, not per byte), as akunu does.
inline std::uint64_t fnv1a_tokens(const std::int32_t* tokens, std::size_t count) {
    std::uint64_t hash = kFnvOffsetBasis;
    for (std::size_t i = 0; i < count; ++i) {
        hash ^= static_cast<std::uint32_t>(tokens[i]);
        hash *= kFnvPrime;
    }
    return hash;
}

}  // namespace ngramspec
