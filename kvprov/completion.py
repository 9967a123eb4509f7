"""`kvprov completion bash|zsh`: a shell completion script for kvprov's commands and options,
generated from the command line's own parser (so it never falls behind a new option).

    source <(kvprov completion bash)                     # this shell; or save it in
    kvprov completion bash > /etc/bash_completion.d/kvprov
    kvprov completion zsh > "${fpath[1]}/_kvprov"        # zsh, through bashcompinit

Commands, subcommands and an argument's choices complete by name, options by their spellings;
every other word completes as a file name (inventories, --out directories, @retry files)."""

from __future__ import annotations

import argparse

SCRIPT = """\
# kvprov's shell completion (`kvprov completion {shell}`, kvprov {version}): commands, options, files.
_kvprov() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} path="" w i words
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        case "$path/$w" in
{paths}) path="$path/$w" ;;
        esac
    done
    case "$path" in
{words}
    esac
    local names=""  # subcommands or an argument's choices; where there are none, a file
    for w in $words; do [[ $w == -* ]] || names="$names $w"; done
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    elif [[ -n $names ]]; then
        COMPREPLY=($(compgen -W "$names" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _kvprov kvprov
"""


def add_parser(sub) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh)",
                       description="Print a completion script for kvprov's commands and options: "
                                   "`source <(kvprov completion bash)`, or save it where your shell reads "
                                   "completions (e.g. /etc/bash_completion.d/kvprov).")
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(func=cmd_completion)


def commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, list[str]]:
    """{command path ("", "/storage", "/storage/check"): the words that may follow it}."""
    words: list[str] = []
    out: dict[str, list[str]] = {}
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        words += action.option_strings
        if not action.option_strings and action.choices and not isinstance(action, argparse._SubParsersAction):
            words += [str(c) for c in action.choices]  # a positional argument's choices (completion's shell)
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                words.append(name)
                out.update(commands(child, f"{path}/{name}"))
    return {path: words, **out}


def script(shell: str) -> str:
    from kvprov import __version__
    from kvprov.cli import build_parser

    found = commands(build_parser())
    known = " | ".join(f'"{p}"' for p in found if p)
    cases = "\n".join(f'        "{p}") words="{" ".join(w)}" ;;' for p, w in found.items())
    text = SCRIPT.format(shell=shell, version=__version__, paths=f"            {known}", words=cases)
    return ("autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else "") + text


def cmd_completion(args) -> int:
    print(script(args.shell), end="")
    return 0
