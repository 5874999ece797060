"""ngramspec.Memory: drafting from earlier outputs, priming, the budget, sharing,
persistence (roundtrip, atomic write, corrupt files) and the tokenizer check.

Most tests use a byte-level fake tokenizer (no model needed); the tokenizer tests
also run on SmolLM2's real vocabulary."""
from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from pathlib import Path

import pytest

import ngramspec
from ngramspec.memory.file_format import _MAGIC, FORMAT_VERSION, MemoryFileError
from ngramspec.memory.fingerprint import TokenizerMismatchError, tokenizer_fingerprint
from ngramspec.memory.proposer import (
    FOLLOW_WINDOW,
    MemoryProposer,
    memory_source,
    resumed_source,
    support_source,
)
from ngramspec.memory.store import Memory
from ngramspec.proposers.base import Proposal, Proposer


class FakeLlm:
    """A byte-level tokenizer: token id = byte value (+ `shift` extra ids at the top)."""

    def __init__(self, extra: int = 0, name: str = "fake-bytes") -> None:
        self.extra = extra
        self.metadata = {"tokenizer.ggml.model": name}

    def n_vocab(self) -> int:
        return 256 + self.extra

    def detokenize(self, tokens):
        return bytes(t for t in tokens if t < 256)

    def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False):
        return list(text)


def toks(s: str) -> list[int]:
    return list(s.encode())


def run_request(p: MemoryProposer, prompt: str, output: str) -> None:
    p.begin(toks(prompt))
    p.accept(toks(output))
    p.end(toks(output))


def test_exported_lazily():
    assert ngramspec.Memory is Memory and ngramspec.MemoryFileError is MemoryFileError
    assert "Memory" in ngramspec.__all__


def test_drafts_what_an_earlier_request_output():
    mem = Memory()
    p = mem.proposer_for(FakeLlm())
    assert isinstance(p, Proposer) and p.name == "memory" and len(p.source_priors) == 18
    run_request(p, "Q: weather in Paris?\nA:", ' {"tool": "get_weather", "city": "Paris"}')
    # A new request with the same chat header: the stored prompt tail lets memory
    # draft the output from its very first token.
    p.begin(toks("Q: weather in Rome?\nA:"))
    prop = p.propose(12)
    assert isinstance(prop, Proposal) and prop.name == "memory"
    assert bytes(prop.tokens.tolist()) == b' {"tool": "g'
    assert prop.match_length >= 3 and all(0 <= s < 18 for s in prop.sources)
    p.accept(toks(' {"tool": "get_weather", "city": "'))
    prop = p.propose(4)  # "Paris" was stored, and the context now ends with its lead-in
    assert bytes(prop.tokens.tolist()) == b'Pari'


def test_outputs_alone_cannot_draft_their_first_tokens():
    mem = Memory(prompt_tail=0)
    p = mem.proposer_for(FakeLlm())
    run_request(p, "Q: weather in Paris?\nA:", ' {"tool": "get_weather"}')
    p.begin(toks("Q: weather in Rome?\nA:"))
    assert len(p.propose(8)) == 0
    p.accept(toks(' {"'))
    assert bytes(p.propose(4).tokens.tolist()) == b'tool'
    assert mem.corpus.tolist() == toks(' {"tool": "get_weather"}') + [-1]


def test_sources_climb_with_the_match_and_continue_after_an_agreeing_pass():
    mem = Memory(prompt_tail=0)
    p = mem.proposer_for(FakeLlm())
    run_request(p, "", "abcdefghijklmnopqrstuvwxyz0123456789")
    p.begin(toks("xxabc"))
    first = p.propose(4)
    assert first.tokens.tolist() == toks("defg") and first.match_length == 3
    # token i follows a match i longer, judged only once tokens before it are accepted
    assert first.sources == [0, 5 + 1, 5 + 1, 5 + 1]
    p.accept(toks("defgh"))  # agreed with the draft over their common length
    second = p.propose(3)
    assert second.sources[0] >= 5  # a continuing draft
    p.accept(toks("Z"))  # disagreed
    p.accept(toks("ijk"))
    # Not a continuing draft: one resumed right where the output departed ("Z" for "i").
    assert p.propose(2).sources[0] == resumed_source(3)


