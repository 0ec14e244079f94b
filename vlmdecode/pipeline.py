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
Not here: the decoders' binding details (decoders/), benchmarks (bench), plotting (plots).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .devices import Device, parse_device
from .embedtable import embedding_table
from .generation import GenerationError, call_params
from .modelfolder import ModelFolder
from .processor import Processor
from .sampling import Sampler, SamplingParams
from .sessions import make_session
from .transfers import Transfers

MODES_CPU = ("resident",)
MODES_CUDA = ("eager", "graph", "device")


@dataclass
class StepRecord:
    """One generated token: what it was and what producing it cost."""

    step: int
    token: int
    text: str
    seconds: float  # host wall time from the previous token (prefill included for step 0)
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
        self.vision_runs = 0
        self._features: dict[str, np.ndarray] = {}
        self.dtype = np.dtype(folder.info.dtype)
        self._table = None  # embedtable rows, built on the first decode step
        if folder.embedding is not None:
            shape = folder.embedding.signature.inputs[folder.embedding.inputs["image_features"]][1]
            self._empty_features = np.zeros([0 if isinstance(d, str) else d for d in shape], self.dtype)

    # ---- prompt path -------------------------------------------------------------------------
    def image_features(self, image) -> np.ndarray:
        """pixel_values -> image_features, once per distinct image (counted in `vision_runs`)."""
        if self.folder.vision is None:
            raise ValueError(f"{self.folder.root} has no vision component; pass image=None")
        self._need_processor()
        px = self.processor.preprocess([image], dtype=self.dtype)
        key = hashlib.sha256(px.tobytes()).hexdigest()
        if key not in self._features:
            v = self.folder.vision
            self._features[key] = self.vision.run([v.outputs["image_features"]], {v.inputs["pixel_values"]: px})[0]
            self.vision_runs += 1
        return self._features[key]

    def embed(self, input_ids: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        """input_ids [1,S] (+ image_features) -> inputs_embeds [1,S,H] on the host."""
        e = self.folder.embedding
        feats = self._empty_features if features is None else features
        return self.embedding.run([e.outputs["inputs_embeds"]],
                                  {e.inputs["input_ids"]: input_ids, e.inputs["image_features"]: feats})[0]

    def token_input(self, token: int, step: int | None = None) -> np.ndarray:
        """The decoder's next host input for `token`: its embedding [1,1,H], or [[token]]."""
        if self.folder.info.drive == "ids":
            return np.array([[token]], np.int64)
        if token == self.folder.image_token_id:
            # the embedding model replaces image soft tokens by image feature rows; a generated one has none
            # (onnxruntime would fail inside the embedding graph, as onnxruntime-genai does)
            at = "" if step is None else f"at step {step} "
            raise ValueError(
                f"the model generated the image soft token (id {token}) {at}and the embedding model cannot "
                f"embed it without image features; pass stop=[{token}, ...] to end generation there"
            )
        if self._table is None:
            self._table = embedding_table(self.folder, self.dtype)
        return self._table[token][None, None]  # [1,1,H]: the embedding model's output for this id

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
        """(input_ids [1,S], first decoder input: inputs_embeds [1,S,H] or input_ids)."""
        self._need_processor()
        ids = self.processor.encode_prompt(prompt, 1 if image is not None else 0, chat_template)
        feats = None if image is None else self.image_features(image)
        if self.folder.image_token_id is not None:
            rows = 0 if feats is None else int(np.prod(feats.shape[:-1]))  # [T,H] or [I,n,H]
            self.processor.check_image_tokens(ids, rows)
        if self.folder.info.drive == "ids":
            if image is not None:
                raise ValueError("this decoder takes input_ids (a text model): it cannot take an image")
            return ids, ids
        return ids, self.embed(ids, feats)

    # ---- generation ----------------------------------------------------------------------------
    def stream(self, prompt: str, image=None, max_new_tokens: int = 32, *, stop=None, chat_template: bool = True,
               **kw):
        """Yield a StepRecord per generated token (see `generate` for the arguments)."""
        t0 = time.perf_counter()
        params = call_params(self.folder, **kw)
        ids, x = self.prepare(prompt, image, chat_template)
        yield from self._generate(x, ids.shape[1], max_new_tokens, t0, params, stop)

    def generate(self, prompt: str, image=None, max_new_tokens: int = 32, **kw) -> GenerationResult:
        """Hugging Face-style generate. do_sample / temperature / top_k / top_p / seed default to the folder's
        genai_config.json `search` values (greedy when it says do_sample false), min_p to 0; any given here win.

        stop: token ids that end generation (default: the model's eos ids; () never stops).
        suppress_tokens: ids never generated (default: the tokens the decoder cannot take back, i.e. the
        image soft token of an inputs_embeds decoder; () = none). An error while decoding is a
        GenerationError whose .tokens holds what was made before it.
        """
        t0 = time.perf_counter()
        chat, stop = kw.pop("chat_template", True), kw.pop("stop", None)
        params = call_params(self.folder, **kw)
        ids, x = self.prepare(prompt, image, chat)
        steps = list(self._generate(x, ids.shape[1], max_new_tokens, t0, params, stop))
        return self._result(steps, ids.shape[1], t0)

    def generate_from_embeds(self, inputs_embeds: np.ndarray, max_new_tokens: int = 32, **kw) -> GenerationResult:
        """Decode from user-supplied inputs_embeds [1,S,H] (onnxruntime-genai cannot take these)."""
        x = np.asarray(inputs_embeds)
        H = self.folder.info.hidden_size
        if self.folder.info.drive != "embeds":
            raise ValueError("generate_from_embeds needs a decoder driven by inputs_embeds; this one takes input_ids")
        if x.ndim != 3 or x.shape[0] != 1 or x.shape[2] != H or x.shape[1] == 0:
            raise ValueError(f"inputs_embeds must have shape [1, S>0, {H}], got {list(x.shape)}")
        t0 = time.perf_counter()
        stop = kw.pop("stop", None)
        steps = list(self._generate(x.astype(self.dtype), x.shape[1], max_new_tokens, t0,
                                    call_params(self.folder, **kw), stop))
        return self._result(steps, x.shape[1], t0)

    def generate_from_ids(self, input_ids: np.ndarray, max_new_tokens: int = 32, _t0: float | None = None,
                          **kw) -> GenerationResult:
        """Decode from token ids [1,S] already formatted (no chat template, no image)."""
        ids = np.asarray(input_ids, dtype=np.int64).reshape(1, -1)
        t0 = _t0 if _t0 is not None else time.perf_counter()
        x = ids if self.folder.info.drive == "ids" else self.embed(ids, None)
        stop = kw.pop("stop", None)
        steps = list(self._generate(x, ids.shape[1], max_new_tokens, t0, call_params(self.folder, **kw), stop))
        return self._result(steps, ids.shape[1], t0)

    def _result(self, steps, prompt_len, t0) -> GenerationResult:
        tokens = [s.token for s in steps]
        return GenerationResult(
            tokens=tokens, text=self.processor.decode(tokens) if self.processor else "", steps=steps,
            prompt_tokens=prompt_len, ttft_seconds=steps[0].seconds if steps else 0.0, mode=self.mode,
            device=str(self.device), counters=self.decoder.counters() if hasattr(self.decoder, "counters") else {},
        )

    def _generate(self, x, prompt_len: int, max_new_tokens: int, t0: float, params: SamplingParams, stop):
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
        self._check_length(prompt_len, max_new_tokens)
        stop = set(self.folder.eos_token_ids if stop is None else stop)
        detok = self.processor.stream_decoder() if self.processor else None
        if getattr(self.decoder, "mode", None) == "device":
            tokens = self.decoder.generate(x, max_new_tokens, params)
        else:
            tokens = self._host_loop(x, max_new_tokens, Sampler(params))
        made: list[int] = []
        try:
            yield from self._records(tokens, made, max_new_tokens, t0, stop, detok)
        except GenerationError:
            raise
        except Exception as e:  # noqa: BLE001 -- any failure mid-generation keeps what was made
            raise GenerationError.wrap(e, made) from e

    def _records(self, tokens, made: list, max_new_tokens: int, t0: float, stop, detok):
        last = t0
        for step, token in enumerate(tokens):
            made.append(token)
            now = time.perf_counter()
            b = self.transfers.steps[-1] if self.transfers.steps else None
            final = token in stop or step + 1 == max_new_tokens
            # the last piece includes the detokenizer's pending bytes: the pieces join to result.text
            text = (detok.put(token) + (detok.flush() if final else "")) if detok else ""
            yield StepRecord(step, token, text, now - last,
                             b.h2d if b else 0, b.d2h if b else 0, b.kv if b else 0, self.decoder.position)
            last = now
            if token in stop:
                break

    def _host_loop(self, x, max_new_tokens: int, sampler: Sampler):
        """prefill, then decode_one_token until done; sampling on the host."""
        self.decoder.begin_generation()
        try:
            self.transfers.steps.clear()  # per-generation records; they would otherwise grow without bound
            self.transfers.begin(0)
            logits = self.decoder.prefill(x, reuse=True)  # [V] model dtype, overwritten by the next step
            for step in range(max_new_tokens):
                token = self.decode_one_token(logits, sampler, step)
                self.transfers.end()
                yield token
                if step + 1 == max_new_tokens:
                    return
                self.transfers.begin(step + 1)
                logits = self.decoder.step(self.token_input(token, step), reuse=True)
        finally:
            self.transfers.end()
            self.decoder.end_generation()

    @staticmethod
    def decode_one_token(logits: np.ndarray, sampler: Sampler, step: int) -> int:
        """Sample one token from logits [V]; NaN/+inf raise NonFiniteLogitsError naming the step."""
        return int(sampler(logits[None], step)[0])


def load(model_dir, device: str | Device = "cpu", mode: str | None = None, *, max_length: int | None = None,
         threads: int = 0, **cuda_options) -> Pipeline:
    """Build a Pipeline from a model folder (genai_config.json, ours or onnxruntime-genai's).

    device: "cpu", "cuda" or "cuda:N". mode: "resident" on CPU; "eager", "graph" (default) or "device" on CUDA.
    cuda_options go to decoders.cuda.CudaDecoder (embed_via, sync_every, graph_per_generation). The vision
    and embedding sessions run on the decoder's CUDA stream, so the pipeline owns its decoder for life.
    """
    from .decoders.cpu import CpuDecoder

    device = parse_device(device)
    folder = ModelFolder.load(model_dir)
    processor = Processor.load(folder.root, folder) if (folder.root / "tokenizer.json").is_file() else None
    if device.is_cuda:
        from .sessions import check_cuda

        check_cuda(device)  # before anything else: no CUDA means CudaUnavailableError, never a CPU fallback
        from .decoders.cuda import CudaDecoder, check_mode

        mode = check_mode(mode or "graph", folder)
        decoder = CudaDecoder(folder, device, mode, max_length=max_length, **cuda_options)
        sess = lambda c: make_session(c.path, device, stream_ptr=decoder.stream_ptr)  # noqa: E731
    else:
        if cuda_options:
            raise ValueError(f"options {sorted(cuda_options)} are for CUDA decoders; device is cpu")
        if mode not in (None, *MODES_CPU):
            raise ValueError(f"mode {mode!r} is not available on cpu: allowed {MODES_CPU} (CUDA modes: {MODES_CUDA})")
        mode = "resident"
        folder.require_cpu_support()
        decoder = CpuDecoder(folder, make_session(folder.decoder.path, device, threads=threads), max_length=max_length)
        sess = lambda c: make_session(c.path, device, threads=threads)  # noqa: E731
    vision = sess(folder.vision) if folder.vision else None
    embedding = sess(folder.embedding) if folder.embedding else None
    return Pipeline(folder, device, mode, processor, vision, embedding, decoder)
