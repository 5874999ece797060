"""Thin helpers over llama-cpp-python's low-level API, shared by the engine and
the invariance check. Everything here works on a ``llama_cpp.Llama`` the user
already has; nothing links llama.cpp directly."""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

_module: Any = None


def llama_cpp_module() -> Any:
    global _module
    if _module is not None:   # looked up every pass: an import statement costs more than this
        return _module
    try:
        import llama_cpp
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "ngramspec's engine needs llama-cpp-python; install it with `pip install "
            "llama-cpp-python==0.3.36`, then `ngramspec install-llama` for the exact build (docs/exactness.md)"
        ) from e
    _module = llama_cpp
    return llama_cpp


def grammar_source(grammar: Any) -> tuple[str, str]:
    """The GBNF text and root rule of a ``llama_cpp.LlamaGrammar``: what llama.cpp's
    grammar sampler is made from, which llama-cpp-python keeps private (``_grammar``,
    ``_root``). The package reads a grammar's text here and nowhere else. TypeError
    for anything but a LlamaGrammar."""
    from llama_cpp.llama_grammar import LlamaGrammar

    if not isinstance(grammar, LlamaGrammar):
        raise TypeError(f"grammar must be a llama_cpp.LlamaGrammar, got {type(grammar).__name__}")
    return str(grammar._grammar), str(grammar._root)


def context_of(llm: Any) -> Any:
    """The raw llama_context pointer, or a clear error if ``llm`` is unusable."""
    llama_cpp = _module if _module is not None else llama_cpp_module()
    if not isinstance(llm, llama_cpp.Llama):
        raise TypeError(f"expected a llama_cpp.Llama, got {type(llm).__name__}")
    ctx = getattr(getattr(llm, "_ctx", None), "ctx", None)
    if ctx is None:
        raise ValueError("this Llama has been closed; create a new one")
    return ctx


def same_context(a: Any, b: Any) -> bool:
    """Whether two Llamas decode in one llama.cpp context (a wrapper shares its Llama's)."""
    return a._ctx is b._ctx


def usable_n_ctx(llm: Any) -> int:
    """The context plain ``create_completion`` fills: llama.cpp's own n_ctx, which
    may be rounded up (to 256) from the one asked for. Llama sizes ``input_ids``
    by the n_ctx asked for and silently stops recording tokens past it; so do we
    (``sync_bookkeeping``)."""
    return int(llm.n_ctx())


def model_handle(llm: Any) -> Any:
    """The raw llama_model pointer of ``llm`` (for llama_model_* calls)."""
    return llm._model.model


def vocab_handle(llm: Any) -> Any:
    """The raw llama_vocab pointer of ``llm``."""
    return llm._model.vocab


def vocabulary_texts(llm: Any) -> Iterator[bytes] | None:
    """Each token's vocabulary entry (llama.cpp's own token text), in token order, for
    a ``llama_cpp.Llama``; None for a stand-in that has no llama.cpp model."""
    vocab = getattr(getattr(llm, "_model", None), "vocab", None)
    if vocab is None:
        return None
    llama_cpp = llama_cpp_module()
    get = getattr(llama_cpp, "llama_vocab_get_text", None) or llama_cpp.llama_token_get_text
    return (get(vocab, i) or b"" for i in range(int(llm.n_vocab())))


def eos_bos_text(llm: Any) -> tuple[str, str]:
    """The text of ``llm``'s end- and beginning-of-sequence tokens ("" where the
    model has none), as llama-cpp-python gives them to a chat template."""
    model = llm._model

    def text(token: int) -> str:
        return str(model.token_get_text(token)) if token != -1 else ""

    return text(model.token_eos()), text(model.token_bos())


def registered_chat_handler(llm: Any) -> Any:
    """The chat handler ``llm`` registered for its ``chat_format`` from its GGUF's
    templates (None if it has none): what ``create_chat_completion`` uses when no
    ``chat_handler`` was given."""
    return llm._chat_handlers.get(llm.chat_format)


def seed_of(llm: Any) -> int | None:
    """The seed a ``Llama`` draws its next call's seed from (None: not a ``llama_cpp.Llama``)."""
    seed = getattr(llm, "_seed", None)
    return None if seed is None else int(seed)


def token_text(llm: Any, token: int) -> str:
    """A token's text as the GGUF vocabulary stores it (special tokens included)."""
    return str(llm._model.token_get_text(token))


def special_tokens(llm: Any) -> dict[str, int]:
    """BOS, EOS and (where the model has one) EOT ids."""
    model = llm._model
    out = {"BOS": int(model.token_bos()), "EOS": int(model.token_eos())}
    eot = getattr(model, "token_eot", None)
    if eot is not None:
        out["EOT"] = int(eot())
    return out


