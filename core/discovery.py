"""What a first launch can find on this machine, each with the next step: NVIDIA GPUs, a
TabbyAPI config.yml, a llama-swap config, LLM servers answering on their usual local ports.

Read-only and quick: files are only looked for at the usual places, servers are asked on
127.0.0.1 with a short timeout, in parallel. Nothing here imports Qt.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.userpath import expand_user

USUAL_PORTS = {
    8080: "llama-server / llama-swap",
    5000: "TabbyAPI",
    8000: "vLLM",
    1234: "LM Studio",
    11434: "Ollama",
}
"""Each server's default port (TabbyAPI's config_sample network.port, llama-server's
--port, vLLM's --port, LM Studio's server, Ollama's OLLAMA_HOST)."""
CONNECT_TIMEOUT_S = 0.3
TUNE_TABBY_FOLDER, TUNE_TABBY_CONFIG = "tabby-folder:", "tabby-config:"
"""The Tune page's argument for a TabbyAPI found: its folder (a TabbyAPI install, main.py
beside config.yml: SpecDeck can start it), else its config.yml (a running one's)."""


@dataclass(frozen=True)
class Discovery:
    what: str
    """One line: what was found (or not)."""
    next_step: str
    page: str | None = None
    """The page that takes the next step (a key of gui.pages.PAGES), if any."""
    found: bool = True
    detail: str = ""
    """A path or URL, for the GUI to pass to that page."""
    tune: str = ""
    """The Tune page's argument when this is a setup SpecDeck can tune ("": not one)."""


def _home() -> Path:
    return Path.home()


def tabby_configs(extra: Sequence[Path] = ()) -> list[Path]:
    """config.yml files of TabbyAPI at the usual places (and SpecDeck's remembered one)."""
    from specdeck.core import settings
    from specdeck.core.config.tabby import CONFIG_NAME

    candidates = [*extra]
    remembered = settings.remembered_config()
    if remembered is not None:
        candidates.append(remembered)
    home = _home()
    for folder in ("tabbyAPI", "TabbyAPI", "tabbyapi", "src/tabbyAPI", "git/tabbyAPI"):
        candidates.append(home / folder / CONFIG_NAME)
    seen, found = set(), []
    for path in candidates:
        try:
            real = expand_user(path).resolve()
        except OSError:
            continue
        if real not in seen and real.is_file():
            seen.add(real)
            found.append(expand_user(path))
    return found


def tabby_tune_argument(config: Path) -> str:
    """What the Tune page is opened with for a TabbyAPI config.yml found (TUNE_TABBY_*)."""
    if (config.parent / "main.py").is_file():
        return TUNE_TABBY_FOLDER + str(config.parent)
    return TUNE_TABBY_CONFIG + str(config)


def llama_swap_configs() -> list[Path]:
    home = _home()
    candidates = [home / "llama-swap" / "config.yaml", home / ".config" / "llama-swap" / "config.yaml",
                  Path("/etc/llama-swap/config.yaml")]
    return [p for p in candidates if p.is_file()]


def _answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def servers(ports: dict[int, str] | None = None) -> list[Discovery]:
    """The usual ports that answer, each identified by probing (in parallel, quick)."""
    from specdeck.core.servers.probe import probe

    ports = USUAL_PORTS if ports is None else ports

    def look(port: int) -> Discovery | None:
        if not _answers(port):
            return None
        url = f"http://127.0.0.1:{port}"
        try:
            info = probe(url)
        except Exception as exc:  # noqa: BLE001 - anything listening there is worth a line
            reason = getattr(exc, "what", str(exc))
            return Discovery(f"Port {port} answers, but not as an LLM server SpecDeck knows "
                           f"({reason})", "Check what runs there.", None, True, url)
        drafting = {True: "drafting", False: "no drafting", None: "drafting unknown"}
        model = f" with {Path(info.model).name}" if info.model else ""
        return Discovery(f"{info.kind.value} at {url}{model} ({drafting[info.speculative]})",
                       "A/B it against another server, or reload it with a draft: "
                       "A/B bench, engine Servers.", "bench", True, url)

    try:
        with ThreadPoolExecutor(max_workers=len(ports) or 1) as pool:
            results = list(pool.map(look, ports))
    except RuntimeError:
        # The app quit while its start page was still looking (concurrent.futures refuses new
        # work once the interpreter shuts down): nobody is left to show the answer.
        if not _shutting_down():
            raise
        return []
    return [r for r in results if r is not None]


def _shutting_down() -> bool:
    import concurrent.futures.thread as futures_thread

    return bool(getattr(futures_thread, "_shutdown", False)) or sys.is_finalizing()


def discover(ports: dict[int, str] | None = None) -> list[Discovery]:
    """Everything a start page shows under "found on this machine"."""
    from specdeck.core.gpu import read_once

    findings: list[Discovery] = []
    frame = read_once()
    if frame.has_gpus:
        names = ", ".join(g.name for g in frame.gpus)
        findings.append(Discovery(f"GPUs: {names}", "Plan VRAM for a target and a draft.", "gpus"))
    else:
        findings.append(Discovery(f"{frame.headline}", "Plan VRAM for the GPUs you type in, or "
                                "A/B on the CPU with the demo model.", "gpus", found=False))
    configs = tabby_configs()
    for path in configs:
        findings.append(Discovery(f"TabbyAPI config: {path}", "Set its draft model, or tune "
                                "its drafting.", "draft", True, str(path),
                                tune=tabby_tune_argument(path)))
    if not configs:
        findings.append(Discovery("No TabbyAPI config.yml at the usual places",
                                "Open yours on Draft settings, or create one there.", "draft",
                                found=False))
    for path in llama_swap_configs():
        findings.append(Discovery(f"llama-swap config: {path}",
                                "Check its models' llama-server flags on the llama-swap page, "
                                "or tune a model's drafting.", "swap", True, str(path),
                                tune=str(path)))
    found_servers = servers(ports)
    findings.extend(found_servers)
    if not found_servers:
        ports_text = ", ".join(str(p) for p in (USUAL_PORTS if ports is None else ports))
        findings.append(Discovery(f"No LLM server answers on 127.0.0.1 ports {ports_text}",
                                "Start yours, or A/B the demo model right here.", "bench",
                                found=False))
    return findings
