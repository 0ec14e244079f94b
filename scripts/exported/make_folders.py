"""Make tests/data/exported/: tiny Gemma 3 folders written by the real public exporters, with expected tokens.

Build-time material, not part of the vlmdecode package (see README.md beside this file for the venvs):

    /work/venv-export/bin/python scripts/exported/make_folders.py \
        --py18 /work/venv-export18/bin/python --genai-py .venv/bin/python [--only NAME ...]

Steps: (1) random-weight Hugging Face checkpoints (hfmodels.py, transformers 4.57.6); (2) onnxruntime-genai
0.18's model builder on them (through builder18.py, transformers 5.x), torch.onnx.export for the VLM's
vision and embedding models, optimum-onnx for the optimum folder; (3) expected.json per folder: prompt
ids, transformers float32 greedy tokens, and onnxruntime-genai (CPU) greedy tokens where it runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hfmodels as hm  # noqa: E402
import vlmexport  # noqa: E402

REPO = HERE.parent.parent
TEXT_SEED, VLM_SEED = 1, 1  # text: chosen over seeds 0-11 (77 distinct tokens in 200 greedy steps, no eos)
STEPS_LONG, STEPS_VLM = 200, 48
TEXT_MESSAGES = [{"role": "user", "content": "Describe the sky in one word."}]
VLM_TEXT = "What is in this image?"
VLM_MESSAGES = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": VLM_TEXT}]}]

# name -> (precision, execution provider, extra options); all from hf-text except builder-vlm.
BUILDER_FOLDERS = {
    "builder-text-fp32": ("fp32", "cpu", []),
    "builder-text-fp32-fullkv": ("fp32", "cpu", ["windowed_kv_cache=false"]),
    "builder-text-int4": ("int4", "cpu", []),
    "builder-text-pruned": ("fp32", "cpu", ["prune_lm_head=true"]),
    "builder-text-hidden": ("fp32", "cpu", ["include_hidden_states=true"]),
    "builder-text-fp16-cuda": ("fp16", "cuda", []),
    "builder-text-int4-cuda": ("int4", "cuda", []),
    "builder-vlm": ("fp32", "cpu", ["exclude_embeds=true"]),
}
GENAI_CPU_RUNS = {"builder-text-fp32", "builder-text-fp32-fullkv", "builder-text-int4", "builder-text-pruned",
                  "builder-text-hidden", "builder-vlm", "optimum-text"}


def run(cmd: list[str], log: Path, cwd: Path | None = None) -> None:
    with log.open("w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}); see {log}")


def pip_version(py: str, dist: str) -> str:
    code = f"import importlib.metadata as m; print(m.version('{dist}'))"
    return subprocess.run([py, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def demo_image(path: Path, size: tuple[int, int], mode: str) -> None:
    """A deterministic picture: colour gradients and a checker, no randomness. RGB, RGBA or L (grayscale)."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    cell = max(w // 8, 1)
    rgb = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                    ((x // cell + y // cell) % 2) * 200 + 27], -1).astype(np.uint8)
    if mode == "RGBA":
        img = Image.fromarray(np.dstack([rgb, (((x + y) % 16) * 16 + 15).astype(np.uint8)]), "RGBA")
    elif mode == "L":
        img = Image.fromarray(rgb, "RGB").convert("L")
    else:
        img = Image.fromarray(rgb, "RGB")
    img.save(path, **({"quality": 90} if path.suffix == ".jpg" else {}))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hf_text_tokens(hf_dir: Path, ids: list[int], steps: int) -> dict:
    """transformers float32 greedy tokens, and per step the gap between the top two logits (how far a
    lower-precision export may drift before a token flips)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=steps, do_sample=False, top_k=None, top_p=None,
                             output_scores=True, return_dict_in_generate=True)
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    return {"tokens": out.sequences[0, len(ids):].tolist(), "steps": steps,
            "top2_logit_gap": [round(g, 5) for g in gaps], "min_top2_logit_gap": round(min(gaps), 5),
            "note": "transformers generate, float32, do_sample=False"}


def genai_tokens(py: str, folder: Path, steps: int, ids: list[int] | None = None,
                 image: Path | None = None, prompt: str | None = None, save_pv: Path | None = None) -> dict:
    cmd = [py, str(HERE / "genai_run.py"), str(folder), "--steps", str(steps)]
    cmd += ["--ids", ",".join(map(str, ids))] if ids is not None else ["--image", str(image), "--prompt", prompt]
    cmd += ["--save-pixel-values", str(save_pv)] if save_pv is not None else []
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def text_prompt(hf_dir: Path) -> tuple[str, list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_dir)
    text = tok.apply_chat_template(TEXT_MESSAGES, tokenize=False, add_generation_prompt=True)
    return text, tok(text, add_special_tokens=False).input_ids


def build(args: argparse.Namespace, work: Path) -> None:
    hf_text, hf_vlm = work / "hf-text", work / "hf-vlm"
    for d in (hf_text, hf_vlm):
        shutil.rmtree(d, ignore_errors=True)
    hm.make_text(hf_text, TEXT_SEED)
    hm.make_vlm(hf_vlm, VLM_SEED)
    v = {"transformers_hf": transformers.__version__, "torch": torch.__version__,
         "onnxruntime_genai_builder": pip_version(args.py18, "onnxruntime-genai"),
         "transformers_builder": pip_version(args.py18, "transformers"),
         "onnxruntime_genai_expected": pip_version(args.genai_py, "onnxruntime-genai")}
    try:
        v["optimum_onnx"] = pip_version(sys.executable, "optimum-onnx")
    except subprocess.CalledProcessError:
        v["optimum_onnx"] = None
    text, ids = text_prompt(hf_text)
    hf_long = hf_text_tokens(hf_text, ids, STEPS_LONG)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (prec, ep, extra) in BUILDER_FOLDERS.items():
        if args.only and name not in args.only:
            continue
        dest = out / name
        shutil.rmtree(dest, ignore_errors=True)
        src = hf_vlm if name == "builder-vlm" else hf_text
        cmd = [args.py18, str(HERE / "builder18.py"), "-i", str(src), "-o", str(dest), "-p", prec, "-e", ep,
               "-c", str(work / "cache")]
        if extra:
            cmd += ["--extra_options", *extra]
        run(cmd, work / f"{name}.log")
        shown = ["python", "-m", "onnxruntime_genai.models.builder", "-i", "HF_DIR", "-o", name, "-p", prec,
                 "-e", ep] + (["--extra_options", *extra] if extra else [])
        made = {"command": " ".join(shown), "via": "scripts/exported/builder18.py (rope config flattened)",
                "hf_dir": src.name, "seed": VLM_SEED if name == "builder-vlm" else TEXT_SEED, "versions": v}
        if name == "builder-vlm":
            vlmexport.complete_vlm_folder(hf_vlm, dest, made)
            vlm_expected(args, hf_vlm, dest, made)
            continue
        exp = {"folder": name, "made_by": made, "prompt": {"messages": TEXT_MESSAGES, "text": text, "input_ids": ids},
               "hf_float32_greedy": hf_long}
        if name in GENAI_CPU_RUNS:
            exp["onnxruntime_genai_cpu_greedy"] = genai_tokens(args.genai_py, dest, STEPS_LONG, ids=ids)
        else:
            exp["onnxruntime_genai_cpu_greedy"] = {"not_run": "CUDA export: q/k norms inside GroupQueryAttention "
                                                   "and fp16 GQA are CUDA-only; run on a GPU "
                                                   "(scripts/exported/genai_run.py FOLDER --steps 200)"}
        write_expected(dest, exp)
    if not args.only or "optimum-text" in args.only:
        optimum_folder(args, work, out / "optimum-text", hf_text, text, ids, hf_long, v)


def optimum_folder(args, work: Path, dest: Path, hf_text: Path, text: str, ids: list[int], hf_long: dict,
                   v: dict) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    cli = str(Path(sys.executable).with_name("optimum-cli"))
    run([cli, "export", "onnx", "--model", str(hf_text), "--task", "text-generation-with-past", str(dest)],
        work / "optimum-text.log")
    vlmexport.write_optimum_genai_config(dest)
    made = {"command": "optimum-cli export onnx --model HF_DIR --task text-generation-with-past optimum-text",
            "genai_config.json": "written by hand (scripts/exported/vlmexport.py write_optimum_genai_config)",
            "hf_dir": hf_text.name, "seed": TEXT_SEED, "versions": v}
    exp = {"folder": "optimum-text", "made_by": made,
           "prompt": {"messages": TEXT_MESSAGES, "text": text, "input_ids": ids},
           "hf_float32_greedy": hf_long,
           "onnxruntime_genai_cpu_greedy": genai_tokens(args.genai_py, dest, STEPS_LONG, ids=ids)}
    write_expected(dest, exp)


def vlm_expected(args, hf_vlm: Path, dest: Path, made: dict) -> None:
    from transformers import AutoTokenizer, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

    # The slow (PIL) image processor with the fast tokenizer: AutoProcessor(use_fast=False) would want a
    # SentencePiece model file, and the fast image processor needs torchvision.
    proc = Gemma3Processor(image_processor=Gemma3ImageProcessor.from_pretrained(hf_vlm),
                           tokenizer=AutoTokenizer.from_pretrained(hf_vlm), chat_template=hm.CHAT_TEMPLATE,
                           image_seq_length=hm.MM_TOKENS)
    model = Gemma3ForConditionalGeneration.from_pretrained(hf_vlm, dtype=torch.float32).eval()
    images = {"image_64x64.png": ((64, 64), "RGB"), "image_57x41_rgba.png": ((57, 41), "RGBA"),
              "image_48x36_gray.jpg": ((48, 36), "L"), "image_2000x1500.png": ((2000, 1500), "RGB")}
    (dest / "pixel_values").mkdir()
    exp: dict = {"folder": dest.name, "made_by": made, "messages": VLM_MESSAGES, "images": {}}
    for fname, (size, mode) in images.items():
        path = dest / fname
        demo_image(path, size, mode)
        prompt = proc.apply_chat_template(VLM_MESSAGES, tokenize=False, add_generation_prompt=True)
        # add_special_tokens=False as Gemma3Processor.apply_chat_template(tokenize=True) passes it: the
        # template already starts with <bos> (processor(text=...) alone would give <bos><bos>).
        inputs = proc(text=prompt, images=Image.open(path).convert("RGB"), return_tensors="pt",
                      add_special_tokens=False)
        ids = inputs["input_ids"][0].tolist()
        pv = inputs["pixel_values"].to(torch.float64)
        np.save(dest / "pixel_values" / f"hf_{path.stem}.npy", inputs["pixel_values"].numpy().astype(np.float32))
        entry = {"sha256": sha256(path), "size": list(size), "mode": mode, "prompt_text": prompt,
                 "hf_processor": {"input_ids": ids, "token_type_ids_sum": int(inputs["token_type_ids"].sum()),
                                  "pixel_values_shape": list(pv.shape), "pixel_values_sum": float(pv.sum()),
                                  "pixel_values_abs_sum": float(pv.abs().sum())}}
        with torch.no_grad():
            kw = dict(max_new_tokens=STEPS_VLM, do_sample=False, top_k=None, top_p=None)
            causal = model.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                    pixel_values=inputs["pixel_values"], **kw)
            bidir = model.generate(**inputs, **kw)
        entry["hf_float32_greedy_causal"] = {"tokens": causal[0, len(ids):].tolist(), "steps": STEPS_VLM,
                                             "note": "no token_type_ids: every token causal, as the exported decoder"}
        entry["hf_float32_greedy_bidirectional_images"] = {
            "tokens": bidir[0, len(ids):].tolist(), "steps": STEPS_VLM,
            "note": "with token_type_ids: image tokens attend to each other both ways (HF only)"}
        genai_prompt = prompt  # onnxruntime-genai expands <start_of_image> itself, as HF does
        entry["onnxruntime_genai_cpu_greedy"] = genai_tokens(args.genai_py, dest, STEPS_VLM, image=path,
                                                             prompt=genai_prompt,
                                                             save_pv=dest / "pixel_values" / f"genai_{path.stem}.npy")
        exp["images"][fname] = entry
    write_expected(dest, exp)


def write_expected(dest: Path, exp: dict) -> None:
    (dest / "expected.json").write_text(json.dumps(exp, indent=1) + "\n")
    print("wrote", dest / "expected.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--py18", required=True, help="python of a venv with onnxruntime-genai 0.18 + transformers 5.x")
    ap.add_argument("--genai-py", required=True, help="python with the onnxruntime-genai that gives expectations")
    ap.add_argument("--work", default=str(Path.home() / ".cache" / "vlmdecode-exported"))
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--out", default=str(REPO / "tests" / "data" / "exported"))
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    build(args, work)


if __name__ == "__main__":
    main()
