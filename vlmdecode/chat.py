"""A folder's chat template, rendered as transformers' `apply_chat_template` renders it; Gemma 3's image text.

    ChatTemplate.load(root, tokenizer_config) -> the template of chat_template.jinja, else of
        tokenizer_config.json's "chat_template" (a string, or a list of {name, template}: "default"),
        the file transformers prefers when both exist; None when the folder has neither.
    template.render(messages, add_generation_prompt=True) -> the prompt text. Rendered with jinja2 in
        an immutable sandbox with trim_blocks / lstrip_blocks and the loop-controls extension, with
        `messages`, `add_generation_prompt`, every special token of tokenizer_config.json
        (`bos_token`, `eos_token`, ...), and `raise_exception` / `strftime_now`, as transformers does.
    image_sequence(tokens, n) -> what Gemma 3's processor puts for each image placeholder:
        "\\n\\n" + boi + image_token * n + eoi + "\\n\\n" (transformers' Gemma3Processor.full_image_sequence).

Not here: tokenization (processor). A template error is a ProcessorError carrying jinja2's message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .errors import ProcessorError

TEMPLATE_FILE = "chat_template.jinja"


def image_sequence(boi: str, image_token: str, eoi: str, n: int) -> str:
    return f"\n\n{boi}{image_token * n}{eoi}\n\n"


def _token_text(v):
    """tokenizer_config.json writes a special token as a string or as an AddedToken object {"content": ...}."""
    return v.get("content") if isinstance(v, dict) else v


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    text: str
    special: dict  # name -> token text passed to the template (bos_token, eos_token, ...)

    @staticmethod
    def load(root: Path, tokenizer_config: dict) -> ChatTemplate | None:
        special = {k: _token_text(v) for k, v in tokenizer_config.items()
                   if k.endswith("_token") and isinstance(_token_text(v), str)}
        path = root / TEMPLATE_FILE
        if path.is_file():
            try:
                return ChatTemplate(str(path), path.read_text(encoding="utf-8"), special)
            except UnicodeDecodeError as e:
                raise ProcessorError(f"{path}: not UTF-8 text ({e})") from None
        t = tokenizer_config.get("chat_template")
        where = f"{root / 'tokenizer_config.json'}: chat_template"
        if t is None:
            return None
        if isinstance(t, list):
            named = {e.get("name"): e.get("template") for e in t if isinstance(e, dict)}
            if "default" not in named:
                raise ProcessorError(f"{where} is a list without a 'default' entry (names: {sorted(named)})")
            t = named["default"]
        if not isinstance(t, str):
            raise ProcessorError(f"{where} must be a string or a list of {{name, template}}, got {type(t).__name__}")
        return ChatTemplate(where, t, special)

    def markers(self) -> list[str]:
        """The <...> special-token literals the template writes (Gemma's <start_of_turn>, <end_of_turn>, ...)."""
        return sorted(set(re.findall(r"<[A-Za-z0-9_|]{1,64}>", self.text)))

    def render(self, messages: list, add_generation_prompt: bool = True) -> str:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
            x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)  # transformers' tojson
        try:
            return env.from_string(self.text).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                     **self.special)
        except jinja2.exceptions.TemplateError as e:
            raise ProcessorError(f"the chat template ({self.source}) failed: {e}") from None
