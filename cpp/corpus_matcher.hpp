// Drafts from a bounded store of earlier text (ngramspec.Memory): finds where the
// end of a query context occurred in the store and drafts what followed there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "anchor_index.hpp"

namespace ngramspec {

// SuffixMatcher looks for the current context inside itself; CorpusMatcher looks
// for it inside a separate corpus of documents (earlier outputs, primed files),
// which many generations, possibly on different threads, query at once. So the
// corpus is the state and the context is an argument: predict() keeps nothing.
//
// Documents are stored back to back, each followed by a boundary (kBoundary,
// never a token id): a backward match stops at the start of its document, and a
// copy at its end, so text from two unrelated documents is never spliced.
// Positions are indexed by the `anchor` tokens ending there (anchors that cross
// a boundary are not indexed). predict() examines the `max_candidates` newest
// positions whose anchor equals the context's last `anchor` tokens and that have
// a continuation, measures each backward match (up to `max_match`), and copies
// from the longest; equal lengths go to the newest.
//
// Positions outside are absolute: the index a token would have if nothing had
// ever been dropped (dropped() + its index in corpus()), so a place remembered by
// one generation stays valid, or is recognisably gone, while others add text.
// follow() drafts near such a place: after a draft from a document departed from
// the output (a new value in a repeated JSON shape), it looks for the output's
// newest tokens a few positions further on in the same document, where one
// matching token is far better evidence than anywhere in the store.
//
// Bounded by `max_tokens` (boundaries count): past it the oldest tokens are
// dropped, keeping the newest three quarters of the budget, and the index is
// rebuilt (amortised O(1) per token); the oldest surviving document may be a
// tail. At most about 24 bytes per budget token. Not thread-safe; the binding
// serialises calls.
class CorpusMatcher {
public:
    static constexpr std::int32_t kBoundary = -1;
    static constexpr int kMaxAnchor = 16;
    static constexpr std::size_t kMaxMaxTokens = std::size_t{1} << 30;

    // Throws std::invalid_argument on a bad combination (same rules as SuffixMatcher;
    // max_tokens >= 2, room for a token and its boundary).
    CorpusMatcher(int anchor, std::size_t max_candidates, std::size_t max_match, std::size_t max_tokens);

    // Appends one document (token ids in [0, 2^31); the binding checks them).
    // An empty document adds nothing.
    void add(const std::int32_t* tokens, std::size_t count);

    // Writes up to `max_tokens` tokens that followed the best match of the end of
    // `context` (its `count` tokens, oldest first; only the last max_match matter)
    // to `out`, cleared first, and returns the match length (0, no draft: none).
    // If `at` is given, it receives the absolute position of the draft's first token.
    std::size_t predict(const std::int32_t* context, std::size_t count, std::size_t max_tokens,
                        std::vector<std::int32_t>& out, std::uint64_t* at = nullptr) const;

    // Drafts near a remembered place: among the absolute positions from..from+window-1
    // that are still stored and lie in from's document (the scan stops at its end),
    // the one whose backward match with the end of `context` is longest (at least
    // one token, at most max_match; equal lengths go to the nearest), and copies up
    // to `max_tokens` tokens that follow it. Returns the match length (0: none) and
    // sets *at to the absolute position of the draft's first token.
    std::size_t follow(std::uint64_t from, std::size_t window, const std::int32_t* context, std::size_t count,
                       std::size_t max_tokens, std::vector<std::int32_t>& out, std::uint64_t* at) const;

    // How far the stored text backs a draft for this context, token by token: over the
    // candidate positions predict() examines (the newest max_candidates whose anchor
    // equals the context's end and that have a continuation), seen[i] counts those whose
    // continuation agrees with draft[0..i-1] and agree[i] those that agree with draft[0..i].
    // Where earlier documents differ (a value in a repeated JSON shape) agree/seen drops.
    void support(const std::int32_t* context, std::size_t count, const std::int32_t* draft, std::size_t n,
                 std::vector<std::uint32_t>& agree, std::vector<std::uint32_t>& seen) const;

    void clear();

    // The stored tokens, oldest first, each document followed by kBoundary.
    const std::vector<std::int32_t>& corpus() const { return corpus_; }
    std::uint64_t tokens_added() const { return tokens_added_; }
    // Tokens dropped from the front (eviction, clear): the absolute position of corpus()[0].
    std::uint64_t dropped() const { return dropped_; }
    int anchor() const { return anchor_; }
    std::size_t max_candidates() const { return max_candidates_; }
    std::size_t max_match() const { return max_match_; }
    std::size_t max_tokens() const { return max_tokens_; }
    std::size_t memory_bytes() const { return corpus_.capacity() * sizeof(std::int32_t) + index_.memory_bytes(); }

private:
    // Walks the candidates predict() and support() weigh, newest first: indexed
    // positions whose backward match with the end of `context` is at least `anchor`
    // tokens long (measured up to `measure`) and that have a continuation, at most
    // max_candidates of them; `visit(end, match_length)` returns false to stop.
    template <typename Visit>
    void for_each_candidate(const std::int32_t* context, std::size_t count, std::size_t measure,
                            Visit&& visit) const;
    bool indexable(const std::int32_t* tokens, std::size_t end) const;
    void rebuild_index(std::size_t count);  // indexes corpus_[0, count)
    void push(std::int32_t token);

    int anchor_;
    std::size_t max_candidates_;
    std::size_t max_match_;
    std::size_t max_tokens_;
    std::uint64_t tokens_added_ = 0;
    std::uint64_t dropped_ = 0;
    std::vector<std::int32_t> corpus_;
    AnchorIndex index_;
};

}  // namespace ngramspec
