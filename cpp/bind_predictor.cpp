// Python binding of NGramPredictor. Input checking lives here, so the core can
// trust its arguments; every check runs before any state changes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>
#include <string>
#include <vector>

#include "ngram_predictor.hpp"
#include "token_args.hpp"

namespace py = pybind11;

namespace {

using ngramspec::NGramPredictor;
using namespace ngramspec::args;

// The core is not thread-safe and its hot calls run without the GIL, so each
// instance carries a mutex, taken only after the GIL has been released.
struct Predictor {
    // Arguments arrive as Python objects so that a bool, a float or a huge int is
    // refused naming the argument (pybind11's own conversion says only
    // "incompatible constructor arguments", and takes True as 1).
    Predictor(py::handle min_order, py::handle max_order, py::handle window)
        : core(checked_int(min_order, "min_order"), checked_int(max_order, "max_order"), checked_window(window)) {}

    // The core checks the real ranges; these only make the value fit its type.
    static int checked_int(py::handle obj, const char* name) {
        const long long value = integer_from_object(obj, name);  // saturates far out of range
        if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
            throw py::value_error(std::string(name) + " is out of range: " + std::string(py::str(obj)));
        }
        return static_cast<int>(value);
    }
    static std::size_t checked_window(py::handle obj) {
        const long long value = integer_from_object(obj, "window");
        if (value < 0) throw py::value_error("window must be positive, got " + std::string(py::str(obj)));
        if (value > std::numeric_limits<int>::max()) {
            throw py::value_error("window is out of range: " + std::string(py::str(obj)));
        }
        return static_cast<std::size_t>(value);
    }

    NGramPredictor core;
    mutable std::mutex mutex;
};

py::dict per_order(const Predictor& self, bool entries) {
    std::lock_guard<std::mutex> lock(self.mutex);
    py::dict sizes;
    for (int order = self.core.min_order(); order <= self.core.max_order(); ++order) {
        const auto& table = self.core.table(order);
        sizes[py::int_(order)] = entries ? table.num_entries() : table.num_contexts();
    }
    return sizes;
}

// One locked call of the core's predict; the tuple holds the draft, then the
// orders when asked for, then counts and totals when asked for.
py::tuple predict(const Predictor& self, py::handle n, bool with_orders, bool with_counts) {
    const std::size_t count = checked_predict_count(n);
    std::vector<std::int32_t> draft, orders, counts, totals;
    {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(self.mutex);
        self.core.predict(count, draft, with_orders ? &orders : nullptr, with_counts ? &counts : nullptr,
                          with_counts ? &totals : nullptr);
    }
    if (with_counts) return py::make_tuple(to_numpy(draft), to_numpy(orders), to_numpy(counts), to_numpy(totals));
    if (with_orders) return py::make_tuple(to_numpy(draft), to_numpy(orders));
    return py::make_tuple(to_numpy(draft));
}

}  // namespace

void bind_predictor(py::module_& m) {
    py::class_<Predictor>(m, "NGramPredictor", R"doc(
Model-free draft predictor over token ids.

An order-n table maps the last n-1 tokens to the tokens that followed them, with
counts. Only the n-grams lying wholly inside the last ``window`` tokens are
counted: when a token leaves the window, the n-grams that start at it are
decremented and dropped at zero, so memory is fixed at construction (see
``memory_bytes``) however long the generation runs.

``predict(n)`` chains up to n guesses. At each step it tries the longest
context first (max_order down to min_order) and takes that context's most
frequent continuation; equal counts go to the continuation seen most recently.
It stops at the first step where no order has a continuation.
)doc")
        .def(py::init<py::handle, py::handle, py::handle>(), py::kw_only(), py::arg("min_order") = 2,
             py::arg("max_order") = 4, py::arg("window") = 512,
             "min_order: shortest n-gram used, 2..max_order. max_order: longest, 2..8. "
             "window: tokens of history kept and counted, max_order..2**20.")
        .def(
            "update",
            [](Predictor& self, py::handle token) {
                const std::int32_t value = token_from_object(token);
                py::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(self.mutex);
                self.core.update(value);
            },
            py::arg("token"), "Append one token id in [0, 2**31).")
        .def(
            "update_batch",
            [](Predictor& self, py::handle tokens) {
                const std::vector<std::int32_t> values = tokens_from_object(tokens);
                py::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(self.mutex);
                self.core.update_batch(values.data(), values.size());
            },
            py::arg("tokens"),
            "Append a list or 1-D integer array of token ids. The whole input is checked "
            "before any of it is added, so a bad id leaves the predictor unchanged.")
        .def(
            "predict",
            [](const Predictor& self, py::handle n) {
                py::tuple out = predict(self, n, false, false);
                return py::object(out[0]);
            },
            py::arg("n"), "Up to n chained draft tokens (numpy int32), possibly none.")
        .def(
            "predict_with_orders",
            [](const Predictor& self, py::handle n) {
                py::tuple out = predict(self, n, true, false);
                return py::make_tuple(out[0], out[1]);
            },
            py::arg("n"),
            "Like predict(n), plus the order (n-gram length) that produced each draft token.")
        .def(
            "predict_detailed", [](const Predictor& self, py::handle n) { return predict(self, n, true, true); },
            py::arg("n"),
            "Like predict_with_orders(n), plus for each draft token how often it followed its context in the "
            "window (counts) and how often that context occurred with any continuation (totals). "
            "counts / totals is the guess's share of its context.")
        .def("reset",
             [](Predictor& self) {
                 std::lock_guard<std::mutex> lock(self.mutex);
                 self.core.reset();
             })
        .def_property_readonly("history",
                               [](const Predictor& self) {
                                   std::vector<std::int32_t> tokens;
                                   {
                                       std::lock_guard<std::mutex> lock(self.mutex);
                                       tokens = self.core.history();
                                   }
                                   return to_numpy(tokens);
                               },
                               "A copy of the last min(window, tokens_seen) tokens, oldest first.")
        .def_property_readonly("tokens_seen",
                               [](const Predictor& self) {
                                   // Under the lock: another thread may be appending (update runs without the GIL).
                                   std::lock_guard<std::mutex> lock(self.mutex);
                                   return self.core.tokens_seen();
                               },
                               "Tokens appended since construction or the last reset().")
        .def_property_readonly("min_order", [](const Predictor& self) { return self.core.min_order(); })
        .def_property_readonly("max_order", [](const Predictor& self) { return self.core.max_order(); })
        .def_property_readonly("window", [](const Predictor& self) { return self.core.window(); })
        .def_property_readonly("table_sizes", [](const Predictor& self) { return per_order(self, false); },
                               "{order: distinct contexts in that order's table}")
        .def_property_readonly("table_entries", [](const Predictor& self) { return per_order(self, true); },
                               "{order: distinct (context, next token) pairs in that order's table}")
        .def_property_readonly("memory_bytes",
                               [](const Predictor& self) {
                                   std::lock_guard<std::mutex> lock(self.mutex);
                                   return self.core.memory_bytes();
                               },
                               "Bytes held by the history ring and tables; fixed at construction.")
        .def("__len__",
             [](const Predictor& self) {
                 std::lock_guard<std::mutex> lock(self.mutex);
                 return self.core.history_size();
             })
        .def("__repr__", [](const Predictor& self) {
            std::lock_guard<std::mutex> lock(self.mutex);
            return "NGramPredictor(min_order=" + std::to_string(self.core.min_order()) +
                   ", max_order=" + std::to_string(self.core.max_order()) +
                   ", window=" + std::to_string(self.core.window()) + ", history=" +
                   std::to_string(self.core.history_size()) + " tokens)";
        });
}
