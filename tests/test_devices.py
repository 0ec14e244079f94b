"""vlmdecode.devices: accepted and rejected device spellings, the canonical string, Device values."""

import sys
import types

import pytest

from vlmdecode.devices import Device, cuda_device_count, parse_device


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("cpu", Device("cpu")),
        ("cuda", Device("cuda", 0)),
        ("cuda:0", Device("cuda", 0)),
        ("cuda:1", Device("cuda", 1)),
        ("cuda:7", Device("cuda", 7)),
        ("cuda:12", Device("cuda", 12)),
        ("cuda:01", Device("cuda", 1)),  # leading zeros allowed, dropped
    ],
)
def test_parse_accepts(spec, expected):
    assert parse_device(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "cudabad", "cuda:abc", "cuda:-1", "cuda:+1", "gpu", "", "CPU", "Cuda", "CUDA:0", " cuda", "cuda ", "cpu\n",
        "cuda:\n", "cuda:0\n", "cuda:", "cuda: 1", "cuda :1", "cuda:1.0", "cuda:1e3", "cuda:0x1", "cuda:1_0",
        "cuda:\u0663",  # ARABIC-INDIC DIGIT THREE: a Unicode digit, not ASCII
        "cpu:0", "cuda:0:0", "mps",
        None, 0, 1.0, b"cpu", ["cpu"], ("cuda", 0),
    ],
)
def test_parse_rejects(spec):
    with pytest.raises(ValueError) as info:
        parse_device(spec)
    message = str(info.value)
    assert repr(spec) in message
    for form in ("'cpu'", "'cuda'", "'cuda:N'"):
        assert form in message


def test_parse_passes_device_through():
    device = Device("cuda", 3)
    assert parse_device(device) is device


@pytest.mark.parametrize(("device", "text"), [(Device("cpu"), "cpu"), (Device("cuda"), "cuda:0"),
                                              (Device("cuda", 5), "cuda:5")])
def test_str_round_trip(device, text):
    assert str(device) == text
    assert parse_device(text) == device
    assert parse_device(str(device)) == device


def test_parse_cuda_is_cuda_0():
    assert str(parse_device("cuda")) == "cuda:0"


def test_properties():
    assert not Device("cpu").is_cuda
    assert Device("cuda", 2).is_cuda
    assert Device("cpu").ort_device == ("cpu", 0)
    assert Device("cuda", 2).ort_device == ("cuda", 2)


def test_equality_and_hash():
    assert Device("cuda", 1) == Device("cuda", 1)
    assert Device("cuda", 1) != Device("cuda", 0)
    assert Device("cuda", 0) != Device("cpu")
    assert Device("cuda") == Device("cuda", 0)
    assert len({Device("cuda"), parse_device("cuda:0"), parse_device("cuda")}) == 1


def test_frozen():
    device = Device("cuda", 1)
    with pytest.raises(AttributeError):
        device.index = 2


@pytest.mark.parametrize(("kind", "index"), [("gpu", 0), ("CPU", 0), ("cuda", -1), ("cuda", 1.0), ("cuda", True),
                                             ("cuda", "1"), ("cpu", 1)])
def test_device_rejects(kind, index):
    with pytest.raises(ValueError):
        Device(kind, index)


def test_cuda_device_count_is_a_count():
    count = cuda_device_count()
    assert isinstance(count, int) and count >= 0


def test_cuda_device_count_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # a None entry makes `import cupy` raise ImportError
    assert cuda_device_count() == 0


def test_cuda_device_count_when_cuda_fails(monkeypatch):
    class CUDARuntimeError(RuntimeError):
        pass

    def no_device():
        raise CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    runtime = types.SimpleNamespace(getDeviceCount=no_device, CUDARuntimeError=CUDARuntimeError)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert cuda_device_count() == 0
    runtime.getDeviceCount = lambda: 2
    assert cuda_device_count() == 2
