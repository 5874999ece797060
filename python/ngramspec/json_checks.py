"""Type tests for values read back from JSON files.

``json.loads`` gives ``True`` for ``true``, and ``bool`` is a subclass of ``int``,
so ``isinstance(x, int)`` lets a boolean pass where a count was stored. A file
whose every value is checked strictly (the invariance cache, a stored cost
curve) uses these instead. Imports nothing of ngramspec: every layer may use it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import TypeGuard  # typing's from Python 3.10

__all__ = ["is_int", "is_number"]


def is_int(x: Any) -> TypeGuard[int]:
    """An int, not a bool."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> TypeGuard[float]:
    """An int or a float, not a bool (NaN and infinities included: check them apart)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)
