"""`kvprov completion bash|zsh` (#39): the script it prints, run by bash as the shell runs a
completion function, completes commands, subcommands, options and choices from the CLI's own
parser, and file names elsewhere."""

import shutil
import subprocess

import pytest

from tests.conftest import kvprov

# Each line as typed; the word being completed is the last (empty after a trailing space).
DRIVE = r'''
source "$1"; shift
for line in "$@"; do
    read -ra COMP_WORDS <<< "$line"
    [[ $line == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _kvprov
    echo "${COMPREPLY[*]}"
done
'''


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_options_choices_and_files(tmp_path):
    script = tmp_path / "kvprov.bash"
    script.write_text(kvprov("completion", "bash", check=True).stdout)
    (tmp_path / "inventory.yml").write_text("all: {}\n")
    lines = ["kvprov de", "kvprov deploy --ch", "kvprov deploy -", "kvprov storage ", "kvprov storage check --ju",
             "kvprov lab u", "kvprov completion ", "kvprov deploy --check inv", "kvprov -"]
    r = subprocess.run(["bash", "-c", DRIVE, "drive", str(script), *lines], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = dict(zip(lines, (set(line.split()) for line in r.stdout.split("\n"))))
    assert got["kvprov de"] == {"deploy"} and got["kvprov deploy --ch"] == {"--check"}
    assert {"-C", "--check", "-D", "-t", "-f", "-l", "--limit", "-i", "--json"} <= got["kvprov deploy -"]
    assert {"--skip-tags", "--list-hosts", "--private-key", "-k", "--ask-pass", "-b", "--become", "--become-user",
            "-K", "-u"} <= got["kvprov deploy -"]  # #39: ansible-playbook's connection and run options
    assert "--namespaces" not in got["kvprov deploy -"]  # check's, not deploy's
    assert got["kvprov storage "] == {"check"} and got["kvprov storage check --ju"] == {"--junit"}
    assert got["kvprov lab u"] == {"up"} and got["kvprov completion "] == {"bash", "zsh"}
    assert got["kvprov deploy --check inv"] == {"inventory.yml"}  # a file where no name is due
    assert {"--help", "--version"} <= got["kvprov -"]


def test_zsh_gets_the_same_function_through_bashcompinit():
    bash, zsh = (kvprov("completion", shell, check=True).stdout for shell in ("bash", "zsh"))
    assert zsh.startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert zsh.split("\n", 1)[1] == bash.replace("completion bash", "completion zsh")
    assert kvprov("completion", "fish").returncode == 2
