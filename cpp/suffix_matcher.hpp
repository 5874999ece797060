// Long copy drafts: finds where the recent context occurred before and drafts
// what followed it there (prompt lookup, with the longest match winning).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

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
// History is unbounded (one int32 and one index entry per token), which is what
// a context window holds anyway. Not thread-safe; the Python binding serialises calls.
class SuffixMatcher {
public:
    static constexpr int kMaxAnchor = 16;

    // anchor:         tokens that must match for a position to be a candidate, 1..16.
    // max_candidates: most recent candidate positions examined per prediction, >= 1;
    //                 bounds the cost of a very common anchor.
    // max_match:      longest backward match measured, >= anchor; longer matches
    //                 count as equal (then the most recent wins).
    // Throws std::invalid_argument on a bad combination.
    SuffixMatcher(int anchor, std::size_t max_candidates, std::size_t max_match);

    // Appends one token. `token` must be in [0, 2^31); the binding checks it.
    void update(std::int32_t token);
    void update_batch(const std::int32_t* tokens, std::size_t count);

    // Writes up to `max_tokens` draft tokens to `out` (cleared first) and returns
    // the length of the backward match they come from (0 and no draft when the
    // current anchor never occurred before).
    std::size_t predict(std::size_t max_tokens, std::vector<std::int32_t>& out) const;

    void reset();

    const std::vector<std::int32_t>& history() const { return history_; }
    int anchor() const { return anchor_; }
    std::size_t max_candidates() const { return max_candidates_; }
    std::size_t max_match() const { return max_match_; }

private:
    std::uint64_t key_ending_at(std::size_t end) const;  // hash of the anchor tokens ending at index `end`

    int anchor_;
    std::size_t max_candidates_;
    std::size_t max_match_;
    std::vector<std::int32_t> history_;
    // anchor hash -> indices (ascending) of the last token of each occurrence
    std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> positions_;
};

}  // namespace ngramspec
