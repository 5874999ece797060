// Long copy drafts: finds where the recent context occurred before and drafts
// what followed it there (prompt lookup, with the longest match winning).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "anchor_index.hpp"

namespace ngramspec {

// The n-gram tables see at most max_order-1 tokens of context inside a sliding
// window; copy-heavy text (code edits, extraction, quoting) wants the opposite:
// the single earlier occurrence, anywhere in the prompt or output, that shares
// the longest suffix with the current context, and a long draft copied from it.
//
// Every position is indexed by the `anchor` tokens ending there. predict()
// looks up the positions whose anchor equals the current one, measures how far
// each match extends backwards (up to `max_match` tokens), and copies forward
// from the longest; equal lengths go to the most recent. The copy may run on
// into the tokens it is drafting (a repeating run), as a chained n-gram draft would.
//
// History is bounded by `max_tokens`: once it holds more, the oldest quarter of
// the budget is dropped and the index rebuilt over what remains (O(max_tokens)
// once every max_tokens/4 tokens, so amortised O(1) per token). A context window
// rarely exceeds the default budget, but a matcher fed for hours (a server, a
// shared memory) must not grow without end. Memory is at most about 24 bytes per
// budget token (the tokens, one chain link each, a head table at most half
// full). Not thread-safe; the Python binding serialises calls.
class SuffixMatcher {
public:
    static constexpr int kMaxAnchor = 16;
    static constexpr std::size_t kDefaultMaxTokens = std::size_t{1} << 20;
    static constexpr std::size_t kMaxMaxTokens = std::size_t{1} << 30;  // positions stay below 2^32 - 1

    // anchor:         tokens that must match for a position to be a candidate, 1..16.
    // max_candidates: most recent candidate positions examined per prediction, >= 1;
    //                 bounds the cost of a very common anchor.
    // max_match:      longest backward match measured, >= anchor; longer matches
    //                 count as equal (then the most recent wins).
    // max_tokens:     history budget, 1..2^30; past it the oldest tokens are dropped
    //                 (see above), so matches only reach back that far.
    // Throws std::invalid_argument on a bad combination.
    SuffixMatcher(int anchor, std::size_t max_candidates, std::size_t max_match,
                  std::size_t max_tokens = kDefaultMaxTokens);

    // Appends one token. `token` must be in [0, 2^31); the binding checks it.
    void update(std::int32_t token);
    void update_batch(const std::int32_t* tokens, std::size_t count);

    // Writes up to `max_tokens` draft tokens to `out` (cleared first) and returns
    // the length of the backward match they come from (0 and no draft when the
    // current anchor never occurred before).
    std::size_t predict(std::size_t max_tokens, std::vector<std::int32_t>& out) const;

    void reset();

    // The tokens still held (at most max_tokens, oldest first).
    const std::vector<std::int32_t>& history() const { return history_; }
    // Every token appended since the last reset(), evicted ones included.
    std::uint64_t tokens_seen() const { return tokens_seen_; }
    std::size_t max_tokens() const { return max_tokens_; }
    std::size_t memory_bytes() const { return history_.capacity() * sizeof(std::int32_t) + index_.memory_bytes(); }
    int anchor() const { return anchor_; }
    std::size_t max_candidates() const { return max_candidates_; }
    std::size_t max_match() const { return max_match_; }

private:
    void rebuild_index(std::size_t count);  // indexes history_[0, count)
    void evict();

    int anchor_;
    std::size_t max_candidates_;
    std::size_t max_match_;
    std::size_t max_tokens_;
    std::uint64_t tokens_seen_ = 0;
    std::vector<std::int32_t> history_;
    AnchorIndex index_;  // every position of history_, by the anchor ending there
};

}  // namespace ngramspec
