"""The parts of the exported folders that no builder writes: VLM vision/embedding ONNX and hand-written configs.

onnxruntime-genai's Gemma 3 vision tutorial builds vision and embedding models outside the model builder
and writes genai_config.json's vision/embedding sections and processor_config.json by hand; this module
does the same for the tiny VLM (torch.onnx.export), and writes the genai_config.json a user puts beside an
optimum-onnx export. Build-time material (imports torch/transformers), not part of the vlmdecode package.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import hfmodels as hm
import onnx
import torch

OPSET = 18


class _Vision(torch.nn.Module):
    """pixel_values [N, 3, S, S] -> image_features [N, mm_tokens, hidden]: SigLIP tower + Gemma 3 projector."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model.get_image_features(pixel_values)


class _Embedding(torch.nn.Module):
    """input_ids [B, S], image_features [N, T, H] -> inputs_embeds [B, S, H].

    The scaled token embedding, with the rows of <image_soft_token> replaced in order by the image
    features (what Gemma3Model does with masked_scatter). An extra zero row keeps the gather valid when
    there are no image features (decode steps: onnxruntime-genai passes [N, 0, H] there).
    """

    def __init__(self, model):
        super().__init__()
        self.embed = model.get_input_embeddings()

    def forward(self, input_ids, image_features):
        emb = self.embed(input_ids)
        hidden = emb.shape[-1]
        feats = torch.cat([image_features.reshape(-1, hidden), torch.zeros(1, hidden, dtype=emb.dtype)], 0)
        mask = (input_ids == hm.IMAGE_TOKEN).reshape(-1)
        idx = torch.cumsum(mask.to(torch.int64), 0) - 1
        idx = torch.where(mask, idx, torch.full_like(idx, feats.shape[0] - 1))
        out = torch.where(mask.unsqueeze(-1), feats[idx], emb.reshape(-1, hidden))
        return out.reshape(emb.shape)


def _export(module, args, path: Path, inputs: list[str], outputs: list[str], dynamic: dict) -> None:
    torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=dynamic,
                      opset_version=OPSET, dynamo=False, external_data=False)
    onnx.checker.check_model(onnx.load(str(path)))


def export_vision_embedding(hf_vlm: Path, dest: Path) -> None:
    from transformers import Gemma3ForConditionalGeneration

    model = Gemma3ForConditionalGeneration.from_pretrained(hf_vlm, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    s = hm.VISION["image_size"]
    with torch.no_grad():
        pv = torch.zeros(1, 3, s, s)
        _export(_Vision(model), (pv,), dest / "vision.onnx", ["pixel_values"], ["image_features"],
                {"pixel_values": {0: "num_images"}, "image_features": {0: "num_images"}})
        # The tracer leaves the token count symbolic (a generated name); it is fixed by the config.
        vis = onnx.load(str(dest / "vision.onnx"))
        vis.graph.output[0].type.tensor_type.shape.dim[1].dim_value = hm.MM_TOKENS
        onnx.checker.check_model(vis)
        onnx.save(vis, str(dest / "vision.onnx"))
        ids = torch.tensor([[hm.BOS, hm.BOI] + [hm.IMAGE_TOKEN] * hm.MM_TOKENS + [hm.EOI]])
        feats = torch.zeros(1, hm.MM_TOKENS, hm.TEXT["hidden_size"])
        _export(_Embedding(model), (ids, feats), dest / "embedding.onnx", ["input_ids", "image_features"],
                ["inputs_embeds"],
                {"input_ids": {0: "batch_size", 1: "sequence_length"},
                 "image_features": {0: "num_images", 1: "num_image_tokens"},
                 "inputs_embeds": {0: "batch_size", 1: "sequence_length"}})


def ortx_processor_config() -> dict:
    """onnxruntime-extensions' Gemma 3 image processor config (its test/data/models/gemma-3), resized to 64."""
    s = hm.VISION["image_size"]
    ops = [
        {"name": "decode_image", "type": "DecodeImage", "attrs": {"color_space": "RGB"}},
        {"name": "resize", "type": "Resize",
         "attrs": {"interpolation": "CUBIC", "width": s, "height": s, "keep_aspect_ratio": 0}},
        {"name": "re-scale", "type": "Rescale"},
        {"name": "normalize", "type": "Normalize", "attrs": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}},
        {"name": "to_channel_first", "type": "Permute3D", "attrs": {"dims": [2, 0, 1]}},
    ]
    return {"processor": {"name": "gemma_3_image_processing", "transforms": [{"operation": o} for o in ops]}}


def complete_vlm_folder(hf_vlm: Path, dest: Path, made: dict) -> None:
    """Add vision.onnx, embedding.onnx, processor configs and genai_config.json's vision/embedding sections."""
    export_vision_embedding(hf_vlm, dest)
    (dest / "processor_config.json").write_text(json.dumps(ortx_processor_config(), indent=2) + "\n")
    shutil.copy(hf_vlm / "preprocessor_config.json", dest / "preprocessor_config.json")
    path = dest / "genai_config.json"
    cfg = json.loads(path.read_text())
    session = cfg["model"]["decoder"]["session_options"]
    cfg["model"]["type"] = "gemma3"
    cfg["model"]["image_token_id"] = hm.IMAGE_TOKEN
    cfg["model"]["embedding"] = {"filename": "embedding.onnx",
                                 "inputs": {"input_ids": "input_ids", "image_features": "image_features"},
                                 "outputs": {"inputs_embeds": "inputs_embeds"}, "session_options": session}
    cfg["model"]["vision"] = {"filename": "vision.onnx", "config_filename": "processor_config.json",
                              "inputs": {"pixel_values": "pixel_values"},
                              "outputs": {"image_features": "image_features"}, "session_options": session}
    path.write_text(json.dumps(cfg, indent=4) + "\n")
    made["vision_embedding"] = "torch.onnx.export (dynamo=False, opset 18) in scripts/exported/vlmexport.py"
    made["genai_config_vision_embedding"] = "added by hand, as onnxruntime-genai's gemma-3-vision tutorial says"


def write_optimum_genai_config(dest: Path) -> None:
    """The genai_config.json a user writes beside an optimum-onnx decoder (KV grows by Concat: no shared buffer)."""
    hf = json.loads((dest / "config.json").read_text())
    session = {"log_id": "onnxruntime-genai", "provider_options": []}
    cfg = {
        "model": {
            "bos_token_id": hm.BOS, "context_length": hf["max_position_embeddings"],
            "decoder": {
                "session_options": session, "filename": "model.onnx", "head_size": hf["head_dim"],
                "hidden_size": hf["hidden_size"],
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": hf["num_attention_heads"], "num_hidden_layers": hf["num_hidden_layers"],
                "num_key_value_heads": hf["num_key_value_heads"],
            },
            "eos_token_id": [hm.EOS, hm.END_OF_TURN], "pad_token_id": hm.PAD, "type": "gemma3_text",
            "vocab_size": hf["vocab_size"],
        },
        "search": {"do_sample": False, "max_length": hf["max_position_embeddings"], "min_length": 0,
                   "num_beams": 1, "num_return_sequences": 1, "past_present_share_buffer": False,
                   "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 1, "top_p": 1.0},
    }
    (dest / "genai_config.json").write_text(json.dumps(cfg, indent=4) + "\n")
