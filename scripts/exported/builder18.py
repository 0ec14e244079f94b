"""Run onnxruntime-genai's model builder under transformers 5.x with Gemma 3's rope config flattened.

onnxruntime-genai 0.18's builder reads `config.rope_parameters["rope_type"]` flat, but transformers 5.x
loads Gemma 3's rope settings nested per layer type ({"full_attention": {...}, "sliding_attention":
{...}}), so the builder stops with KeyError: 'rope_type'. This wrapper patches AutoConfig.from_pretrained
to give the builder the flat form (global theta in rope_parameters/rope_theta, local theta in
rope_local_base_freq, as transformers 4.x had it) and then runs the builder's command line unchanged:

    python builder18.py -i HF_DIR -o OUT -p fp32 -e cpu [--extra_options k=v ...]
"""

from __future__ import annotations

import runpy

import transformers

_orig = transformers.AutoConfig.from_pretrained


def _flatten(cfg):
    for c in (cfg, getattr(cfg, "text_config", None)):
        rp = getattr(c, "rope_parameters", None) if c is not None else None
        if isinstance(rp, dict) and "full_attention" in rp:
            full, local = rp["full_attention"], rp.get("sliding_attention", rp["full_attention"])
            c.rope_parameters = dict(full)
            c.rope_theta = full["rope_theta"]
            c.rope_local_base_freq = local["rope_theta"]
    return cfg


def _from_pretrained(*args, **kwargs):
    return _flatten(_orig(*args, **kwargs))


transformers.AutoConfig.from_pretrained = _from_pretrained

if __name__ == "__main__":
    runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)
