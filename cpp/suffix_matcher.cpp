#include "suffix_matcher.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "fnv1a.hpp"

namespace ngramspec {

SuffixMatcher::SuffixMatcher(int anchor, std::size_t max_candidates, std::size_t max_match)
    : anchor_(anchor), max_candidates_(max_candidates), max_match_(max_match) {
    if (anchor < 1 || anchor > kMaxAnchor) {
        throw std::invalid_argument("anchor must be in [1, " + std::to_string(kMaxAnchor) + "], got " +
                                    std::to_string(anchor));
    }
    if (max_candidates < 1) throw std::invalid_argument("max_candidates must be >= 1");
    if (max_match < static_cast<std::size_t>(anchor)) {
        throw std::invalid_argument("max_match must be >= anchor, got " + std::to_string(max_match));
    }
}

std::uint64_t SuffixMatcher::key_ending_at(std::size_t end) const {
    return fnv1a_tokens(history_.data() + (end + 1 - static_cast<std::size_t>(anchor_)),
                        static_cast<std::size_t>(anchor_));
}

void SuffixMatcher::update(std::int32_t token) {
    history_.push_back(token);
    const std::size_t end = history_.size() - 1;
    if (history_.size() >= static_cast<std::size_t>(anchor_)) {
        positions_[key_ending_at(end)].push_back(static_cast<std::uint32_t>(end));
    }
}

void SuffixMatcher::update_batch(const std::int32_t* tokens, std::size_t count) {
    history_.reserve(history_.size() + count);
    for (std::size_t i = 0; i < count; ++i) update(tokens[i]);
}

std::size_t SuffixMatcher::predict(std::size_t max_tokens, std::vector<std::int32_t>& out) const {
    out.clear();
    const std::size_t n = history_.size();
    if (max_tokens == 0 || n < static_cast<std::size_t>(anchor_) + 1) return 0;
    const auto found = positions_.find(key_ending_at(n - 1));
    if (found == positions_.end()) return 0;
    const std::vector<std::uint32_t>& ends = found->second;
    // The newest entry is the current position itself: it has no continuation yet.
    std::size_t best_len = 0, best_end = 0, examined = 0;
    for (std::size_t i = ends.size(); i-- > 0 && examined < max_candidates_;) {
        const std::size_t end = ends[i];
        if (end + 1 >= n) continue;
        ++examined;
        const std::size_t limit = std::min(max_match_, end + 1);
        std::size_t len = 0;
        while (len < limit && history_[end - len] == history_[n - 1 - len]) ++len;
        if (len < static_cast<std::size_t>(anchor_)) continue;  // a hash collision, not a match
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
    positions_.clear();
}

}  // namespace ngramspec