def set_cached_tokens(llm: Any, n: int) -> None:
    """Tell the Llama its cache now holds ``n`` tokens (its input_ids already say
    which), and that its last logits are no longer its own (``Llama.eval`` must run
    before it samples again)."""
    llm.n_tokens = n
    llm._requires_eval = True


def can_roll_back(llm: Any) -> bool:
    """Recurrent and hybrid models keep state that a KV range removal cannot undo."""
    llama_cpp = llama_cpp_module()
    model = llm._model.model
    return not (llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model))


def remove_from(llm: Any, pos: int) -> bool:
    """Drop every cached position >= pos of sequence 0; False if llama.cpp refused."""
    llama_cpp = llama_cpp_module()
    mem = llama_cpp.llama_get_memory(context_of(llm))
    return bool(llama_cpp.llama_memory_seq_rm(mem, 0, pos, -1))


def save_sequence(llm: Any) -> Any:
    """Sequence 0's cached keys and values as llama.cpp copies them out
    (``llama_state_seq_get_data``: the bytes themselves, with their positions), for
    ``restore_sequence``; None if llama.cpp gives nothing."""
    llama_cpp = llama_cpp_module()
    ctx = context_of(llm)
    size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
    if size <= 0:
        return None
    state = (ctypes.c_uint8 * size)()
    return state if int(llama_cpp.llama_state_seq_get_data(ctx, state, size, 0)) == size else None


def restore_sequence(llm: Any, state: Any) -> int:
    """Puts ``save_sequence``'s copy back as sequence 0 of an empty cache; returns the
    positions it holds (0 if llama.cpp refused)."""
    llama_cpp = llama_cpp_module()
    ctx = context_of(llm)
    if not int(llama_cpp.llama_state_seq_set_data(ctx, state, len(state), 0)):
        return 0
    return int(llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(ctx), 0)) + 1


def clear_memory(llm: Any) -> None:
    llama_cpp = llama_cpp_module()
    mem = llama_cpp.llama_get_memory(context_of(llm))
    llama_cpp.llama_memory_clear(mem, True)
    llm.n_tokens = 0
    llm._requires_eval = True


class Batch:
    """A reusable llama_batch for one sequence, with numpy views on its arrays so
    that filling it costs a few vector copies rather than a ctypes call per token."""

    def __init__(self, capacity: int) -> None:
        llama_cpp = llama_cpp_module()
        self._llama_cpp = llama_cpp
        self.capacity = capacity
        self.batch = llama_cpp.llama_batch_init(capacity, 0, 1)
        self.token = np.ctypeslib.as_array(self.batch.token, shape=(capacity,))
        self.pos = np.ctypeslib.as_array(self.batch.pos, shape=(capacity,))
        self.logits = np.ctypeslib.as_array(self.batch.logits, shape=(capacity,))
        self._offsets = np.arange(capacity, dtype=np.int32)
        n_seq = np.ctypeslib.as_array(self.batch.n_seq_id, shape=(capacity,))
        n_seq[:] = 1
        for i in range(capacity):
            self.batch.seq_id[i][0] = 0

    def fill(self, tokens: Sequence[int] | np.ndarray, start_pos: int, all_logits: bool) -> None:
        n = len(tokens)
        if n > self.capacity:
            raise ValueError(f"batch of {n} tokens exceeds capacity {self.capacity}")
        self.token[:n] = tokens
        np.add(self._offsets[:n], start_pos, out=self.pos[:n])
        self.logits[:n] = 1 if all_logits else 0
        self.logits[n - 1] = 1
        self.batch.n_tokens = n

    def fill_verify(self, first: int, draft: np.ndarray, start_pos: int) -> int:
        """[first, draft...] at start_pos.., logits on every row; returns the size."""
        n = len(draft) + 1
        self.token[0] = first
        self.token[1:n] = draft
        np.add(self._offsets[:n], start_pos, out=self.pos[:n])
        self.logits[:n] = 1
        self.batch.n_tokens = n
        return n

    def close(self) -> None:
        if self.batch is not None:
            self._llama_cpp.llama_batch_free(self.batch)
            self.batch = None

    def __del__(self) -> None:
        try:  # noqa: SIM105 - not contextlib.suppress: at interpreter shutdown the module may be gone
            self.close()
        except Exception:
            pass


def raise_decode_error(rc: int) -> None:
    what = {1: "no KV cache slot for the batch (context full?)", 2: "aborted"}.get(rc, "error")
    raise RuntimeError(f"llama_decode failed with code {rc}: {what}")


