"""No lost work, no dead ends (#11 part 5), and the folder's search defaults.

On the tiny fixture (random weights) the model emits its image soft token, which an inputs_embeds
decoder cannot take back: with the default suppression 500 greedy tokens and the README's sampling
line over 50 seeds complete; without it generation stops with a GenerationError that keeps the
tokens made so far. The search defaults of genai_config.json apply and per-call arguments win.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import vlmdecode
from vlmdecode.fixture import build_fixture, preset
from vlmdecode.fixture.config import IMAGE_TOKEN_ID
from vlmdecode.generation import GenerationError, call_params, unfeedable_tokens
from vlmdecode.modelfolder import ModelFolder
from vlmdecode.processor import demo_image
from vlmdecode.sampling import SamplingParams, sample

PROMPT = "Describe the image."


@pytest.fixture(scope="module")
def long_tiny(tmp_path_factory):
    return build_fixture(preset("tiny", max_length=1024), tmp_path_factory.mktemp("gen") / "tiny")


@pytest.fixture(scope="module")
def pipe(long_tiny):
    return vlmdecode.load(long_tiny, "cpu")


@pytest.mark.parametrize("image", [True, False])
def test_500_greedy_tokens_complete(pipe, image):
    out = pipe.generate(PROMPT, image=demo_image(32) if image else None, max_new_tokens=500, stop=())
    assert len(out.tokens) == 500 and IMAGE_TOKEN_ID not in out.tokens


def test_readme_sampling_line_over_50_seeds(pipe):
    hit = 0
    for seed in range(50):
        out = pipe.generate("...", do_sample=True, temperature=0.8, top_k=50, top_p=0.9, min_p=0.05, seed=seed)
        assert IMAGE_TOKEN_ID not in out.tokens and out.tokens
        try:
            pipe.generate("...", do_sample=True, temperature=0.8, top_k=50, top_p=0.9, min_p=0.05, seed=seed,
                          suppress_tokens=())
        except GenerationError as e:
            hit += 1
            assert e.tokens[-1] == IMAGE_TOKEN_ID
    assert hit > 0  # the suppression is what makes every seed complete


def test_unfeedable_tokens(long_tiny):
    assert unfeedable_tokens(ModelFolder.load(long_tiny)) == (IMAGE_TOKEN_ID,)
    assert unfeedable_tokens(ModelFolder.load(long_tiny / "text")) == ()  # a token-id decoder embeds every id


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("do_sample", [False, True])
def test_sample_never_picks_suppressed(dtype, do_sample):
    logits = np.array([[0.0, 5.0, 1.0, 4.0], [9.0, 0.0, 0.5, 0.0]], dtype)
    params = SamplingParams(do_sample=do_sample, top_k=1, suppress=(1, 0, 99))  # 99: outside the vocabulary
    assert sample(logits, params, np.array([0.5, 0.5])).tolist() == [3, 2]
    assert sample(logits, SamplingParams(), None).tolist() == [1, 0]
    assert logits[0, 1] == 5.0  # the caller's logits are not modified
    with pytest.raises(ValueError, match="suppress"):
        SamplingParams(suppress=(-1,))


def test_search_defaults_apply_and_calls_override(long_tiny, tmp_path):
    work = tmp_path / "m"
    shutil.copytree(long_tiny, work)
    cfg = json.loads((work / "genai_config.json").read_text())
    cfg["search"].update(do_sample=True, top_k=1, temperature=0.5, random_seed=7)
    (work / "genai_config.json").write_text(json.dumps(cfg))
    folder = ModelFolder.load(work)
    p = call_params(folder)
    assert (p.do_sample, p.top_k, p.temperature, p.seed, p.suppress) == (True, 1, 0.5, 7, (IMAGE_TOKEN_ID,))
    q = call_params(folder, do_sample=False, top_k=5, seed=3, suppress_tokens=())
    assert (q.do_sample, q.top_k, q.temperature, q.seed, q.suppress) == (False, 5, 0.5, 3, ())
    with pytest.raises(TypeError, match="num_beams"):
        call_params(folder, num_beams=2)
    pipe = vlmdecode.load(work, "cpu")
    greedy = vlmdecode.load(long_tiny, "cpu").generate(PROMPT, max_new_tokens=8, stop=()).tokens
    # the folder says do_sample with top_k=1: sampling that is greedy, whatever the seed
    assert pipe.generate(PROMPT, max_new_tokens=8, stop=()).tokens == greedy
    assert pipe.generate(PROMPT, max_new_tokens=8, stop=(), top_k=0, temperature=5.0).tokens != greedy


@pytest.mark.parametrize("field,value,match", [
    ("num_beams", 4, "num_beams is 4; vlmdecode supports only 1"),
    ("repetition_penalty", 1.1, "repetition_penalty"),
    ("chunk_size", 64, r"field\(s\) \['chunk_size'\]"),
    ("top_p", 1.5, "top_p must be in"),
    ("do_sample", "yes", "do_sample must be true or false"),
])
def test_search_fields_refused_by_name(long_tiny, tmp_path, field, value, match):
    work = tmp_path / "m"
    shutil.copytree(long_tiny, work, ignore=shutil.ignore_patterns("text"))
    cfg = json.loads((work / "genai_config.json").read_text())
    cfg["search"][field] = value
    (work / "genai_config.json").write_text(json.dumps(cfg))
    with pytest.raises(vlmdecode.modelfolder.ModelFolderError, match=match):
        ModelFolder.load(work)
