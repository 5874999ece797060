// Python binding of CorpusMatcher. Input checking lives here (token_args), so
// the core can trust its arguments; every check runs before any state changes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "corpus_matcher.hpp"
#include "token_args.hpp"

namespace py = pybind11;

namespace {

using ngramspec::CorpusMatcher;
using namespace ngramspec::args;

constexpr long long kMaxSetting = 1LL << 20;  // as SuffixMatcher's max_candidates and max_match
constexpr long long kDefaultMaxTokens = 1000000;

// One corpus is shared by every generation that uses the same ngramspec.Memory,
// possibly from several threads, and its calls run without the GIL: a mutex per
// instance, taken only after the GIL has been released.
struct Corpus {
    Corpus(py::handle anchor, py::handle max_candidates, py::handle max_match, py::handle max_tokens)
        : core(static_cast<int>(integer_in_range(anchor, "anchor", 1, CorpusMatcher::kMaxAnchor)),
               static_cast<std::size_t>(integer_in_range(max_candidates, "max_candidates", 1, kMaxSetting)),
               static_cast<std::size_t>(integer_in_range(max_match, "max_match", 1, kMaxSetting)),
               static_cast<std::size_t>(integer_in_range(max_tokens, "max_tokens", 2,
                                                         static_cast<long long>(CorpusMatcher::kMaxMaxTokens)))) {}
    CorpusMatcher core;
    mutable std::mutex mutex;
};

// Runs `call` on the core without the GIL, under the instance's lock; the arguments
// were converted and checked before, with the GIL held.
template <typename Call>
auto on_core(const Corpus& self, Call&& call) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(self.mutex);
    return call(self.core);
}

}  // namespace

