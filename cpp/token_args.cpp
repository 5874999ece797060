#include "token_args.hpp"

#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace ngramspec::args {

namespace {

template <typename T>
std::vector<std::int32_t> copy_checked(const py::array& array) {
    auto typed = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(array);
    if (!typed) throw py::error_already_set();
    const T* data = typed.data();
    const auto count = static_cast<std::size_t>(typed.size());
    std::vector<std::int32_t> tokens(count);
    for (std::size_t i = 0; i < count; ++i) {
        const T value = data[i];
        bool bad = static_cast<unsigned long long>(value) >= static_cast<unsigned long long>(kTokenLimit);
        if constexpr (std::is_signed_v<T>) bad = bad || value < 0;
        if (bad) {
            throw py::value_error("token ids must be in [0, 2**31), got " + std::to_string(value) + " at index " +
                                  std::to_string(i));
        }
        tokens[i] = static_cast<std::int32_t>(value);
    }
    return tokens;
}

}  // namespace

long long integer_from_object(py::handle obj, const char* what) {
    if (PyBool_Check(obj.ptr()) || PyFloat_Check(obj.ptr()) || !PyIndex_Check(obj.ptr())) {
        throw py::type_error(std::string(what) + " must be an int, got " +
                             std::string(py::str(py::type::of(obj).attr("__name__"))));
    }
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
    if (!index) throw py::error_already_set();
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0) return overflow > 0 ? std::numeric_limits<long long>::max() : std::numeric_limits<long long>::min();
    if (value == -1 && PyErr_Occurred()) throw py::error_already_set();
    return value;
}

long long integer_in_range(py::handle obj, const char* what, long long lo, long long hi) {
    const long long v = integer_from_object(obj, what);
    if (v < lo || v > hi) {
        throw py::value_error(std::string(what) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + std::string(py::str(obj)));
    }
    return v;
}

std::int32_t token_from_object(py::handle obj) {
    const long long value = integer_from_object(obj, "token");
    if (value < 0 || value >= kTokenLimit) {
        throw py::value_error("token ids must be in [0, 2**31), got " + std::string(py::str(obj)));
    }
    return static_cast<std::int32_t>(value);
}

std::vector<std::int32_t> tokens_from_object(py::handle obj) {
    if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj) || PyByteArray_Check(obj.ptr()) ||
        PyMemoryView_Check(obj.ptr())) {
        // A byte buffer would read as token ids 0..255, one per byte: text, not tokens.
        throw py::type_error("tokens must be a list or 1-D integer array of token ids, not a string or bytes");
    }
    py::array array;
    if (py::isinstance<py::array>(obj)) {
        array = py::reinterpret_borrow<py::array>(obj);
    } else {
        if (!py::isinstance<py::sequence>(obj)) {  // a generator, set or dict: no order, or read only once
            throw py::type_error("tokens must be a list or 1-D integer array of token ids, got " +
                                 std::string(py::str(py::type::of(obj).attr("__name__"))));
        }
        if (py::len(obj) == 0) return {};
        array = py::module_::import("numpy").attr("asarray")(obj);
    }
    if (array.ndim() != 1) {
        throw py::value_error("tokens must be 1-D, got an array with " + std::to_string(array.ndim()) + " dimensions");
    }
    const char kind = array.dtype().kind();
    const auto size = array.dtype().itemsize();
    if (kind == 'i') {
        if (size == 1) return copy_checked<std::int8_t>(array);
        if (size == 2) return copy_checked<std::int16_t>(array);
        if (size == 4) return copy_checked<std::int32_t>(array);
        if (size == 8) return copy_checked<std::int64_t>(array);
    } else if (kind == 'u') {
        if (size == 1) return copy_checked<std::uint8_t>(array);
        if (size == 2) return copy_checked<std::uint16_t>(array);
        if (size == 4) return copy_checked<std::uint32_t>(array);
        if (size == 8) return copy_checked<std::uint64_t>(array);
    }
    throw py::type_error("tokens must have an integer dtype, got " + std::string(py::str(array.dtype())));
}

std::size_t checked_predict_count(py::handle n) {
    const long long count = integer_from_object(n, "n");
    if (count < 0) throw py::value_error("n must be >= 0, got " + std::string(py::str(n)));
    if (count > kMaxPredict) {
        throw py::value_error("n must be at most " + std::to_string(kMaxPredict) + ", got " + std::string(py::str(n)));
    }
    return static_cast<std::size_t>(count);
}

py::array_t<std::int32_t> to_numpy(const std::vector<std::int32_t>& tokens) {
    py::array_t<std::int32_t> out(static_cast<py::ssize_t>(tokens.size()));
    if (!tokens.empty()) std::memcpy(out.mutable_data(), tokens.data(), tokens.size() * sizeof(std::int32_t));
    return out;
}

}  // namespace ngramspec::args
