"""kvprov loadtest's workload: token counts (the model's tokenizer.json, else the server's
/tokenize, else one token per word), the generated text and the multi-turn conversations
(deterministic for a seed, each user's different from its first word), and the context check
that refuses prompt lengths the model cannot serve before any request is sent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from kvprov.loadtest_client import Client, Endpoint, EndpointError

CHAT_OVERHEAD = 8  # template tokens per chat message, for the context check (a margin, not a count)


# ---------------------------------------------------------------------------- tokens

class TokenCounter:
    """Token counts from the model's tokenizer.json (the `tokenizers` package), or an
    approximation of one token per generated word when that is not readable."""

    def __init__(self, path: str | None = None):
        self.exact, self.path, self.note = False, None, ""
        self._tok = None
        file = _tokenizer_file(path)
        if file is None:
            self.note = (f"approximate: 1 token per word (no tokenizer.json at {path})" if path else
                         "approximate: 1 token per word (no tokenizer given)")
            return
        try:
            from tokenizers import Tokenizer
        except ImportError:
            self.note = f"approximate: 1 token per word (the `tokenizers` package is not installed; {file} unread)"
            return
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as e:  # a corrupt or foreign file: say so, approximate
            self.note = f"approximate: 1 token per word ({file}: {e})"
            return
        self.exact, self.path, self.note = True, str(file), f"exact: {file}"

    def count(self, text: str) -> int:
        if self._tok is None:
            return len(text.split())
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def head(self, text: str, tokens: int) -> str:
        """The start of `text` that is its first `tokens` tokens."""
        return text[:self._tok.encode(text, add_special_tokens=False).offsets[tokens - 1][1]]

    def describe(self) -> dict:
        return {"exact": self.exact, "path": self.path, "note": self.note}


class ServerTokens:
    """Token counts by the server's own tokenizer: POST /tokenize and /detokenize, which vLLM and
    SGLang both serve (the text alone, no special tokens, as TokenCounter counts)."""

    exact, path = True, None
    note = "exact: the server's /tokenize"

    def __init__(self, client: "Client", model: str | None):
        self.client, self.model = client, model

    def ids(self, text: str) -> list[int]:
        got = self.client.get_json("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        if not isinstance(got.get("tokens"), list):
            raise EndpointError("POST /tokenize did not answer a token list")
        return got["tokens"]

    def count(self, text: str) -> int:
        return len(self.ids(text))

    def head(self, text: str, tokens: int) -> str:
        got = self.client.get_json("/detokenize", {"model": self.model, "tokens": self.ids(text)[:tokens]})
        out = got.get("prompt", got.get("text"))  # vLLM: prompt; SGLang: text
        if not isinstance(out, str):
            raise EndpointError("POST /detokenize did not answer a text")
        return out

    def describe(self) -> dict:
        return {"exact": True, "path": None, "note": self.note}


def token_counter(ep: "Endpoint", timeout: float) -> "TokenCounter | ServerTokens":
    """The model's tokenizer.json on the controller, else the server's /tokenize, else one token
    per word (the note says which, and why)."""
    local = TokenCounter(ep.model_path)
    if local.exact or ep.problem:
        return local
    server = ServerTokens(Client(ep, timeout), ep.model)
    try:
        server.count("kvprov")
    except EndpointError as e:
        local.note += f"; the server's /tokenize: {e}"
        return local
    return server


def _tokenizer_file(path: str | None) -> Path | None:
    if not path:
        return None
    candidates = [Path(path)]
    try:  # the lab's model: containers see <lab home>/models read-only at CONTAINER_MODELS
        from kvprov.lab import topology
        if path.startswith(topology.CONTAINER_MODELS + "/"):
            candidates.append(topology.models_dir() / path[len(topology.CONTAINER_MODELS) + 1:])
    except Exception:
        pass
    for p in candidates:
        f = p if p.name.endswith(".json") else p / "tokenizer.json"
        try:
            if f.is_file():
                return f
        except OSError:
            continue
    return None


# ---------------------------------------------------------------------------- text and conversations

WORDS = ("cache page token prefix layer block tier storage memory host device read write hit miss engine server "
         "model prompt request batch chunk file mount pool queue offload restore the a of to and in is on for with "
         "that it as by from at this be are was data volume network latency through answer question").split()


def make_text(counter: TokenCounter, tokens: int, rng: random.Random, head: str = "") -> str:
    """Text of `tokens` tokens (exact with a tokenizer, within a token or two after trimming;
    one word per token otherwise), starting with `head` (makes each conversation unique)."""
    if tokens <= 0:
        return head
    words = head.split() + [rng.choice(WORDS) for _ in range(tokens)]
    if not counter.exact:
        return " ".join(words[:tokens])
    text = " ".join(words)
    while counter.count(text) < tokens:  # rare: more words than tokens
        words += [rng.choice(WORDS) for _ in range(tokens)]
        text = " ".join(words)
    keep = tokens
    for _ in range(8):  # re-tokenizing a cut text can merge differently: cut shorter until it fits
        cut = counter.head(text, keep)
        n = counter.count(cut)
        if n <= tokens or keep <= 1:
            break
        keep = max(1, keep - (n - tokens))
    text = cut
    return text


@dataclass
class Conversation:
    """One user's conversation: the first message and one more per later turn."""

    user: int
    prompt_tokens: int  # the first message's length (target)
    messages: list[str]  # user messages, turn 1..N
    message_tokens: list[int]  # their counted lengths


