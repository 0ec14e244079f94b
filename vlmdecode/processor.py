"""Prompts and images in, token ids out, and ids back to text, for one model folder.

    Processor.load(model_dir, folder=None): tokenizer.json (+ tokenizer_config.json), the special ids
        and context length of genai_config.json (read by `modelfolder`, the one reader), the chat
        template (`chat`), and for a VLM folder its image config (`imageconfig`) and image tokens.
        A text folder needs no image config.
    encode_prompt(prompt, n_images) -> input_ids [1, S]: the folder's chat template over
        [{"role": "user", "content": ...}] (images as {"type": "image"} items before the text, or
        wherever the prompt has the image placeholder), then each placeholder replaced by Gemma 3's
        image sequence, tokenized without adding special tokens (the template writes <bos>): the ids
        transformers' Gemma3Processor gives for the same text and images.
    preprocess(images) -> pixel_values [N, 3, H, W] (`images`); decode / StreamDecoder: ids -> text.

Image tokens: boi / eoi / image soft token from the flat fixture config, else tokenizer_config.json
(boi_token, eoi_token, image_token: Gemma 3's), each a single token; the image token's id must be
genai_config.json's model.image_token_id. Tokens per image: the config's, checked against the vision
model's output shape (or taken from it when the config has none). Every bad input raises
`ProcessorError` naming what was wrong and what is accepted. No model is run here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .chat import ChatTemplate, image_sequence
from .errors import ProcessorError
from .imageconfig import ImageConfig, read_image_config, read_json
from .images import MAX_IMAGE_PIXELS, ImageSpec, demo_image, preprocess_image
from .modelfolder import ModelFolder, ModelFolderError, TokenIds, read_config, token_ids

__all__ = ["MAX_IMAGE_PIXELS", "Processor", "ProcessorError", "StreamDecoder", "ImageSpec", "demo_image",
           "preprocess_image", "TOKENIZER_JSON", "TOKENIZER_CONFIG"]

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
MAX_PROMPT_CHARS_PER_TOKEN = 64  # a prompt longer than 64 x context_length characters cannot fit (issue 12)


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
    """Tokenizer, chat template, image config and special ids of one model folder (`Processor.load`).

    Ids: `bos_token_id`, `eos_token_ids` (tuple: Gemma ends a turn with <end_of_turn> as well as <eos>),
    `pad_token_id`, `image_token_id` (None for a text model); `context_length`; `spec` (ImageSpec or None),
    `tokens_per_image`.
    """

    def __init__(self, tokenizer, ids: TokenIds, template: ChatTemplate | None = None, image: ImageConfig | None = None,
                 image_tokens: tuple | None = None, tokens_per_image: int | None = None, source: str = "Processor"):
        self.tokenizer, self.template, self._source = tokenizer, template, source
        self.bos_token_id, self.eos_token_ids, self.pad_token_id = ids.bos_token_id, ids.eos_token_ids, ids.pad_token_id
        self.context_length = ids.context_length
        self.image_token_id = ids.image_token_id
        self.spec = image.spec if image else None
        self.image_tokens = image_tokens  # (boi, image_token, eoi) text, or None
        self.tokens_per_image = tokens_per_image
        if self.tokenizer.id_to_token(self.bos_token_id) is None:
            raise ProcessorError(f"{source}: bos_token_id {self.bos_token_id} is not in the tokenizer")

    # ---- loading ------------------------------------------------------------------------
    @classmethod
    def load(cls, model_dir, folder: ModelFolder | None = None) -> Processor:
        """Read the folder's tokenizer, chat template and (VLM) image config; ids from genai_config.json."""
        from tokenizers import Tokenizer

        root = Path(model_dir)
        if not root.is_dir():
            raise ProcessorError(f"model folder {str(root)!r} does not exist or is not a folder")
        tok_path = root / TOKENIZER_JSON
        if not tok_path.is_file():
            raise ProcessorError(f"{tok_path}: file not found (the model folder needs a tokenizers tokenizer.json)")
        try:
            tokenizer = Tokenizer.from_file(str(tok_path))
        except Exception as e:  # noqa: BLE001 -- tokenizers raises a bare Exception on malformed files
            raise ProcessorError(f"{tok_path}: not a tokenizer.json the tokenizers library can read ({e})") from None
        try:  # genai_config.json through the one reader (modelfolder): parsed there, or here without a folder
            cfg = folder.raw if folder is not None else read_config(root)
            ids = folder.ids if folder is not None and folder.ids is not None else token_ids(cfg)
        except ModelFolderError as e:
            raise ProcessorError(str(e)) from None
        tc_path = root / TOKENIZER_CONFIG
        tc = read_json(tc_path) if tc_path.is_file() else {}
        if not isinstance(tc, dict):
            raise ProcessorError(f"{tc_path}: expected a JSON object")
        template = ChatTemplate.load(root, tc)
        vision = folder.vision if folder is not None else None
        model = cfg["model"]
        if vision is None and (folder is not None or "vision" not in model):
            return cls(tokenizer, ids, template, source=str(root))
        config_filename = model.get("vision", {}).get("config_filename")
        image = read_image_config(root, config_filename)
        tokens = _image_tokens(tokenizer, image, tc, ids, str(root))
        per_image = _tokens_per_image(image, vision)
        _check_pixels(image, vision)
        return cls(tokenizer, ids, template, image, tokens, per_image, source=str(root))

    # ---- prompts ------------------------------------------------------------------------
    def expand_prompt(self, prompt: str, n_images: int, chat_template: bool = True) -> str:
        """The prompt as text: the chat template (or <bos> + prompt), image placeholders expanded.

        Each image is a placeholder (the boi token, "<start_of_image>"); a prompt without one gets its
        images before the text. Each placeholder becomes Gemma 3's image sequence (`chat.image_sequence`).
        """
        if not isinstance(prompt, str):
            raise ProcessorError(f"prompt must be a str; got {type(prompt).__name__}")
        if self.context_length is not None and len(prompt) > MAX_PROMPT_CHARS_PER_TOKEN * self.context_length:
            raise ProcessorError(f"the prompt is {len(prompt)} characters; at most "
                                 f"{MAX_PROMPT_CHARS_PER_TOKEN * self.context_length} ({MAX_PROMPT_CHARS_PER_TOKEN} x "
                                 f"context_length {self.context_length}) are tokenised")
        if not isinstance(n_images, (int, np.integer)) or isinstance(n_images, bool) or n_images < 0:
            raise ProcessorError(f"n_images={n_images!r} is invalid: must be an integer >= 0")
        if self.image_tokens is None:
            if n_images:
                raise ProcessorError(f"{self._source} is a text model (no vision component): it takes no image")
            boi = image_token = None
        else:
            boi, image_token, _ = self.image_tokens
            if image_token in prompt:
                raise ProcessorError(
                    f"the prompt contains the literal image soft token {image_token!r}; it is reserved for image "
                    f"features (they would no longer line up). Mark an image with {boi!r} instead")
        n_placeholders = prompt.count(boi) if boi else 0
        if n_placeholders not in (0, n_images):
            raise ProcessorError(
                f"the prompt has {n_placeholders} image placeholder(s) {boi!r} but {n_images} image(s) were given; "
                f"they must match (images without a placeholder go before the text)")
        if chat_template:
            if self.template is None:
                raise ProcessorError(f"{self._source} has no chat template (chat_template.jinja or tokenizer_config."
                                     "json's chat_template); pass chat_template=False for <bos> + prompt")
            self._check_markers()
            content = prompt if n_placeholders or not n_images else \
                [{"type": "image"}] * n_images + [{"type": "text", "text": prompt}]
            text = self.template.render([{"role": "user", "content": content}], add_generation_prompt=True)
        else:
            bos = self.tokenizer.id_to_token(self.bos_token_id)
            text = bos + (boi * n_images if boi and not n_placeholders else "") + prompt
        if boi is None:
            return text
        if text.count(boi) != n_images:
            raise ProcessorError(f"the chat template ({self.template.source}) wrote {text.count(boi)} image "
                                 f"placeholder(s) {boi!r} for {n_images} image(s)")
        return text.replace(boi, image_sequence(*self.image_tokens, self.tokens_per_image))

    def _check_markers(self) -> None:
        """Each special token the template writes must be one token: split into pieces the prompt is wrong."""
        for t in self.template.markers():
            if len(self.tokenizer.encode(t, add_special_tokens=False).ids) != 1:
                raise ProcessorError(f"{self._source}: the tokenizer has no {t!r} token (a single added token) that "
                                     f"the chat template ({self.template.source}) writes; use chat_template=False")

    def encode_prompt(self, prompt: str, n_images: int, chat_template: bool = True) -> np.ndarray:
        """Prompt -> input_ids int64 [1, S]. See `expand_prompt` for the format and placeholder rules."""
        text = self.expand_prompt(prompt, n_images, chat_template)
        # the special tokens are added tokens, so each is one id; the template already wrote <bos>
        ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)[None]
        if n_images:
            self.check_image_tokens(ids, n_images * self.tokens_per_image)
        if self.context_length is not None and ids.shape[1] > self.context_length:
            raise ProcessorError(
                f"the prompt is {ids.shape[1]} tokens; the model's context_length is {self.context_length}")
        return ids  # [1, S]

    def check_image_tokens(self, input_ids, n_feature_rows: int) -> None:
        """The number of image soft tokens in input_ids must equal the image feature rows to insert."""
        if self.image_token_id is None:
            return
        n = int(np.count_nonzero(np.asarray(input_ids) == self.image_token_id))
        if n != n_feature_rows:
            raise ProcessorError(
                f"input_ids hold {n} image tokens (id {self.image_token_id}) but there are {n_feature_rows} image "
                f"feature rows (images x {self.tokens_per_image} per image); they must be equal")

    # ---- images -------------------------------------------------------------------------
    def preprocess(self, images, dtype=np.float32) -> np.ndarray:
        """A list of images (any size and mode) -> pixel_values [N, 3, H, W] (N may be 0). See `images`."""
        if self.spec is None:
            raise ProcessorError(f"{self._source} is a text model (no image config): it takes no image")
        if not isinstance(images, (list, tuple)):
            images = [images]
        if not images:
            return np.zeros((0, 3, *self.spec.size), dtype)
        return np.concatenate([preprocess_image(im, self.spec, dtype) for im in images], axis=0)

    # ---- decoding -----------------------------------------------------------------------
    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """ids (1-D, or [1, S]) -> text. Ids the tokenizer does not know (a model's padded vocab
        rows) decode to nothing, as in the tokenizers library."""
        return self.tokenizer.decode(_as_id_list(ids), skip_special_tokens=skip_special_tokens)

    def stream_decoder(self, skip_special_tokens: bool = True) -> StreamDecoder:
        return StreamDecoder(self.tokenizer, skip_special_tokens)

    def is_eos(self, token_id: int) -> bool:
        return int(token_id) in self.eos_token_ids


