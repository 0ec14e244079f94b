"""Images of any size and mode -> pixel_values, as a folder's image config says (with Pillow).

    ImageSpec: target height x width, resample filter, rescale factor, per-channel mean/std (what the
        config readers in `imageconfig` produce from an onnxruntime-extensions, Hugging Face or flat
        fixture config).
    load_image(x) -> PIL.Image: a path, a PIL.Image or a uint8 array (HxW, HxWx3, HxWx4), decoded now;
        a corrupt or unreadable file is a ProcessorError naming it.
    preprocess_image(x, spec) -> pixel_values [1, 3, H, W]: convert to RGB (any mode; RGBA drops alpha,
        L and P expand, as transformers' convert_rgb), resize to the spec's size with its filter
        (aspect ratio not kept: Gemma 3 without pan-and-scan), then x * rescale_factor and
        (x - mean) / std per channel in float32 (as transformers' rescale/normalize), CHW.
    demo_image(size): a deterministic synthetic RGB image for demos, tests and notebooks.

Not here: which config says what (imageconfig), prompts (chat, processor). No cropping, no
pan-and-scan, no EXIF rotation (transformers' Gemma 3 processor applies none either).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, UnidentifiedImageError

from .errors import ProcessorError

RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
# resource bound, checked before anything is decoded (issue 12)
MAX_IMAGE_SIDE = 8192
MAX_IMAGE_PIXELS = MAX_IMAGE_SIDE * MAX_IMAGE_SIDE  # 64 Mpx: 192 MB as RGB uint8, before any resize


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


@dataclass(frozen=True)
class ImageSpec:
    """pixel = (uint8 * rescale_factor - mean[c]) / std[c] on the image resized to height x width (RGB)."""

    height: int
    width: int
    rescale_factor: float
    mean: tuple
    std: tuple
    resample: str = "bilinear"
    source: str = "ImageSpec"  # the config it came from, for messages

    def __post_init__(self):
        def bad(name, value, accepted):
            raise ProcessorError(f"{self.source}: {name}={value!r} is invalid: {accepted}")

        for name in ("height", "width"):
            if not _is_int(getattr(self, name)) or getattr(self, name) <= 0:
                bad(name, getattr(self, name), "must be a positive integer (pixels)")
        if not _is_number(self.rescale_factor) or not self.rescale_factor > 0:
            bad("rescale_factor", self.rescale_factor, "must be a positive number (e.g. 1/255)")
        for name in ("mean", "std"):
            v = getattr(self, name)
            if not isinstance(v, (list, tuple)) or len(v) != 3 or not all(_is_number(x) for x in v):
                bad(name, v, "must be a list of 3 numbers (R, G, B)")
            object.__setattr__(self, name, tuple(float(x) for x in v))
        if not all(s > 0 for s in self.std):
            bad("std", self.std, "every channel must be > 0")
        if self.resample not in RESAMPLE:
            bad("resample", self.resample, f"allowed: {', '.join(RESAMPLE)}")

    @property
    def size(self) -> tuple[int, int]:
        return self.height, self.width


def check_image_pixels(w: int, h: int, where: str) -> None:
    """Refuse an image of more than MAX_IMAGE_PIXELS pixels before it is decoded or resized."""
    if w * h > MAX_IMAGE_PIXELS:
        raise ProcessorError(f"{where} is {w}x{h} = {w * h} pixels; at most {MAX_IMAGE_PIXELS} "
                             f"({MAX_IMAGE_SIDE}x{MAX_IMAGE_SIDE}) are accepted: downscale it first")


def _open(path: Path) -> Image.Image:
    if not path.exists():
        raise ProcessorError(f"image file {str(path)!r} does not exist")
    if not path.is_file():
        raise ProcessorError(f"image path {str(path)!r} is not a file")
    try:
        with warnings.catch_warnings():  # Pillow's bomb warning: our own bound below decides, in one message
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(path)
        with im:
            check_image_pixels(*im.size, f"image file {str(path)!r}")  # from the header, before decoding
            im.load()  # decode now: a truncated file fails here, not later
            return im.copy()
    except UnidentifiedImageError:
        raise ProcessorError(
            f"image file {str(path)!r} is not an image Pillow can read (unknown format or damaged header)") from None
    except Image.DecompressionBombError as e:
        raise ProcessorError(f"image file {str(path)!r} is too large to decode safely ({e})") from None
    except (OSError, SyntaxError, ValueError) as e:  # truncated / corrupt data, unreadable file
        raise ProcessorError(f"image file {str(path)!r} could not be read or decoded ({e})") from None


def load_image(image) -> Image.Image:
    """A decoded PIL image from a path (str or Path), a PIL.Image, or a uint8 array HxW / HxWx3 / HxWx4."""
    if isinstance(image, (str, Path)):
        return _open(Path(image))
    if isinstance(image, Image.Image):
        try:
            image.load()  # a lazily opened, truncated file fails here
        except (OSError, SyntaxError, ValueError) as e:
            name = getattr(image, "filename", "") or "<in memory>"
            raise ProcessorError(f"image {name!r} could not be decoded ({e})") from None
        if image.width == 0 or image.height == 0:
            raise ProcessorError(f"image is {image.width}x{image.height}; it has no pixels")
        check_image_pixels(image.width, image.height, "the image")
        return image
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise ProcessorError(f"image array has dtype {image.dtype}; only uint8 arrays are accepted")
        if not (image.ndim == 2 or (image.ndim == 3 and image.shape[2] in (3, 4))):
            raise ProcessorError(f"image array has shape {image.shape}; accepted: HxW (gray), HxWx3 (RGB), "
                                 "HxWx4 (RGBA)")
        if image.shape[0] == 0 or image.shape[1] == 0:
            raise ProcessorError(f"image array has shape {image.shape}; it has no pixels")
        check_image_pixels(image.shape[1], image.shape[0], "the image array")
        return Image.fromarray(np.ascontiguousarray(image))
    raise ProcessorError(f"image of type {type(image).__name__} is not accepted: pass a path (str or Path), "
                         "a PIL.Image, or a uint8 numpy array (HxW, HxWx3 or HxWx4)")


def rgb_pixels(image, spec: ImageSpec) -> np.ndarray:
    """uint8 [H, W, 3]: the image in RGB, resized to the spec's height x width with its filter."""
    im = load_image(image)
    if im.mode != "RGB":
        try:
            im = im.convert("RGB")
        except (OSError, ValueError) as e:
            raise ProcessorError(f"image mode {im.mode!r} cannot be converted to RGB ({e})") from None
    if im.size != (spec.width, spec.height):
        im = im.resize((spec.width, spec.height), resample=RESAMPLE[spec.resample])
    return np.asarray(im, dtype=np.uint8)


