// One n-gram order's table: context key -> {next token -> count}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ngramspec {

// A fixed-capacity table sized once for the predictor's window, so that memory is
// bounded and no update allocates. Keys live in an open-addressing hash index
// (linear probing, backward-shift deletion); each key owns a singly linked list of
// continuation nodes drawn from a preallocated pool.
class NGramTable {
public:
    // max_entries: the most distinct (context, next) pairs that can be live at
    //   once. The predictor passes its window size: a window of W tokens holds at
    //   most W n-grams of any order.
    explicit NGramTable(std::size_t max_entries);

    // Counts one more occurrence of (key, next) seen at absolute position `pos`.
    void add(std::uint64_t key, std::int32_t next, std::int64_t pos);

    // Forgets the oldest occurrence of (key, next). The pair must be present.
    void remove(std::uint64_t key, std::int32_t next);

    // The most frequent continuation of `key`; ties go to the continuation seen
    // most recently. Returns false when the key has no continuation.
    // count: when given, receives how often that continuation followed the key.
    // total: when given, receives how often the key was followed by anything; the
    //   share count/total is the draft's confidence signal.
    bool best(std::uint64_t key, std::int32_t* next, std::int32_t* count = nullptr,
              std::int32_t* total = nullptr) const;

    void clear();
    std::size_t num_contexts() const { return num_keys_; }
    std::size_t num_entries() const { return num_nodes_; }
    std::size_t memory_bytes() const;

private:
    static constexpr std::int32_t kNone = -1;

    struct Slot {
        std::uint64_t key;
        std::int32_t head;  // first continuation node, kNone when the slot is empty
    };
    struct Node {
        std::int32_t token;
        std::int32_t count;
        std::int64_t last_pos;  // position of the latest occurrence, for the tie-break
        std::int32_t next;      // next node of the same key, or the next free node
    };

    std::size_t home(std::uint64_t key) const;
    std::size_t find_slot(std::uint64_t key) const;  // slot index or slots_.size()
    void erase_slot(std::size_t index);
    std::int32_t alloc_node();
    void free_node(std::int32_t index);

    std::vector<Slot> slots_;  // power-of-two size, at least twice max_entries
    std::vector<Node> nodes_;
    std::size_t mask_ = 0;
    std::int32_t free_head_ = kNone;
    std::size_t num_keys_ = 0;
    std::size_t num_nodes_ = 0;
};

}  // namespace ngramspec
