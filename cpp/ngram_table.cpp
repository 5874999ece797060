#include "ngram_table.hpp"

#include <stdexcept>

namespace ngramspec {

namespace {

std::size_t next_power_of_two(std::size_t n) {
    std::size_t p = 8;
    while (p < n) p <<= 1;
    return p;
}

}  // namespace

NGramTable::NGramTable(std::size_t max_entries)
    : slots_(next_power_of_two(2 * max_entries), Slot{0, kNone}),
      nodes_(max_entries == 0 ? 1 : max_entries) {
    mask_ = slots_.size() - 1;
    clear();
}

void NGramTable::clear() {
    for (auto& slot : slots_) slot = Slot{0, kNone};
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        nodes_[i].next = (i + 1 < nodes_.size()) ? static_cast<std::int32_t>(i + 1) : kNone;
    }
    free_head_ = 0;
    num_keys_ = 0;
    num_nodes_ = 0;
}

std::size_t NGramTable::home(std::uint64_t key) const {
    // FNV-1a's low bits are weak for power-of-two tables; a murmur3 finaliser spreads them.
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<std::size_t>(key) & mask_;
}

std::size_t NGramTable::find_slot(std::uint64_t key) const {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
        const Slot& slot = slots_[i];
        if (slot.head == kNone) return slots_.size();
        if (slot.key == key) return i;
    }
}

std::int32_t NGramTable::alloc_node() {
    if (free_head_ == kNone) {
        // Unreachable while the predictor keeps at most max_entries n-grams live.
        throw std::logic_error("NGramTable: node pool exhausted");
    }
    const std::int32_t index = free_head_;
    free_head_ = nodes_[static_cast<std::size_t>(index)].next;
    ++num_nodes_;
    return index;
}

void NGramTable::free_node(std::int32_t index) {
    nodes_[static_cast<std::size_t>(index)].next = free_head_;
    free_head_ = index;
    --num_nodes_;
}

void NGramTable::add(std::uint64_t key, std::int32_t next, std::int64_t pos) {
    std::size_t i = home(key);
    while (slots_[i].head != kNone && slots_[i].key != key) i = (i + 1) & mask_;
    Slot& slot = slots_[i];
    if (slot.head == kNone) {
        slot.key = key;
        ++num_keys_;
    } else {
        for (std::int32_t n = slot.head; n != kNone; n = nodes_[static_cast<std::size_t>(n)].next) {
            Node& node = nodes_[static_cast<std::size_t>(n)];
            if (node.token == next) {
                ++node.count;
                node.last_pos = pos;
                return;
            }
        }
    }
    const std::int32_t n = alloc_node();
    nodes_[static_cast<std::size_t>(n)] = Node{next, 1, pos, slot.head};
    slot.head = n;
}

void NGramTable::remove(std::uint64_t key, std::int32_t next) {
    const std::size_t i = find_slot(key);
    if (i == slots_.size()) throw std::logic_error("NGramTable: removing an absent context");
    Slot& slot = slots_[i];
    std::int32_t prev = kNone;
    for (std::int32_t n = slot.head; n != kNone; prev = n, n = nodes_[static_cast<std::size_t>(n)].next) {
        Node& node = nodes_[static_cast<std::size_t>(n)];
        if (node.token != next) continue;
        if (--node.count > 0) return;
        if (prev == kNone) {
            slot.head = node.next;
        } else {
            nodes_[static_cast<std::size_t>(prev)].next = node.next;
        }
        free_node(n);
        if (slot.head == kNone) erase_slot(i);
        return;
    }
    throw std::logic_error("NGramTable: removing an absent continuation");
}

void NGramTable::erase_slot(std::size_t index) {
    // Backward-shift deletion keeps every probe chain unbroken without tombstones,
    // so lookups never slow down over a long generation.
    --num_keys_;
    std::size_t hole = index;
    for (std::size_t j = (hole + 1) & mask_; slots_[j].head != kNone; j = (j + 1) & mask_) {
        const std::size_t want = home(slots_[j].key);
        if (((j - want) & mask_) >= ((j - hole) & mask_)) {
            slots_[hole] = slots_[j];
            hole = j;
        }
    }
    slots_[hole].head = kNone;
}

bool NGramTable::best(std::uint64_t key, std::int32_t* next, std::int32_t* count, std::int32_t* total) const {
    const std::size_t i = find_slot(key);
    if (i == slots_.size()) return false;
    const Node* best_node = nullptr;
    std::int32_t sum = 0;
    for (std::int32_t n = slots_[i].head; n != kNone; n = nodes_[static_cast<std::size_t>(n)].next) {
        const Node& node = nodes_[static_cast<std::size_t>(n)];
        sum += node.count;
        if (best_node == nullptr || node.count > best_node->count ||
            (node.count == best_node->count && node.last_pos > best_node->last_pos)) {
            best_node = &node;
        }
    }
    *next = best_node->token;
    if (count != nullptr) *count = best_node->count;
    if (total != nullptr) *total = sum;
    return true;
}

std::size_t NGramTable::memory_bytes() const {
    return slots_.capacity() * sizeof(Slot) + nodes_.capacity() * sizeof(Node);
}

}  // namespace ngramspec
