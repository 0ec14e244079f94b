"""One validation layer for generation arguments: Pipeline.generate / stream / generate_from_ids /
generate_from_embeds (and so the `vlmdecode generate` command) check their arguments here.

    check_keywords(kw, accepted)        unknown keywords; Hugging Face ones get what to use instead
    check_max_new_tokens(n)             an int > 0 (not a bool, float or str)
    check_stop(stop, vocab)             None (the model's eos ids), an int, or a sequence of ints in [0, vocab)
    check_ids(ids, vocab)               token ids -> int64 [1, S]: integer dtype, one row, 0 <= id < vocab
    check_embeds(x, hidden)             inputs_embeds -> [1, S, hidden], a floating dtype, finite

Every problem raises `GenerationArgumentError` (a ValueError and a TypeError) naming the argument, what
it got and what is accepted. The sampling fields themselves (temperature, top_k, ...) are checked by
`sampling.SamplingParams`. Not here: the folder's defaults, the decode loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Integral

import numpy as np

# Hugging Face `generate` keywords -> what vlmdecode takes instead
HF_KEYWORDS = {
    "max_length": "max_new_tokens=N counts the tokens after the prompt; the KV capacity is "
                  "vlmdecode.load(..., max_length=N)",
    "min_length": "no minimum length; stop=() ignores eos and generates exactly max_new_tokens",
    "min_new_tokens": "no minimum length; stop=() ignores eos and generates exactly max_new_tokens",
    "eos_token_id": "stop=[ids] ends generation at those ids (default: the model's eos ids; () never stops)",
    "pad_token_id": "one sequence, so nothing is padded; stop=[ids] for the ids that end generation",
    "num_beams": "no beam search: greedy (default) or do_sample=True",
    "num_beam_groups": "no beam search: greedy (default) or do_sample=True",
    "early_stopping": "no beam search: greedy (default) or do_sample=True",
    "length_penalty": "no beam search: greedy (default) or do_sample=True",
    "repetition_penalty": "no history-dependent logits processors: temperature, top_k, top_p, min_p",
    "no_repeat_ngram_size": "no history-dependent logits processors: temperature, top_k, top_p, min_p",
    "typical_p": "not supported; top_p or min_p",
    "num_return_sequences": "one sequence per call; call again with another seed",
    "streamer": "Pipeline.stream(...) yields a StepRecord per token",
    "generation_config": "pass the settings as keywords",
    "use_cache": "the KV cache is always used",
    "return_dict_in_generate": "the result always carries tokens, text and per-step records",
    "output_scores": "the result carries tokens, text and per-step records, no scores",
    "resize": "every image is resized (and converted to RGB) as the folder's image config says; nothing to pass",
}


class GenerationArgumentError(ValueError, TypeError):
    """A generation argument of the wrong type or value; the message names it and what is accepted."""


def _is_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, (bool, np.bool_))


SAMPLING_ARGS = ("do_sample", "temperature", "top_k", "top_p", "min_p", "seed")


def check_keywords(kw: dict, accepted: Iterable[str] = SAMPLING_ARGS, also: Iterable[str] = ("stop",)) -> dict:
    """Refuse keywords outside `accepted` (`also`: the call's other arguments, named in the message), saying
    what to use instead of a Hugging Face one. Returns kw."""
    accepted = list(accepted)
    for key in kw:
        if key not in accepted:
            hint = HF_KEYWORDS.get(key)
            raise GenerationArgumentError(
                f"generation argument {key!r} is not accepted" + (f": {hint}" if hint else "")
                + f"; accepted: {', '.join(['max_new_tokens', *also, *accepted])}")
    return kw


def check_max_new_tokens(n) -> int:
    if not _is_int(n) or n <= 0:
        raise GenerationArgumentError(f"max_new_tokens must be an int > 0, got {n!r} ({type(n).__name__})")
    return int(n)


def check_stop(stop, vocab: int) -> frozenset | None:
    """None (the model's eos ids), or the set of ids that end generation."""
    if stop is None:
        return None
    if _is_int(stop):
        stop = [stop]
    if isinstance(stop, (str, bytes)) or not isinstance(stop, Iterable):
        raise GenerationArgumentError(f"stop must be None, a token id or a sequence of token ids, got {stop!r}; "
                                      "a string is not a token id (encode it first)")
    ids = list(stop)
    bad = [i for i in ids if not _is_int(i) or not 0 <= i < vocab]
    if bad:
        raise GenerationArgumentError(f"stop holds {bad[:4]!r}: each stop id must be an int in [0, {vocab})")
    return frozenset(int(i) for i in ids)


def check_ids(ids, vocab: int) -> np.ndarray:
    """One prompt of token ids, [S] or [1, S], -> int64 [1, S]."""
    arr = np.asarray(ids)
    if arr.size == 0:
        raise GenerationArgumentError("input_ids is empty: a prompt needs at least one token")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise GenerationArgumentError(f"input_ids must be integers, got dtype {arr.dtype} (floats are not "
                                      "truncated to ids)")
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[0] != 1:
        raise GenerationArgumentError(f"input_ids must be one prompt, [S] or [1, S]; got shape {list(arr.shape)} "
                                      "(a batch is not supported: one call per prompt)")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab:
        raise GenerationArgumentError(f"input_ids hold {lo if lo < 0 else hi}: token ids must be in [0, {vocab})")
    return arr.astype(np.int64, copy=False)


def check_embeds(x, hidden: int) -> np.ndarray:
    """inputs_embeds [1, S > 0, hidden] of a floating dtype, all finite."""
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise GenerationArgumentError(f"inputs_embeds must be a floating array, got dtype {arr.dtype}")
    if arr.ndim != 3 or arr.shape[0] != 1 or arr.shape[2] != hidden or arr.shape[1] == 0:
        raise GenerationArgumentError(f"inputs_embeds must have shape [1, S>0, {hidden}], got {list(arr.shape)}")
    if not np.isfinite(arr).all():
        raise GenerationArgumentError("inputs_embeds hold NaN or inf")
    return arr