def preprocess_image(image, spec: ImageSpec, dtype=np.float32) -> np.ndarray:
    """One image -> pixel_values [1, 3, spec.height, spec.width] of `dtype` (float32 or float16).

    Rescale in float64 then float32, normalise in float32, as transformers' image processors do; cast last."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in _DTYPES:
        raise ProcessorError(f"dtype {dtype!r} is not accepted: use np.float32 or np.float16")
    arr = rgb_pixels(image, spec)  # [H, W, 3] uint8
    x = (arr.astype(np.float64) * spec.rescale_factor).astype(np.float32)
    x = (x - np.asarray(spec.mean, np.float32)) / np.asarray(spec.std, np.float32)  # broadcast over C
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None]).astype(dt, copy=False)  # [1, 3, H, W]


def demo_image(size: int, seed: int = 0) -> Image.Image:
    """A deterministic synthetic RGB image of size x size: a colour gradient with a few shapes.

    Same (size, seed) -> same pixels (numpy RandomState + Pillow's rasteriser; no downloads).
    """
    if not _is_int(size) or size <= 0:
        raise ProcessorError(f"demo_image size={size!r} is invalid: must be a positive integer")
    if not _is_int(seed) or seed < 0:
        raise ProcessorError(f"demo_image seed={seed!r} is invalid: must be a non-negative integer")
    rng = np.random.RandomState(seed)
    t = np.linspace(0.0, 1.0, size, dtype=np.float64)
    yy, xx = np.meshgrid(t, t, indexing="ij")  # [S, S] each
    phase = rng.uniform(0, 2 * np.pi, size=3)
    rgb = np.stack([0.5 + 0.5 * np.sin(2.0 * xx + 1.5 * yy + phase[c]) for c in range(3)], -1)
    img = Image.fromarray(np.round(rgb * 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(4):
        x0, y0 = rng.randint(0, max(1, size * 3 // 4), size=2)
        w, h = rng.randint(max(1, size // 8), max(2, size // 3), size=2)
        color = tuple(int(c) for c in rng.randint(0, 256, size=3))
        box = [int(x0), int(y0), int(x0 + w), int(y0 + h)]
        (draw.ellipse if rng.rand() < 0.5 else draw.rectangle)(box, fill=color)
    return img
