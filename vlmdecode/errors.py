"""The processor's error type, shared by its modules (images, imageconfig, chat, processor)."""

from __future__ import annotations


class ProcessorError(ValueError):
    """A prompt, image, id sequence or config file that the processor cannot accept; the message says why
    and what is accepted."""
