#include "suffix_matcher.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ngramspec {

namespace {

// A chain may hold positions of other anchors that share its slot (rare: the
// table is at most half full). Walking them costs time but is not a candidate,
// so a walk is capped at this many steps beyond max_candidates, and a slot that
// a very common anchor happens to share cannot make a prediction scan the history.
constexpr std::size_t kMaxForeignSteps = 256;

bool always_indexed(const std::int32_t*, std::size_t) { return true; }

}  // namespace

SuffixMatcher::SuffixMatcher(int anchor, std::size_t max_candidates, std::size_t max_match, std::size_t max_tokens)
    : anchor_(anchor), max_candidates_(max_candidates), max_match_(max_match), max_tokens_(max_tokens), index_(anchor, max_tokens) {
    if (anchor < 1 || anchor > kMaxAnchor) {
        throw std::invalid_argument("anchor must be in [1, " + std::to_string(kMaxAnchor) + "], got " +
                                    std::to_string(anchor));
    }
    if (max_candidates < 1) throw std::invalid_argument("max_candidates must be >= 1");
    if (max_match < static_cast<std::size_t>(anchor)) {
        throw std::invalid_argument("max_match must be >= anchor, got " + std::to_string(max_match));
    }
    if (max_tokens < 1 || max_tokens > kMaxMaxTokens) {
        throw std::invalid_argument("max_tokens must be in [1, 2**30], got " + std::to_string(max_tokens));
    }
}

void SuffixMatcher::rebuild_index(std::size_t count) { index_.rebuild(history_.data(), count, always_indexed); }

void SuffixMatcher::evict() {
    // Keep the newest three quarters of the budget: the next eviction is then a
    // quarter of the budget away, which makes the rebuild amortised O(1).
    const std::size_t keep = max_tokens_ - max_tokens_ / 4;
    history_.erase(history_.begin(), history_.end() - static_cast<std::ptrdiff_t>(keep));
    rebuild_index(keep);
}

void SuffixMatcher::update(std::int32_t token) {
    ++tokens_seen_;
    reserve_one_more(history_, max_tokens_ + 1);
    history_.push_back(token);
    if (history_.size() > max_tokens_) {
        evict();  // indexes the new token too
        return;
    }
    if (index_.full()) rebuild_index(history_.size() - 1);  // a bigger head table: re-slot every older position
    index_.add(history_.data(), history_.size() - 1, true);
}

void SuffixMatcher::update_batch(const std::int32_t* tokens, std::size_t count) {
    history_.reserve(std::min(history_.size() + count, max_tokens_ + 1));
    for (std::size_t i = 0; i < count; ++i) update(tokens[i]);
}

std::size_t SuffixMatcher::predict(std::size_t max_tokens, std::vector<std::int32_t>& out) const {
    out.clear();
    const std::size_t n = history_.size();
    const auto a = static_cast<std::size_t>(anchor_);
    if (max_tokens == 0 || n < a + 1) return 0;
    const std::int32_t* h = history_.data();
    // The newest entry is the current position itself: it has no continuation yet.
    std::size_t best_len = 0, best_end = 0, examined = 0, foreign = 0;
    for (std::uint32_t pos = index_.first(h + (n - a)); pos != AnchorIndex::kNone && examined < max_candidates_;
         pos = index_.next(pos)) {
        const std::size_t end = pos;
        if (end + 1 >= n) continue;
        std::size_t len = 0;
        const std::size_t limit = std::min(max_match_, end + 1);
        while (len < limit && h[end - len] == h[n - 1 - len]) ++len;
        if (len < a) {  // another anchor sharing the slot, not a candidate
            if (++foreign > kMaxForeignSteps) break;
            continue;
        }
        ++examined;
        if (len > best_len) {  // strictly longer: among equals the most recent (seen first) stays
            best_len = len;
            best_end = end;
            if (len == max_match_) break;
        }
    }
    if (best_len == 0) return 0;
    // Copy forward from just after the match; reading past the history continues
    // from the draft itself (the source and the copy overlap on a repeating run).
    for (std::size_t j = 0; j < max_tokens; ++j) {
        const std::size_t src = best_end + 1 + j;
        out.push_back(src < n ? history_[src] : out[src - n]);
    }
    return best_len;
}

void SuffixMatcher::reset() {
    history_.clear();
    index_.reset();
    tokens_seen_ = 0;
}

}  // namespace ngramspec