def _image_tokens(tokenizer, image: ImageConfig, tc: dict, ids: TokenIds, where: str) -> tuple:
    """(boi, image_token, eoi): from the flat config, else tokenizer_config.json; single tokens, ids checked."""
    found = []
    for key in ("boi_token", "image_token", "eoi_token"):
        text = image.tokens.get(key, tc.get(key))
        if not isinstance(text, str) or not text:
            raise ProcessorError(f"{where}: no {key} (in {image.source} or tokenizer_config.json); a VLM folder "
                                 "names its image tokens there (Gemma 3: <start_of_image>, <image_soft_token>, "
                                 "<end_of_image>)")
        n = len(tokenizer.encode(text, add_special_tokens=False).ids)
        if n != 1:
            raise ProcessorError(f"{where}: the tokenizer splits {key} {text!r} into {n} tokens; it must be a single "
                                 "added (special) token")
        found.append(text)
    if len(set(found)) != 3:
        raise ProcessorError(f"{where}: boi_token, image_token and eoi_token must differ, got {found}")
    got = tokenizer.token_to_id(found[1])
    for name, want in (("genai_config.json model.image_token_id", ids.image_token_id),
                       (f"{image.source} image_token_id", image.tokens.get("image_token_id"))):
        if want is not None and got != want:
            raise ProcessorError(f"{where}: {name} is {want} but the tokenizer maps {found[1]!r} to {got}")
    return tuple(found)


