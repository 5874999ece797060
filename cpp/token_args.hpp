// Checked conversion of Python arguments (token ids, token arrays, draft
// lengths) shared by the bindings: every check runs before any state changes.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ngramspec::args {

namespace py = pybind11;

inline constexpr long long kTokenLimit = 1LL << 31;  // token ids live in [0, 2^31)
inline constexpr long long kMaxPredict = 1 << 16;    // a bound on predict(n), so a cyclic draft cannot hang

// An int (or an object with __index__, not bool or float); saturates out of range.
long long integer_from_object(py::handle obj, const char* what);
// An int (as above) in [lo, hi]; ValueError naming `what` otherwise.
long long integer_in_range(py::handle obj, const char* what, long long lo, long long hi);
// One token id in [0, 2^31).
std::int32_t token_from_object(py::handle obj);
// A list or 1-D integer array of token ids, all checked.
std::vector<std::int32_t> tokens_from_object(py::handle obj);
// A draft length n in [0, kMaxPredict].
std::size_t checked_predict_count(py::handle n);
py::array_t<std::int32_t> to_numpy(const std::vector<std::int32_t>& tokens);

}  // namespace ngramspec::args
