"""Helpers the tests share: pure-Python references, plain decoding, prompts, loaders."""
