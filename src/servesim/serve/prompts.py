"""From an OpenAI request's prompt to what the simulated engine needs: a token count and block ids.

The engines' prefix caches work on block ids (``Request.hash_ids``): equal ids at the same
position mean identical content.  A served prompt is cut into blocks of ``block_size``
tokens and each block gets a chained hash (its content and every block before it), so two
requests that share a leading run of text share the leading block ids, and the simulated cache
hits as the real one would.

Token counts: a prompt given as token ids (``prompt: [1, 2, ...]``, as benchmark clients send
random datasets) counts exactly.  Text is counted by a tokenizer when one is configured
(``--tokenizer PATH``: a local Hugging Face tokenizer folder, read with ``transformers`` when it
is installed; nothing is downloaded), otherwise by the rule of :data:`CHARS_PER_TOKEN`
characters per token (about what BPE tokenizers of English text give; OpenAI's guidance is
"about 4 characters per token").  A chat request's messages are joined as
``role: content`` lines, then counted like a prompt.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

#: Characters per token when no tokenizer is configured.
CHARS_PER_TOKEN = 4

_MASK63 = (1 << 63) - 1


@dataclass(frozen=True)
class EncodedPrompt:
    """A prompt as the simulation sees it."""

    input_length: int
    hash_ids: tuple[int, ...]


def _chain(blocks: Sequence[bytes]) -> tuple[int, ...]:
    """Chained 63-bit hashes of consecutive blocks (a block's id depends on every block before it)."""
    ids = []
    prev = b""
    for block in blocks:
        digest = hashlib.blake2b(prev + block, digest_size=8).digest()
        ids.append(int.from_bytes(digest, "big") & _MASK63)
        prev = digest
    return tuple(ids)


class PromptEncoder:
    """Counts a prompt's tokens and names its blocks of ``block_size`` tokens."""

    def __init__(self, block_size: int, tokenizer_path: str | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.block_size = block_size
        self.tokenizer = _load_tokenizer(tokenizer_path) if tokenizer_path else None

    def encode_ids(self, token_ids: Sequence[int]) -> EncodedPrompt:
        """A prompt given as token ids: exact count, blocks of ids."""
        bs = self.block_size
        blocks = [",".join(map(str, token_ids[i:i + bs])).encode() for i in range(0, len(token_ids), bs)]
        return EncodedPrompt(len(token_ids), _chain(blocks))

    def encode_text(self, text: str) -> EncodedPrompt:
        """A prompt given as text: tokenized when a tokenizer is configured, else counted by rule."""
        if self.tokenizer is not None:
            return self.encode_ids(self.tokenizer.encode(text, add_special_tokens=False))
        n_tokens = max(1, -(-len(text) // CHARS_PER_TOKEN))
        step = self.block_size * CHARS_PER_TOKEN  # a block holds this many characters by the rule
        blocks = [text[i:i + step].encode() for i in range(0, max(len(text), 1), step)]
        return EncodedPrompt(n_tokens, _chain(blocks))

    def encode_chat(self, messages: Sequence[dict]) -> EncodedPrompt:
        """A chat request's messages, joined as ``role: content`` lines."""
        return self.encode_text("\n".join(f"{m.get('role', 'user')}: {_content_text(m.get('content'))}"
                                          for m in messages))


def _content_text(content) -> str:
    """A message's content as text (a string, or the text parts of a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def _load_tokenizer(path: str):
    """A local Hugging Face tokenizer (never downloaded)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # an explicit --tokenizer without the library is an error, not a silent fallback
        raise ValueError("--tokenizer needs the 'transformers' package; without it, text is counted at "
                         f"{CHARS_PER_TOKEN} characters per token") from exc
    return AutoTokenizer.from_pretrained(path, local_files_only=True)
