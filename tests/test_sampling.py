"""vlmdecode.sampling against brute-force per-row definitions written with plain Python loops.

The references below restate each filter's definition directly (top-p as "mass strictly above this token < top_p",
with an O(V^2) loop rather than a sort), so they share no code or trick with the vectorised implementation.
Near a boundary (a token whose mass-above or p/p_max ratio is within 1e-9 of the threshold) the two may round
differently; hypothesis discards those examples.
"""

import math
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vlmdecode.philox import PHILOX_SOURCE, philox4x32, philox_uniform
from vlmdecode.sampling import (
    NonFiniteLogitsError,
    Sampler,
    SamplingParams,
    array_module,
    check_finite,
    filter_logits,
    sample,
    sample_unchecked,
)

NEG = -math.inf
BOUNDARY = 1e-9
DTYPES = (np.float16, np.float32, np.float64)
FAST = settings(max_examples=60, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------------------------
# references: one row (a list of Python floats) at a time; each returns (filtered row, distance to a boundary)


def ref_softmax(row):
    top = max(row)
    e = [math.exp(v - top) for v in row]
    total = sum(e)
    return [x / total for x in e]


def ref_temperature(row, temperature):
    return [v / temperature for v in row], math.inf


def ref_top_k(row, k):
    if k == 0 or k >= len(row):
        return list(row), math.inf
    kth = sorted(row, reverse=True)[k - 1]
    return [v if v >= kth else NEG for v in row], math.inf


def ref_top_p(row, top_p):
    if top_p >= 1.0:
        return list(row), math.inf
    p = ref_softmax(row)
    out, margin = [], math.inf
    for t in range(len(row)):
        above = 0.0
        for j in range(len(row)):
            if p[j] > p[t]:
                above += p[j]
        if p[t] > 0:
            margin = min(margin, abs(above - top_p))
        out.append(row[t] if above < top_p else NEG)
    return out, margin


def ref_min_p(row, min_p):
    if min_p == 0.0:
        return list(row), math.inf
    top = max(row)
    out, margin = [], math.inf
    for v in row:
        ratio = math.exp(v - top)
        if v > NEG:
            margin = min(margin, abs(ratio - min_p))
        out.append(v if ratio >= min_p else NEG)
    return out, margin


def ref_filter(row, params):
    margin = math.inf
    for step in (lambda r: ref_temperature(r, params.temperature), lambda r: ref_top_k(r, params.top_k),
                 lambda r: ref_top_p(r, params.top_p), lambda r: ref_min_p(r, params.min_p)):
        row, m = step(row)
        margin = min(margin, m)
    return row, margin


def check_against_reference(logits, params):
    expected, margins = zip(*(ref_filter([float(v) for v in row], params) for row in logits))
    assume(min(margins) > BOUNDARY)
    got = filter_logits(logits, params)
    assert got.dtype == np.float64 and got.shape == logits.shape
    # Same IEEE operations on the kept entries (a division at most), so the values match exactly.
    np.testing.assert_array_equal(got, np.array(expected, dtype=np.float64))


# ---------------------------------------------------------------------------------------------------------------
# strategies


# Half-integers make ties common (also after a float16 cast); -inf entries are pre-masked tokens.
logit_values = st.one_of(st.integers(-12, 12).map(lambda i: i / 2), st.floats(-20, 20), st.just(NEG))


@st.composite
def logits_arrays(draw, max_batch=4, max_vocab=12):
    batch = draw(st.integers(1, max_batch))
    vocab = draw(st.integers(1, max_vocab))
    dtype = draw(st.sampled_from(DTYPES))
    rows = draw(st.lists(st.lists(logit_values, min_size=vocab, max_size=vocab), min_size=batch, max_size=batch))
    logits = np.array(rows, dtype=dtype)
    for row in logits:  # every row needs one finite logit
        if not np.isfinite(row).any():
            row[draw(st.integers(0, vocab - 1))] = draw(st.integers(-5, 5))
    return logits


temperatures = st.one_of(st.just(1.0), st.floats(0.05, 5.0))
top_ks = st.integers(0, 14)
top_ps = st.one_of(st.just(1.0), st.floats(0.01, 1.0))
min_ps = st.one_of(st.just(0.0), st.floats(0.0, 0.99))


# ---------------------------------------------------------------------------------------------------------------
# filters against the references


@FAST
@given(logits_arrays(), temperatures)
def test_temperature_matches_reference(logits, temperature):
    check_against_reference(logits, SamplingParams(do_sample=True, temperature=temperature))


@FAST
@given(logits_arrays(), top_ks)
def test_top_k_matches_reference(logits, top_k):
    check_against_reference(logits, SamplingParams(do_sample=True, top_k=top_k))


@FAST
@given(logits_arrays(), top_ps)
def test_top_p_matches_reference(logits, top_p):
    check_against_reference(logits, SamplingParams(do_sample=True, top_p=top_p))


@FAST
@given(logits_arrays(), min_ps)
def test_min_p_matches_reference(logits, min_p):
    check_against_reference(logits, SamplingParams(do_sample=True, min_p=min_p))


@FAST
@given(logits_arrays(), temperatures, top_ks, top_ps, min_ps)
def test_filter_chain_matches_reference(logits, temperature, top_k, top_p, min_p):
    params = SamplingParams(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    check_against_reference(logits, params)


def test_filter_chain_keeps_the_top_token():
    # The harshest settings still leave the argmax.
    logits = np.random.default_rng(0).normal(size=(8, 50))
    params = SamplingParams(do_sample=True, temperature=0.1, top_k=1, top_p=1e-6, min_p=0.999)
    kept = np.isfinite(filter_logits(logits, params))
    assert (kept.sum(axis=1) == 1).all()
    assert (kept.argmax(axis=1) == logits.argmax(axis=1)).all()


def kept(logits, **kwargs):
    out = filter_logits(np.array([logits], dtype=np.float64), SamplingParams(do_sample=True, **kwargs))[0]
    return [i for i, v in enumerate(out) if v > NEG]


def test_top_k_keeps_ties_with_the_kth():
    assert kept([3.0, 2.0, 2.0, 1.0], top_k=2) == [0, 1, 2]
    assert kept([3.0, 2.0, 2.0, 1.0], top_k=1) == [0]
    assert kept([1.0, 1.0, 1.0], top_k=1) == [0, 1, 2]


def test_top_p_examples():
    logits = np.log([0.5, 0.3, 0.15, 0.05]).tolist()
    assert kept(logits, top_p=0.45) == [0]  # 0.5 >= 0.45 already
    assert kept(logits, top_p=0.75) == [0, 1]  # 0.8 >= 0.75
    assert kept(logits, top_p=0.9) == [0, 1, 2]
    assert kept(logits, top_p=0.99) == [0, 1, 2, 3]
    assert kept(logits, top_p=1e-9) == [0]  # the top token always stays


def test_top_p_keeps_ties_at_the_boundary():
    assert kept([0.0, 0.0, 0.0, 0.0], top_p=0.1) == [0, 1, 2, 3]
    # p ~ [0.46, 0.17, 0.17, 0.17, 0.02]: the three tied tokens have 0.46 strictly above them, < 0.5.
    assert kept([2.0, 1.0, 1.0, 1.0, -2.0], top_p=0.5) == [0, 1, 2, 3]


def test_exact_boundaries_match_hf():
    # exp(-ln 2) == 0.5 exactly, so p == [0.5, 0.25, 0.125, 0.125] exactly and the boundaries are hit exactly.
    logits = [0.0, -math.log(2), -math.log(4), -math.log(4)]
    assert kept(logits, top_p=0.5) == [0]  # {0} already has mass 0.5 >= 0.5
    assert kept(logits, top_p=0.75) == [0, 1]
    assert kept(logits, min_p=0.5) == [0, 1]  # p == min_p * p_max stays (HF removes only p < min_p * p_max)
    # Mass above the tied pair is 0.75 < 0.875: both stay. (HF keeps one of them, whichever its unstable sort
    # puts last; this is the documented difference.)
    assert kept(logits, top_p=0.875) == [0, 1, 2, 3]


def test_top_p_runs_before_min_p():
    # p = [0.5, 0.3, 0.01 x 20]. top-p 0.6 keeps {0, 1} (0.5 above token 1 < 0.6); min-p 0.1 keeps both.
    # The other order would renormalise to [0.625, 0.375] first, and top-p would then drop token 1.
    logits = np.log([0.5, 0.3] + [0.01] * 20).tolist()
    assert kept(logits, top_p=0.6, min_p=0.1) == [0, 1]


def test_min_p_is_relative_to_the_top_token():
    logits = np.log([0.5, 0.3, 0.15, 0.05]).tolist()
    assert kept(logits, min_p=0.25) == [0, 1, 2]  # ratios 1, 0.6, 0.3, 0.1
    assert kept(logits, min_p=0.5) == [0, 1]


def test_filters_leave_pre_masked_tokens_masked():
    logits = np.array([[NEG, 1.0, NEG, 0.5]])
    out = filter_logits(logits, SamplingParams(do_sample=True, temperature=0.5, top_k=3, top_p=0.99, min_p=0.01))
    assert np.isneginf(out[0, [0, 2]]).all()


# ---------------------------------------------------------------------------------------------------------------
# greedy


@pytest.mark.parametrize("dtype", DTYPES)
def test_greedy_is_argmax(dtype):
    logits = np.random.default_rng(1).normal(size=(16, 300)).astype(dtype)
    # Filters do not apply to greedy.
    ids = sample(logits, SamplingParams(temperature=0.3, top_k=2, top_p=0.1, min_p=0.5))
    assert ids.dtype == np.int64 and ids.shape == (16,)
    np.testing.assert_array_equal(ids, logits.argmax(axis=1))


def test_greedy_takes_first_max_and_ignores_uniform():
    logits = np.array([[1.0, 3.0, 3.0, 0.0], [NEG, NEG, 2.0, 2.0]])
    assert sample(logits, SamplingParams()).tolist() == [1, 2]
    assert sample(logits, SamplingParams(), np.array([0.9, 0.1])).tolist() == [1, 2]
    assert Sampler(SamplingParams())(logits).tolist() == [1, 2]


def ref_greedy(row):
    """(first index of the max, None) of one row of Python floats, or (None, why) where check_finite must raise."""
    if any(math.isnan(v) or v == math.inf for v in row):
        return None, "NaN or +inf"
    if all(v == NEG for v in row):
        return None, "entirely -inf"
    top = max(row)
    return row.index(top), None


@st.composite
def raw_logits(draw):
    """[B, V] logits of any bit pattern: float16 from random int16 bits and float16 values (NaNs of both signs,
    +-inf, +-0, subnormals), half the time all negative; float32/float64 from a pool of special and ordinary
    values, ties likely."""
    dtype = draw(st.sampled_from(DTYPES))
    b, v = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    if dtype == np.float16:
        as_bits = lambda f: int(np.array(f, np.float16).view(np.int16))  # noqa: E731
        specials = [-512, 0x7C01, -32768, 0x7C00, -1024, 0]  # -NaN, +NaN, -0.0, +inf, -inf, +0.0 as int16 bits
        element = st.one_of(st.integers(-32768, 32767), st.floats(width=16).map(as_bits), st.sampled_from(specials))
        bits = np.array(draw(st.lists(element, min_size=b * v, max_size=b * v)), np.int16)
        if draw(st.booleans()):  # every value <= 0 (sign bit set): where int16 bits stop ordering as floats
            bits |= np.int16(-32768)
        return bits.view(np.float16).reshape(b, v)
    pool = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, NEG, math.inf, math.nan, -math.nan, 1e-30, -7.0])
    return np.array(draw(st.lists(pool, min_size=b * v, max_size=b * v)), dtype).reshape(b, v)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(raw_logits())
