"""`python -m ngramspec.server` exits with the status its main returns."""
from __future__ import annotations

import subprocess
import sys


def test_module_entry_point_exits_nonzero_on_a_missing_model(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    p = subprocess.run([sys.executable, "-m", "ngramspec.server", "--model", str(missing)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert str(missing) in p.stderr or "no-such-model" in p.stderr