void bind_corpus_matcher(py::module_& m) {
    py::class_<Corpus>(m, "CorpusMatcher", R"doc(
Copy drafts from a bounded store of earlier documents (the engine of ngramspec.Memory).

``add(tokens)`` stores a document; ``predict(context, n)`` finds the stored
positions whose ``anchor`` tokens equal the end of ``context``, measures how far
each match extends backwards (up to ``max_match`` tokens, never past the start of
its document), and copies up to n tokens that followed the longest (never past
the end of its document); equal lengths go to the newest. The corpus is bounded
by ``max_tokens`` (each document's end marker counts): once it holds more, the
oldest tokens are dropped, keeping the newest three quarters of the budget.
Safe to share between threads.
)doc")
        .def(py::init<py::handle, py::handle, py::handle, py::handle>(), py::kw_only(), py::arg("anchor") = 3,
             py::arg("max_candidates") = 64, py::arg("max_match") = 64, py::arg("max_tokens") = kDefaultMaxTokens,
             "anchor: tokens that must match, 1..16. max_candidates: newest candidate positions examined per "
             "prediction, >= 1. max_match: longest backward match measured, >= anchor. max_tokens: corpus "
             "budget, 2..2**30 (default 1,000,000).")
        .def(
            "add",
            [](Corpus& self, py::handle tokens) {
                const std::vector<std::int32_t> values = tokens_from_object(tokens);
                py::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(self.mutex);
                self.core.add(values.data(), values.size());
            },
            py::arg("tokens"),
            "Store one document: a list or 1-D integer array of token ids (all checked first); empty adds nothing.")
        .def(
            "predict",
            [](const Corpus& self, py::handle context, py::handle n) {
                const std::vector<std::int32_t> values = tokens_from_object(context);
                const std::size_t count = checked_predict_count(n);
                std::vector<std::int32_t> draft;
                const std::size_t match = on_core(self, [&](const CorpusMatcher& core) {
                    return core.predict(values.data(), values.size(), count, draft);
                });
                return py::make_tuple(to_numpy(draft), match);
            },
            py::arg("context"), py::arg("n"),
            "(draft, match_length): up to n tokens that followed the longest match of the end of `context` "
            "(token ids; only its last max_match matter) in the corpus, as numpy int32; (empty, 0) when none.")
        .def(
            "predict_at",
            [](const Corpus& self, py::handle context, py::handle n) {
                const std::vector<std::int32_t> values = tokens_from_object(context);
                const std::size_t count = checked_predict_count(n);
                std::vector<std::int32_t> draft;
                std::uint64_t at = 0;
                const std::size_t match = on_core(self, [&](const CorpusMatcher& core) {
                    return core.predict(values.data(), values.size(), count, draft, &at);
                });
                return py::make_tuple(to_numpy(draft), match, at);
            },
            py::arg("context"), py::arg("n"),
            "(draft, match_length, at): as predict, and `at`, the absolute position (see `dropped`) of the "
            "draft's first token in the corpus (0 when there is no draft).")
        .def(
            "follow",
            [](const Corpus& self, py::handle from, py::handle window, py::handle context, py::handle n) {
                const auto start = static_cast<std::uint64_t>(
                    integer_in_range(from, "from_", 0, std::numeric_limits<long long>::max()));
                const auto span = static_cast<std::size_t>(integer_in_range(window, "window", 0, kMaxSetting));
                const std::vector<std::int32_t> values = tokens_from_object(context);
                const std::size_t count = checked_predict_count(n);
                std::vector<std::int32_t> draft;
                std::uint64_t at = 0;
                const std::size_t match = on_core(self, [&](const CorpusMatcher& core) {
                    return core.follow(start, span, values.data(), values.size(), count, draft, &at);
                });
                return py::make_tuple(to_numpy(draft), match, at);
            },
            py::arg("from_"), py::arg("window"), py::arg("context"), py::arg("n"),
            "(draft, match_length, at): drafts near a remembered place. Among the absolute positions "
            "from_ .. from_+window-1 still stored and in from_'s document, the one whose backward match with "
            "the end of `context` is longest (>= 1 token; equal lengths: the nearest); up to n tokens that "
            "follow it, and the absolute position of the first. (empty, 0, 0) when none, or when from_ was "
            "evicted.")
        .def(
            "support",
            [](const Corpus& self, py::handle context, py::handle draft) {
                const std::vector<std::int32_t> values = tokens_from_object(context);
                const std::vector<std::int32_t> guess = tokens_from_object(draft);
                std::vector<std::uint32_t> agree, seen;
                on_core(self, [&](const CorpusMatcher& core) {
                    core.support(values.data(), values.size(), guess.data(), guess.size(), agree, seen);
                });
                return py::make_tuple(py::array_t<std::uint32_t>(agree.size(), agree.data()),
                                      py::array_t<std::uint32_t>(seen.size(), seen.data()));
            },
            py::arg("context"), py::arg("draft"),
            "(agree, seen), numpy uint32, one entry per draft token: over the candidate positions predict "
            "examines for `context` (the newest max_candidates whose anchor equals its end and that have a "
            "continuation), seen[i] counts those whose continuation agrees with draft[:i], agree[i] those "
            "that agree with draft[:i+1].")
        .def("clear",
             [](Corpus& self) {
                 std::lock_guard<std::mutex> lock(self.mutex);
                 self.core.clear();
             })
        .def_property_readonly("corpus",
                               [](const Corpus& self) {
                                   std::vector<std::int32_t> tokens;
                                   {
                                       std::lock_guard<std::mutex> lock(self.mutex);
                                       tokens = self.core.corpus();
                                   }
                                   return to_numpy(tokens);
                               },
                               "A copy of the stored tokens, oldest first, each document followed by -1.")
        .def_property_readonly("tokens_added",
                               [](const Corpus& self) {
                                   std::lock_guard<std::mutex> lock(self.mutex);
                                   return self.core.tokens_added();
                               },
                               "Document tokens added since construction, evicted ones included.")
        .def_property_readonly("dropped",
                               [](const Corpus& self) {
                                   std::lock_guard<std::mutex> lock(self.mutex);
                                   return self.core.dropped();
                               },
                               "Tokens dropped from the front (eviction, clear): the absolute position of "
                               "corpus[0].")
        .def_property_readonly("memory_bytes",
                               [](const Corpus& self) {
                                   std::lock_guard<std::mutex> lock(self.mutex);
                                   return self.core.memory_bytes();
                               },
                               "Bytes held by the corpus and its index (capacity, not size).")
        .def_property_readonly("anchor", [](const Corpus& self) { return self.core.anchor(); })
        .def_property_readonly("max_candidates", [](const Corpus& self) { return self.core.max_candidates(); })
        .def_property_readonly("max_match", [](const Corpus& self) { return self.core.max_match(); })
        .def_property_readonly("max_tokens", [](const Corpus& self) { return self.core.max_tokens(); })
        .def("__len__",
             [](const Corpus& self) {
                 std::lock_guard<std::mutex> lock(self.mutex);
                 return self.core.corpus().size();
             })
        .def("__repr__", [](const Corpus& self) {
            std::lock_guard<std::mutex> lock(self.mutex);
            return "CorpusMatcher(anchor=" + std::to_string(self.core.anchor()) + ", max_candidates=" +
                   std::to_string(self.core.max_candidates()) + ", max_match=" +
                   std::to_string(self.core.max_match()) + ", max_tokens=" + std::to_string(self.core.max_tokens()) +
                   ", corpus=" + std::to_string(self.core.corpus().size()) + " tokens)";
        });
}