def test_greedy_fast_path_matches_reference_on_any_bits(logits):
    # the host greedy path reads float16 as integer bits (sampling._greedy_host); the reference reads floats
    refs = [ref_greedy([float(x) for x in row]) for row in logits]
    if any(i is None for i, _ in refs):
        with pytest.raises(NonFiniteLogitsError, match="step 4"):
            sample(logits, SamplingParams(), step=4)
    else:
        assert sample(logits, SamplingParams(), step=4).tolist() == [i for i, _ in refs]


def test_greedy_fast_path_signed_zeros_and_negative_rows():
    f16 = np.float16
    assert sample(np.array([[-0.0, 0.0, -1.0], [0.0, -0.0, -1.0]], f16), SamplingParams()).tolist() == [0, 0]
    assert sample(np.array([[-3.0, -2.0, -2.0, NEG]], f16), SamplingParams()).tolist() == [1]
    neg_nan = np.array([0xFE00], np.uint16).view(f16)[0]  # sign bit set: sorts below -inf as integer keys
    with pytest.raises(NonFiniteLogitsError, match="NaN"):
        sample(np.array([[1.0, neg_nan, 2.0]], f16), SamplingParams())


# ---------------------------------------------------------------------------------------------------------------
# sampling


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


SAMPLED = SamplingParams(do_sample=True, temperature=0.8, top_k=6, top_p=0.95, min_p=0.02)


