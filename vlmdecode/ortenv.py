"""Which onnxruntime and onnxruntime-genai distributions are installed, checked once at import of vlmdecode.

onnxruntime and onnxruntime-gpu install the same `onnxruntime` package directory, and onnxruntime-genai and
onnxruntime-genai-cuda the same `onnxruntime_genai` one; with both of a pair in one site directory,
whichever was installed last has overwritten the other's files, and the CUDA provider may be missing or
broken. We refuse to run in that state and say how to fix it.
"""

from __future__ import annotations

from importlib import metadata

ORT_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu")
GENAI_DISTRIBUTIONS = ("onnxruntime-genai", "onnxruntime-genai-cuda")


class OnnxruntimeInstallError(ImportError):
    pass


def installed_ort_distributions(names=None) -> list[tuple[str, str]]:
    """(distribution, site directory) for each installed distribution of `names` (default: onnxruntime's)."""
    names = ORT_DISTRIBUTIONS if names is None else names
    found = []
    for n in names:
        try:
            found.append((n, str(metadata.distribution(n).locate_file(""))))
        except metadata.PackageNotFoundError:
            pass
    return found


def check_single_onnxruntime(found: list[tuple[str, str]] | None = None,
                             genai_found: list[tuple[str, str]] | None = None) -> str | None:
    """Return the installed onnxruntime distribution (or None); raise if two of a pair share one site
    directory (onnxruntime / onnxruntime-gpu, or onnxruntime-genai / onnxruntime-genai-cuda).

    Two in different directories (a --target install shadowing a system one on PYTHONPATH) do not
    overwrite each other; the first on sys.path is imported and sessions.make_session checks it.
    """
    found = installed_ort_distributions() if found is None else found
    genai_found = installed_ort_distributions(GENAI_DISTRIBUTIONS) if genai_found is None else genai_found
    for pair, dists in ((ORT_DISTRIBUTIONS, found), (GENAI_DISTRIBUTIONS, genai_found)):
        # plain names (the pre-directory form) are taken to share one site directory
        dists = [(f, "") if isinstance(f, str) else tuple(f) for f in dists]
        dirs = [d for _, d in dists]
        if len(set(dirs)) < len(dirs):
            cpu, gpu = pair
            raise OnnxruntimeInstallError(
                f"both {cpu} and {gpu} are installed; they overwrite each other's files. Fix: "
                f"pip uninstall -y {cpu} {gpu} && pip install 'vlmdecode[cuda]' (GPU) or "
                "'vlmdecode[cpu]' (CPU only)"
            )
    found = [(f, "") if isinstance(f, str) else tuple(f) for f in found]
    return found[0][0] if found else None
