"""Where ngramspec meets llama-cpp-python's own API: ``wrap(llm)`` (``wrapper``) and
``Llama(draft_model=NGramDraftModel())`` (``draft_model``)."""
