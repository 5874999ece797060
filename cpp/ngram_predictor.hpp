// The n-gram draft predictor: guesses the next tokens from the tokens seen so far.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ngram_table.hpp"

namespace ngramspec {

// Orders follow the n-gram convention: an order-n entry maps a context of n-1
// tokens to the token that followed it. Counts are kept for exactly the n-grams
// that lie wholly inside the last `window` tokens: when a token leaves the window
// the n-grams that start at it are decremented and dropped at zero. Memory is
// therefore fixed at construction and never grows with the length of a generation.
//
// Not thread-safe; the Python binding serialises calls.
class NGramPredictor {
public:
    static constexpr int kMinOrder = 2;
    static constexpr int kMaxOrder = 8;
    static constexpr std::size_t kMaxWindow = std::size_t{1} << 20;

    // min_order: shortest n-gram consulted, 2..max_order (2 = one token of context).
    // max_order: longest n-gram consulted, 2..8; longer contexts are tried first.
    // window:    tokens of history kept and counted, max_order..2^20.
    // Throws std::invalid_argument on a bad combination.
    NGramPredictor(int min_order, int max_order, std::size_t window);

    // Appends one token. `token` must be in [0, 2^31); the binding checks it.
    void update(std::int32_t token);
    void update_batch(const std::int32_t* tokens, std::size_t count);

    // Writes up to `max_tokens` chained draft tokens to `out`; returns how many.
    // At each step the longest order whose context has a continuation wins, and
    // within it the most frequent continuation; equal counts go to the one seen
    // most recently. Drafting stops at the first step where no order matches.
    // orders: when given, receives the order that produced each draft token, the
    //   engine's signal of how far to trust it.
    // counts, totals: when given, receive for each draft token how often it
    //   followed its context in the window, and how often that context occurred
    //   (with any continuation): a context always followed by the same token is
    //   a far safer guess than one followed by many.
    std::size_t predict(std::size_t max_tokens, std::vector<std::int32_t>& out,
                        std::vector<std::int32_t>* orders = nullptr, std::vector<std::int32_t>* counts = nullptr,
                        std::vector<std::int32_t>* totals = nullptr) const;

    void reset();

    std::vector<std::int32_t> history() const;  // oldest first
    std::size_t history_size() const;
    std::int64_t tokens_seen() const { return total_; }
    int min_order() const { return min_order_; }
    int max_order() const { return max_order_; }
    std::size_t window() const { return window_; }
    const NGramTable& table(int order) const { return tables_[static_cast<std::size_t>(order - min_order_)]; }
    std::size_t memory_bytes() const;

private:
    std::int32_t at(std::int64_t pos) const { return ring_[static_cast<std::size_t>(pos) & ring_mask_]; }
    std::uint64_t context_key(std::int64_t start, int length) const;

    int min_order_;
    int max_order_;
    std::size_t window_;
    std::vector<std::int32_t> ring_;  // power-of-two ring holding at least window+1 tokens
    std::size_t ring_mask_ = 0;
    std::int64_t total_ = 0;          // tokens ever appended since the last reset
    std::vector<NGramTable> tables_;  // index order - min_order_
};

}  // namespace ngramspec
