"""One base for every exception the package raises on purpose, and the old names kept."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import ngramspec
from ngramspec.errors import NgramspecError


def _package_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(ngramspec.__path__, "ngramspec.")
            if not m.name.endswith("__main__")]


def test_every_exception_class_of_the_package_derives_from_ngramspec_error():
    found = []
    for name in _package_modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            cls_name = cls.__name__   # an alias (an old name) is the same class
            if cls.__module__ == name and issubclass(cls, BaseException):
                found.append(cls_name)
                assert issubclass(cls, NgramspecError), f"{name}.{cls_name} does not derive from NgramspecError"
                assert cls_name.endswith("Error"), f"{name}.{cls_name}: an exception's name ends in Error"
    assert {"UserError", "PromptTooLongError", "BuildError", "ModelFetchError", "MemoryFileError",
            "TokenizerMismatchError", "ClientError"} <= set(found)


def test_the_names_before_the_error_suffix_still_catch():
    from ngramspec.errors import ContextTooSmall, ContextTooSmallError, MissingChatTemplate, PromptTooLong
    from ngramspec.suite.sources import MissingMaterial, MissingMaterialError

    assert PromptTooLong.__name__ == "PromptTooLongError" and ContextTooSmall is ContextTooSmallError
    assert MissingMaterial is MissingMaterialError and issubclass(MissingChatTemplate, ValueError)
    try:
        raise PromptTooLong("x")
    except ValueError as e:                 # the built-in base it had before
        assert isinstance(e, NgramspecError)
