#include "ngram_predictor.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "fnv1a.hpp"

namespace ngramspec {

NGramPredictor::NGramPredictor(int min_order, int max_order, std::size_t window)
    : min_order_(min_order), max_order_(max_order), window_(window) {
    if (max_order < kMinOrder || max_order > kMaxOrder) {
        throw std::invalid_argument("max_order must be between 2 and 8, got " + std::to_string(max_order));
    }
    if (min_order < kMinOrder || min_order > max_order) {
        throw std::invalid_argument("min_order must be between 2 and max_order (" + std::to_string(max_order) +
                                    "), got " + std::to_string(min_order));
    }
    if (window < static_cast<std::size_t>(max_order) || window > kMaxWindow) {
        throw std::invalid_argument("window must be between max_order (" + std::to_string(max_order) +
                                    ") and " + std::to_string(kMaxWindow) + ", got " + std::to_string(window));
    }
    std::size_t ring_size = 1;
    while (ring_size < window + 1) ring_size <<= 1;
    ring_.assign(ring_size, 0);
    ring_mask_ = ring_size - 1;
    tables_.reserve(static_cast<std::size_t>(max_order - min_order + 1));
    for (int order = min_order; order <= max_order; ++order) tables_.emplace_back(window);
}

std::uint64_t NGramPredictor::context_key(std::int64_t start, int length) const {
    std::int32_t context[kMaxOrder];
    for (int i = 0; i < length; ++i) context[i] = at(start + i);
    return fnv1a_tokens(context, static_cast<std::size_t>(length));
}

void NGramPredictor::update(std::int32_t token) {
    const std::int64_t pos = total_;
    ring_[static_cast<std::size_t>(pos) & ring_mask_] = token;
    ++total_;
    for (int order = min_order_; order <= max_order_; ++order) {
        const std::int64_t start = pos - (order - 1);
        if (start < 0) break;
        tables_[static_cast<std::size_t>(order - min_order_)].add(context_key(start, order - 1), token, pos);
    }
    const auto window = static_cast<std::int64_t>(window_);
    if (total_ > window) {
        // The token at `leaving` drops out of the window, and with it every n-gram
        // that starts there; all of those n-grams end at or before `pos`.
        const std::int64_t leaving = pos - window;
        for (int order = min_order_; order <= max_order_; ++order) {
            tables_[static_cast<std::size_t>(order - min_order_)].remove(context_key(leaving, order - 1),
                                                                         at(leaving + order - 1));
        }
    }
}

void NGramPredictor::update_batch(const std::int32_t* tokens, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) update(tokens[i]);
}

std::size_t NGramPredictor::predict(std::size_t max_tokens, std::vector<std::int32_t>& out,
                                    std::vector<std::int32_t>* orders, std::vector<std::int32_t>* counts,
                                    std::vector<std::int32_t>* totals) const {
    out.clear();
    if (orders != nullptr) orders->clear();
    if (counts != nullptr) counts->clear();
    if (totals != nullptr) totals->clear();
    if (max_tokens == 0 || total_ == 0) return 0;
    // The tentative context: the tail of the history, then our own guesses.
    std::vector<std::int32_t> context;
    const std::int64_t have = std::min<std::int64_t>(total_, max_order_ - 1);
    context.reserve(static_cast<std::size_t>(have) + max_tokens);
    for (std::int64_t pos = total_ - have; pos < total_; ++pos) context.push_back(at(pos));
    while (out.size() < max_tokens) {
        std::int32_t next = 0, count = 0, total = 0;
        int matched = 0;
        for (int order = max_order_; order >= min_order_ && matched == 0; --order) {
            const auto length = static_cast<std::size_t>(order - 1);
            if (context.size() < length) continue;
            const std::uint64_t key = fnv1a_tokens(context.data() + context.size() - length, length);
            if (tables_[static_cast<std::size_t>(order - min_order_)].best(key, &next, &count, &total)) {
                matched = order;
            }
        }
        if (matched == 0) break;
        context.push_back(next);
        out.push_back(next);
        if (orders != nullptr) orders->push_back(matched);
        if (counts != nullptr) counts->push_back(count);
        if (totals != nullptr) totals->push_back(total);
    }
    return out.size();
}

void NGramPredictor::reset() {
    total_ = 0;
    for (auto& table : tables_) table.clear();
}

std::size_t NGramPredictor::history_size() const {
    return static_cast<std::size_t>(std::min<std::int64_t>(total_, static_cast<std::int64_t>(window_)));
}

std::vector<std::int32_t> NGramPredictor::history() const {
    std::vector<std::int32_t> tokens;
    tokens.reserve(history_size());
    for (std::int64_t pos = total_ - static_cast<std::int64_t>(history_size()); pos < total_; ++pos) {
        tokens.push_back(at(pos));
    }
    return tokens;
}

std::size_t NGramPredictor::memory_bytes() const {
    std::size_t bytes = sizeof(*this) + ring_.capacity() * sizeof(std::int32_t);
    for (const auto& table : tables_) bytes += table.memory_bytes();
    return bytes;
}

}  // namespace ngramspec