def test_inverse_cdf_with_stratified_draws_reproduces_the_probabilities():
    # u on a regular grid: token i must be drawn N * p_i times, give or take one at each interval end.
    logits = np.random.default_rng(2).normal(scale=2.0, size=(1, 10))
    probs = softmax(filter_logits(logits, SAMPLED))[0]
    n = 10_000
    uniform = (np.arange(n) + 0.5) / n
    ids = sample(np.repeat(logits, n, axis=0), SAMPLED, uniform)
    counts = np.bincount(ids, minlength=10)
    assert np.abs(counts - n * probs).max() <= 1.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_empirical_distribution_matches_softmax_of_filtered(dtype):
    logits = np.random.default_rng(3).normal(size=(1, 12)).astype(dtype)
    params = SamplingParams(do_sample=True, temperature=1.3, top_k=8, top_p=0.95, min_p=0.05, seed=0)
    probs = softmax(filter_logits(logits, params))[0]
    n = 40_000
    ids = Sampler(params)(np.repeat(logits, n, axis=0))
    counts = np.bincount(ids, minlength=12)
    allowed = probs > 0
    assert counts[~allowed].sum() == 0
    expected = n * probs[allowed]
    chi2 = (((counts[allowed] - expected) ** 2) / expected).sum()
    # 7 tokens survive the filters, df = 6: P(chi2_6 > 40) ~ 5e-7. The seed is fixed, so this is deterministic anyway.
    assert allowed.sum() == 7 and chi2 < 40


