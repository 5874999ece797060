"""The libraries users put on llama-cpp-python (LangChain, llama-index, outlines,
instructor), driving a wrapped Llama: plain's greedy output, and speculation where the
library's call path allows it. docs/usage.md, "Libraries on llama-cpp-python", says how
each takes the wrapper."""
