// Positions of a token sequence, indexed by the `anchor` tokens ending at each:
// the lookup shared by SuffixMatcher (the current context) and CorpusMatcher
// (a bounded store of earlier text).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ngramspec {

// Makes room for one more element, doubling as push_back would but never past
// `limit` elements, so a buffer filled to a budget holds no slack beyond it.
template <typename T>
void reserve_one_more(std::vector<T>& v, std::size_t limit) {
    if (v.size() < v.capacity()) return;
    v.reserve(std::max(v.size() + 1, std::min(std::max<std::size_t>(2 * v.size(), 16), limit)));
}

// Hash chains, as in LZ77 compressors: head_[slot] is the newest indexed position
// whose anchor hashes to `slot`, and prev_[pos] the next older one in that slot.
// That costs 4 bytes per position plus a power-of-two head table kept at or below
// half full, so memory follows the sequence length with a small constant (the
// map of vectors it replaced held a hash node and a heap vector per distinct
// anchor). A chain walks newest first, which is the order the matchers want;
// it may also hold positions of other
// anchors that share the slot, so callers confirm each candidate token by token.
//
// Positions are indices into the caller's sequence (below 2^32 - 1). The caller
// owns the tokens: dropping a prefix of them means rebuild() on what remains.
class AnchorIndex {
public:
    static constexpr std::uint32_t kNone = 0xFFFFFFFFu;

    // max_positions: the most positions the owner will ever hold at once; no
    // buffer grows past what that needs.
    AnchorIndex(int anchor, std::size_t max_positions) : anchor_(anchor), max_positions_(max_positions) {}

    // Records position `end` (the index of the last of its anchor tokens) of
    // `tokens`; `indexed`: false to record it without making it findable (too
    // close to the start, or its anchor crosses a document boundary). Positions
    // must be added in order 0, 1, 2, ...; `tokens` must hold them all. Call
    // only when !full(): growing the table is the owner's rebuild().
    void add(const std::int32_t* tokens, std::size_t end, bool indexed);

    // Whether the head table is too small to add one more position at most half full.
    bool full() const { return 2 * (prev_.size() + 1) > head_.size(); }

    // Forgets every position, grows the head table if needed so that one more
    // position fits at most half full (it never shrinks), then adds positions
    // 0..count-1 of `tokens`, each indexed when `indexable(tokens, end)` says so.
    // O(count + table size); the table doubles, so growth is amortised O(1).
    template <typename Indexable>
    void rebuild(const std::int32_t* tokens, std::size_t count, Indexable indexable) {
        size_head_for(std::min(count + 1, max_positions_));
        reset();
        for (std::size_t end = 0; end < count; ++end) add(tokens, end, indexable(tokens, end));
    }

    // The newest indexed position whose anchor may equal the `anchor` tokens
    // ending at `key_tokens[anchor - 1]`, or kNone.
    std::uint32_t first(const std::int32_t* key_tokens) const;
    // The next older position in the same chain, or kNone.
    std::uint32_t next(std::uint32_t pos) const { return prev_[pos]; }

    void reset();
    std::size_t size() const { return prev_.size(); }
    std::size_t memory_bytes() const {
        return prev_.capacity() * sizeof(std::uint32_t) + head_.capacity() * sizeof(std::uint32_t);
    }

private:
    std::size_t slot_of(const std::int32_t* key_tokens) const;
    void size_head_for(std::size_t count);

    int anchor_;
    std::size_t max_positions_;
    unsigned head_bits_ = 0;
    std::vector<std::uint32_t> head_;  // slot -> newest position, kNone when empty
    std::vector<std::uint32_t> prev_;  // position -> next older position in its slot
};

}  // namespace ngramspec
