"""The llama.cpp settings a benchmark applies to every method alike: GPU offload
and flash attention. The defaults are llama-cpp-python's (nothing offloaded,
flash attention off), so a CPU run is unchanged; a GPU run offloads every layer
(``n_gpu_layers=-1``). Every loader of the suite (its Llamas, the draft model,
the peak-RSS probe, the other build's worker, ``ngramspec serve`` and
llama-server) takes them from here, so that no method runs on other kernels."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LlamaSettings:
    n_gpu_layers: int = 0      # layers offloaded to the GPU; -1: all (llama-cpp-python's convention)
    flash_attn: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.n_gpu_layers, bool) or not isinstance(self.n_gpu_layers, int):
            raise TypeError(f"n_gpu_layers must be an int, got {type(self.n_gpu_layers).__name__}")
        if self.n_gpu_layers < -1:
            raise ValueError(f"n_gpu_layers must be >= -1 (-1: every layer), got {self.n_gpu_layers}")
        if not isinstance(self.flash_attn, bool):
            raise TypeError(f"flash_attn must be a bool, got {type(self.flash_attn).__name__}")

    def llama_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``llama_cpp.Llama``."""
        return {"n_gpu_layers": self.n_gpu_layers, "flash_attn": self.flash_attn}

    def serve_args(self) -> tuple[str, ...]:
        """The same settings as ``ngramspec serve`` (llama-cpp-python's server) options."""
        return ("--n_gpu_layers", str(self.n_gpu_layers), "--flash_attn", "true" if self.flash_attn else "false")

    def llama_server_args(self, draft: bool = False) -> tuple[str, ...]:
        """The same settings as llama-server options (its -ngl takes "all" for every
        layer); ``draft``: its draft model offloaded alike (-ngld)."""
        layers = "all" if self.n_gpu_layers == -1 else str(self.n_gpu_layers)
        return ("-ngl", layers, "-fa", "on" if self.flash_attn else "off", *(("-ngld", layers) if draft else ()))

    def describe(self) -> str:
        return f"n_gpu_layers={self.n_gpu_layers}, flash_attn={self.flash_attn}"

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> LlamaSettings:
        return cls(**(data or {}))


#: llama-cpp-python's own defaults: nothing offloaded, flash attention off.
LLAMA_DEFAULTS = LlamaSettings()