def test_follows_a_shape_past_a_new_value():
    """After the output departs from a memory draft (a new value), one matching token
    a little further on in the same document resumes the draft there, in the
    resumed buckets; a fresh match would need `anchor` (3) tokens of the shape."""
    mem = Memory(prompt_tail=0)
    p = mem.proposer_for(FakeLlm())
    earlier = '{"zone": "UTC", "city": "Urumqi", "comment": null}'
    run_request(p, "", earlier)
    # A different document that a global 1-token match could also pick.
    run_request(p, "", '"x, "x, "x, "x')
    p.begin(toks("row:"))
    p.accept(toks('{"zone": "'))
    assert bytes(p.propose(4).tokens.tolist()) == b'UTC"'
    p.accept(toks("CE"))           # departed: a new value ...
    p.accept(toks("T"))            # ... whose end is not in the store either
    p.accept(toks('"'))            # one token of the shape again
    prop = p.propose(8)
    assert bytes(prop.tokens.tolist()) == b', "city"' and prop.match_length == 1
    assert prop.sources[0] == resumed_source(1) == 10 and prop.sources[1:] == [memory_source(2 + i, True)
                                                                             for i in range(7)]
    p.accept(toks(', "city": "'))  # agreed: it follows the document again, synced
    prop = p.propose(6)
    assert bytes(prop.tokens.tolist()) == b"Urumqi" and prop.sources[0] not in (10, 11, 12)   # not resumed
    # Without following (a fresh proposer), one token of context drafts nothing.
    q = mem.proposer_for(FakeLlm())
    q.begin(toks('row:{"zone": "CET"'))
    assert len(q.propose(8)) == 0


def test_tokens_backed_by_several_stored_continuations_are_keyed_on_their_agreement():
    mem = Memory(prompt_tail=0)
    p = mem.proposer_for(FakeLlm())
    for i in (1, 2, 3):
        run_request(p, "", f'row {{"id": {i}, "ok": true}}')
    p.begin(toks(""))
    p.accept(toks('row {"id": '))
    prop = p.propose(4)
    # '": ' ends six stored places: three go on with an id (one of them this "3"), three with "true".
    assert bytes(prop.tokens.tolist()) == b'3, "' and prop.sources[0] == support_source(1, 6) == 14
    assert prop.sources[1] == memory_source(prop.match_length + 1, True)   # one document backs the rest
    p.accept(toks('7, "ok": '))
    prop = p.propose(4)
    assert bytes(prop.tokens.tolist()) == b"true"
    assert prop.sources == [support_source(3, 6), support_source(3, 3), support_source(3, 3), support_source(3, 3)]
    assert support_source(3, 6) == 15 and support_source(3, 3) == 17 and support_source(1, 1) == 13


def test_following_gives_up_after_the_window():
    mem = Memory(prompt_tail=0)
    p = mem.proposer_for(FakeLlm())
    run_request(p, "", "abc=1; def=2; ghi=3")
    p.begin(toks(""))
    p.accept(toks("abc="))
    assert bytes(p.propose(2).tokens.tolist()) == b"1;"
    p.accept(toks("9" * (FOLLOW_WINDOW + 1)))   # a value longer than the window: the place is forgotten
    p.accept(toks(";"))
    assert len(p.propose(4)) == 0
    # A place at the end of its document is not followed past it.
    p.begin(toks(""))
    p.accept(toks("def=2; ghi="))
    assert bytes(p.propose(4).tokens.tolist()) == b"3"
    p.accept(toks("3!"))
    p.accept(toks("="))
    assert len(p.propose(4)) == 0


def test_own_memory_by_default_shared_when_passed():
    llm = FakeLlm()
    a, b = Memory(), Memory()
    pa, pb = a.proposer_for(llm), b.proposer_for(llm)
    run_request(pa, "", "the quick brown fox jumps")
    pb.begin(toks("the quick"))
    assert len(pb.propose(4)) == 0  # b never saw it
    shared1, shared2 = a.proposer_for(llm), a.proposer_for(llm)
    assert shared1 is not shared2 and shared1.memory is shared2.memory
    shared2.begin(toks("the quick"))
    assert bytes(shared2.propose(6).tokens.tolist()) == b" brown"


def test_budget_evicts_the_oldest():
    mem = Memory(max_tokens=200, prompt_tail=0)
    p = mem.proposer_for(FakeLlm())
    run_request(p, "", "OLDEST text that will be evicted")
    for i in range(20):
        run_request(p, "", f"filler number {i} " * 3)
    assert len(mem) <= 200
    p.begin(toks("OLDEST te"))
    assert len(p.propose(4)) == 0


