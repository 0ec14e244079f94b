"""Image + prompt -> text: the VLM pipeline over a model folder, on CPU or CUDA.

    image ─► Processor.preprocess ─► pixel_values [1,3,H,W]   (any size and mode, resized as the folder says)
                                        │ vision:    pixel_values -> image_features [n,H]     (cached per image)
    prompt ─► Processor.encode_prompt ─► input_ids [1,S]
                                        │ embedding: input_ids (+ image_features) -> inputs_embeds [1,S,H]
                                        ▼
                 decoder.prefill(inputs_embeds) -> logits [V]     (KV written in place, stays resident)
    loop:  sampler(logits) -> token ─► embedding(token) [1,1,H] ─► decoder.step -> logits [V]
           (embedding(token): a row of embedtable's [V,H] table, the embedding model's own output for
            that id; mode "device": sampling and that row's gather run on the GPU; only the id comes back)
    detokenizer: StreamDecoder(token) -> text pieces

Whether the decoder takes inputs_embeds or input_ids comes from its declared inputs (modelfolder).
The prompt path (vision -> embedding -> the decoder's prefill buffer, device-resident on CUDA) is
prompt_path's; `GenerationResult.ttft_breakdown` gives time to first token by phase.
Not here: the decoders' binding details (decoders/), benchmarks (bench), plotting (plots).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from . import modes
from .devices import Device, parse_device
from .genargs import check_embeds, check_ids, check_keywords, check_max_new_tokens, check_stop
from .generation import GENERATION_ARGS, GenerationError, call_params
from .modelfolder import ModelFolder
from .pipestate import GenerationGuard, PipelineBusyError, StaleStreamError
from .processor import Processor
from .prompt_path import PhaseTimer, PromptPath
from .sampling import Sampler, SamplingParams  # noqa: F401 (SamplingParams: annotations)
from .sessions import make_session
from .transfers import Transfers


@dataclass
class StepRecord:
    """One generated token: what it was and what producing it cost."""

    step: int
    token: int
    text: str
    seconds: float  # host time inside the decode loop for this token: decoder work + sampling (step 0: prompt
    #                 preparation + prefill + sampling); never the consumer's time between tokens. A queue_ahead
    #                 decoder (CUDA graph mode, decoders.base): the wait for this token's step, its pick and
    #                 the launch of the next step, whose device time overlaps the consumer's
    detok_seconds: float  # host time of the detokenizer for this token
    h2d_bytes: int
    d2h_bytes: int
    kv_bytes: int
    position: int  # tokens in the KV cache after this step


@dataclass
class GenerationResult:
    tokens: list
    text: str
    steps: list
    prompt_tokens: int
    ttft_seconds: float
    mode: str
    device: str
    counters: dict = field(default_factory=dict)
    # seconds by phase: processor, vision, embedding, prefill, first_pick (prompt_path.PhaseTimer)
    ttft_breakdown: dict = field(default_factory=dict)

    @property
    def decode_seconds(self) -> list:
        return [s.seconds for s in self.steps[1:]]

    def frame(self):
        import pandas as pd

        return pd.DataFrame([asdict(s) for s in self.steps])


class Pipeline:
    """Processor -> vision (prompt only) -> embedding -> decoder -> sampler -> detokenizer."""

    def __init__(self, folder: ModelFolder, device: Device, mode: str, processor: Processor | None,
                 vision, embedding, decoder):
        self.folder, self.device, self.mode = folder, device, mode
        self.processor = processor
        self.vision, self.embedding = vision, embedding
        self.decoder = decoder
        self.transfers: Transfers = decoder.transfers
        self.prompt = PromptPath(folder, vision, embedding, decoder)  # its feature cache: pipestate's LRU
        self.timer = PhaseTimer(getattr(decoder, "stream", None))  # CUDA events on the decoder's stream
        decoder.timer = self.timer  # the decoder marks the end of its prefill run
        self.last_ttft_breakdown: dict[str, float] = {}  # of the latest generation, set before its first yield
        self._prompt_len = 0
        self._guard = GenerationGuard()  # one KV cache: one generation at a time (pipestate)
        self.dtype = np.dtype(folder.info.dtype)
        if folder.embedding is not None:
            shape = folder.embedding.signature.inputs[folder.embedding.inputs["image_features"]][1]
            self._empty_features = np.zeros([0 if isinstance(d, str) else d for d in shape], self.dtype)

    # ---- prompt path -------------------------------------------------------------------------
    @property
    def vision_runs(self) -> int:
        """Vision runs so far: one per distinct image (prompt_path caches the features)."""
        return self.prompt.vision_runs

    def pixel_values(self, image) -> np.ndarray:
        """image (path, PIL image or HWC array) -> preprocessed pixel_values [1,3,S,S] in the model's dtype."""
        if self.folder.vision is None:
            raise ValueError(f"{self.folder.root} has no vision component; pass image=None")
        self._need_processor()
        return self.processor.preprocess([image], dtype=self.dtype)

    def image_features(self, image):
        """image -> image_features [n, H], once per distinct image, on the decoder's device (numpy on
        cpu, CuPy on cuda)."""
        return self.prompt.image_features(self.pixel_values(image))

    def embed(self, input_ids: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        """input_ids [1,S] (+ image_features) -> inputs_embeds [1,S,H] on the host."""
        e = self.folder.embedding
        feats = self._empty_features if features is None else features
        return self.embedding.run([e.outputs["inputs_embeds"]],
                                  {e.inputs["input_ids"]: input_ids, e.inputs["image_features"]: feats})[0]

    def token_input(self, token: int, step: int | None = None) -> np.ndarray:
        """The decoder's next host input for `token` (decoders.base.Decoder.token_input)."""
        return self.decoder.token_input(token, step)

    def _check_length(self, prompt_len: int, max_new_tokens: int) -> None:
        limit = self.decoder.max_length
        if prompt_len + max_new_tokens > limit:
            raise ValueError(
                f"prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) = {prompt_len + max_new_tokens} "
                f"exceeds max_length {limit}, the KV capacity of this pipeline over {self.folder.root.name}; load it "
                f"with a larger max_length= (at most its context_length {self.folder.context_length})"
            )

    def _need_processor(self) -> None:
        if self.processor is None:
            raise ValueError(
                f"{self.folder.root} has no tokenizer.json, so prompts and images cannot be processed; "
                "pass inputs_embeds to generate_from_embeds instead"
            )

    def prepare(self, prompt: str, image=None, chat_template: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids [1,S], first decoder input on the host: inputs_embeds [1,S,H] or input_ids), for
        inspection and generate_from_embeds; generation itself keeps the prompt on the device (_stage)."""
        ids, feats = self._encode(prompt, image, chat_template)
        if self.folder.info.drive == "ids":
            return ids, ids
        if feats is not None and not isinstance(feats, np.ndarray):
            feats = feats.get()  # CuPy -> host, for the host embedding below
        return ids, self.embed(ids, feats)

    def _encode(self, prompt: str, image, chat_template: bool):
        """(input_ids [1,S], image features or None); marks the processor and vision phases."""
        self._need_processor()
        ids = self.processor.encode_prompt(prompt, 1 if image is not None else 0, chat_template)
        px = None if image is None else self.pixel_values(image)
        if px is not None and self.folder.info.drive == "ids":
            raise ValueError("this decoder takes input_ids (a text model): it cannot take an image")
        self.timer.mark("processor")
        feats = None if px is None else self.prompt.image_features(px)
        if px is not None:
            self.timer.mark("vision")
        if self.folder.image_token_id is not None:
            rows = 0 if feats is None else int(np.prod(feats.shape[:-1]))  # [T,H] or [I,n,H]
            self.processor.check_image_tokens(ids, rows)
        return ids, feats

    def _stage(self, ids: np.ndarray, feats=None):
        """The decoder's first input: ids as they are, or Staged (embeddings written into its prefill buffer)."""
        if self.folder.info.drive == "ids":
            return ids
        staged = self.prompt.embed(ids, feats)
        self.timer.mark("embedding")
        return staged

    # ---- generation ----------------------------------------------------------------------------
    def stream(self, prompt: str, image=None, max_new_tokens: int = 32, *, stop=None, chat_template: bool = True,
               **kw):
        """Yield a StepRecord per generated token (see `generate` for the arguments)."""
        t0 = time.perf_counter()
        params = call_params(self.folder, **check_keywords(kw, GENERATION_ARGS, also=("stop", "chat_template")))
        yield from self._generate(lambda: self._stage(*self._encode(prompt, image, chat_template)),
                                  max_new_tokens, t0, params, stop)

    def generate(self, prompt: str, image=None, max_new_tokens: int = 32, **kw) -> GenerationResult:
        """Hugging Face-style generate. do_sample / temperature / top_k / top_p / seed default to the folder's
        genai_config.json `search` values (greedy when it says do_sample false), min_p to 0; any given here win.

        stop: token ids that end generation (default: the model's eos ids; () never stops).
        suppress_tokens: ids never generated (default: the tokens the decoder cannot take back, i.e. the
        image soft token of an inputs_embeds decoder; () = none). An error while decoding is a
        GenerationError whose .tokens holds what was made before it.
        """
        t0 = time.perf_counter()
        chat_template, stop = kw.pop("chat_template", True), kw.pop("stop", None)
        params = call_params(self.folder, **check_keywords(kw, GENERATION_ARGS, also=("stop", "chat_template")))
        stage = lambda: self._stage(*self._encode(prompt, image, chat_template))  # noqa: E731
        return self._result(list(self._generate(stage, max_new_tokens, t0, params, stop)))

    def generate_from_embeds(self, inputs_embeds: np.ndarray, max_new_tokens: int = 32, **kw) -> GenerationResult:
        """Decode from user-supplied inputs_embeds [1,S,H] (onnxruntime-genai cannot take these)."""
        if self.folder.info.drive != "embeds":
            raise ValueError("generate_from_embeds needs a decoder driven by inputs_embeds; this one takes input_ids")
        x = check_embeds(inputs_embeds, self.folder.info.hidden_size).astype(self.dtype)
        t0 = time.perf_counter()
        stop = kw.pop("stop", None)
        params = call_params(self.folder, **check_keywords(kw, GENERATION_ARGS))
        return self._result(list(self._generate(lambda: x, max_new_tokens, t0, params, stop)))

    def generate_from_ids(self, input_ids: np.ndarray, max_new_tokens: int = 32, _t0: float | None = None,
                          pixel_values: np.ndarray | None = None, **kw) -> GenerationResult:
        """Decode from token ids [1,S] already formatted (no chat template). pixel_values: preprocessed
        images [I,3,S,S] whose features replace the image soft tokens that `input_ids` holds."""
        ids = check_ids(input_ids, self.folder.vocab_size)
        t0 = _t0 if _t0 is not None else time.perf_counter()
        stop = kw.pop("stop", None)
        params = call_params(self.folder, **check_keywords(kw, GENERATION_ARGS))

        def stage():
            feats = None
            if pixel_values is not None:
                if self.folder.vision is None or self.folder.info.drive == "ids":
                    raise ValueError(f"{self.folder.root} has no vision component; pass pixel_values=None")
                feats = self.prompt.image_features(np.asarray(pixel_values, dtype=self.dtype))
                self.timer.mark("vision")
            if self.folder.image_token_id is not None and self.folder.info.drive == "embeds":
                n = int((ids == self.folder.image_token_id).sum())
                rows = 0 if feats is None else int(np.prod(feats.shape[:-1]))
                if n != rows:
                    raise ValueError(f"input_ids hold {n} image soft tokens (id {self.folder.image_token_id}) but "
                                     f"the image features have {rows} rows")
            return self._stage(ids, feats)
        return self._result(list(self._generate(stage, max_new_tokens, t0, params, stop)))

    def _result(self, steps) -> GenerationResult:
        tokens = [s.token for s in steps]
        return GenerationResult(
            tokens=tokens, text=self.processor.decode(tokens) if self.processor else "", steps=steps,
            prompt_tokens=self._prompt_len, ttft_seconds=steps[0].seconds if steps else 0.0, mode=self.mode,
            device=str(self.device), counters=self.decoder.counters(), ttft_breakdown=dict(self.last_ttft_breakdown),
        )

    def _generate(self, stage, max_new_tokens: int, t0: float, params: SamplingParams, stop):
        """The decoder's loop (decoders.base) with the prompt path, text, stop ids and per-step records around it.

        stage() -> the decoder's first input (prompt_path.Staged or a host array); it runs inside the
        generation guard (it writes the decoder's prefill buffers), on the decoder's stream, and its bytes
        (ids, pixel_values) are added to step 0's record. Each record's `seconds` is measured inside this
        loop, from resuming after the previous yield to the decoder handing over the token (step 0: from t0,
        the prompt path included), so whatever the consumer does between tokens is never counted."""
        max_new_tokens, stop = check_max_new_tokens(max_new_tokens), check_stop(stop, self.folder.vocab_size)
        stop = set(self.folder.eos_token_ids) if stop is None else stop
        detok = self.processor.stream_decoder() if self.processor else None
        clock, records = time.perf_counter, self.transfers.steps
        prompt_bytes = self.transfers.fixed([])

        def run():
            nonlocal prompt_bytes
            self.timer.start(t0)
            prompt_bytes = self.transfers.begin()
            try:
                with self.prompt.on_stream():
                    x = stage()
            finally:
                self.transfers.end()
            self._prompt_len = x.length if hasattr(x, "length") else x.shape[1]
            self._check_length(self._prompt_len, max_new_tokens)
            yield from self.decoder.generate(x, max_new_tokens, Sampler(params))

        tokens = self._guard.tokens(run())  # PipelineBusyError / StaleStreamError instead of a shared cache
        made: list[int] = []  # what a GenerationError carries when the loop fails after the first token
        with contextlib.closing(tokens):  # an abandoned stream ends the decoder's generation now
            start = t0
            try:
                for step, token in enumerate(tokens):
                    made.append(token)
                    if step == 0:
                        self.timer.mark("first_pick")
                    now = clock()
                    if step == 0:
                        self.last_ttft_breakdown = self.timer.breakdown()  # the first token is on the host
                        records[0] = records[0] + prompt_bytes  # the prompt path's bytes are step 0's too
                    final = token in stop or step + 1 == max_new_tokens
                    # the last piece includes the detokenizer's pending bytes: the pieces join to result.text
                    text = (detok.put(token) + (detok.flush() if final else "")) if detok else ""
                    b = records[step]
                    yield StepRecord(step, token, text, now - start, clock() - now, b.h2d, b.d2h, b.kv,
                                     self._prompt_len + step)
                    if token in stop:
                        return
                    start = clock()
            except Exception as e:  # noqa: BLE001 -- a failure after the first token keeps the tokens made
                if not made or isinstance(e, (GenerationError, PipelineBusyError, StaleStreamError)):
                    raise  # nothing generated yet (the prompt's or the prefill's own error), or a misuse
                raise GenerationError.wrap(e, made) from e

def load(model_dir, device: str | Device = "cpu", mode: str | None = None, *, max_length: int | None = None,
         threads: int = 0, **options) -> Pipeline:
    """Build a Pipeline from a model folder (genai_config.json, ours or onnxruntime-genai's).

    device: "cpu", "cuda" or "cuda:N". mode: a pipeline mode of `vlmdecode.modes` on that device ("resident"
    (default) or "naive" on CPU; "eager", "graph" (default), "device" or "naive" on CUDA). options go to the
    mode's decoder (CUDA: decoders.cuda.CudaDecoder's embed_via, sync_every, graph_per_generation, ...). The
    vision and embedding sessions run on the decoder's CUDA stream, so the pipeline owns its decoder for life.
    """
    import importlib

    device = parse_device(device)
    folder = ModelFolder.load(model_dir)
    processor = Processor.load(folder.root, folder) if (folder.root / "tokenizer.json").is_file() else None
    if device.is_cuda:
        from .sessions import check_cuda

        check_cuda(device)  # before anything else: no CUDA means CudaUnavailableError, never a CPU fallback
    elif options:
        raise ValueError(f"options {sorted(options)} are for CUDA decoders; device is cpu")
    m = modes.resolve(mode, device.kind)
    module, _, name = m.factory.partition(":")
    decoder = getattr(importlib.import_module(module), name)(folder, device, m.name, max_length=max_length,
                                                             threads=threads, **options)
    # vision and embedding run once per prompt: their threads must not spin on into the decoder's prefill
    sess = lambda c: make_session(c, device, threads=threads, stream_ptr=decoder.stream_ptr, spin=False)  # noqa: E731
    vision = sess(folder.vision) if folder.vision else None
    embedding = sess(folder.embedding) if folder.embedding else None
    return Pipeline(folder, device, m.name, processor, vision, embedding, decoder)
