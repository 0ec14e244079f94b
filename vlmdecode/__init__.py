"""vlmdecode: decode multi-component vision-language models exported to ONNX, on CPU and CUDA.

    pipe = vlmdecode.load("model_dir", device="cpu")        # or "cuda", "cuda:N" (mode eager|graph|device)
    out = pipe.generate("Describe the image.", image="cat.png", max_new_tokens=32)

`load`, `Pipeline`, `GenerationResult` and `StepRecord` are imported on first use, so `import vlmdecode`
(and the `vlmdecode` command's start) does not wait for numpy and onnxruntime.
"""

from .ortenv import check_single_onnxruntime

check_single_onnxruntime()  # onnxruntime and onnxruntime-gpu side by side overwrite each other

__version__ = "0.1.0"
__all__ = ["load", "Pipeline", "GenerationResult", "GenerationError", "StepRecord", "__version__"]


def __getattr__(name: str):
    if name in ("load", "Pipeline", "GenerationResult", "StepRecord"):
        from . import pipeline

        return getattr(pipeline, name)
    if name == "GenerationError":
        from .generation import GenerationError

        return GenerationError
    raise AttributeError(f"module 'vlmdecode' has no attribute {name!r}")
