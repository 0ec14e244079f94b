"""vlmdecode.native: a decoder ONNX graph recognised as a typed plan, run by our own executors.

`plan` holds the types (DecoderPlan, LayerPlan, PlanError): the contract every executor reads.
"""

from .plan import DecoderPlan, LayerPlan, PlanError

__all__ = ["DecoderPlan", "LayerPlan", "PlanError"]
