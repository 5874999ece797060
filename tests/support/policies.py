"""A CostAwarePolicy with the default pipeline's acceptance table, for tests that
drive a policy by source index without a Drafter: the n-gram proposer's buckets
first, then the copy proposer's, declared as a Drafter declares them."""
from __future__ import annotations

from typing import Any

from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.proposers.copy import COPY_PRIORS, N_COPY_SOURCES
from ngramspec.proposers.ngram import DEFAULT_NGRAM_PRIOR, N_NGRAM_SOURCES

#: Where the copy buckets start in the default table, and the table's size.
COPY_BASE = N_NGRAM_SOURCES
N_TABLE = N_NGRAM_SOURCES + N_COPY_SOURCES


def table_policy(max_batch: int, *, ngram_prior: float = DEFAULT_NGRAM_PRIOR, **options: Any) -> CostAwarePolicy:
    """``CostAwarePolicy(max_batch, **options)`` with the n-gram buckets (each from
    ``ngram_prior``) and the copy buckets declared."""
    policy = CostAwarePolicy(max_batch, **options)
    policy.declare_sources(0, [ngram_prior] * N_NGRAM_SOURCES)
    policy.declare_sources(COPY_BASE, COPY_PRIORS)
    return policy
