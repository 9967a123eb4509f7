"""Volume identity as a property (#41 item 2): hosts whose storage server and export are spelled
differently but name one volume (the server's name in any case; the export with doubled, leading
// or trailing slashes and . components, as Linux resolves it) have one volume and one path on it
in `kvprov check`'s fleet rules, so the rules that compare hosts sharing a volume (one namespace's
seed and uid, nested directories) see them together; exports that differ stay apart."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvprov import check, inventory

ROLES = inventory.roles_dir()
SPECS = check.read_specs(ROLES)
DEFAULTS = inventory.read_role_defaults(ROLES)
COMPONENTS = st.lists(st.sampled_from(["kv", "vol", "kvcache", "a.b", "x_y", "svm-1"]), max_size=3)


@st.composite
def spelled(draw, components: list[str]) -> str:
    """One of the many ways to write the export made of these components."""
    out = draw(st.sampled_from(["/", "//", "///"]))
    for c in components:
        out += c + draw(st.sampled_from(["/", "//", "/./"]))
    if draw(st.booleans()):
        out = out.rstrip("/") or "/"
    return out + draw(st.sampled_from(["", ".", "/."])) if out.endswith("/") else out


@st.composite
def cased(draw, name: str) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c for c in name)


def volume(server: str, export: str) -> tuple:
    values = {"kvprov_storage_server": server, "kvprov_storage_export": export, "kvprov_engine": "lmcache_inproc",
              "kvprov_engine_model_revision": "0123abc", "kvprov_engine_uid": 2001}
    [d] = check.storage_dirs(check.HostView(check.host_from_values("h", values, DEFAULTS), SPECS))
    return d.volume, d.volume_path


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.data(), COMPONENTS, st.sampled_from(["nas1.example.com", "svm-kv.corp", "10.0.0.5"]))
def test_equivalent_spellings_are_one_volume(data, components, server):
    canonical = volume(server, "/" + "/".join(components))
    assert volume(data.draw(cased(server)), data.draw(spelled(components))) == canonical


@settings(max_examples=100, derandomize=True, deadline=None)
@given(st.data(), COMPONENTS, COMPONENTS)
def test_different_exports_are_different_volume_paths(data, one, other):
    if one == other:
        return
    assert volume("nas1", data.draw(spelled(one))) != volume("nas1", data.draw(spelled(other)))
