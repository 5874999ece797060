// Python binding of SuffixMatcher. Input checking lives here (token_args), so
// the core can trust its arguments; every check runs before any state changes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "suffix_matcher.hpp"
#include "token_args.hpp"

namespace py = pybind11;

namespace {

using ngramspec::SuffixMatcher;
using namespace ngramspec::args;

constexpr long long kMaxSetting = 1LL << 20;  // generous bounds for max_candidates and max_match

long long checked_setting(py::handle value, const char* name, long long lo) {
    return integer_in_range(value, name, lo, kMaxSetting);
}

// The core is not thread-safe and its hot calls run without the GIL, so each
// instance carries a mutex, taken only after the GIL has been released.
struct Matcher {
    Matcher(py::handle anchor, py::handle max_candidates, py::handle max_match, py::handle max_tokens)
        : core(static_cast<int>(checked_setting(anchor, "anchor", 1)),
               static_cast<std::size_t>(checked_setting(max_candidates, "max_candidates", 1)),
               static_cast<std::size_t>(checked_setting(max_match, "max_match", 1)),
               static_cast<std::size_t>(integer_in_range(max_tokens, "max_tokens", 1,
                                                         static_cast<long long>(SuffixMatcher::kMaxMaxTokens)))) {}
    SuffixMatcher core;
    mutable std::mutex mutex;
};

}  // namespace

void bind_suffix_matcher(py::module_& m) {
    py::class_<Matcher>(m, "SuffixMatcher", R"doc(
Long copy drafts over token ids (prompt lookup with the longest match winning).

Every position is indexed by the ``anchor`` tokens ending there. ``predict(n)``
finds the earlier positions whose anchor equals the current one, measures how
far each match extends backwards (up to ``max_match`` tokens), and copies up to
n tokens forward from the longest match; equal lengths go to the most recent.
The copy may run on into its own draft (a repeating run). History is the sequence
since the last ``reset()``, bounded by ``max_tokens``: once it holds more, the
oldest tokens are dropped, keeping the newest three quarters of the budget
(amortised O(1) per token; at most about 24 bytes per budget token).
)doc")
        .def(py::init<py::handle, py::handle, py::handle, py::handle>(), py::kw_only(), py::arg("anchor") = 2,
             py::arg("max_candidates") = 64, py::arg("max_match") = 64,
             py::arg("max_tokens") = SuffixMatcher::kDefaultMaxTokens,
             "anchor: tokens that must match, 1..16. max_candidates: most recent candidate positions "
             "examined per prediction, >= 1. max_match: longest backward match measured, >= anchor. "
             "max_tokens: history budget, 1..2**30 (default 2**20).")
        .def(
            "update",
            [](Matcher& self, py::handle token) {
                const std::int32_t value = token_from_object(token);
                py::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(self.mutex);
                self.core.update(value);
            },
            py::arg("token"), "Append one token id in [0, 2**31).")
        .def(
            "update_batch",
            [](Matcher& self, py::handle tokens) {
                const std::vector<std::int32_t> values = tokens_from_object(tokens);
                py::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(self.mutex);
                self.core.update_batch(values.data(), values.size());
            },
            py::arg("tokens"),
            "Append a list or 1-D integer array of token ids; the whole input is checked first.")
        .def(
            "predict",
            [](const Matcher& self, py::handle n) {
                const std::size_t count = checked_predict_count(n);
                std::vector<std::int32_t> draft;
                std::size_t match = 0;
                {
                    py::gil_scoped_release release;
                    std::lock_guard<std::mutex> lock(self.mutex);
                    match = self.core.predict(count, draft);
                }
                return py::make_tuple(to_numpy(draft), match);
            },
            py::arg("n"),
            "(draft, match_length): up to n copied tokens (numpy int32) and the length of the "
            "backward match they follow; (empty, 0) when the current anchor never occurred before.")
        .def("reset",
             [](Matcher& self) {
                 std::lock_guard<std::mutex> lock(self.mutex);
                 self.core.reset();
             })
        .def_property_readonly("history",
                               [](const Matcher& self) {
                                   std::vector<std::int32_t> tokens;
                                   {
                                       std::lock_guard<std::mutex> lock(self.mutex);
                                       tokens = self.core.history();
                                   }
                                   return to_numpy(tokens);
                               },
                               "A copy of the tokens held (the last max_tokens at most), oldest first.")
        .def_property_readonly("tokens_seen",
                               [](const Matcher& self) {
                                   std::lock_guard<std::mutex> lock(self.mutex);
                                   return self.core.tokens_seen();
                               },
                               "Tokens appended since the last reset(), evicted ones included.")
        .def_property_readonly("memory_bytes",
                               [](const Matcher& self) {
                                   std::lock_guard<std::mutex> lock(self.mutex);
                                   return self.core.memory_bytes();
                               },
                               "Bytes held by the history and its index (capacity, not size).")
        .def_property_readonly("max_tokens", [](const Matcher& self) { return self.core.max_tokens(); })
        .def_property_readonly("anchor", [](const Matcher& self) { return self.core.anchor(); })
        .def_property_readonly("max_candidates", [](const Matcher& self) { return self.core.max_candidates(); })
        .def_property_readonly("max_match", [](const Matcher& self) { return self.core.max_match(); })
        .def("__len__",
             [](const Matcher& self) {
                 std::lock_guard<std::mutex> lock(self.mutex);
                 return self.core.history().size();
             })
        .def("__repr__", [](const Matcher& self) {
            std::lock_guard<std::mutex> lock(self.mutex);
            return "SuffixMatcher(anchor=" + std::to_string(self.core.anchor()) + ", max_candidates=" +
                   std::to_string(self.core.max_candidates()) + ", max_match=" +
                   std::to_string(self.core.max_match()) + ", max_tokens=" +
                   std::to_string(self.core.max_tokens()) + ", history=" +
                   std::to_string(self.core.history().size()) + " tokens)";
        });
}
