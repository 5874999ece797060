"""One base for every exception the package raises on purpose, each also the built-in it was."""
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
            cls_name = cls.__name__
            if cls.__module__ == name and issubclass(cls, BaseException):
                found.append(cls_name)
                assert issubclass(cls, NgramspecError), f"{name}.{cls_name} does not derive from NgramspecError"
                assert cls_name.endswith("Error"), f"{name}.{cls_name}: an exception's name ends in Error"
    assert {"UserError", "PromptTooLongError", "BuildError", "ModelFetchError", "MemoryFileError",
            "TokenizerMismatchError", "ClientError"} <= set(found)


def test_each_error_still_derives_from_the_built_in_it_was():
    from ngramspec.errors import ContextTooSmallError, MissingChatTemplateError, PromptTooLongError
    from ngramspec.suite.workload import MissingMaterialError

    assert issubclass(ContextTooSmallError, ValueError) and issubclass(MissingChatTemplateError, ValueError)
    assert issubclass(MissingMaterialError, RuntimeError)
    try:
        raise PromptTooLongError("x")
    except ValueError as e:                 # the built-in base it had before
        assert isinstance(e, NgramspecError)
