"""Text from files and servers reaches the terminal with its control characters escaped."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from specdeck.core.printable import SafeTextStream, printable

HOSTILE = "evil\x1b[2J\x1b]0;pwned\x07\x9b31m\u202egnp.exe\x00"


def test_printable_escapes_every_control_and_bidi_character():
    shown = printable(HOSTILE)
    assert shown == "evil\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202egnp.exe\\x00"
    assert printable("a\nb\tc") == "a\\x0ab\\x09c"
    assert printable("a\nb\tc", newlines=True) == "a\nb\tc"
    assert printable("Qwen2.5-0.5B — ünïcode") == "Qwen2.5-0.5B — ünïcode"


def test_safe_stream_keeps_line_breaks_and_progress_returns():
    out = io.StringIO()
    stream = SafeTextStream(out)
    assert stream.write("50%\r100%\n" + HOSTILE + "\tend\n") == len("50%\r100%\n" + HOSTILE) + 5
    text = out.getvalue()
    assert text.startswith("50%\r100%\nevil\\x1b[2J")
    assert not any(c in text for c in "\x1b\x07\x9b\u202e\x00")
    assert stream.getvalue() == text  # everything else is the wrapped stream's


def test_cli_prints_a_hostile_model_name_escaped(tmp_path, specdeck_home):
    config = tmp_path / "config.yaml"
    config.write_text('models:\n  "evil\\e[2J\\e]0;pwned\\a":\n'
                      '    cmd: llama-server --port ${PORT} -m /m/a.gguf\n', encoding="utf-8")
    for extra in ([], ["--json"]):
        done = subprocess.run([sys.executable, "-m", "specdeck", "swap", "show", "--config",
                               str(config), *extra], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
        assert done.returncode == 0, done.stderr
        assert "evil" in done.stdout
        assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout
