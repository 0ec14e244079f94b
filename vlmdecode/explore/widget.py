"""The interactive side of the notebooks: the ipywidgets explorer that streams one generation, the
tiny-fixture pipelines it runs, and live per-step times of one generation per available mode.

    explorer(make_pipe)        preset/device/mode/tokens pickers, a Run button, streamed tokens, a step plot
    fixture_pipes(root)        make_pipe(preset, device, mode) over the tiny fixtures
    live_step_times(root)      per-step ms of one generation per mode available here

Timings here are live and machine-dependent; recorded numbers come from explore.results.
"""

from __future__ import annotations

from pathlib import Path

import ipywidgets as w
import numpy as np
import pandas as pd
from IPython.display import display

import vlmdecode

from ..devices import gpu_available
from ..fixture.config import preset
from ..plots import plot_step_times
from ..processor import demo_image


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


class Explorer(w.VBox):
    """The explorer's box; its text form (what a notebook shows before its widgets load) says what it is."""

    def __repr__(self) -> str:
        return "explorer: preset, device, mode and max-tokens pickers with a Run button (run this cell to use it)"


def explorer(make_pipe, presets=("tiny",), devices=None, modes=None, image=None,
             prompt: str = "Describe the image.") -> Explorer:
    """An ipywidgets box: preset, device, mode, max tokens, a Run button, the tokens and a live plot.

    make_pipe(preset, device, mode) -> Pipeline. image: None (each preset's `demo_image` at its image size) or
    one image, and then only the presets of that image size are offered. "cuda" is offered only when
    `gpu_available()`. Nothing runs until the button is clicked (`box.run()` clicks it programmatically); while
    a run is in progress the button is disabled. A failing run shows one line, `error: <type>: <message>`, in
    the box's output area and keeps the exception in `box.error`. `box.records` holds the last run's steps.
    """
    import matplotlib.pyplot as plt

    if image is not None:
        side = np.asarray(image).shape[:2]
        fit = [p for p in presets if (preset(p).image_size,) * 2 == tuple(side)]
        if not fit:
            raise ValueError(f"image of {side[1]}x{side[0]} px fits none of the presets {list(presets)} "
                             f"(image sizes {[preset(p).image_size for p in presets]}); pass image=None to use "
                             "each preset's demo image")
        presets = fit
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
    box = Explorer([w.HBox([preset_w, device_w, mode_w, tokens_w, button]), text, out])
    box.records, box.error = [], None

    def show_steps():
        fig = plot_step_times([r.seconds * 1e3 for r in box.records],
                              title=f"{preset_w.value} {device_w.value} {mode_w.value}")
        with out:
            out.clear_output(wait=True)
            display(fig)  # (plt.show() draws nothing from a button callback: no cell is executing)
        plt.close(fig)

    def run(_=None):
        box.records, box.error = [], None
        button.disabled, button.description = True, "Running..."
        out.outputs = ()
        text.value = "<i>running</i>"
        try:
            pipe = make_pipe(preset_w.value, device_w.value, mode_w.value)
            img = demo_image(preset(preset_w.value).image_size) if image is None else image
            for rec in pipe.stream(prompt, image=img, max_new_tokens=tokens_w.value, stop=()):
                box.records.append(rec)
                text.value = "tokens: " + " ".join(str(r.token) for r in box.records)
                if len(box.records) % 8 == 0 and len(box.records) < tokens_w.value:
                    show_steps()
            show_steps()
        except Exception as e:  # noqa: BLE001  (shown in the box: a notebook callback's traceback goes to a log)
            box.error = e
            text.value = "<i>run failed</i>"
            lines = str(e).strip().splitlines()
            out.outputs = ()  # (set directly, not through `with out:`, so that it also works outside a kernel)
            out.append_stdout(f"error: {type(e).__name__}: {lines[0] if lines else ''}\n")
        finally:
            button.disabled, button.description = False, "Run"
        return box.records

    button.on_click(run)
    box.run = run
    box.widgets = {"preset": preset_w, "device": device_w, "mode": mode_w, "tokens": tokens_w, "button": button,
                   "text": text, "output": out}
    return box


def live_step_times(root, max_new_tokens: int = 48, prompt: str = "Describe the image.") -> pd.DataFrame:
    """Per-step milliseconds of one generation per mode available here (cpu resident; cuda modes with a GPU)."""
    from ..fixture.cache import ensure_fixture

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
