// ngramspec._core: the compiled half of ngramspec. One bind_x() per file.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_predictor(py::module_& m);
void bind_suffix_matcher(py::module_& m);
void bind_corpus_matcher(py::module_& m);

PYBIND11_MODULE(_core, m) {
    m.doc() = "Native core of ngramspec (private: import from ngramspec instead).";
    bind_predictor(m);
    bind_suffix_matcher(m);
    bind_corpus_matcher(m);
}
