"""Helpers for the notebooks, one module per topic; every function returns plain pandas/numpy objects
(figures live in `vlmdecode.plots`).

    explore.tables      what a model folder's ONNX files hold (components, inputs/outputs, ops, layouts)
    explore.results     the recorded results under data/results (or $VLMDECODE_RESULTS)
    explore.results_native  the native decoder's recorded step beside onnxruntime's, by kernel group
    explore.parity      CPU vs float64 reference vs onnxruntime-genai (vs CUDA) tokens, logits, margins
    explore.residency   bytes a decode step should move; naive vs resident CPU sweep over context
    explore.widget      the ipywidgets explorer and live per-step times

This file imports nothing: `plots` reads `explore.results` and `explore.widget` draws with `plots`, so an
import here would close a cycle. Not a benchmark harness (see bench).
"""
