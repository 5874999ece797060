#include "anchor_index.hpp"

#include <algorithm>

#include "fnv1a.hpp"

namespace ngramspec {

namespace {
constexpr unsigned kMinHeadBits = 8;
}

std::size_t AnchorIndex::slot_of(const std::int32_t* key_tokens) const {
    // FNV-1a's low bits mix poorly for short keys; a Fibonacci multiply moves the
    // well-mixed high bits into the slot number.
    const std::uint64_t hash = fnv1a_tokens(key_tokens, static_cast<std::size_t>(anchor_)) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(hash >> (64 - head_bits_));
}

void AnchorIndex::size_head_for(std::size_t count) {
    // At most half full, so a chain rarely holds another anchor's positions.
    unsigned bits = std::max(kMinHeadBits, head_bits_);
    while ((std::size_t{1} << bits) < 2 * count) ++bits;
    if (bits != head_bits_ || head_.empty()) {
        head_bits_ = bits;
        std::vector<std::uint32_t>(std::size_t{1} << bits, kNone).swap(head_);
    }
}

void AnchorIndex::add(const std::int32_t* tokens, std::size_t end, bool indexed) {
    reserve_one_more(prev_, max_positions_);
    if (!indexed || end + 1 < static_cast<std::size_t>(anchor_)) {
        prev_.push_back(kNone);
        return;
    }
    std::uint32_t& head = head_[slot_of(tokens + (end + 1 - static_cast<std::size_t>(anchor_)))];
    prev_.push_back(head);
    head = static_cast<std::uint32_t>(end);
}

std::uint32_t AnchorIndex::first(const std::int32_t* key_tokens) const {
    if (head_.empty()) return kNone;
    return head_[slot_of(key_tokens)];
}

void AnchorIndex::reset() {
    std::fill(head_.begin(), head_.end(), kNone);
    prev_.clear();
}

}  // namespace ngramspec
