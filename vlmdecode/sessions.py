"""onnxruntime sessions for a component on a device: providers, options, and no silent fallback.

`make_session(path, device)` gives a CPU session, or a CUDA session that is checked to really have
the CUDA execution provider (onnxruntime otherwise falls back to CPU without a word). Graph capture
is opt-in per session (`cuda_graph=True`), so vision and embedding never inherit it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .devices import Device, cuda_device_count, parse_device
from .sessionpolicy import check_session_options, check_threads, ort_settings


class CudaUnavailableError(RuntimeError):
    """CUDA was asked for and cannot be used; the message says why."""


_preloaded = False
_log_severity = 3  # onnxruntime errors, unless quiet_logs()


def ort():
    """The onnxruntime module; ImportError with the install command when it is missing."""
    try:
        import onnxruntime
    except ImportError as e:
        raise ImportError(f"onnxruntime is not installed ({e}): pip install \".[cpu]\" (CPU) or \".[cuda]\" "
                          "(onnxruntime-gpu) in the vlmdecode folder, or pip install 'vlmdecode[cpu]'") from None
    return onnxruntime


def quiet_logs() -> None:
    """onnxruntime logs only fatal errors from now on (the CLI reports errors in its own one line)."""
    global _log_severity
    _log_severity = 4
    if "onnxruntime" in sys.modules:
        ort().set_default_logger_severity(4)


def _preload_cuda_libraries() -> None:
    """onnxruntime-gpu >= 1.21 finds the CUDA/cuDNN libraries of the nvidia-* wheels this way."""
    global _preloaded
    if not _preloaded and hasattr(ort(), "preload_dlls"):
        try:
            ort().preload_dlls()
        except Exception:  # missing wheels are reported by the provider check below, with its reason
            pass
        _preloaded = True


def check_cuda(device: Device) -> None:
    """Raise CudaUnavailableError unless the CUDA provider exists and device.index is a real GPU."""
    providers = ort().get_available_providers()
    if "CUDAExecutionProvider" not in providers:
        raise CudaUnavailableError(
            f"device {device} asked for, but this onnxruntime ({ort().__version__}) has no "
            f"CUDAExecutionProvider (available: {providers}); install vlmdecode[cuda] (onnxruntime-gpu)"
        )
    n = cuda_device_count()
    if device.index >= n:
        raise CudaUnavailableError(
            f"device {device} asked for, but {n} CUDA device(s) are visible"
            + ("" if n else " (no GPU, no driver, or CuPy missing)")
        )


def session_options(*, log_severity: int | None = None, profile_prefix: str | None = None, threads: int = 0,
                    folder_options: dict | None = None, spin: bool = True):
    """onnxruntime SessionOptions: ours, then the folder's safe subset (`sessionpolicy`), then `threads`.
    spin=False: the intra-op threads sleep when a run ends instead of spinning (sessions that run once per
    prompt, whose spinning threads would take the CPU from the decoder's prefill right after them)."""
    so = ort().SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")  # see node_assignment()
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = _log_severity if log_severity is None else log_severity
    if _log_severity == 4:
        ort().set_default_logger_severity(4)
    so.graph_optimization_level = ort().GraphOptimizationLevel.ORT_ENABLE_ALL
    for key, value in ort_settings(check_session_options(folder_options or {}, "session_options")).items():
        setattr(so, key, getattr(ort().GraphOptimizationLevel, value) if key == "graph_optimization_level" else value)
    if check_threads(threads):
        so.intra_op_num_threads = threads
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return so


def make_session(path: str | Path, device: Device | str = "cpu", *, cuda_graph: bool = False,
                 stream_ptr: int | None = None, log_severity: int | None = None, profile_prefix: str | None = None,
                 threads: int = 0, provider_options: dict | None = None, spin: bool = True):
    """An InferenceSession for `path` on `device`. CUDA sessions are checked; never a CPU fallback.

    path: an ONNX file, or a `modelfolder.Component` (its file, with the safe subset of the
    genai_config.json session_options it carries; see `vlmdecode.sessionpolicy`).
    provider_options: extra CUDA provider options (e.g. arena_extend_strategy); the ones this function
    sets itself (device_id, enable_cuda_graph, user_compute_stream) are refused."""
    device = parse_device(device)
    folder_options = getattr(path, "session_options", None)
    path = getattr(path, "path", path)
    if provider_options and not device.is_cuda:
        raise ValueError(f"provider_options {sorted(provider_options)} are CUDA provider options; device is cpu")
    so = session_options(log_severity=log_severity, profile_prefix=profile_prefix, threads=threads,
                         folder_options=folder_options, spin=spin)
    if not device.is_cuda:
        if cuda_graph:
            raise ValueError("cuda_graph=True needs a CUDA device, got cpu")
        return ort().InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    _preload_cuda_libraries()
    check_cuda(device)
    opts = {"device_id": str(device.index), "enable_cuda_graph": "1" if cuda_graph else "0"}
    if stream_ptr is not None:
        opts["user_compute_stream"] = str(stream_ptr)
    for key, value in (provider_options or {}).items():
        if key in ("device_id", "enable_cuda_graph", "user_compute_stream"):
            raise ValueError(f"provider option {key!r} is set by vlmdecode (device, mode, stream), not by callers")
        opts[key] = str(value)
    try:
        sess = ort().InferenceSession(str(path), so, providers=[("CUDAExecutionProvider", opts)])
    except Exception as e:
        raise CudaUnavailableError(f"could not create a CUDA session for {Path(path).name} on {device}: {e}") from e
    if "CUDAExecutionProvider" not in sess.get_providers():
        raise CudaUnavailableError(
            f"{Path(path).name}: onnxruntime created the session without CUDAExecutionProvider "
            f"(got {sess.get_providers()}); refusing to run on CPU when {device} was asked for"
        )
    return sess


def node_assignment(session) -> list[tuple[str, str, str]]:
    """(execution provider, op type, node name) for every node of the optimized graph."""
    return [(sg.ep_name, n.op_type, n.name) for sg in session.get_provider_graph_assignment_info()
            for n in sg.get_nodes()]


def memcpy_nodes(session) -> list[str]:
    """Names of the host<->device copy nodes onnxruntime inserted (none allowed in a captured decoder)."""
    return [name for _, op, name in node_assignment(session) if op.startswith("Memcpy")]
