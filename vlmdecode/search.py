"""A folder's `search` section of genai_config.json: its generation defaults, read strictly.

    SearchConfig.parse(section) -> do_sample, temperature, top_k, top_p, max_length (the defaults a
    call starts from, as onnxruntime-genai applies them), past_present_share_buffer, and the other
    fields onnxruntime-genai's builder writes, each either honoured or refused when it asks for
    something vlmdecode does not do (beam search, repetition penalty, n-gram blocking, min_length).

`SearchConfig.sampling(**overrides)` gives the `SamplingParams` of one call: the folder's values,
replaced by every argument the caller passes. onnxruntime-genai's rules: do_sample=False is greedy
whatever top_k/top_p/temperature say; do_sample=True samples with them; an absent field takes
genai's default (top_k 50, top_p off, temperature 1, unseeded); top_k 0 = off (as in Hugging
Face). Every problem raises `SearchConfigError` naming the field.
Not here: the sampling itself (sampling), the KV capacity rule (ModelFolder.capacity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .sampling import SamplingParams

WHERE = "genai_config.json: search"


class SearchConfigError(ValueError):
    """A field of genai_config.json's search section is ill-typed or asks for unsupported behaviour."""


_NUMBER = (int, float)


def _num(section: dict, key: str, default, kinds: tuple = _NUMBER):
    """section[key] (or `default`) if it has one of `kinds`; a bool passes only where bool is named."""
    v = section.get(key, default)
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
        names = " or ".join("null" if k is type(None) else "true or false (a JSON boolean)" if k is bool
                            else k.__name__ for k in kinds)
        raise SearchConfigError(f"{WHERE}.{key} must be {names}, got {v!r}")
    return v


# fields that only change what vlmdecode does not do: accepted at the value that means "off"
_OFF = {
    "num_beams": 1,  # beam search
    "num_return_sequences": 1,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,  # eos suppression until a length
    "diversity_penalty": 0.0,  # beam groups only
    "batch_size": 1,
    "blank_penalty": 0.0,  # CTC/RNNT decoders
}
# read and without effect for a single greedy/sampled sequence (beam-search scoring only)
_BEAM_ONLY = ("length_penalty", "early_stopping")


@dataclass(frozen=True)
class SearchConfig:
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_length: int | None = None  # prompt + generated tokens (None: the model's context_length)
    past_present_share_buffer: bool = False
    seed: int | None = None  # random_seed; -1 (genai: seed from the OS) -> None

    @staticmethod
    def parse(section) -> SearchConfig:
        if not isinstance(section, dict):
            raise SearchConfigError(f"{WHERE} must be an object, got {section!r}")
        known = {"do_sample", "temperature", "top_k", "top_p", "max_length", "past_present_share_buffer",
                 "random_seed", *_OFF, *_BEAM_ONLY}
        unknown = sorted(set(section) - known)
        if unknown:
            raise SearchConfigError(f"{WHERE} has field(s) {unknown} that vlmdecode does not read; accepted: "
                                    f"{sorted(known)}")
        for key, off in _OFF.items():
            v = _num(section, key, off)
            if v != off:
                raise SearchConfigError(
                    f"{WHERE}.{key} is {v!r}; vlmdecode supports only {off!r} ({key} is not implemented: greedy "
                    f"or sampled single sequences only). Set it to {off!r} to load this folder")
        for key in _BEAM_ONLY:
            _num(section, key, 1.0 if key == "length_penalty" else True,
                 _NUMBER if key == "length_penalty" else (bool,))
        do_sample = _num(section, "do_sample", False, (bool,))
        temperature = _num(section, "temperature", 1.0)
        top_k = _num(section, "top_k", 50, (int,))  # onnxruntime-genai's defaults when a field is absent
        top_p = _num(section, "top_p", 0.0)  # genai: 0 (or >= 1) = off
        seed = _num(section, "random_seed", -1, (int,))
        max_length = _num(section, "max_length", None, (int, type(None)))
        share = _num(section, "past_present_share_buffer", False, (bool,))
        if not (0 < temperature < math.inf):
            raise SearchConfigError(f"{WHERE}.temperature must be > 0, got {temperature!r}")
        if top_k < 0:
            raise SearchConfigError(f"{WHERE}.top_k must be >= 0, got {top_k!r}")
        if not (0 <= top_p <= 1):
            raise SearchConfigError(f"{WHERE}.top_p must be in [0, 1] (0 or 1: off), got {top_p!r}")
        if seed < -1:
            raise SearchConfigError(f"{WHERE}.random_seed must be -1 (unseeded) or >= 0, got {seed!r}")
        if max_length is not None and max_length <= 0:
            raise SearchConfigError(f"{WHERE}.max_length must be a positive int, got {max_length!r}")
        return SearchConfig(do_sample, float(temperature), top_k, float(top_p) if top_p > 0 else 1.0, max_length,
                            share, None if seed == -1 else seed)

    def sampling(self, **overrides) -> SamplingParams:
        """SamplingParams for one call: the folder's do_sample/temperature/top_k/top_p, then `overrides`
        (any SamplingParams field; None values are ignored, so callers can pass their defaults through)."""
        base = {"do_sample": self.do_sample, "temperature": self.temperature, "top_k": self.top_k,
                "top_p": self.top_p, "seed": self.seed}
        base.update({k: v for k, v in overrides.items() if v is not None})
        return SamplingParams(**base)
