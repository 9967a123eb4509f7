"""Redaction as a property, not examples (#41, item 2): any secret kvprov can hold, placed in
any of the places secrets travel through the files, units and command lines an audit diffs,
is never shown, not even in part; the text around it stays. test_redact.py holds the examples."""

import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kvprov import redact
from kvprov.check.values import SECRET_VALUE

settings.register_profile("kvprov", max_examples=300, deadline=None, database=None, derandomize=True)
settings.load_profile("kvprov")

# every value a secret file may hold (kvprov check's SECRET_VALUE: what systemd's EnvironmentFile=
# takes as it is),
# long enough that finding it in the output means it was shown; not a whole {table} or [list], which
# YAML, TOML and JSON read as one, not as a string
SECRET = st.from_regex(SECRET_VALUE, fullmatch=True).filter(
    lambda s: len(s) >= 6 and not re.fullmatch(r"\{.*\}|\[.*\]", s))
NAME = st.sampled_from(["VLLM_API_KEY", "HF_TOKEN", "aws_secret_access_key", "password", "api-key", "ADMIN_PASSWD",
                        "s3_secret", "x_auth_token", "Credentials"])
FLAG = st.sampled_from(["--api-key", "--admin-api-key", "--hf-token", "--password", "--secret-key"])
# (place, how the secret is written there): each a line of a file, unit or command line kvprov or an
# operator writes; {n} a secret name, {f} a flag, {s} the secret
PLACES = {
    "env file": "{n}={s}",
    "env file, quoted": 'export {n}="{s}"',
    "YAML": "  {n}: {s}",
    "YAML, quoted": "  {n}: '{s}'",
    "TOML": '{n} = "{s}"',
    "INI": "{n} = {s}",
    "JSON": '{{"{n}": "{s}", "port": 8000}}',
    "unit Environment=, quoted": 'Environment="{n}={s}" "PORT=8000"',
    "unit Environment=, a plain word": "Environment={n}={s}",
    "command line": "ExecStart=/opt/v/bin/python3 -m x {f} {s} --port 8000",
    "command line, =": "ExecStart=/opt/v/bin/python3 -m x {f}={s} --port 8000",
    "command line, quoted": 'ExecStart=/x {f} "{s}" --port 8000',
    "HTTP header": "Authorization: Bearer {s}",
    "curl": 'curl -H "Authorization: Bearer {s}" https://127.0.0.1:8000/v1/models',
}
# a URL's password is written percent-encoded: what remains are unreserved and sub-delimiter characters
URL_SECRET = st.from_regex(r"[A-Za-z0-9._~!&()*+,;=%-]{6,24}", fullmatch=True)


def shown_part(secret: str, text: str, around: str) -> str | None:
    """The longest run of 4+ characters of the secret that the text shows and the line's own text
    around it does not hold, or None."""
    for size in range(len(secret), 3, -1):
        for i in range(len(secret) - size + 1):
            part = secret[i:i + size]
            if part in text and part not in around:
                return part
    return None


@given(place=st.sampled_from(sorted(PLACES)), name=NAME, flag=FLAG, secret=SECRET)
def test_a_secret_in_any_place_is_never_shown(place, name, flag, secret):
    template = PLACES[place]
    assume(not (secret.startswith("-") and "{f} {s}" in template))  # a flag's value never starts with -
    line = template.format(n=name, f=flag, s=secret)
    around = template.format(n=name, f=flag, s="")
    out = redact.redact_line(line)
    assert shown_part(secret, out, around) is None, (place, line, out)
    assert redact.REDACTED in out
    # what surrounds the secret stays: the name or flag, and the text before it
    assert out.startswith(line[:line.index(secret)].rstrip("\"'")), (line, out)


@given(secret=URL_SECRET, scheme=st.sampled_from(["https", "postgres", "s3", "redis"]))
def test_a_url_password_is_never_shown(secret, scheme):
    for line in (f"DATABASE_URL={scheme}://svc:{secret}@db.example:5432/x",
                 f"ExecStart=/x --url {scheme}://svc:{secret}@h/x --port 1"):
        out = redact.redact_line(line)
        assert shown_part(secret, out, line.replace(secret, "")) is None, (line, out)
        assert f"{scheme}://svc:" in out


@given(secret=SECRET, lines=st.lists(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
                                     max_size=4))
def test_a_secret_file_shows_nothing_of_its_content(secret, lines):
    diff = ["--- a/etc/kvprov/secrets/engine.env\n", "+++ b/etc/kvprov/secrets/engine.env\n", "@@ -1 +1 @@\n",
            f"-VLLM_API_KEY={secret}\n", *[f"+{line}\n" for line in lines], f"+{secret}\n"]
    out, redacted = redact.redact_diff(diff, "/etc/kvprov/secrets/engine.env")
    assert redacted and not any(secret in line for line in out[3:])
    assert out[:3] == diff[:3] and len(out) == len(diff)


# A value that only starts like a reference ($NAME, ${NAME}) is a secret all the same: an operator's
# password may begin with $ in the files an audit diffs (kvprov's own secret files cannot hold one).
# Only a whole reference is kept (test_redact.py).
REF_LIKE = st.builds(lambda ref, rest: ref + rest,
                     st.from_regex(r"\$(\{[A-Za-z_][A-Za-z0-9_]{0,8}\}|[A-Za-z_][A-Za-z0-9_]{0,8})", fullmatch=True),
                     st.from_regex(r"[-!#%&()*+,./:;<=>?@^\]][!#%&(-\[\]-_a-~]{3,16}", fullmatch=True))


@given(place=st.sampled_from(sorted(PLACES)), name=NAME, flag=FLAG, secret=REF_LIKE)
def test_a_secret_that_starts_like_a_reference_is_never_shown(place, name, flag, secret):
    line = PLACES[place].format(n=name, f=flag, s=secret)
    out = redact.redact_line(line)
    assert shown_part(secret, out, PLACES[place].format(n=name, f=flag, s="")) is None, (place, line, out)
