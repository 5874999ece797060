"""The texts the batch-invariance check decodes: real code and real prose, so that
attention sees a plausible cache. Two different texts, because whether two
kernels round a row alike depends on the values in it (docs/exactness.md)."""
from __future__ import annotations

__all__ = ["CODE", "PROSE"]

CODE = '''\
def merge_intervals(intervals):
    """Merge overlapping [start, end] intervals and return them sorted."""
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return merged


class LRUCache:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        value = self._items.pop(key, None)
        if value is not None:
            self._items[key] = value
        return value

    def put(self, key: str, value: bytes) -> None:
        self._items.pop(key, None)
        self._items[key] = value
        while len(self._items) > self.capacity:
            del self._items[next(iter(self._items))]
'''

PROSE = '''\
The river had been rising for three days before anyone in the village thought to move
the grain. By the time the carts were loaded, the lower road was already under water,
and the miller's son had to lead the horses up the goat track behind the church. Nobody
spoke much. The older women counted sacks as they came in, and the children were sent
to fetch lamps, because the light was going and the clouds over the hills had turned
the colour of slate. In the morning the bridge was gone. What remained of it stood in
the current like the ribs of a drowned animal, and the water beneath was brown and fast
and full of branches. The council met in the schoolroom at noon. They agreed that the
new bridge should be built of stone, that it should stand two feet higher than the old
one, and that the work should begin as soon as the ground was dry enough to bear a cart.
'''