@FAST
@given(logits_arrays(), temperatures, top_ks, top_ps, min_ps,
       st.lists(st.sampled_from([0.0, 0.5, float(np.nextafter(1.0, 0.0))]) | st.floats(0.0, 1.0, exclude_max=True),
                min_size=4, max_size=4))
def test_masked_tokens_are_never_drawn(logits, temperature, top_k, top_p, min_p, draws):
    params = SamplingParams(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    uniform = np.array(draws[: logits.shape[0]])
    ids = sample(logits, params, uniform)
    allowed = np.isfinite(filter_logits(logits, params))
    assert ids.dtype == np.int64
    assert allowed[np.arange(len(ids)), ids].all()


def test_extreme_draws_pick_first_and_last_allowed_tokens():
    logits = np.array([[NEG, 0.0, 1.0, NEG, 0.5, NEG, NEG]])
    params = SamplingParams(do_sample=True)
    assert sample(logits, params, [0.0]).tolist() == [1]
    assert sample(logits, params, [np.nextafter(1.0, 0.0)]).tolist() == [4]
    assert sample(logits, params, [1.0]).tolist() == [4]  # outside the contract, still a valid token


def test_sample_is_a_function_of_its_inputs():
    logits = np.random.default_rng(4).normal(size=(5, 40))
    uniform = np.random.default_rng(5).random(5)
    np.testing.assert_array_equal(sample(logits, SAMPLED, uniform), sample(logits, SAMPLED, uniform.copy()))


def draws(seed, steps=60):
    sampler = Sampler(SamplingParams(do_sample=True, seed=seed))
    logits = np.zeros((4, 50))  # uniform over 50 tokens: different streams show quickly
    return np.stack([sampler(logits, step=i) for i in range(steps)])


def test_same_seed_same_tokens_different_seed_different_tokens():
    np.testing.assert_array_equal(draws(123), draws(123))
    assert (draws(123) != draws(124)).mean() > 0.5
    assert len(np.unique(draws(123))) > 25  # and it does move


def test_sampler_uniform_is_in_unit_interval():
    u = Sampler(SamplingParams(do_sample=True, seed=0)).uniform(3, 1000)
    assert u.dtype == np.float64 and u.shape == (1000,) and (u >= 0).all() and (u < 1).all()
    assert len(np.unique(u)) == 1000


# Random123's known-answer vectors for philox4x32-10 (kat_vectors): counter, key -> output
PHILOX_KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


@pytest.mark.parametrize("counter, key, expected", PHILOX_KAT)
def test_philox_matches_random123_known_answers(counter, key, expected):
    out = philox4x32([[c] for c in counter], key)
    assert out.dtype == np.uint32 and out[:, 0].tolist() == expected


def test_philox_uniform_is_counter_based():
    """A draw depends on (seed, step, row) only: the same step gives the same value whatever came before."""
    a, b = Sampler(SamplingParams(do_sample=True, seed=9)), Sampler(SamplingParams(do_sample=True, seed=9))
    for step in range(5):
        a.uniform(step, 4)
    np.testing.assert_array_equal(a.uniform(7, 4), b.uniform(7, 4))
    assert philox_uniform(9, 7, 4)[2] == b.uniform(7, 3)[2]  # row r of a batch = row r alone
    assert philox_uniform(9, 7)[0] != philox_uniform(9, 8)[0] != philox_uniform(10, 8)[0]
    seeds = [0, 2**32 - 1, 2**32, 2**64 - 1]  # both key words are used
    assert len({philox_uniform(s, 0)[0] for s in seeds}) == 4
    with pytest.raises(ValueError, match="2\\*\\*64"):
        SamplingParams(do_sample=True, seed=2**64)


def test_philox_cuda_source_matches_numpy(tmp_path):
    """The CUDA C of PHILOX_SOURCE, compiled for the host by nvcc (no GPU needed), gives numpy's bits."""
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    src = tmp_path / "philox.cu"
    src.write_text("#include <cstdio>\nint main() {\n"
                   "  unsigned long long seeds[3] = {0ULL, 12345ULL, 0xFFFFFFFFFFFFFFFFULL};\n"
                   "  unsigned long long steps[3] = {0ULL, 7ULL, 0x100000003ULL};\n"
                   "  for (int s = 0; s < 3; ++s) for (int t = 0; t < 3; ++t) for (int i = 0; i < 2; ++i) {\n"
                   "    unsigned int k0 = (unsigned int)seeds[s], k1 = (unsigned int)(seeds[s] >> 32);\n"
                   "    unsigned long long step = steps[t]; double u;\n"
                   + PHILOX_SOURCE + '    printf("%.17g\\n", u); }\n  return 0;\n}\n')
    exe = tmp_path / "philox"
    subprocess.run([nvcc, "-o", str(exe), str(src)], check=True, capture_output=True, timeout=300)
    got = [float(v) for v in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    want = [philox_uniform(seed, step, 2)[i] for seed in (0, 12345, 2**64 - 1) for step in (0, 7, 2**32 + 3)
            for i in range(2)]
    assert got == want


def test_unseeded_sampler_works():
    assert Sampler(SamplingParams(do_sample=True))(np.zeros((3, 7))).shape == (3,)


# ---------------------------------------------------------------------------------------------------------------
# bad logits and bad arguments


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nonfinite_logits_raise_naming_step_and_rows(bad, dtype):
    logits = np.zeros((4, 6), dtype=dtype)
    logits[1, 2] = bad
    logits[3, 0] = bad
    logits[2, 1] = NEG  # allowed
    for call in (lambda: sample(logits, SamplingParams(), step=7),
                 lambda: sample(logits, SAMPLED, np.zeros(4), step=7),
                 lambda: Sampler(SAMPLED)(logits, step=7),
                 lambda: check_finite(logits, 7)):
        with pytest.raises(NonFiniteLogitsError, match=r"step 7: batch rows \[1, 3\] contain NaN or \+inf") as info:
            call()
        assert isinstance(info.value, ValueError)
        assert info.value.step == 7 and info.value.rows == (1, 3)


def test_all_masked_row_raises():
    logits = np.array([[0.0, NEG], [NEG, NEG]])
    with pytest.raises(NonFiniteLogitsError, match=r"step 2: batch rows \[1\] are entirely -inf"):
        sample(logits, SAMPLED, [0.5, 0.5], step=2)


def test_message_without_step_can_be_prefixed():
    with pytest.raises(NonFiniteLogitsError, match=r"^non-finite logits: batch rows \[0\]") as info:
        filter_logits(np.array([[math.nan, 0.0]]), SAMPLED)
    assert info.value.step is None


def test_finite_and_partly_masked_logits_pass():
    check_finite(np.array([[0.0, NEG, 3.0], [NEG, NEG, -1e30]]), step=0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 0.0), ("temperature", -1.0), ("temperature", math.nan), ("temperature", math.inf),
        ("temperature", "1"),
        ("top_k", -1), ("top_k", 1.5), ("top_k", True),
        ("top_p", 0.0), ("top_p", 1.01), ("top_p", -0.5), ("top_p", math.nan),
        ("min_p", -0.01), ("min_p", 1.0), ("min_p", math.nan),
        ("seed", -1), ("seed", 1.5),
        ("do_sample", 1),
    ],
)
def test_invalid_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field} must be"):
        SamplingParams(**{field: value})


