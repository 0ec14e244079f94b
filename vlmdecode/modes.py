"""The registry of decode modes: every mode name, once, with what it runs on and how.

A mode is how a decode step runs. `vlmdecode.load(folder, device, mode)` builds the decoder of a
pipeline mode through its `factory`; the bench adds its comparison scenarios (token-id decoders,
the onnxruntime-genai peer) as `runner="bench"` entries, so the CLI, the bench, the notebooks and
the plots all read names, devices and order from here. Order = display order (tables, legends).

    name      the string users pass (`load(..., mode=...)`, `--mode`, `--modes`)
    devices   where it runs: ("cpu",), ("cuda",) or both
    runner    "pipeline": vlmdecode.load builds it; "bench": a bench-only comparison scenario
    capture   the decode step replays a CUDA graph
    sampling  "host" (logits come back each step) or "device" (only token ids come back)
    factory   "module:callable" building the decoder: callable(folder, device, mode, *, max_length,
              threads, **options) -> a decoder (decoders.base's contract); None for bench entries
    default   the mode `load` picks on its device when none is given

Adding a mode (e.g. the native CUDA decoder) = one `Mode(...)` entry below. This module imports
nothing from the package (pure data), so any module may import it without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    name: str
    devices: tuple[str, ...]
    runner: str
    capture: bool
    sampling: str
    description: str
    factory: str | None = None
    default: bool = False


MODES: tuple[Mode, ...] = (
    Mode("naive", ("cpu", "cuda"), "pipeline", False, "host",
         "plain session.run with numpy KV in and out of onnxruntime every step (the baseline residency saves)",
         "vlmdecode.decoders.naive:build"),
    Mode("naive-concat", ("cpu",), "bench", False, "host", "naive on the Concat-growing `onnx` attention build"),
    Mode("resident", ("cpu",), "pipeline", False, "host",
         "KV allocated once and bound by address; only the step's input and logits are copied",
         "vlmdecode.decoders.cpu:build", default=True),
    Mode("eager", ("cuda",), "pipeline", False, "host",
         "device-resident KV; each step uploads its input and runs uncaptured; logits come back",
         "vlmdecode.decoders.cuda:build"),
    Mode("graph", ("cuda",), "pipeline", True, "host",
         "eager's step captured once as a CUDA graph and replayed", "vlmdecode.decoders.cuda:build", default=True),
    Mode("device", ("cuda",), "pipeline", True, "device",
         "graph replay with sampling and the next input written on the GPU; 8 bytes per token come back",
         "vlmdecode.decoders.cuda:build"),
    Mode("native", ("cuda",), "pipeline", True, "device",
         "our own CUDA kernels over the recognised plan (vlmdecode.native), the step one captured graph; "
         "the prompt by cuBLAS GEMMs + our row kernels (native.prefill), one graph per length bucket; 8 bytes per "
         "token come back", "vlmdecode.native.decoder:build"),
    Mode("device-session", ("cuda",), "bench", True, "device", "device mode embedding through the embedding session"),
    Mode("tokenid-graph", ("cuda",), "bench", True, "host", "graph mode on a decoder that takes input_ids"),
    Mode("genai", ("cpu",), "bench", False, "host", "onnxruntime-genai's generator on the CPU"),
    Mode("genai-eager", ("cuda",), "bench", False, "host", "onnxruntime-genai's generator on CUDA"),
    Mode("genai-graph", ("cuda",), "bench", True, "host", "onnxruntime-genai's generator on CUDA with graph capture"),
)
ORDER: tuple[str, ...] = tuple(m.name for m in MODES)
PIPELINE: tuple[str, ...] = tuple(m.name for m in MODES if m.runner == "pipeline")  # what vlmdecode.load takes


def get(name: str) -> Mode:
    for m in MODES:
        if m.name == name:
            return m
    raise ValueError(f"unknown mode {name!r}: allowed {ORDER}")


def on(device_kind: str, runner: str | None = None) -> tuple[str, ...]:
    """Mode names available on "cpu" or "cuda" (only one runner's, if given), in display order."""
    return tuple(m.name for m in MODES if device_kind in m.devices and (runner is None or m.runner == runner))


def resolve(name: str | None, device_kind: str) -> Mode:
    """The pipeline mode `name` (None: the device's default) on `device_kind`, or a ValueError naming the choices."""
    allowed = on(device_kind, "pipeline")
    if name is None:
        return next(m for m in MODES if m.default and device_kind in m.devices)
    if name not in allowed:
        other = "cuda" if device_kind == "cpu" else "cpu"
        raise ValueError(f"mode {name!r} is not available on {device_kind}: allowed {allowed} "
                         f"({other} modes: {on(other, 'pipeline')})")
    return get(name)
