"""The modules of scripts/gpu (the prepared GPU run), for its tests: they import each
other by name from that folder, so it goes on sys.path."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

GPU = Path(__file__).resolve().parents[2] / "scripts" / "gpu"


def gpu_module(name: str) -> Any:
    if str(GPU) not in sys.path:
        sys.path.insert(0, str(GPU))
    return importlib.import_module(name)
