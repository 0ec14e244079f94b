"""vlmdecode: decode multi-component vision-language models exported to ONNX, on CPU and CUDA.

    pipe = vlmdecode.load("model_dir", device="cpu")        # or "cuda", "cuda:N" (mode eager|graph|device)
    out = pipe.generate("Describe the image.", image="cat.png", max_new_tokens=32)
"""

from .ortenv import check_single_onnxruntime

check_single_onnxruntime()  # onnxruntime and onnxruntime-gpu side by side overwrite each other

from .generation import GenerationError  # noqa: E402
from .pipeline import GenerationResult, Pipeline, StepRecord, load  # noqa: E402

__version__ = "0.1.0"
__all__ = ["load", "Pipeline", "GenerationResult", "GenerationError", "StepRecord", "__version__"]
