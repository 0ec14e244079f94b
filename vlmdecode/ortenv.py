"""Which onnxruntime distribution is installed, checked once at import of vlmdecode.

onnxruntime and onnxruntime-gpu install the same `onnxruntime` package directory; with both
present, whichever was installed last has overwritten the other's files, and the CUDA provider may
be missing or broken. We refuse to run in that state and say how to fix it.
"""

from __future__ import annotations

from importlib import metadata

ORT_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu")


class OnnxruntimeInstallError(ImportError):
    pass


def installed_ort_distributions(names=None) -> list[str]:
    names = ORT_DISTRIBUTIONS if names is None else names
    found = []
    for n in names:
        try:
            metadata.version(n)
            found.append(n)
        except metadata.PackageNotFoundError:
            pass
    return found


def check_single_onnxruntime(found: list[str] | None = None) -> str | None:
    """Return the one installed distribution (or None); raise if both are installed."""
    found = installed_ort_distributions() if found is None else found
    if len(found) > 1:
        raise OnnxruntimeInstallError(
            "both onnxruntime and onnxruntime-gpu are installed; they overwrite each other's files. Fix: "
            "pip uninstall -y onnxruntime onnxruntime-gpu && pip install 'vlmdecode[cuda]' (GPU) or "
            "'vlmdecode[cpu]' (CPU only)"
        )
    return found[0] if found else None
