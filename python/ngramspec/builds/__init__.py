"""The llama-cpp-python build: what the loaded one is (``build_info``) and how to
install the exact one (``llama_build``)."""
