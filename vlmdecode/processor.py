"""Turn prompts and images into model inputs, and token ids back into text, for Gemma-3-style VLMs.

What it is:
    - `ImageSpec`: the image preprocessing contract of a model folder (processor_config.json).
    - `preprocess_image`: one image -> pixel_values [1, 3, S, S] (rescale, normalise, CHW).
    - `Processor`: tokenizer.json + processor_config.json + genai_config.json of one model folder;
      encodes prompts in Gemma's chat format with the image placeholders expanded, checks that the
      image tokens match the image features, decodes ids (whole or streamed with `StreamDecoder`).
    - `demo_image`: a deterministic synthetic RGB image for demos, tests and notebooks.

What it is not:
    - Not a Hugging Face processor: it reads only the flat processor_config.json that
      `vlmdecode.fixture` writes, not Hugging Face's preprocessor_config.json.
    - Not a lenient image loader. Images must already be RGB; any other mode is an error rather than a
      silent conversion. Images must be spec.size x spec.size unless the caller passes resize=True
      (then: bilinear to a square, aspect ratio not kept -- what Gemma 3's processor does without
      pan-and-scan). No pan-and-scan, no cropping, no EXIF rotation.
    - No model is run here; nothing is downloaded.

Every bad input raises `ProcessorError` (a ValueError) naming what was wrong and what is accepted.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, UnidentifiedImageError

__all__ = [
    "GENAI_CONFIG",
    "PROCESSOR_CONFIG",
    "TOKENIZER_JSON",
    "ImageSpec",
    "Processor",
    "ProcessorError",
    "StreamDecoder",
    "demo_image",
    "preprocess_image",
]

PROCESSOR_CONFIG = "processor_config.json"
GENAI_CONFIG = "genai_config.json"
TOKENIZER_JSON = "tokenizer.json"

# Gemma chat-format turn markers. Checked against the tokenizer on first use with chat_template=True.
START_OF_TURN = "<start_of_turn>"
END_OF_TURN = "<end_of_turn>"

_RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
# resource bounds, checked before anything is decoded or tokenised (issue 12)
MAX_IMAGE_SIDE = 8192
MAX_IMAGE_PIXELS = MAX_IMAGE_SIDE * MAX_IMAGE_SIDE  # 64 Mpx: 192 MB as RGB uint8, before any resize
MAX_PROMPT_CHARS_PER_TOKEN = 64  # a prompt longer than 64 x context_length characters cannot fit


class ProcessorError(ValueError):
    """A prompt, image, id sequence or config file that the processor cannot accept."""


# ---- image spec ------------------------------------------------------------------------------


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


# processor_config.json key -> (ImageSpec attribute, required)
_SPEC_JSON_FIELDS = {
    "image_size": ("size", True),
    "rescale_factor": ("rescale_factor", True),
    "image_mean": ("mean", True),
    "image_std": ("std", True),
    "mode": ("mode", True),
    "mm_tokens_per_image": ("tokens_per_image", True),
    "image_token_id": ("image_token_id", True),
    "boi_token": ("boi_token", True),
    "eoi_token": ("eoi_token", True),
    "image_token": ("image_token", True),
    "resample": ("resample", False),  # default "bilinear"
}


@dataclass(frozen=True)
class ImageSpec:
    """How a model wants its images: a square of `size` pixels, RGB, rescaled then normalised.

    pixel = (uint8 * rescale_factor - mean[c]) / std[c], per channel c in RGB order.
    Each image becomes `tokens_per_image` soft tokens (`image_token`, id `image_token_id`) between
    `boi_token` and `eoi_token` in the prompt.
    """

    size: int
    rescale_factor: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    mode: str
    tokens_per_image: int
    image_token_id: int
    boi_token: str
    eoi_token: str
    image_token: str = "<image_soft_token>"
    resample: str = "bilinear"

    def __post_init__(self):
        def bad(name, value, accepted):
            err = ProcessorError(f"ImageSpec.{name}={value!r} is invalid: {accepted}")
            err.field = name  # from_dict maps it back to the json key
            raise err

        if not _is_int(self.size) or self.size <= 0:
            bad("size", self.size, "must be a positive integer (pixels per side)")
        if not _is_number(self.rescale_factor) or not self.rescale_factor > 0:
            bad("rescale_factor", self.rescale_factor, "must be a positive number (e.g. 1/255)")
        for name in ("mean", "std"):
            v = getattr(self, name)
            if not isinstance(v, (list, tuple)) or len(v) != 3 or not all(_is_number(x) for x in v):
                bad(name, v, "must be a list of 3 numbers (R, G, B)")
            object.__setattr__(self, name, tuple(float(x) for x in v))
        if not all(s > 0 for s in self.std):
            bad("std", self.std, "every channel must be > 0")
        if self.mode != "RGB":
            bad("mode", self.mode, "only 'RGB' is supported")
        if not _is_int(self.tokens_per_image) or self.tokens_per_image <= 0:
            bad("tokens_per_image", self.tokens_per_image, "must be a positive integer")
        if not _is_int(self.image_token_id) or self.image_token_id < 0:
            bad("image_token_id", self.image_token_id, "must be a non-negative integer")
        for name in ("boi_token", "eoi_token", "image_token"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                bad(name, getattr(self, name), "must be a non-empty string")
        if len({self.boi_token, self.eoi_token, self.image_token}) != 3:
            bad("image_token", self.image_token, "boi_token, eoi_token and image_token must differ")
        if self.resample not in _RESAMPLE:
            bad("resample", self.resample, f"allowed: {', '.join(_RESAMPLE)}")

    @classmethod
    def from_dict(cls, d: dict, source: str = PROCESSOR_CONFIG) -> ImageSpec:
        """From the fields of processor_config.json; errors name `source` and the json field."""
        if not isinstance(d, dict):
            raise ProcessorError(f"{source}: expected a JSON object, got {type(d).__name__}")
        kwargs = {}
        for key, (attr, required) in _SPEC_JSON_FIELDS.items():
            if key not in d:
                if required:
                    raise ProcessorError(f"{source}: missing field '{key}'")
                continue
            kwargs[attr] = d[key]
        try:
            return cls(**kwargs)
        except ProcessorError as e:
            # name the json field, not only the dataclass attribute
            key = next((k for k, (a, _) in _SPEC_JSON_FIELDS.items() if a == getattr(e, "field", None)), "?")
            raise ProcessorError(f"{source}: field '{key}': {e}") from None

    @classmethod
    def from_json(cls, path: str | Path) -> ImageSpec:
        return cls.from_dict(_read_json(path), source=str(path))



def _read_json(path: str | Path):
    path = Path(path)
    if not path.is_file():
        raise ProcessorError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProcessorError(f"{path}: not valid JSON ({e})") from None


# ---- images ----------------------------------------------------------------------------------


def check_image_pixels(w: int, h: int, where: str) -> None:
    """Refuse an image of more than MAX_IMAGE_PIXELS pixels before it is decoded or resized."""
    if w * h > MAX_IMAGE_PIXELS:
        raise ProcessorError(f"{where} is {w}x{h} = {w * h} pixels; at most {MAX_IMAGE_PIXELS} "
                             f"({MAX_IMAGE_SIDE}x{MAX_IMAGE_SIDE}) are accepted: downscale it first")


def _open_image(path: Path) -> Image.Image:
    """Open and fully decode an image file; every failure becomes a ProcessorError naming the path."""
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
            im.load()  # decode now: a truncated file fails here, not later in np.asarray
            return im.copy()
    except UnidentifiedImageError:
        raise ProcessorError(
            f"image file {str(path)!r} is not an image Pillow can read (unknown format or damaged header)"
        ) from None
    except Image.DecompressionBombError as e:
        raise ProcessorError(f"image file {str(path)!r} is too large to decode safely ({e})") from None
    except (OSError, SyntaxError, ValueError) as e:  # truncated / corrupt data, unreadable file
        raise ProcessorError(f"image file {str(path)!r} could not be read or decoded ({e})") from None


def _as_rgb_array(image, size: int, resize: bool, resample: str) -> np.ndarray:
    """Any accepted image -> uint8 array [size, size, 3] (RGB), or ProcessorError."""
    if isinstance(image, (str, Path)):
        image = _open_image(Path(image))
    if isinstance(image, Image.Image):
        if image.mode != "RGB":
            raise ProcessorError(
                f"image mode is {image.mode!r}; only 'RGB' is accepted. Convert it first, e.g. "
                f"img.convert('RGB') (for 'RGBA' this drops alpha; composite on a background to keep it)"
            )
        try:
            image.load()  # a lazily opened, truncated file fails here
        except (OSError, SyntaxError, ValueError) as e:
            name = getattr(image, "filename", "") or "<in memory>"
            raise ProcessorError(f"image {name!r} could not be decoded ({e})") from None
        w, h = image.size
        check_image_pixels(w, h, "the image")
    elif isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise ProcessorError(f"image array has dtype {image.dtype}; only uint8 HxWx3 (RGB) arrays are accepted")
        if image.ndim != 3 or image.shape[2] != 3:
            raise ProcessorError(
                f"image array has shape {image.shape}; only HxWx3 (RGB) uint8 arrays are accepted "
                f"(grayscale HxW: np.stack([a] * 3, -1); RGBA HxWx4: a[..., :3])"
            )
        h, w = image.shape[:2]
        check_image_pixels(w, h, "the image array")
        if h == 0 or w == 0:
            raise ProcessorError(f"image array has shape {image.shape}; it has no pixels")
    else:
        raise ProcessorError(
            f"image of type {type(image).__name__} is not accepted: pass a path (str or Path), "
            f"a PIL.Image in mode 'RGB', or a uint8 numpy array HxWx3"
        )
    if (w, h) != (size, size):
        if not resize:
            raise ProcessorError(
                f"image is {w}x{h} (WxH); the model expects {size}x{size}. Pass resize=True to resize it "
                f"({resample}, aspect ratio not kept) or resize it yourself"
            )
        if isinstance(image, np.ndarray):
            image = Image.fromarray(image)  # uint8 HxWx3 -> mode RGB
        image = image.resize((size, size), resample=_RESAMPLE[resample])
    arr = np.asarray(image, dtype=np.uint8)  # [S, S, 3]
    assert arr.shape == (size, size, 3), arr.shape
    return arr


def preprocess_image(image, spec: ImageSpec, dtype=np.float32, resize: bool = False) -> np.ndarray:
    """One image -> pixel_values [1, 3, spec.size, spec.size] of `dtype` (float32 or float16).

    `image`: a path (str or Path), a PIL.Image in mode 'RGB', or a uint8 numpy array HxWx3 (RGB).
    Policy: the mode must be RGB (no silent conversion); the size must be spec.size x spec.size
    unless resize=True, which resizes with spec.resample (bilinear) to a square, ignoring aspect.
    Then x * rescale_factor, (x - mean) / std per channel, HWC -> CHW, batch dim; computed in float32,
    cast last.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in _DTYPES:
        raise ProcessorError(f"dtype {dtype!r} is not accepted: use np.float32 or np.float16")
    arr = _as_rgb_array(image, spec.size, resize, spec.resample)  # [S, S, 3] uint8
    x = arr.astype(np.float32) * np.float32(spec.rescale_factor)
    x = (x - np.asarray(spec.mean, np.float32)) / np.asarray(spec.std, np.float32)  # broadcast over C
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None]).astype(dt, copy=False)  # [1, 3, S, S]


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


