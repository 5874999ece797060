"""OutputText against llama-cpp-python's own completion loop (copied below), on
random token pieces: the same text, the same token count, the same finish."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ngramspec.engine.output_text import OutputText


class FakeLlama:
    """A Llama as OutputText reads one (output_text.RendersTokens): llama.cpp's own
    tokenizer (each token renders alone), no BOS, pieces for tokens."""

    def __init__(self, pieces):
        from llama_cpp.llama_tokenizer import LlamaTokenizer

        self.pieces = pieces
        self.tokenizer_ = LlamaTokenizer.__new__(LlamaTokenizer)   # its type is all OutputText reads

    def token_bos(self):
        return -1

    def detokenize(self, tokens, prev_tokens=None):
        return b"".join(self.pieces[t] for t in tokens)


def plain_loop(llm, tokens, stops, max_tokens):
    """llama_cpp.Llama._create_completion's loop (0.3.36), minus the model."""
    completion_tokens, text, finish_reason, multibyte_fix = [], b"", "length", 0
    stop_sequences = [s.encode("utf-8") for s in stops]
    for token in tokens:
        completion_tokens.append(token)
        all_text = llm.detokenize(completion_tokens)
        for k, char in enumerate(all_text[-3:]):
            k = 3 - k
            for num, pattern in [(2, 192), (3, 224), (4, 240)]:
                if num > k and pattern & char == pattern:
                    multibyte_fix = num - k
        if multibyte_fix > 0:
            multibyte_fix -= 1
            continue
        any_stop = [s for s in stop_sequences if s in all_text]
        if len(any_stop) > 0:
            text = all_text[: all_text.index(any_stop[0])]
            return text, len(completion_tokens), "stop"
        if len(completion_tokens) >= max_tokens:
            return llm.detokenize(completion_tokens), len(completion_tokens), "length"
    return llm.detokenize(completion_tokens), len(completion_tokens), finish_reason


def ours(llm, tokens, stops, max_tokens):
    out, n = OutputText(llm, stops), 0
    for token in tokens:
        n += 1
        if not out.add(token):
            continue
        if out.stopped:
            return out.data, n, "stop"
        if n >= max_tokens:
            return out.data, n, "length"
    return out.data, n, "length"


PIECES = [b"a", b"b", b" ", b"\n", b"ab", b"\xc3", b"\xa9", b"\xe5", b"\x92", b"\x96", b"\xf0", b"\x9f",
          b"\x98", b"\x80", "é".encode(), "咖".encode(), "😀".encode(), b"\xc3\xa9a", b"x\xf0"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, len(PIECES) - 1), min_size=1, max_size=30),
       st.lists(st.sampled_from(["a", "ab", " b", "é", "😀", "\n\n", "ba", ""]), max_size=3),
       st.integers(1, 30))
def test_matches_llama_cpp_pythons_loop(tokens, stops, max_tokens):
    llm = FakeLlama(PIECES)
    assert ours(llm, tokens, stops, max_tokens) == plain_loop(llm, tokens, stops, max_tokens)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(PIECES) - 1), min_size=1, max_size=30),
       st.lists(st.sampled_from(["a", "ab", " b", "é", "😀", ""]), max_size=3))
def test_stable_text_only_grows_and_never_holds_a_stop(tokens, stops):
    out, before = OutputText(FakeLlama(PIECES), stops), b""
    for t in tokens:
        out.add(t)
        stable = out.stable
        assert stable.startswith(before) or out.stopped
        # Once stopped, the text is cut as plain cuts it (at the first stop *listed*
        # that occurs), which can leave another stop in it: only before that may
        # nothing that a stop could still cut be sent.
        assert out.stopped or not any(s and s.encode() in stable for s in stops)
        before = stable
        if out.stopped:
            break


class FakeBosLlama(FakeLlama):
    """As llama-cpp-python's detokenize: a token list that starts with BOS loses the
    text's leading space (``_internals.LlamaModel.detokenize``)."""

    def __init__(self, pieces, bos):
        super().__init__(pieces)
        self.bos = bos

    def token_bos(self):
        return self.bos

    def detokenize(self, tokens, prev_tokens=None):
        out = super().detokenize(tokens)
        return out[1:] if tokens and tokens[0] == self.bos and out[:1] == b" " else out


BOS_PIECES = PIECES + [b"", b" ", b" x"]   # BOS (renders as nothing), a space, a space-led token
BOS = len(PIECES)


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.lists(st.integers(0, len(BOS_PIECES) - 1), min_size=1, max_size=20),
       st.lists(st.sampled_from(["a", "x", " x", ""]), max_size=2), st.integers(1, 25))
def test_a_first_token_bos_drops_the_leading_space_as_plain_does(start_with_bos, tokens, stops, max_tokens):
    # SmolLM2 answering "<|im_start|> a<|im_start|> a" with BOS, " a", ...: plain's
    # text was 'a a a', ours ' a a a'.
    llm = FakeBosLlama(BOS_PIECES, BOS)
    tokens = ([BOS] if start_with_bos else []) + tokens
    assert ours(llm, tokens, stops, max_tokens) == plain_loop(llm, tokens, stops, max_tokens)