def _check_pixels(image: ImageConfig, vision) -> None:
    """The config's height x width must be what the vision model declares for pixel_values (where it fixes them)."""
    if vision is None:
        return
    shape = vision.signature.inputs[vision.inputs["pixel_values"]][1]
    declared = tuple(shape[2:4]) if len(shape) == 4 else ()
    if len(declared) == 2 and all(isinstance(d, int) and d > 0 for d in declared) and declared != image.spec.size:
        raise ProcessorError(f"{image.source} resizes images to {image.spec.height}x{image.spec.width} (HxW) but "
                             f"{vision.path.name} declares pixel_values {list(shape)}: they must agree")


def _tokens_per_image(image: ImageConfig, vision) -> int:
    """The config's tokens per image, checked against a fixed token axis of the vision output (or taken from it)."""
    declared = None
    if vision is not None:
        shape = vision.signature.outputs[vision.outputs["image_features"]][1]
        axis = shape[1] if len(shape) == 3 else None  # [images, tokens, hidden]; rank 2 flattens images x tokens
        declared = axis if isinstance(axis, int) and axis > 0 else None
    n = image.tokens_per_image
    if n is not None and declared is not None and n != declared:
        raise ProcessorError(f"{image.source} says {n} tokens per image but {vision.path.name} outputs {declared}")
    if n is None and declared is None:
        raise ProcessorError(f"{image.source} gives no tokens per image (mm_tokens_per_image, image_seq_length) and "
                             "the vision model's image_features shape does not fix it")
    return n if n is not None else declared
