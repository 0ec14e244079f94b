"""The interactive side of the notebooks: the ipywidgets explorer that streams one generation, the
tiny-fixture pipelines it runs, and live per-step times of one generation per available mode.

    explorer(make_pipe)        preset/device/mode/tokens pickers, a Run button, streamed tokens, a step plot
    fixture_pipes(root)        make_pipe(preset, device, mode) over the tiny fixtures
    live_step_times(root)      per-step ms of one generation per mode available here

Timings here are live and machine-dependent; recorded numbers come from explore.results.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

import vlmdecode

from ..devices import gpu_available
from ..plots import plot_step_times


def fixture_pipes(root):
    """make_pipe(preset, device, mode) for `explorer`: tiny fixtures under `root` (fp32 on CPU, fp16 on CUDA)."""
    from ..fixture.cache import ensure_fixture

    cache = {}

    def make_pipe(preset: str, device: str, mode: str):
        dtype = "fp32" if device == "cpu" else "fp16"
        key = (preset, device, mode)
        if key not in cache:
            cache[key] = vlmdecode.load(ensure_fixture(preset, "gqa", dtype, root=Path(root)), device,
                                        None if device == "cpu" else mode)
        return cache[key]

    return make_pipe


def explorer(make_pipe, presets=("tiny",), devices=None, modes=None, image=None,
             prompt: str = "Describe the image."):
    """An ipywidgets box: preset, device, mode, max tokens, a Run button, the tokens and a live plot.

    make_pipe(preset, device, mode) -> Pipeline. Nothing runs until the button is clicked
    (`box.run()` clicks it programmatically). Returns the VBox; `box.records` holds the last run.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt

    devices = list(devices or (["cpu", "cuda"] if gpu_available() else ["cpu"]))
    modes = dict(modes or {"cpu": ["resident"], "cuda": ["eager", "graph", "device"]})
    preset_w = w.Dropdown(options=list(presets), description="preset")
    device_w = w.Dropdown(options=devices, description="device")
    mode_w = w.Dropdown(options=modes[devices[0]], description="mode")
    tokens_w = w.IntSlider(value=16, min=1, max=64, description="max tokens")
    button = w.Button(description="Run", button_style="primary")
    text = w.HTML(value="<i>press Run</i>")
    out = w.Output()

    def on_device(change):
        mode_w.options = modes[change["new"].split(":")[0]]

    device_w.observe(on_device, names="value")
    box = w.VBox([w.HBox([preset_w, device_w, mode_w, tokens_w, button]), text, out])
    box.records = []

    def run(_=None):
        pipe = make_pipe(preset_w.value, device_w.value, mode_w.value)
        box.records = []
        out.clear_output(wait=True)
        for rec in pipe.stream(prompt, image=image, max_new_tokens=tokens_w.value, stop=()):
            box.records.append(rec)
            text.value = "tokens: " + " ".join(str(r.token) for r in box.records)
            if len(box.records) % 4 == 0 or len(box.records) == tokens_w.value:
                with out:
                    out.clear_output(wait=True)
                    plot_step_times([r.seconds * 1e3 for r in box.records],
                                    title=f"{preset_w.value} {device_w.value} {mode_w.value}")
                    plt.show()
        return box.records

    button.on_click(run)
    box.run = run
    box.widgets = {"preset": preset_w, "device": device_w, "mode": mode_w, "tokens": tokens_w, "button": button}
    return box


def summary_stats(values) -> dict:
    """median/min/max of a list of numbers (empty -> NaNs)."""
    v = [float(x) for x in values]
    if not v:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"median": statistics.median(v), "min": min(v), "max": max(v)}


def live_step_times(root, max_new_tokens: int = 48, prompt: str = "Describe the image.") -> pd.DataFrame:
    """Per-step milliseconds of one generation per mode available here (cpu resident; cuda modes with a GPU)."""
    from ..fixture.cache import ensure_fixture
    from ..processor import demo_image

    runs = [("cpu", "resident", "fp32")]
    if gpu_available():
        runs += [("cuda", m, "fp16") for m in ("eager", "graph", "device")]
    rows = []
    for device, mode, dtype in runs:
        pipe = vlmdecode.load(ensure_fixture("tiny", "gqa", dtype, root=Path(root)), device,
                              None if device == "cpu" else mode)
        r = pipe.generate(prompt, image=demo_image(32), max_new_tokens=max_new_tokens, stop=())
        rows += [{"label": f"{device} {mode}", "step": s.step, "ms": s.seconds * 1e3} for s in r.steps]
    return pd.DataFrame(rows)
