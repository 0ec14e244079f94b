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


def installed_ort_distributions(names=None) -> list[tuple[str, str]]:
    """(distribution, site directory) for each installed onnxruntime distribution."""
    names = ORT_DISTRIBUTIONS if names is None else names
    found = []
    for n in names:
        try:
            found.append((n, str(metadata.distribution(n).locate_file(""))))
        except metadata.PackageNotFoundError:
            pass
    return found


def check_single_onnxruntime(found: list[tuple[str, str]] | None = None) -> str | None:
    """Return the installed distribution (or None); raise if two share one site directory.

    Two in different directories (a --target install shadowing a system one on PYTHONPATH) do not
    overwrite each other; the first on sys.path is imported and sessions.make_session checks it.
    """
    found = installed_ort_distributions() if found is None else found
    # plain names (the pre-directory form) are taken to share one site directory
    found = [(f, "") if isinstance(f, str) else tuple(f) for f in found]
    dirs = [d for _, d in found]
    if len(set(dirs)) < len(dirs):
        raise OnnxruntimeInstallError(
            "both onnxruntime and onnxruntime-gpu are installed; they overwrite each other's files. Fix: "
            "pip uninstall -y onnxruntime onnxruntime-gpu && pip install 'vlmdecode[cuda]' (GPU) or "
            "'vlmdecode[cpu]' (CPU only)"
        )
    return found[0][0] if found else None
