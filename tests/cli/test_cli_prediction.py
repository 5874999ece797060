"""``ngramspec generate --prediction FILE|-``: the expected output drafts, the
text stays plain greedy's, and input mistakes are one line and exit code 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import ngramspec

PROMPT = "Here is a list of fruits:\n1. apple\n2. banana\n3. cherry\n\nThe same list again:\n1."

run = ngramspec


def test_stdin_cannot_be_prompt_and_prediction():
    p = run("generate", "-", "--prediction", "-", stdin="x")
    assert p.returncode == 2
    assert "stdin cannot be both the prompt and the prediction" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("content, needle", [(None, "cannot read prediction file"), (b"", "is empty"),
                                             (b"\xff\xfe bad", "is not UTF-8")])
def test_bad_prediction_file(tmp_path: Path, content, needle):
    f = tmp_path / "prediction.txt"
    if content is not None:
        f.write_bytes(content)
    p = run("generate", "x", "--prediction", str(f))
    assert p.returncode == 2 and needle in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_empty_prediction_on_stdin():
    p = run("generate", "x", "--prediction", "-", stdin="")
    assert p.returncode == 2 and "the prediction on stdin is empty" in p.stderr


@pytest.mark.model
def test_prediction_from_file_and_stdin_keeps_plain_text(tmp_path: Path, llm):
    llm.reset()
    ref = llm.create_completion(PROMPT, max_tokens=32, temperature=0.0)["choices"][0]["text"]
    llm.reset()
    f = tmp_path / "expected.txt"
    f.write_text(ref, encoding="utf-8")
    p = run("generate", PROMPT, "--max-tokens", "32", "--json", "--prediction", str(f))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["choices"][0]["text"] == ref
    details = out["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] > 0
    assert "prediction:" in p.stderr and "tokens accepted" in p.stderr
    # The same prediction from stdin, the prompt as text; streamed this time.
    q = run("generate", PROMPT, "--max-tokens", "32", "--prediction", "-", stdin=ref)
    assert q.returncode == 0, q.stderr
    assert q.stdout == ref + "\n"
    # A wrong prediction changes nothing in the text.
    g = tmp_path / "wrong.txt"
    g.write_text("Completely unrelated text about the weather in spring.\n" * 4, encoding="utf-8")
    w = run("generate", PROMPT, "--max-tokens", "32", "--json", "--prediction", str(g))
    assert w.returncode == 0, w.stderr
    assert json.loads(w.stdout)["choices"][0]["text"] == ref