def decode(llm: Any, batch: Batch) -> None:
    """llama_decode, with the one precondition llama.cpp enforces by aborting the
    process (GGML_ASSERT: at most n_batch tokens) raised as a Python error instead."""
    if batch.batch.n_tokens > llm.n_batch:
        raise ValueError(f"a batch of {batch.batch.n_tokens} tokens exceeds the context's n_batch ({llm.n_batch})")
    rc = checked_decode(llm)(context_of(llm), batch.batch)
    if rc != 0:
        raise_decode_error(rc)


_views: dict[tuple[int, int, int], np.ndarray] = {}


def output_logits(llm: Any, rows: int) -> np.ndarray:
    """The logits of the last decode's requested rows, as a (rows, n_vocab) view.
    llama.cpp stores requested rows contiguously in batch order.

    Building a numpy view over a ctypes pointer costs ~80 us right after a decode
    has flushed the caches, so views are cached by (address, rows): llama.cpp
    keeps the output buffer in place until it needs a larger one."""
    llama_cpp = llama_cpp_module()
    ptr = llama_cpp.llama_get_logits(context_of(llm))
    address = ctypes.cast(ptr, ctypes.c_void_p).value or 0
    n_vocab = llm._n_vocab
    key = (address, rows, n_vocab)
    view = _views.get(key)
    if view is None:
        if len(_views) > 256:
            _views.clear()
        view = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(rows, n_vocab))
        _views[key] = view
    return view


def last_logits(llm: Any) -> np.ndarray:
    llama_cpp = llama_cpp_module()
    ptr = llama_cpp.llama_get_logits_ith(context_of(llm), -1)
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(llm.n_vocab(),))


# -- used by the engine: every private llama-cpp-python attribute is read here --

def completion_prompt_tokens(llm: Any, prompt: str) -> list[int]:
    """A text prompt's tokens exactly as ``Llama.create_completion`` builds them."""
    model = llm._model
    bos, cls, sep = llm.token_bos(), model.token_cls(), model.token_sep()
    first = cls if cls != -1 else bos
    head = [first] if model.add_bos_token() and first != -1 else []
    body = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True) if prompt else []
    tail = [] if (not model.add_eos_token() and sep == -1) else [sep if sep != -1 else llm.token_eos()]
    return head + body + tail


def prompt_capacity(llm: Any) -> int:
    """The longest prompt ``Llama.eval`` can record: ``input_ids`` is sized by the n_ctx
    the user asked for, which can be less than llama.cpp's rounded-up context."""
    return len(llm.input_ids)


def tokenize_text(llm: Any, text: str) -> list[int]:
    """Plain text (no special tokens, no BOS), as a model would write it."""
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))


def batch_limit(llm: Any) -> int:
    """The most tokens one llama_decode may take: llama.cpp aborts the process beyond it."""
    return int(min(llm.n_batch, llm.context_params.n_ubatch))


def is_eog(llm: Any, token: int) -> bool:
    llama_cpp = llama_cpp_module()
    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, token))


def cached_prefix(llm: Any, tokens: Sequence[int]) -> int:
    """How many leading ``tokens`` the Llama's bookkeeping says are in its cache."""
    cached = llm.input_ids[: max(llm.n_tokens, 0)]
    n = min(len(cached), len(tokens))
    diff = np.flatnonzero(cached[:n] != np.asarray(tokens[:n], dtype=cached.dtype))
    return int(diff[0]) if len(diff) else n


def records(llm: Any, tokens: Sequence[int] | np.ndarray, n: int) -> bool:
    """Whether the Llama's bookkeeping says its cache holds exactly ``n`` tokens
    and that they are ``tokens`` (as many of them as ``input_ids``, sized by the
    n_ctx asked for, can record): what a run that put them there checks before it
    goes on, since any other call on the Llama rewrites the bookkeeping."""
    ids = llm.input_ids
    if llm.n_tokens != n:
        return False
    m = min(n, len(ids))
    theirs = np.asarray(tokens[:m], dtype=ids.dtype)
    return bool(ids[:m].tobytes() == theirs.tobytes())   # one memcmp: cheaper than array_equal's temporaries


def sync_bookkeeping(llm: Any, kv: Sequence[int], start: int) -> None:
    """Make ``Llama.n_tokens``/``input_ids`` say that ``kv`` is in the cache, given
    that its first ``start`` tokens already were. Like ``Llama.eval``, tokens past
    the end of ``input_ids`` (sized by the n_ctx asked for, which llama.cpp may
    round up) are not recorded."""
    ids, n = llm.input_ids, len(kv)
    end = min(n, len(ids))
    if end == start + 1:   # a plain pass: one token (a numpy slice from a list costs more)
        ids[start] = kv[start]
    elif end > start:
        ids[start:end] = kv[start:end]
    llm.n_tokens = n
    llm._requires_eval = True


