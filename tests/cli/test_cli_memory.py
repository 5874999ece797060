"""`ngramspec generate --memory FILE --prime PATH`, end to end through
subprocess: the memory is loaded (or started), primed, used, and saved after the
generation; mistakes in the flags are one line, before any model loads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ngramspec import Memory
from tests.support.cli import ngramspec

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"

run = ngramspec


def test_memory_is_started_saved_and_loaded_again(tmp_path: Path, llm):
    llm.reset()
    ref = llm.create_completion(PROMPT, max_tokens=16, temperature=0.0)["choices"][0]["text"]
    llm.reset()
    mem_file = tmp_path / "mem.ngsm"
    folder = tmp_path / "src"
    (folder / "pkg").mkdir(parents=True)
    (folder / "a.py").write_text("def mul(a, b):\n    return a * b\n")
    (folder / "pkg" / "b.py").write_text("def div(a, b):\n    return a / b\n")
    (folder / "blob.bin").write_bytes(b"\0\1\2")
    single = tmp_path / "c.py"
    single.write_text("def neg(a):\n    return -a\n")

    p = run("generate", PROMPT, "--max-tokens", "16", "--memory", str(mem_file),
            "--prime", str(folder), "--prime", str(single), "--compare")
    assert p.returncode == 0, p.stderr
    assert p.stdout == ref + "\n"
    assert "identical text: yes" in p.stderr
    assert f"primed 2 file(s) from {folder}, skipped 1" in p.stderr
    assert f"primed 1 file(s) from {single}" in p.stderr
    assert f"memory saved to {mem_file}" in p.stderr
    first = Memory.load(mem_file)
    assert first.pending_documents == 0 and first.fingerprint is not None
    assert first.corpus.tolist().count(-1) == 4   # three primed files and this generation's output

    q = run("generate", PROMPT, "--max-tokens", "16", "--memory", str(mem_file), "--json")
    assert q.returncode == 0, q.stderr
    out = json.loads(q.stdout)
    assert out["choices"][0]["text"] == ref
    second = Memory.load(mem_file)
    assert second.corpus.tolist().count(-1) == 5 and len(second) > len(first)


def test_memory_of_another_tokenizer_is_one_line(tmp_path: Path, smollm2_path):
    class Bytes:
        metadata = {"tokenizer.ggml.model": "fake-bytes"}

        def n_vocab(self):
            return 256

        def detokenize(self, tokens):
            return bytes(tokens)

        def tokenize(self, text, add_bos=False, special=False):
            return list(text)

    mem = Memory()
    mem.bind(Bytes())
    mem.prime("some text")
    f = tmp_path / "bytes.ngsm"
    mem.save(f)
    p = run("generate", PROMPT, "--max-tokens", "4", "--memory", str(f))
    assert p.returncode == 2
    assert "fake-bytes" in p.stderr and "tokenizer" in p.stderr and "Traceback" not in p.stderr
    fp = Memory.load(f).fingerprint
    assert fp is not None and fp.name == "fake-bytes"   # not overwritten


@pytest.mark.parametrize("make, flag, needle", [
    (lambda d: (d / "junk.ngsm").write_bytes(b"hello, not a memory file at all, truly") and d / "junk.ngsm",
     "--memory", "not an ngramspec memory file"),
    (lambda d: d / "missing" / "mem.ngsm", "--memory", "no such directory"),
    (lambda d: d, "--memory", "is a directory"),
    (lambda d: d / "nothing-here", "--prime", "no such file or folder"),
    # Saving renames over the path: it would have replaced the link (or a device) itself.
    (lambda d: (d / "link.ngsm").symlink_to(d / "target.ngsm") or d / "link.ngsm", "--memory",
     "not a regular file"),
    (lambda d: "", "--memory", "an empty path"),
])
def test_bad_memory_flags_are_one_line_before_the_model_loads(tmp_path: Path, make, flag, needle):
    # --model names a file that does not exist: reaching the model load would say so instead.
    p = run("generate", PROMPT, "--model", str(tmp_path / "no-model.gguf"), flag, str(make(tmp_path)),
            timeout=120)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_help_lists_the_flags():
    p = run("generate", "--help", timeout=120)
    assert p.returncode == 0 and "--memory FILE" in p.stdout and "--prime PATH" in p.stdout
