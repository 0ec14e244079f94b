"""vlmdecode.native: a decoder ONNX graph recognised as a typed plan, run by our own executors.

`plan` holds the types (DecoderPlan, LayerPlan, PlanError): the contract every executor reads.
`recognise(path_or_model)` reads a Gemma-3 decoder graph into a DecoderPlan (lift + recognise modules).
"""

from .plan import DecoderPlan, LayerPlan, PlanError
from .recognise import recognise

__all__ = ["DecoderPlan", "LayerPlan", "PlanError", "recognise"]