def test_prime_strings_files_and_folders(tmp_path: Path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("def alpha_function(x):\n    return x + 1\n")
    (tmp_path / "pkg" / "b.txt").write_text("beta text")
    (tmp_path / "pkg" / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "pkg" / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "pkg" / "huge.txt").write_text("x" * 5000)
    (tmp_path / "pkg" / ".hidden").write_text("secret")
    (tmp_path / "pkg" / ".git").mkdir()
    (tmp_path / "pkg" / ".git" / "config").write_text("[core]")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.pyc").write_text("cached")

    mem = Memory(max_file_bytes=4096)
    report = mem.prime(text=["first string", "second string"], path=tmp_path / "pkg")
    # Not bound yet: kept as text.
    assert report.documents == 4 and report.pending == 4 and report.tokens == 0 and len(mem) == 0
    assert [Path(f).name for f in report.files] == ["a.py", "b.txt"]
    reasons = {Path(f).name: why for f, why in report.skipped}
    assert set(reasons) == {"blob.bin", "latin1.txt", "huge.txt"}
    assert "binary" in reasons["blob.bin"] and "UTF-8" in reasons["latin1.txt"] and "larger" in reasons["huge.txt"]

    llm = FakeLlm()
    p = mem.proposer_for(llm)  # binding tokenizes what was pending
    assert mem.pending_documents == 0 and len(mem) > 0
    p.begin(toks("def alpha_"))
    assert bytes(p.propose(8).tokens.tolist()) == b"function"
    # Bound: priming tokenizes at once.
    report = mem.prime(path=tmp_path / "pkg" / "b.txt")
    assert report.tokens == len("beta text") and report.pending == 0
    with pytest.raises(FileNotFoundError):
        mem.prime(path=tmp_path / "missing")
    stored = (len(mem), mem.pending_documents)
    with pytest.raises(FileNotFoundError):   # the text and the first path were primed before the check
        mem.prime("hello there", path=[tmp_path / "pkg", tmp_path / "missing"])
    assert (len(mem), mem.pending_documents) == stored
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(FileNotFoundError, match="symbolic link that leads nowhere"):   # said "no such file"
        mem.prime(path=tmp_path / "loop")
    before = len(mem)
    for empty in ("", [str(tmp_path / "pkg" / "b.txt"), ""]):   # Path("") is ".": it primed the working folder
        with pytest.raises(ValueError, match="empty path"):
            mem.prime(path=empty)
    assert len(mem) == before   # nothing primed by a call that failed
    with pytest.raises(TypeError):
        mem.prime(text=[5])  # type: ignore[list-item]
    # Once no bound model is alive, text is kept as text again until the next binding.
    del llm
    import gc
    gc.collect()
    assert mem.prime(text="later").pending == 1


def test_text_kept_before_binding_is_bounded():
    mem = Memory(max_tokens=16)
    for i in range(100):
        mem.prime(text=f"document {i:03d} ...")
    assert mem.memory_bytes - mem._corpus.memory_bytes <= 8 * 16


def test_add_tokens_needs_a_tokenizer():
    with pytest.raises(RuntimeError, match="bind"):
        Memory().add_tokens([1, 2, 3])


@pytest.mark.parametrize("kwargs, exc", [
    ({"max_tokens": 1}, ValueError), ({"max_tokens": 2**31}, ValueError), ({"max_tokens": 1.5}, TypeError),
    ({"anchor": 0}, ValueError), ({"max_match": 2, "anchor": 3}, ValueError), ({"prompt_tail": -2}, ValueError),
    ({"prompt_tail": True}, TypeError), ({"max_file_bytes": 0}, ValueError), ({"max_file_bytes": "1"}, TypeError),
])
def test_bad_settings(kwargs, exc):
    with pytest.raises(exc):
        Memory(**kwargs)


def test_propose_edge_cases():
    mem = Memory()
    p = mem.proposer_for(FakeLlm())
    p.begin([])
    assert len(p.propose(4)) == 0 and len(p.propose(0)) == 0
    p.end([])
    assert len(mem) == 0


# --- persistence -------------------------------------------------------------------

def filled_memory() -> tuple[Memory, MemoryProposer]:
    mem = Memory(max_tokens=5000, anchor=2, prompt_tail=4)
    p = mem.proposer_for(FakeLlm())
    run_request(p, "prompt one:", "the first output, stored")
    run_request(p, "prompt two:", "the second output, also stored")
    return mem, p


def test_save_and_load_roundtrip(tmp_path: Path):
    mem, _ = filled_memory()
    mem.prime(text="kept as text? no: bound, so tokenized")
    path = tmp_path / "mem.ngsm"
    mem.save(path)
    loaded = Memory.load(path)
    assert loaded.corpus.tolist() == mem.corpus.tolist()
    assert loaded.fingerprint == mem.fingerprint
    assert (loaded.max_tokens, loaded.prompt_tail, loaded._corpus.anchor) == (5000, 4, 2)
    p = loaded.proposer_for(FakeLlm())
    p.begin(toks("the second out"))
    assert bytes(p.propose(6).tokens.tolist()) == b"put, a"
    assert Memory.load(path, max_tokens=30).max_tokens == 30


def test_text_primed_before_binding_survives_a_roundtrip(tmp_path: Path):
    mem = Memory()
    mem.prime(text="pending text, not yet tokenized")
    mem.save(tmp_path / "m")
    loaded = Memory.load(tmp_path / "m")
    assert loaded.fingerprint is None and loaded.pending_documents == 1
    p = loaded.proposer_for(FakeLlm())
    p.begin(toks("pending text"))
    assert bytes(p.propose(5).tokens.tolist()) == b", not"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_save_keeps_an_existing_files_mode_and_makes_new_ones_private(tmp_path: Path):
    import stat

    shared, new = tmp_path / "shared.ngmem", tmp_path / "new.ngmem"
    Memory().save(shared)
    shared.chmod(0o644)
    Memory().save(shared)
    Memory().save(new)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644   # was 0600 after the save
    assert stat.S_IMODE(new.stat().st_mode) == 0o600


def test_save_is_atomic(tmp_path: Path, monkeypatch):
    mem, _ = filled_memory()
    path = tmp_path / "mem.ngsm"
    mem.save(path)
    before = path.read_bytes()
    mem.prime(text="more text")

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        mem.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before  # the old file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mem.ngsm"]  # no temporary left behind
    mem.save(path)
    assert path.read_bytes() != before and sorted(p.name for p in tmp_path.iterdir()) == ["mem.ngsm"]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:-1], "checksum"),
    (lambda d: d[: len(d) // 2], "checksum"),
    (lambda d: d[:20], "truncated|checksum"),
    (lambda d: d[:5], "truncated"),
    (lambda d: b"", "truncated"),
    (lambda d: d[:30] + bytes([d[30] ^ 0x01]) + d[31:], "checksum"),
    (lambda d: d[:-5] + bytes([d[-5] ^ 0xFF]) + d[-4:], "checksum"),
    (lambda d: b"PK\x03\x04" + d[4:], "not an ngramspec memory file"),
    (lambda d: d[:8] + struct.pack("<I", 99) + d[12:], "format 99"),
])
def test_corrupt_or_truncated_files_raise(tmp_path: Path, damage, message):
    mem, _ = filled_memory()
    path = tmp_path / "mem.ngsm"
    mem.save(path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(MemoryFileError, match=message):
        Memory.load(path)
    assert issubclass(MemoryFileError, ValueError)


def rewrite_header(path: Path, edit) -> None:
    """Rewrites a saved file's header and checksum (a well-formed file with other contents)."""
    data = path.read_bytes()[:-32]
    magic, version, head_len = struct.unpack_from("<8sII", data)
    header = json.loads(data[16:16 + head_len])
    edit(header)
    head = json.dumps(header).encode()
    body = struct.pack("<8sII", magic, version, len(head)) + head + data[16 + head_len:]
    path.write_bytes(body + hashlib.sha256(body).digest())


def test_malformed_contents_with_a_valid_checksum_raise(tmp_path: Path):
    mem, _ = filled_memory()
    path = tmp_path / "mem.ngsm"
    mem.save(path)
    rewrite_header(path, lambda h: h.update(n_tokens=h["n_tokens"] + 1))
    with pytest.raises(MemoryFileError, match="header says"):
        Memory.load(path)
    mem.save(path)
    rewrite_header(path, lambda h: h.pop("anchor"))
    with pytest.raises(MemoryFileError, match="malformed header"):
        Memory.load(path)


@pytest.mark.parametrize("edit, message", [
    (lambda h: h.update(anchor=3.9), "not an integer"),          # was truncated to 3
    (lambda h: h.update(anchor=True), "not an integer"),         # was 1
    (lambda h: h.update(max_match="64"), "not an integer"),      # was 64
    (lambda h: h.update(pending="abc"), "pending"),              # was three documents "a", "b", "c"
    (lambda h: h.update(pending=[1, 2]), "pending"),
    (lambda h: h.update(format=2), "format 2"),
    (lambda h: h.update(anchor=0), "invalid settings"),          # the constructor's ValueError
    (lambda h: h.update(prompt_tail=-7), "invalid settings"),
])
def test_header_values_of_the_wrong_kind_raise(tmp_path: Path, edit, message):
    mem, _ = filled_memory()
    path = tmp_path / "mem.ngsm"
    mem.save(path)
    rewrite_header(path, edit)
    with pytest.raises(MemoryFileError, match=message):
        Memory.load(path)


@pytest.mark.parametrize("raw", ['{"max_tokens": Infinity}', '{"n_tokens": 1e400}', "[" * 100_000 + "]" * 100_000])
def test_header_json_that_python_cannot_hold_raises(tmp_path: Path, raw):
    # Each was a bare OverflowError or RecursionError, with a valid checksum.
    head = raw.encode()
    body = struct.pack("<8sII", _MAGIC, FORMAT_VERSION, len(head)) + head
    path = tmp_path / "mem.ngsm"
    path.write_bytes(body + hashlib.sha256(body).digest())
    with pytest.raises(MemoryFileError, match="malformed header"):
        Memory.load(path)


def test_a_declared_header_longer_than_the_file_raises(tmp_path: Path):
    body = struct.pack("<8sII", _MAGIC, FORMAT_VERSION, 2**32 - 1) + b"{}"
    path = tmp_path / "mem.ngsm"
    path.write_bytes(body + hashlib.sha256(body).digest())
    with pytest.raises(MemoryFileError, match="header"):
        Memory.load(path)


def test_a_smaller_budget_on_load_bounds_the_pending_text_too(tmp_path: Path):
    mem = Memory(max_tokens=1000)
    mem.prime(["a" * 3000, "b" * 4000])
    mem.save(tmp_path / "m.ngsm")
    small = Memory.load(tmp_path / "m.ngsm", max_tokens=10)
    assert small.memory_bytes <= 8 * 10 and small.pending_documents == 0   # both exceed 80 characters


def test_prime_reports_what_it_still_holds():
    report = Memory(max_tokens=100).prime("x" * 801)   # over the 800 characters kept for 100 tokens
    assert report.documents == 1 and report.pending == 0


def test_prime_skips_what_is_not_a_regular_file(tmp_path: Path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.txt").write_text("hello")
    os.mkfifo(folder / "b.fifo")   # reading it would block for ever
    mem = Memory()
    report = mem.prime(path=folder)
    assert [Path(f).name for f in report.files] == ["a.txt"]
    assert [(Path(f).name, why) for f, why in report.skipped] == [("b.fifo", "not a regular file")]
    report = mem.prime(path="/dev/zero")   # size 0 by stat, endless when read
    assert report.files == [] and report.skipped == [("/dev/zero", "not a regular file")]


def test_text_that_is_not_valid_unicode_is_refused_and_nothing_is_lost():
    mem = Memory()
    with pytest.raises(ValueError, match=r"text\[1\] is not valid Unicode"):
        mem.prime(["doc one", "bad \udc80", "doc three"])   # a lone surrogate: could be neither tokenized nor saved
    assert mem.pending_documents == 0    # refused before anything was kept
    mem.prime(["doc one", "doc three"])
    mem.bind(FakeLlm())
    assert mem.pending_documents == 0 and len(mem) == len("doc one") + len("doc three") + 2   # + document ends


def test_bind_keeps_the_pending_text_a_tokenizer_fails_on():
    class Failing(FakeLlm):
        def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False):
            if text == b"two":
                raise RuntimeError("tokenizer failed")
            return list(text)

    mem = Memory()
    mem.prime(["one", "two", "three"])
    with pytest.raises(RuntimeError, match="tokenizer failed"):
        mem.bind(Failing())
    assert mem.pending_documents == 2           # "two" and "three" wait for the next bind
    mem.bind(FakeLlm())
    assert mem.pending_documents == 0 and len(mem) == 3 + 3 + 5 + 3


def test_save_refuses_a_path_that_is_not_a_regular_file(tmp_path: Path):
    mem, _ = filled_memory()
    target = tmp_path / "real.ngsm"
    target.write_bytes(b"keep me")
    link = tmp_path / "link.ngsm"
    link.symlink_to(target)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for bad in (link, fifo):
        with pytest.raises(ValueError, match="not a regular file"):
            mem.save(bad)
    assert link.is_symlink() and target.read_bytes() == b"keep me"
    with pytest.raises(ValueError, match="empty path"):
        mem.save("")
    with pytest.raises(IsADirectoryError):
        mem.save(tmp_path)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["link.ngsm", "pipe", "real.ngsm"]   # no temp files left


# --- the tokenizer -----------------------------------------------------------------

def test_tokenizer_mismatch_is_refused_at_binding():
    mem = Memory()
    mem.proposer_for(FakeLlm())
    with pytest.raises(TokenizerMismatchError, match="other-bytes") as err:
        mem.proposer_for(FakeLlm(extra=1, name="other-bytes"))
    assert "fake-bytes" in str(err.value) and "256 tokens" in str(err.value) and "257 tokens" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_fingerprint_is_cached_per_model():
    llm = FakeLlm()
    assert tokenizer_fingerprint(llm) is tokenizer_fingerprint(llm)
    assert tokenizer_fingerprint(FakeLlm()) == tokenizer_fingerprint(llm)
    assert not tokenizer_fingerprint(FakeLlm(extra=3)).same_tokenizer(tokenizer_fingerprint(llm))


@pytest.fixture(scope="module")
def smollm2_vocab(smollm2_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    model = llama_cpp.Llama(smollm2_path, vocab_only=True, verbose=False)
    yield model
    model.close()


def test_smollm2_memory_roundtrip_and_tokenizer_mismatch(smollm2_vocab, tmp_path: Path):
    fp = tokenizer_fingerprint(smollm2_vocab)
    assert fp.n_vocab == 49152 and "gpt2" in fp.name
    mem = Memory()
    p = mem.proposer_for(smollm2_vocab)
    prompt = smollm2_vocab.tokenize(b"Extract the fields as JSON.\n", add_bos=False)
    output = smollm2_vocab.tokenize(b'{"name": "Ada Lovelace", "born": 1815, "field": "mathematics"}', add_bos=False)
    p.begin(prompt)
    p.accept(output)
    p.end(output)
    path = tmp_path / "smol.ngsm"
    mem.save(path)

    loaded = Memory.load(path)
    q = loaded.proposer_for(smollm2_vocab)  # the same tokenizer: accepted
    q.begin(prompt)
    assert q.propose(5).tokens.tolist() == output[:5]

    # The same file claiming another tokenizer (Qwen2.5's size and name): refused, naming both.
    rewrite_header(path, lambda h: h.update(tokenizer={"n_vocab": 151936, "sha256": "ab" * 32,
                                                       "name": "gpt2/qwen2 of Qwen2.5 Coder 0.5B"}))
    other = Memory.load(path)
    with pytest.raises(TokenizerMismatchError) as err:
        other.proposer_for(smollm2_vocab)
    msg = str(err.value)
    assert "qwen2" in msg and "151936 tokens" in msg and "49152 tokens" in msg and "smollm" in msg


# --- threads -----------------------------------------------------------------------

def test_one_memory_shared_by_threads():
    mem = Memory(max_tokens=3000, prompt_tail=4)
    llm = FakeLlm()
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            p = mem.proposer_for(llm)
            for j in range(40):
                text = f"request {j % 5} from worker {i}: the same answer shape {{\"id\": {j}}}"
                p.begin(toks("Q:"))
                out = toks(text)
                pos = 0
                while pos < len(out):
                    prop = p.propose(4)
                    n = 0
                    while n < len(prop) and pos + n < len(out) and int(prop.tokens[n]) == out[pos + n]:
                        n += 1
                    step = out[pos:pos + n + 1]
                    p.accept(step)
                    pos += len(step)
                p.end(out)
                if j % 10 == 0:
                    mem.prime(text=f"primed by {i}")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and 0 < len(mem) <= 3000
