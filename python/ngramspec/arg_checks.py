"""The one check of an integer argument a caller gave: an int (numpy's too), never a
bool (``True`` is an ``int`` to Python, and a count of True is a mistake), at least a
minimum. Imports nothing of ngramspec: every layer may use it."""
from __future__ import annotations

import numpy as np

__all__ = ["checked_int"]


def checked_int(value: object, name: str, *, minimum: int | None = None, what: str = "an int") -> int:
    """``value`` as an int. TypeError ("``name`` must be ``what``, got <type>") unless
    it is an int and not a bool; ValueError ("``name`` must be >= ``minimum``, got
    <value>") below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)
