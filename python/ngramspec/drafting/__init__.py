"""The drafting decision: which proposal to verify each pass, and how much of it.

``drafter`` asks the proposers and lets the ``policy`` choose; ``cost_model`` prices a
verify batch from the measured cost curve; ``cost_gate`` decides when a costly
proposer (a draft model) is worth calling at all.
"""
