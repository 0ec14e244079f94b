"""Tiny random-weight Gemma 3 checkpoints in Hugging Face format, and their tokenizer files.

Build-time material for `make_folders.py` (runs in the export venv with transformers 4.57.6); not part of
the vlmdecode package. Everything is deterministic: fixed seeds, no downloads.

What it writes into a folder, as a Hugging Face checkpoint of google/gemma-3-*-it would have it:
config.json, model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json,
special_tokens_map.json, chat_template.jinja (and for the VLM preprocessor_config.json,
processor_config.json). The weights are random; their text is noise by design.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

# Gemma 3's specials in Gemma's order where it has one (pad 0, eos 1, bos 2, unk 3, mask 4); the real
# vocabulary puts <start_of_turn>/<end_of_turn> at 105/106, <start_of_image>/<end_of_image> at
# 255999/256000 and <image_soft_token> at 262144: here they are packed at 5..9.
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>",
            "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
PAD, EOS, BOS, UNK = 0, 1, 2, 3
START_OF_TURN, END_OF_TURN, BOI, EOI, IMAGE_TOKEN = 5, 6, 7, 8, 9
N_UNUSED = 7  # <unused0..6>: pads the vocabulary to VOCAB (Gemma 3 has <unusedN> tokens too)
VOCAB = len(SPECIALS) + 256 + 95 + N_UNUSED  # specials, <0xNN> byte fallback, printable ASCII, unused = 368

# Gemma 3's chat template (google/gemma-3-*-it tokenizer_config.json "chat_template"): the package's fixture copy
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from vlmdecode.fixture.tokenizer import GEMMA3_CHAT_TEMPLATE as CHAT_TEMPLATE  # noqa: E402

# Text model: Gemma 3 layout (5 sliding + 1 global, q/k norms, no softcaps as in Gemma 3) in miniature.
# hidden 64 makes the builder's rounded embedding scale sqrt(64) = 8 exact; heads*head_dim = 64 != VOCAB.
TEXT = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
    num_key_value_heads=1, head_dim=16, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=512,
    rms_norm_eps=1e-6, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS, tie_word_embeddings=True,
    rope_theta=1_000_000.0, rope_local_base_freq=10_000.0, query_pre_attn_scalar=16, sliding_window=12,
    layer_types=["sliding_attention"] * 5 + ["full_attention"], sliding_window_pattern=6,
    final_logit_softcapping=None, attn_logit_softcapping=None, attention_bias=False,
)
# Vision: a tiny SigLIP; 64x64 images in 4x4 patches = 256 patches, pooled 1x1 to 256 tokens per image,
# the count that Gemma3Processor (image_seq_length 256) and onnxruntime-genai (a constant) both assume.
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
              image_size=64, patch_size=4, num_channels=3, layer_norm_eps=1e-6, vision_use_head=False)
MM_TOKENS = 256
# (1 + w) of the post-attention/post-MLP norms. With 6 the random text model repeated one token forever;
# 48 (seeds 0-11 tried) gives varied greedy trajectories: the blocks outweigh the tied input embedding.
POST_NORM_GAIN = 48.0


def build_tokenizer() -> Tokenizer:
    """A SentencePiece-style BPE like Gemma's: spaces as "▁", byte fallback, no merges."""
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for c in range(32, 127):
        vocab["▁" if c == 32 else chr(c)] = len(vocab)
    for i in range(N_UNUSED):
        vocab[f"<unused{i}>"] = len(vocab)
    assert len(vocab) == VOCAB
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", BOS)])
    specials = SPECIALS + [f"<unused{i}>" for i in range(N_UNUSED)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def write_tokenizer(folder: Path) -> None:
    tok = build_tokenizer()
    tok.save(str(folder / "tokenizer.json"))
    specials = SPECIALS + [f"<unused{i}>" for i in range(N_UNUSED)]
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": True} for t in specials}
    cfg = {
        "add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": added,
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>",
        "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                 "image_token": "<image_soft_token>"},
        "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
        "model_max_length": 1000000000000000019884624838656, "padding_side": "left",
        "sp_model_kwargs": None, "spaces_between_special_tokens": False,
        "tokenizer_class": "GemmaTokenizer", "use_default_system_prompt": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    special_map = {
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>",
        **{k: {"content": v, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
           for k, v in (("bos_token", "<bos>"), ("eos_token", "<eos>"), ("pad_token", "<pad>"),
                        ("unk_token", "<unk>"))},
    }
    (folder / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)


def _init_weights(model: torch.nn.Module, seed: int) -> None:
    """Fan-in scaled normal weights, unit-std embedding, (1 + w) norms near 1, post-norms near the gain."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") and p.dim() == 1 and "vision" not in name:
                base = POST_NORM_GAIN - 1.0 if ("post_attention" in name or "post_feedforward" in name) else 0.0
                p.copy_(base + 0.3 * (torch.rand(p.shape, generator=g) - 0.5))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=g) + (1.0 if name.endswith("layernorm.weight")
                                                                   or name.endswith("post_layernorm.weight")
                                                                   else 0.0))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in**0.5)


def _generation_config(folder: Path) -> None:
    gen = {"bos_token_id": BOS, "cache_implementation": "hybrid", "do_sample": True,
           "eos_token_id": [EOS, END_OF_TURN], "pad_token_id": PAD, "top_k": 64, "top_p": 0.95,
           "transformers_version": "4.57.6"}
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


def make_text(folder: Path, seed: int) -> None:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    folder.mkdir(parents=True, exist_ok=True)
    cfg = Gemma3TextConfig(**TEXT)
    cfg.architectures = ["Gemma3ForCausalLM"]
    model = Gemma3ForCausalLM(cfg).eval()
    _init_weights(model, seed)
    model.save_pretrained(folder)
    _generation_config(folder)  # after save_pretrained: it writes one of its own
    write_tokenizer(folder)


def make_vlm(folder: Path, seed: int) -> None:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, SiglipVisionConfig

    folder.mkdir(parents=True, exist_ok=True)
    text = {k: v for k, v in TEXT.items() if k not in ("pad_token_id", "eos_token_id", "bos_token_id")}
    cfg = Gemma3Config(text_config=text, vision_config=SiglipVisionConfig(**VISION).to_dict(),
                       mm_tokens_per_image=MM_TOKENS, boi_token_index=BOI, eoi_token_index=EOI,
                       image_token_index=IMAGE_TOKEN, pad_token_id=PAD, eos_token_id=[EOS, END_OF_TURN],
                       bos_token_id=BOS)
    cfg.architectures = ["Gemma3ForConditionalGeneration"]
    model = Gemma3ForConditionalGeneration(cfg).eval()
    _init_weights(model, seed)
    model.save_pretrained(folder)
    _generation_config(folder)
    write_tokenizer(folder)
    pre = {"do_convert_rgb": None, "do_normalize": True, "do_pan_and_scan": None, "do_rescale": True,
           "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Gemma3ImageProcessor",
           "image_seq_length": MM_TOKENS, "image_std": [0.5, 0.5, 0.5], "pan_and_scan_max_num_crops": None,
           "pan_and_scan_min_crop_size": None, "pan_and_scan_min_ratio_to_activate": None,
           "processor_class": "Gemma3Processor", "resample": 2, "rescale_factor": 0.00392156862745098,
           "size": {"height": VISION["image_size"], "width": VISION["image_size"]}}
    (folder / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")
    (folder / "processor_config.json").write_text(
        json.dumps({"image_seq_length": MM_TOKENS, "processor_class": "Gemma3Processor"}, indent=2) + "\n")