class Decoder:
    """The verify pass's llama.cpp calls, looked up once per generation: each
    attribute or ctypes lookup in the loop costs more right after a decode has
    flushed the CPU caches."""

    def __init__(self, llm: Any) -> None:
        import time

        llama_cpp = llama_cpp_module()
        self.llm = llm
        self.ctx = context_of(llm)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self._decode, self._seq_rm = checked_decode(llm), llama_cpp.llama_memory_seq_rm
        self._clock = time.perf_counter

    def verify(self, batch: Batch, rows: int) -> tuple[float, np.ndarray]:
        """Decodes the filled batch; (seconds inside llama_decode, its logits rows)."""
        t0 = self._clock()
        rc = self._decode(self.ctx, batch.batch)
        seconds = self._clock() - t0
        if rc != 0:
            raise_decode_error(rc)
        return seconds, output_logits(self.llm, rows)

    def decode_one(self, batch: Batch, token: int, pos: int) -> np.ndarray:
        """Decodes one token at ``pos`` with its logits, as plain decoding does; returns its row."""
        batch.fill([token], pos, all_logits=True)
        rc = self._decode(self.ctx, batch.batch)
        if rc != 0:
            raise_decode_error(rc)
        row: np.ndarray = output_logits(self.llm, 1)[0]
        return row

    def roll_back(self, pos: int) -> bool:
        """Drop every cached position >= pos; False if llama.cpp refused."""
        return bool(self._seq_rm(self.memory, 0, pos, -1))


# -- models over RPC workers (ngramspec.rpc): the hooks it needs in llama-cpp-python --

def checked_decode(llm: Any) -> Any:
    """``llama_cpp.llama_decode``, or for a Llama loaded over RPC workers, the same
    with the workers' check (``after_each_decode``) before and after."""
    llama_cpp = llama_cpp_module()
    check = decode_check(llm)
    if check is None:
        return llama_cpp.llama_decode
    raw, synchronize = llama_cpp.llama_decode, llama_cpp.llama_synchronize

    def decode(ctx: Any, batch: Any) -> int:
        check()
        rc = int(raw(ctx, batch))
        synchronize(ctx)   # llama_decode returns before the logits have come back from the workers
        check()
        return rc

    return decode


def decode_check(llm: Any) -> Any:
    """The check ``after_each_decode`` gave this Llama, or None."""
    return getattr(getattr(llm, "_ctx", None), "ngramspec_decode_check", None)


def after_each_decode(llm: Any, check: Any) -> None:
    """Runs ``check()`` before and after every decode of ``llm``: its own
    (``Llama.eval``, so plain ``create_completion`` too) and ngramspec's
    (``decode``, ``Decoder``). ``check`` raises to stop the caller from using what a
    decode returned: it runs once the decode's outputs are in (``llama_decode``
    returns before they are, and ``llama_get_logits`` waits for them)."""
    llama_cpp = llama_cpp_module()
    ctx = llm._ctx
    own = ctx.decode

    def decode(batch: Any) -> None:
        check()
        own(batch)
        llama_cpp.llama_synchronize(ctx.ctx)
        check()

    ctx.decode = decode
    ctx.ngramspec_decode_check = check


_model_load_lock = threading.Lock()


@contextlib.contextmanager
def model_devices(devices: Sequence[int]) -> Iterator[Any]:
    """While it is open, every ``llama_cpp.Llama`` constructed loads its model onto
    exactly ``devices`` (ggml device pointers; no others, the CPU aside):
    ``llama_model_params.devices``, which ``Llama()`` does not expose. It is set in
    the parameters ``Llama.__init__`` takes from ``llama_model_default_params``.
    Yields the NULL-terminated array (keep it as long as the Llama)."""
    module: Any = importlib.import_module("llama_cpp.llama_cpp")
    array = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
    original = module.llama_model_default_params

    def with_devices() -> Any:
        params = original()
        params.devices = ctypes.cast(array, ctypes.c_void_p)
        return params

    with _model_load_lock:
        module.llama_model_default_params = with_devices
        try:
            yield array
        finally:
            module.llama_model_default_params = original


@contextlib.contextmanager
def llama_log_lines() -> Iterator[list[str]]:
    """Collects llama.cpp's log lines (every level, whatever ``verbose``) while it is
    open, and passes them on to llama-cpp-python's own logger as before."""
    llama_cpp = llama_cpp_module()
    from llama_cpp import _logger

    lines: list[str] = []
    forward = _logger.llama_log_callback

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def collect(level: int, text: bytes, user_data: Any) -> None:
        lines.append(text.decode("utf-8", errors="replace"))
        forward(level, text, user_data)

    llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
    try:
        yield lines
    finally:
        llama_cpp.llama_log_set(forward, ctypes.c_void_p(0))
