"""The wheel carries the Ansible collection kvprov.kvprov (issue #25, "a wheel is the product").

The collection's root is the repository root (galaxy.yml, roles/, playbooks/, plugins/,
meta/), outside the Python package. build_py copies it into the build as
kvprov/collection/ansible_collections/kvprov/kvprov, a collections directory as Ansible looks
one up, so an installed kvprov finds its roles and modules inside itself (kvprov/paths.py)
and points ANSIBLE_COLLECTIONS_PATH at kvprov/collection. A checkout and an editable install
(`pip install -e .`) copy nothing: they use the repository root, as before. Everything else
is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# What Ansible reads at run time, and the readme galaxy.yml names (docs/collection.md), so the
# bundled directory is a whole collection (ansible-galaxy collection build accepts it too).
COLLECTION = ("galaxy.yml", "LICENSE", "ansible.cfg", "meta", "playbooks", "plugins", "roles", "docs/collection.md")
BUNDLE = Path("kvprov", "collection", "ansible_collections", "kvprov", "kvprov")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.retry")


class build_py_with_collection(build_py):
    def run(self):
        if self.editable_mode:
            return super().run()
        missing = [name for name in COLLECTION if not (HERE / name).exists()]
        if missing:  # a wheel without its roles fails at run time: refuse to build one
            raise SystemExit(f"kvprov's collection is incomplete here ({HERE}): no {', '.join(missing)}")
        # The package is built anew: setuptools reuses build/lib and only adds to it, so a
        # module or role file removed since the last build would still travel in the wheel.
        shutil.rmtree(Path(self.build_lib, "kvprov"), ignore_errors=True)
        super().run()
        dest = Path(self.build_lib, BUNDLE)
        for name in COLLECTION:
            source, target = HERE / name, dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():  # links (roles/desired_state's) are copied as the files they name
                shutil.copytree(source, target, ignore=IGNORE)
            else:
                shutil.copy2(source, target)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        bundle = Path(self.build_lib, "kvprov", "collection")
        if self.editable_mode or not bundle.is_dir():
            return outputs
        return outputs + [str(p) for p in sorted(bundle.rglob("*")) if p.is_file()]


setup(cmdclass={"build_py": build_py_with_collection})