def make_conversations(counter: TokenCounter, prompt_tokens: int, users: int, turns: int, turn_tokens: int,
                       seed: str) -> list[Conversation]:
    """`users` conversations of `turns` user messages; the first of `prompt_tokens` tokens, each later one
    of `turn_tokens`. Deterministic for a seed; each user's text differs from its first word."""
    out = []
    for u in range(users):
        rng = random.Random(f"{seed}/{prompt_tokens}/{u}")
        head = f"Conversation {rng.getrandbits(48):012x} of user {u}:"
        msgs = [make_text(counter, prompt_tokens, rng, head)]
        msgs += [make_text(counter, turn_tokens, rng, f"Turn {t} question:") for t in range(2, turns + 1)]
        out.append(Conversation(u, prompt_tokens, msgs, [counter.count(m) for m in msgs]))
    return out


# ---------------------------------------------------------------------------- the context check

def context_needed(prompt_tokens: int, turns: int, turn_tokens: int, output_tokens: int) -> int:
    """Tokens the last turn needs: every user message, every earlier answer, the answer, template margin."""
    return (prompt_tokens + (turns - 1) * (turn_tokens + output_tokens) + output_tokens
            + CHAT_OVERHEAD * 2 * turns)


# Without a tokenizer a generated word may be a token per byte plus its space (a byte-level BPE at
# worst): the context guard assumes that many tokens per word, not one.
WORST_TOKENS_PER_WORD = max(map(len, WORDS)) + 1


def context_problems(endpoints: list[Endpoint], lengths: list[int], turns: int, turn_tokens: int,
                     output_tokens: int, approximate: frozenset[str] = frozenset()) -> list[str]:
    """Why each length would overflow an endpoint's context; `approximate`: endpoints whose tokens
    are counted as words (their text is judged at WORST_TOKENS_PER_WORD)."""
    out = []
    for ep in endpoints:
        if ep.problem or not ep.max_model_len:
            continue
        per_word = WORST_TOKENS_PER_WORD if ep.name in approximate else 1
        for n in lengths:
            need = context_needed(n * per_word, turns, turn_tokens * per_word, output_tokens)
            if need > ep.max_model_len and per_word > 1:
                out.append(f"--prompt-tokens {n}: without a tokenizer for {ep.name} (no tokenizer.json on this "
                           f"controller and no /tokenize on the server) {n} words may be up to {n * per_word} "
                           f"tokens, and {turns} turns up to {need}, over its max_model_len {ep.max_model_len} "
                           f"({ep.max_model_len_from}): give --tokenizer, or lower --prompt-tokens")
                continue
            if need > ep.max_model_len:
                out.append(f"--prompt-tokens {n}: {turns} turns need up to {need} tokens of context (prompt, "
                           f"{turns - 1} x ({turn_tokens} question + {output_tokens} answer), {output_tokens} output, "
                           f"template margin) but {ep.name} serves at most max_model_len {ep.max_model_len} "
                           f"({ep.max_model_len_from})")
    return out
