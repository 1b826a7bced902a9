"""Hostile llama-swap config.yaml files, generated: one maker per class of fault from issue 26
(macro expansion, YAML merge keys, quoting and line ends, values SpecDeck cannot write, old
flag spellings, names with terminal escapes). Each returns the file's text; the tests write it
into tmp_path themselves.

llama-swap's own behaviour these follow is at 0bdb3720 (internal/config/macros.go,
commands.go); the comments say what llama-swap does with each file.
"""

from __future__ import annotations

SERVER = "/opt/llama.cpp/build/bin/llama-server"


def macro_bomb(levels: int = 40, seed: str = "-c 1") -> str:
    """Each macro uses the one before twice: ${m<levels-1>} is 2^levels copies of the seed
    (llama-swap itself would build it: it has no bound). The file is a few hundred bytes."""
    lines = ["macros:", f'  m0: "{seed} "']
    lines += [f'  m{i}: "${{m{i - 1}}}${{m{i - 1}}}"' for i in range(1, levels)]
    lines += ["models:", "  bomb:", f"    cmd: {SERVER} -m /m/t.gguf ${{m{levels - 1}}}",
              "  plain:", f"    cmd: {SERVER} -m /m/t.gguf -md /m/d.gguf"]
    return "\n".join(lines) + "\n"


def macro_cycle() -> str:
    """a uses b, b uses a: llama-swap leaves ${a} or ${b} unresolved and refuses the config."""
    return f"""\
macros:
  a: "-md ${{b}}"
  b: "${{a}} --spec-type draft-simple"
models:
  looped:
    cmd: {SERVER} -m /m/t.gguf ${{a}}
"""


def macro_self() -> str:
    """A macro that uses itself: llama-swap's validateMacro refuses it by name."""
    return f"""\
macros:
  me: "-c ${{me}}"
models:
  selfish:
    cmd: {SERVER} ${{me}}
"""


def macro_chain(depth: int = 20) -> str:
    """A valid chain: each macro uses the one declared just before it, the last holds the
    drafting flags. llama-swap resolves it in one pass (last declared first), any depth."""
    lines = ["macros:", f'  l0: "{SERVER} -m /m/t.gguf"']
    lines += [f'  l{i}: "${{l{i - 1}}}' + (' -md /m/d.gguf --spec-type draft-simple"'
                                          if i == depth else '"') for i in range(1, depth + 1)]
    lines += ["models:", "  deep:", f"    cmd: ${{l{depth}}} --spec-draft-n-max 8"]
    return "\n".join(lines) + "\n"


def macro_forward() -> str:
    """A macro used before it is declared: llama-swap leaves it unresolved and refuses."""
    return f"""\
macros:
  server: "{SERVER} ${{draft}}"
  draft: "-md /m/d.gguf --spec-type draft-simple"
models:
  early:
    cmd: ${{server}} -m /m/t.gguf
"""


def merge_keys() -> str:
    """Models through YAML merge keys and aliases (yaml.v3 and ruamel resolve both): one
    shared cmd for three models, one that overrides it, one merged from a list."""
    return f"""\
x-base: &base
  cmd: {SERVER} -m /m/t.gguf -md /m/d.gguf --draft-max 16
  ttl: 300
x-ttl: &short
  ttl: 60
  cmd: {SERVER} -m /m/never-used.gguf
models:
  merged:
    <<: *base
    ttl: 600
  aliased: *base
  listed:
    <<: [*base, *short]
  own:
    <<: *base
    cmd: {SERVER} -m /m/own.gguf -md /m/d.gguf --draft-max 4
"""


def unclosed_quote(quote: str = "'") -> str:
    """A quote never closed on line 6: llama-swap (shlex.Posix) runs the argument to the end
    of the cmd and starts a llama-server with everything after it as one path."""
    return f"""\
models:
  broken:
    cmd: |
      {SERVER}
      -m /m/t.gguf
      -md {quote}/m/my draft.gguf
      --spec-type draft-simple
"""


def cr_only() -> str:
    """Classic Mac line ends: YAML (yaml.v3, ruamel) reads a lone CR as a line break, so
    llama-swap reads this file like its LF twin: a comment line, a backslash continuation."""
    text = f"""\
models:
  old-mac:
    cmd: |
      {SERVER} \\
      -m /m/t.gguf
      # the draft goes on the second GPU
      -md /m/d.gguf --draft-max 16
      --flash-attn
"""
    return text.replace("\n", "\r")


def draft_writable() -> str:
    """A valid plain (unquoted) cmd and a block one: the plain one cannot take a value with
    ': ' or ' #' (YAML would read a key or a comment); no cmd takes a line break."""
    return f"""\
models:
  plain:
    cmd: {SERVER} -m /m/t.gguf
  block:
    cmd: |
      {SERVER} -m /m/t.gguf
"""


def old_flash(flag: str = "-fa") -> str:
    """Last year's command ending in a bare flash-attention flag (it took no value then)."""
    return f"""\
models:
  old:
    cmd: {SERVER} -m /m/t.gguf -md /m/d.gguf {flag}
"""


def escape_name() -> str:
    """A model name with terminal escapes (clear screen, retitle) and HTML in it."""
    return (f'models:\n  "evil\\e[2J\\e]0;owned\\a<b>bold</b>":\n'
            f"    cmd: {SERVER} -m /m/t.gguf\n")


def alias_bomb() -> str:
    """The YAML alias bomb SpecDeck's reader already refuses (for comparison)."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    lines += ["models:", "  m:", f"    cmd: {SERVER}"]
    return "\n".join(lines) + "\n"


HOSTILE = {
    "macro-bomb": macro_bomb,
    "macro-cycle": macro_cycle,
    "macro-self": macro_self,
    "macro-chain": macro_chain,
    "macro-forward": macro_forward,
    "merge-keys": merge_keys,
    "unclosed-quote": unclosed_quote,
    "cr-only": cr_only,
    "draft-writable": draft_writable,
    "old-flash": old_flash,
    "escape-name": escape_name,
    "alias-bomb": alias_bomb,
}
"""Every maker, by name, for tests that go through all of them."""


def write(tmp_path, name: str) -> "object":
    """The named hostile config written to tmp_path/<name>.yaml (bytes as made: a CR stays)."""
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(HOSTILE[name]().encode("utf-8"))
    return path
