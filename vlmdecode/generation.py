"""What one generation call asks for, and what it leaves behind when it fails.

    call_params(folder, **kw) -> SamplingParams: the folder's `search` defaults (do_sample,
        temperature, top_k, top_p, random_seed; onnxruntime-genai's rule, see search.py), replaced by
        every argument the caller passes, with the tokens that cannot be fed back suppressed.
    unfeedable_tokens(folder) -> ids the decoder could not take as its next input: the image soft
        token of an inputs_embeds decoder (the embedding model replaces it by image features, and a
        generated one has none). Suppressed by default like transformers' `suppress_tokens` (their
        logits are -inf before greedy or sampling); `suppress_tokens=()` turns that off.
    GenerationError: an error during decoding, carrying the tokens made before it (`.tokens`,
        `.step`); the original error is its `__cause__`.

Not here: the decode loop (pipeline, decoders), the sampling arithmetic (sampling).
"""

from __future__ import annotations

from .genargs import SAMPLING_ARGS
from .modelfolder import ModelFolder
from .sampling import SamplingParams

GENERATION_ARGS = (*SAMPLING_ARGS, "suppress_tokens")  # the keywords genargs.check_keywords lets through


class GenerationError(RuntimeError):
    """Generation failed at `step`; `tokens` holds every token generated before the failure."""

    def __init__(self, message: str, tokens: list, step: int):
        super().__init__(message)
        self.tokens = list(tokens)
        self.step = step

    @classmethod
    def wrap(cls, error: BaseException, tokens: list) -> GenerationError:
        n = len(tokens)
        return cls(f"generation stopped at step {n} ({n} token(s) made, in .tokens: {list(tokens)[:16]}"
                   f"{' ...' if n > 16 else ''}): {type(error).__name__}: {error}", tokens, n)


def unfeedable_tokens(folder: ModelFolder) -> tuple[int, ...]:
    if folder.info.drive == "embeds" and folder.image_token_id is not None:
        return (int(folder.image_token_id),)
    return ()


def call_params(folder: ModelFolder, suppress_tokens=None, **kw) -> SamplingParams:
    """SamplingParams of one call. kw: genargs.SAMPLING_ARGS, already checked by genargs.check_keywords (None =
    the folder's default); suppress_tokens: None = unfeedable_tokens(folder), or the caller's ids (() = none)."""
    suppress = unfeedable_tokens(folder) if suppress_tokens is None else tuple(suppress_tokens)
    return folder.search.sampling(**kw, suppress=suppress)