# ---- text ------------------------------------------------------------------------------------


def _as_id_list(ids, what: str = "ids") -> list[int]:
    """1-D ids (list, tuple, array; or an array [1, S]) -> list of non-negative Python ints."""
    arr = np.asarray(ids)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1:
        raise ProcessorError(f"{what} must be 1-D (or [1, S]); got shape {arr.shape}")
    if arr.size == 0:
        return []
    if not np.issubdtype(arr.dtype, np.integer):
        raise ProcessorError(f"{what} must be integers; got dtype {arr.dtype}")
    if arr.min() < 0:
        raise ProcessorError(f"{what} contain a negative id ({int(arr.min())}); token ids are >= 0")
    return [int(i) for i in arr]


class StreamDecoder:
    """Incremental detokenizer: feed ids one at a time, get back text only once it is complete UTF-8.

    A byte-level tokenizer may split one character across tokens (ö is 2 byte tokens, an emoji 4);
    decoding them one by one would produce U+FFFD. We keep a small window of ids, decode
    ids[prefix:] and ids[prefix:read], and emit the difference only when it does not end in U+FFFD
    (an incomplete sequence). The window restarts at the last emitted token, so decoders that strip a
    leading space at the start of a decode (SentencePiece) still join correctly. `flush()` emits any
    rest (an incomplete tail becomes U+FFFD). Concatenated pieces == Processor.decode(all ids).
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self.reset()

    def reset(self) -> None:
        self._ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # ids before this were emitted
        self.text = ""  # everything emitted so far

    def _decode(self, ids) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip)

    def put(self, token_id) -> str:
        """Add one id; return the newly completed text ('' while a character is incomplete)."""
        (tid,) = _as_id_list([token_id], "token_id")
        self._ids.append(tid)
        before = self._decode(self._ids[self._prefix:self._read])
        now = self._decode(self._ids[self._prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            piece = now[len(before):]
            self._prefix, self._read = self._read, len(self._ids)
            self.text += piece
            return piece
        return ""

    def flush(self) -> str:
        """Emit whatever is pending (incomplete bytes decode to U+FFFD). Call once at the end."""
        before = self._decode(self._ids[self._prefix:self._read])
        now = self._decode(self._ids[self._prefix:])
        piece = now[len(before):]
        self._prefix = self._read = len(self._ids)
        self.text += piece
        return piece


class Processor:
    """Tokenizer, image spec and special ids of one model folder.

    Build with `Processor.load(model_dir)`. Ids: `bos_token_id`, `eos_token_ids` (tuple: Gemma ends
    a turn with <end_of_turn> as well as <eos>), `pad_token_id`, `image_token_id`; `context_length`.
    """

    def __init__(self, tokenizer, spec: ImageSpec, bos_token_id: int, eos_token_ids, pad_token_id: int,
                 context_length: int, source: str = "Processor"):
        self.tokenizer = tokenizer
        self.spec = spec
        self.bos_token_id = int(bos_token_id)
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self.pad_token_id = int(pad_token_id)
        self.context_length = int(context_length)
        self.image_token_id = spec.image_token_id
        self._source = source
        if not self.eos_token_ids:
            raise ProcessorError(f"{source}: eos_token_ids is empty; give at least one id")
        if self.context_length <= 0:
            raise ProcessorError(f"{source}: context_length={self.context_length} must be > 0")
        self._check_tokens()

    # ---- loading ------------------------------------------------------------------------
    @classmethod
    def load(cls, model_dir: str | Path) -> Processor:
        """Read tokenizer.json, processor_config.json and genai_config.json from `model_dir`."""
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise ProcessorError(f"model folder {str(model_dir)!r} does not exist or is not a folder")
        tok_path = model_dir / TOKENIZER_JSON
        if not tok_path.is_file():
            raise ProcessorError(f"{tok_path}: file not found (the model folder needs a tokenizers tokenizer.json)")
        try:
            tokenizer = Tokenizer.from_file(str(tok_path))
        except Exception as e:  # noqa: BLE001 -- tokenizers raises a bare Exception on malformed files
            raise ProcessorError(f"{tok_path}: not a tokenizer.json the tokenizers library can read ({e})") from None
        spec = ImageSpec.from_json(model_dir / PROCESSOR_CONFIG)
        gpath = model_dir / GENAI_CONFIG
        g = _read_json(gpath)
        model = g.get("model") if isinstance(g, dict) else None
        if not isinstance(model, dict):
            raise ProcessorError(f"{gpath}: missing object 'model'")

        def int_field(name):
            if name not in model:
                raise ProcessorError(f"{gpath}: missing field 'model.{name}'")
            v = model[name]
            if not _is_int(v) or v < 0:
                raise ProcessorError(f"{gpath}: field 'model.{name}'={v!r} must be a non-negative integer")
            return int(v)

        bos, pad, ctx = int_field("bos_token_id"), int_field("pad_token_id"), int_field("context_length")
        if ctx == 0:
            raise ProcessorError(f"{gpath}: field 'model.context_length' must be > 0")
        if "eos_token_id" not in model:
            raise ProcessorError(f"{gpath}: missing field 'model.eos_token_id'")
        eos = model["eos_token_id"]
        eos = [eos] if _is_int(eos) else eos
        if not isinstance(eos, list) or not eos or not all(_is_int(i) and i >= 0 for i in eos):
            raise ProcessorError(
                f"{gpath}: field 'model.eos_token_id'={model['eos_token_id']!r} must be an integer "
                f"or a non-empty list of integers"
            )
        # a text-only model (gemma3_text) has no image_token_id; a VLM's must agree with processor_config
        image_id = int_field("image_token_id") if "image_token_id" in model else spec.image_token_id
        if image_id != spec.image_token_id:
            raise ProcessorError(
                f"image_token_id disagrees: {gpath} says {image_id}, "
                f"{model_dir / PROCESSOR_CONFIG} says {spec.image_token_id}"
            )
        return cls(tokenizer, spec, bos, eos, pad, ctx, source=str(model_dir))

    def _check_tokens(self) -> None:
        """The image tokens must be single added tokens with the ids the configs name."""
        s = self.spec
        for text in (s.boi_token, s.eoi_token, s.image_token):
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
            if len(ids) != 1:
                raise ProcessorError(
                    f"{self._source}: the tokenizer splits {text!r} into {len(ids)} tokens; "
                    f"it must be a single added (special) token"
                )
        got = self.tokenizer.token_to_id(s.image_token)
        if got != s.image_token_id:
            raise ProcessorError(
                f"{self._source}: image_token_id is {s.image_token_id} but the tokenizer maps "
                f"{s.image_token!r} to {got}"
            )
        if self.tokenizer.id_to_token(self.bos_token_id) is None:
            raise ProcessorError(f"{self._source}: bos_token_id {self.bos_token_id} is not in the tokenizer")

    # ---- prompts ------------------------------------------------------------------------
    def expand_prompt(self, prompt: str, n_images: int, chat_template: bool = True) -> str:
        """The prompt as text, with image placeholders expanded and (optionally) the chat format.

        chat_template=True:  <bos><start_of_turn>user\\n{content}<end_of_turn>\\n<start_of_turn>model\\n
        chat_template=False: <bos>{content}
        The placeholder is spec.boi_token ("<start_of_image>"); each becomes
        boi + image_token * tokens_per_image + eoi. With n_images == 1 and no placeholder in the
        prompt, "<start_of_image>\\n" is prepended (the image comes before the question).
        """
        s = self.spec
        if not isinstance(prompt, str):
            raise ProcessorError(f"prompt must be a str; got {type(prompt).__name__}")
        limit = MAX_PROMPT_CHARS_PER_TOKEN * self.context_length
        if len(prompt) > limit:
            raise ProcessorError(f"the prompt is {len(prompt)} characters; at most {limit} "
                                 f"({MAX_PROMPT_CHARS_PER_TOKEN} x context_length {self.context_length}) are "
                                 "tokenised")
        if not _is_int(n_images) or n_images < 0:
            raise ProcessorError(f"n_images={n_images!r} is invalid: must be an integer >= 0")
        if s.image_token in prompt:
            raise ProcessorError(
                f"the prompt contains the literal image soft token {s.image_token!r}; it is reserved for "
                f"image features (they would no longer line up). Mark an image with {s.boi_token!r} instead"
            )
        n_placeholders = prompt.count(s.boi_token)
        if n_images == 1 and n_placeholders == 0:
            prompt = s.boi_token + "\n" + prompt
            n_placeholders = 1
        if n_placeholders != n_images:
            raise ProcessorError(
                f"the prompt has {n_placeholders} image placeholder(s) {s.boi_token!r} but {n_images} image(s) "
                f"were given; they must match (a single image without a placeholder is placed first)"
            )
        content = prompt.replace(s.boi_token, s.boi_token + s.image_token * s.tokens_per_image + s.eoi_token)
        bos = self.tokenizer.id_to_token(self.bos_token_id)
        if not chat_template:
            return bos + content
        for t in (START_OF_TURN, END_OF_TURN):
            # in the vocabulary but not an added token, it would be split into pieces: a wrong prompt
            if len(self.tokenizer.encode(t, add_special_tokens=False).ids) != 1:
                raise ProcessorError(
                    f"{self._source}: the tokenizer has no {t!r} token (a single added token) needed by the Gemma "
                    f"chat format; use chat_template=False"
                )
        return f"{bos}{START_OF_TURN}user\n{content}{END_OF_TURN}\n{START_OF_TURN}model\n"

    def encode_prompt(self, prompt: str, n_images: int, chat_template: bool = True) -> np.ndarray:
        """Prompt -> input_ids int64 [1, S]. See `expand_prompt` for the format and placeholder rules."""
        text = self.expand_prompt(prompt, n_images, chat_template)
        # the special tokens are added tokens, so each is one id; no post-processor adds another <bos>
        ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)[None]
        self.check_image_tokens(ids, n_images * self.spec.tokens_per_image)
        if ids.shape[1] > self.context_length:
            raise ProcessorError(
                f"the prompt is {ids.shape[1]} tokens; the model's context_length is {self.context_length}"
            )
        return ids  # [1, S]

    def check_image_tokens(self, input_ids, n_feature_rows: int) -> None:
        """The number of image soft tokens in input_ids must equal the image feature rows to insert.

        n_feature_rows = images * tokens_per_image (image_features [I, tokens_per_image, H]).
        """
        n = int(np.count_nonzero(np.asarray(input_ids) == self.image_token_id))
        if n != n_feature_rows:
            raise ProcessorError(
                f"input_ids hold {n} image tokens (id {self.image_token_id}) but there are {n_feature_rows} image "
                f"feature rows (images x {self.spec.tokens_per_image} per image); they must be equal"
            )

    # ---- images -------------------------------------------------------------------------
    def preprocess(self, images, dtype=np.float32, resize: bool = False) -> np.ndarray:
        """A list of images -> pixel_values [N, 3, S, S] (N may be 0). See `preprocess_image`."""
        if not isinstance(images, (list, tuple)):
            images = [images]
        s = self.spec.size
        if not images:
            return preprocess_image(np.zeros((s, s, 3), np.uint8), self.spec, dtype)[:0]  # [0, 3, S, S]
        return np.concatenate([preprocess_image(im, self.spec, dtype, resize) for im in images], axis=0)

    # ---- decoding -----------------------------------------------------------------------
    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """ids (1-D, or [1, S]) -> text. Ids the tokenizer does not know (a model's padded vocab
        rows) decode to nothing, as in the tokenizers library."""
        return self.tokenizer.decode(_as_id_list(ids), skip_special_tokens=skip_special_tokens)

    def stream_decoder(self, skip_special_tokens: bool = True) -> StreamDecoder:
        return StreamDecoder(self.tokenizer, skip_special_tokens)

    def is_eos(self, token_id: int) -> bool:
        return int(token_id) in self.eos_token_ids
