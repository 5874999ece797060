"""Draft proposers: each guesses the next tokens behind begin / propose / accept / end.

``base`` holds the interface every proposer implements; ``ngram``, ``copy``,
``prediction`` and ``draft_model`` are the proposers. None of them knows how its
drafts are chosen or priced: that is the drafting layer's job.
"""
