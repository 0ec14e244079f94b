"""The tiny preset's greedy trajectory has top-1/top-2 margins that fp16 rounding cannot flip.

CPU-fp32 vs CUDA-fp16 token parity on the tiny fixture means something only if no step is a near
tie. `margin_report` measures the float64 reference's margins and the fp16 logit error
(onnxruntime CPU on the fp16 build, teacher-forced); see vlmdecode.fixture.margins for the bound.
"""

from __future__ import annotations

import numpy as np
import pytest

import vlmdecode
from vlmdecode.fixture import preset
from vlmdecode.fixture.config import IMAGE_TOKEN_ID
from vlmdecode.fixture.margins import PROMPT, SAFETY, fp16_logit_error, margin_report, seed_search, trajectory_margins
from vlmdecode.processor import demo_image

STEPS = 48


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return margin_report("tiny", steps=STEPS, root=tmp_path_factory.mktemp("margins"))


@pytest.fixture(scope="module")
def tiny(tiny_folder):
    return tiny_folder


def test_fp16_cannot_flip_a_token(report):
    # recorded figures: data/results/tiny_margin_report.json; SAFETY = 4 leaves room for CUDA's fp16 kernels,
    # whose rounding differs from onnxruntime CPU's
    assert report["seed"] == preset("tiny").seed and report["steps"] == STEPS and report["prompt"] == PROMPT
    assert report["min_margin"] > 0 and report["max_fp16_error"] > 0
    assert report["ratio"] == pytest.approx(report["min_margin"] / (2 * report["max_fp16_error"]))
    assert report["ratio"] >= SAFETY, report
    assert report["fp16_tokens_match"]


def test_trajectory_is_not_degenerate(report):
    assert len(report["tokens"]) == STEPS
    assert report["distinct_tokens"] == len(set(report["tokens"])) >= 8
    assert IMAGE_TOKEN_ID not in report["tokens"]


def test_reference_trajectory_is_the_cpu_pipelines_greedy_trajectory(tiny, report):
    m = trajectory_margins(tiny, steps=STEPS)
    assert list(m.columns) == ["step", "token", "top1", "top2", "margin"]
    assert (m["margin"] == m["top1"] - m["top2"]).all() and (m["margin"] >= 0).all()
    assert m["token"].tolist() == report["tokens"]
    assert m["margin"].min() == pytest.approx(report["min_margin"])
    out = vlmdecode.load(tiny, "cpu").generate(PROMPT, image=demo_image(32), max_new_tokens=STEPS, stop=())
    assert out.tokens == m["token"].tolist()


def test_fp16_error_is_teacher_forced_and_split(tiny, fixture_folder):
    d16 = fixture_folder("tiny", dtype="fp16")
    df = fp16_logit_error(tiny, d16, steps=8)
    assert len(df) == 8 and (df["error"] > 0).all()
    # the error on the top two logits is part of the error over the vocabulary, and the total is
    # at most the weight rounding plus the arithmetic (triangle inequality)
    assert (df["error_top"] <= df["error"]).all()
    assert (df["error"] <= df["weight_error"] + df["arith_error"] + 1e-12).all()
    assert np.array_equal(df["fp16_token"], df["token"])


def test_seed_search_ranks_by_min_margin(tmp_path):
    df = seed_search("tiny", seeds=[0, preset("tiny").seed], steps=16, root=tmp_path)
    assert list(df.columns) == ["seed", "min_margin", "step_of_min", "distinct_tokens", "image_token"]
    assert df["min_margin"].is_monotonic_decreasing and set(df["seed"]) == {0, preset("tiny").seed}