def test_valid_param_edges():
    SamplingParams(temperature=1e-6, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    SamplingParams(temperature=100, top_k=10**6, top_p=1e-9, min_p=0.999, seed=2**63)
    SamplingParams(top_k=np.int64(3), top_p=np.float32(0.5))


@pytest.mark.parametrize("logits", [np.zeros(5), np.zeros((2, 0)), np.zeros((1, 2, 3)), np.zeros((2, 3), dtype=int)])
def test_bad_logits_arrays(logits):
    with pytest.raises(ValueError, match="logits must be"):
        sample(logits, SamplingParams())


def test_uniform_must_match_batch():
    with pytest.raises(ValueError, match="needs `uniform`"):
        sample(np.zeros((2, 3)), SAMPLED)
    with pytest.raises(ValueError, match="3 draws for 2 batch rows"):
        sample(np.zeros((2, 3)), SAMPLED, np.zeros(3))


def test_numpy_arrays_use_numpy_without_importing_cupy():
    had_cupy = "cupy" in sys.modules
    assert array_module(np.zeros(3)) is np
    assert array_module([1.0]) is np
    sample(np.zeros((2, 3)), SAMPLED, np.zeros(2))
    assert ("cupy" in sys.modules) == had_cupy


# ---------------------------------------------------------------------------------------------------------------
# the loop's entry points: Sampler.pick (B = 1 host fast path) and sample_unchecked (device loops)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [320, 5000])
def test_pick_equals_sample(dtype, vocab):
    rng = np.random.default_rng(vocab)
    greedy, sampled = Sampler(SamplingParams()), Sampler(SamplingParams(do_sample=True, seed=3, top_k=50))
    for step in range(20):
        row = rng.normal(scale=3.0, size=vocab).astype(dtype)
        row[rng.integers(0, vocab, 5)] = NEG
        if step % 4 == 0:
            row[:] = -5.0  # a tie everywhere: the first index
        assert greedy.pick(row, step) == int(sample(row[None], SamplingParams())[0])
        want = sample(row[None], sampled.params, philox_uniform(3, step))[0]
        assert sampled.pick(row, step) == int(want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [320, 5000])
@pytest.mark.parametrize("bad", ["nan", "inf", "all-inf"])
def test_pick_raises_like_sample(dtype, vocab, bad):
    row = np.zeros(vocab, dtype)
    if bad == "all-inf":
        row[:] = NEG
    else:
        row[vocab // 2] = float(bad)
    for params in (SamplingParams(), SAMPLED):
        with pytest.raises(NonFiniteLogitsError, match="at step 5"):
            Sampler(params).pick(row, 5)


@pytest.mark.parametrize("params", [SamplingParams(), SAMPLED], ids=["greedy", "sampled"])
def test_sample_unchecked_marks_bad_rows_minus_one(params):
    logits = np.random.default_rng(8).normal(size=(5, 30))
    logits[1, 4] = math.nan
    logits[2, 0] = math.inf
    logits[3, :] = NEG  # nothing to pick: the same rule as check_finite
    logits[4, :3] = NEG  # masked tokens are fine
    u = philox_uniform(1, 0, 5)
    got = sample_unchecked(logits, params, u)
    assert got[1:4].tolist() == [-1, -1, -1]
    good = [0, 4]
    np.testing.assert_array_equal(got[good], sample(logits[good], params, u[good]))


# ---------------------------------------------------------------------------------------------------------------
# CuPy: the same functions on the GPU


@pytest.mark.cuda
def test_cupy_matches_numpy():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError:
        pytest.skip("CUDA unusable")
    logits = np.random.default_rng(6).normal(scale=2.0, size=(8, 1000)).astype(np.float16)
    logits[0, :10] = NEG
    uniform = np.random.default_rng(7).random(8)
    on_gpu = cupy.asarray(logits)
    assert array_module(on_gpu) is cupy
    np.testing.assert_array_equal(filter_logits(on_gpu, SAMPLED).get(), filter_logits(logits, SAMPLED))
    for params in (SamplingParams(), SAMPLED):
        ids = sample(on_gpu, params, cupy.asarray(uniform))
        assert isinstance(ids, cupy.ndarray) and ids.dtype == cupy.int64
        np.testing.assert_array_equal(ids.get(), sample(logits, params, uniform))
    first, second = Sampler(SamplingParams(do_sample=True, seed=1)), Sampler(SamplingParams(do_sample=True, seed=1))
    np.testing.assert_array_equal(first(on_gpu).get(), second(on_gpu).get())
    # Philox on the GPU: bit-identical uniforms, so host and device draws give the same tokens
    for seed in (0, 1, 2**32 + 5, 2**64 - 1):
        for step in (0, 3, 2**32 + 1):
            on_dev = Sampler(SamplingParams(do_sample=True, seed=seed)).uniform(step, 8, cupy)
            np.testing.assert_array_equal(on_dev.get(), philox_uniform(seed, step, 8))
    np.testing.assert_array_equal(first(on_gpu, 6).get(), Sampler(first.params)(logits, 6))
    # sample_unchecked on the GPU: same ids, -1 for bad rows
    worse = on_gpu.copy()
    worse[2, 7] = cupy.inf
    worse[3, :] = -cupy.inf
    for params in (SamplingParams(), SAMPLED):
        np.testing.assert_array_equal(sample_unchecked(worse, params, cupy.asarray(uniform)).get(),
                                      sample_unchecked(worse.get(), params, uniform))
    bad = on_gpu.copy()
    bad[5, 3] = cupy.nan
    with pytest.raises(NonFiniteLogitsError, match=r"step 4: batch rows \[5\]"):
        sample(bad, SAMPLED, uniform, step=4)
