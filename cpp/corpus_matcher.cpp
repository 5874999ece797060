#include "corpus_matcher.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ngramspec {

namespace {
constexpr std::size_t kMaxForeignSteps = 256;  // as in SuffixMatcher: other anchors walked past, at most
}

CorpusMatcher::CorpusMatcher(int anchor, std::size_t max_candidates, std::size_t max_match, std::size_t max_tokens)
    : anchor_(anchor), max_candidates_(max_candidates), max_match_(max_match), max_tokens_(max_tokens), index_(anchor, max_tokens) {
    if (anchor < 1 || anchor > kMaxAnchor) {
        throw std::invalid_argument("anchor must be in [1, " + std::to_string(kMaxAnchor) + "], got " +
                                    std::to_string(anchor));
    }
    if (max_candidates < 1) throw std::invalid_argument("max_candidates must be >= 1");
    if (max_match < static_cast<std::size_t>(anchor)) {
        throw std::invalid_argument("max_match must be >= anchor, got " + std::to_string(max_match));
    }
    if (max_tokens < 2 || max_tokens > kMaxMaxTokens) {
        throw std::invalid_argument("max_tokens must be in [2, 2**30], got " + std::to_string(max_tokens));
    }
}

bool CorpusMatcher::indexable(const std::int32_t* tokens, std::size_t end) const {
    const auto a = static_cast<std::size_t>(anchor_);
    if (end + 1 < a) return false;
    for (std::size_t i = 0; i < a; ++i) {
        if (tokens[end - i] == kBoundary) return false;
    }
    return true;
}

void CorpusMatcher::rebuild_index(std::size_t count) {
    index_.rebuild(corpus_.data(), count,
                   [this](const std::int32_t* tokens, std::size_t end) { return indexable(tokens, end); });
}

void CorpusMatcher::push(std::int32_t token) {
    reserve_one_more(corpus_, max_tokens_ + 1);
    corpus_.push_back(token);
    if (corpus_.size() > max_tokens_) {
        // Keep the newest three quarters of the budget (see the class comment).
        const std::size_t keep = max_tokens_ - max_tokens_ / 4;
        dropped_ += corpus_.size() - keep;
        corpus_.erase(corpus_.begin(), corpus_.end() - static_cast<std::ptrdiff_t>(keep));
        rebuild_index(keep);
        return;
    }
    if (index_.full()) rebuild_index(corpus_.size() - 1);  // a bigger head table: re-slot every older position
    index_.add(corpus_.data(), corpus_.size() - 1, indexable(corpus_.data(), corpus_.size() - 1));
}

void CorpusMatcher::add(const std::int32_t* tokens, std::size_t count) {
    if (count == 0) return;
    tokens_added_ += count;
    for (std::size_t i = 0; i < count; ++i) push(tokens[i]);
    push(kBoundary);
}

template <typename Visit>
void CorpusMatcher::for_each_candidate(const std::int32_t* context, std::size_t count, std::size_t measure,
                                       Visit&& visit) const {
    const auto a = static_cast<std::size_t>(anchor_);
    const std::int32_t* c = corpus_.data();
    const std::int32_t* last = context + (count - 1);  // the context's newest token
    std::size_t examined = 0, foreign = 0;
    for (std::uint32_t pos = index_.first(context + (count - a)); pos != AnchorIndex::kNone && examined < max_candidates_;
         pos = index_.next(pos)) {
        const std::size_t end = pos;
        std::size_t len = 0;
        const std::size_t limit = std::min(measure, end + 1);
        // A boundary never equals a context token, so the match stops at its document's start.
        while (len < limit && c[end - len] == *(last - len)) ++len;
        if (len < a) {  // another anchor sharing the slot, not a candidate
            if (++foreign > kMaxForeignSteps) break;
            continue;
        }
        if (c[end + 1] == kBoundary) continue;  // the end of a document: nothing to copy
        ++examined;
        if (!visit(end, len)) break;
    }
}

std::size_t CorpusMatcher::predict(const std::int32_t* context, std::size_t count, std::size_t max_tokens,
                                   std::vector<std::int32_t>& out, std::uint64_t* at) const {
    out.clear();
    if (max_tokens == 0 || count < static_cast<std::size_t>(anchor_) || corpus_.empty()) return 0;
    const std::size_t longest = std::min(max_match_, count);
    std::size_t best_len = 0, best_end = 0;
    for_each_candidate(context, count, longest, [&](std::size_t end, std::size_t len) {
        if (len > best_len) {  // strictly longer: among equals the newest (seen first) stays
            best_len = len;
            best_end = end;
        }
        return len < longest;
    });
    if (best_len == 0) return 0;
    const std::int32_t* c = corpus_.data();
    for (std::size_t src = best_end + 1; out.size() < max_tokens && c[src] != kBoundary; ++src) out.push_back(c[src]);
    if (at != nullptr) *at = dropped_ + best_end + 1;
    return best_len;
}

std::size_t CorpusMatcher::follow(std::uint64_t from, std::size_t window, const std::int32_t* context,
                                  std::size_t count, std::size_t max_tokens, std::vector<std::int32_t>& out,
                                  std::uint64_t* at) const {
    out.clear();
    if (max_tokens == 0 || count == 0 || window == 0 || from < dropped_ || from - dropped_ >= corpus_.size()) {
        return 0;
    }
    const std::int32_t* c = corpus_.data();
    const std::int32_t* last = context + (count - 1);
    const std::size_t longest = std::min(max_match_, count);
    const std::size_t first = static_cast<std::size_t>(from - dropped_);
    const std::size_t stop = first + std::min(window, corpus_.size() - first);
    std::size_t best_len = 0, best_end = 0;
    // The corpus ends with a boundary, so c[end + 1] is always in range here.
    for (std::size_t end = first; end < stop && c[end] != kBoundary; ++end) {
        if (c[end + 1] == kBoundary) break;  // the document's last token: nothing to copy after it
        std::size_t len = 0;
        const std::size_t limit = std::min(longest, end + 1);
        while (len < limit && c[end - len] == *(last - len)) ++len;
        if (len > best_len) {  // strictly longer: among equals the nearest stays
            best_len = len;
            best_end = end;
            if (len == longest) break;
        }
    }
    if (best_len == 0) return 0;
    for (std::size_t src = best_end + 1; out.size() < max_tokens && c[src] != kBoundary; ++src) out.push_back(c[src]);
    *at = dropped_ + best_end + 1;
    return best_len;
}

void CorpusMatcher::support(const std::int32_t* context, std::size_t count, const std::int32_t* draft,
                            std::size_t n, std::vector<std::uint32_t>& agree, std::vector<std::uint32_t>& seen) const {
    agree.assign(n, 0);
    seen.assign(n, 0);
    const auto a = static_cast<std::size_t>(anchor_);
    if (n == 0 || count < a || corpus_.empty()) return;
    const std::int32_t* c = corpus_.data();
    for_each_candidate(context, count, a, [&](std::size_t end, std::size_t) {
        // A draft token is never a boundary, so the agreement stops at the document's end.
        std::size_t m = 0;
        while (m < n && c[end + 1 + m] == draft[m]) ++m;
        for (std::size_t i = 0; i < n && i <= m; ++i) {
            ++seen[i];
            if (i < m) ++agree[i];
        }
        return true;
    });
}

void CorpusMatcher::clear() {
    dropped_ += corpus_.size();  // every remembered place is gone
    corpus_.clear();
    index_.reset();
}

}  // namespace ngramspec
