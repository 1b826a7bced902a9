"""`specdeck servers ...`: what is listening at a URL; whether llama-server flags still work."""

from __future__ import annotations

import argparse
import os
import shlex

from specdeck.core.cli import EXIT_OK
from specdeck.core.cli.output import emit_json
from specdeck.core.servers.key_names import add_api_key_option


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "servers", help="probe LLM servers; check llama-server flags against your binary",
        description="Identify a running LLM server (kind, loaded model and draft, what it "
        "reports) or check a llama-server command line against the binary's own --help.")
    commands = parser.add_subparsers(dest="servers_command", metavar="ACTION", required=True)

    probe = commands.add_parser("probe", help="what kind of server, which model and draft, "
                                "which metrics it reports")
    probe.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8080")
    probe.add_argument("--kind", help="skip detection (llama-server, tabbyapi, vllm, ...)")
    add_api_key_option(probe, tabby=False)
    probe.add_argument("--json", action="store_true")
    probe.set_defaults(handler=cmd_probe)

    flags = commands.add_parser(
        "check-flags", help="would this llama-server accept these flags (removed ones named)?")
    flags.add_argument("--llama-server", required=True, metavar="BINARY")
    flags.add_argument("flags", help='the flags, quoted: "-md d.gguf --draft-max 8"')
    flags.add_argument("--json", action="store_true")
    flags.set_defaults(handler=cmd_check_flags)


def cmd_probe(args: argparse.Namespace) -> int:
    from specdeck.core.servers.key_names import DEFAULT_KEY_ENV
    from specdeck.core.servers.kinds import parse_kind
    from specdeck.core.servers.probe import probe, server_drafting

    key = os.environ.get(args.api_key_env or DEFAULT_KEY_ENV) or None
    info = probe(args.url, key, parse_kind(args.kind) if args.kind else None)
    drafting = server_drafting(info, info.model)
    if args.json:
        emit_json({**info.to_json(), "drafting": drafting.to_json()})
        return EXIT_OK
    data = info.to_json()
    print(f"{data['url']}: {data['title']} (detected by {data['detected_by']})")
    for label, value in (("model", info.model), ("draft", info.draft),
                         ("drafting", drafting.line),
                         ("version", info.version),
                         ("acceptance", info.acceptance),
                         ("metrics", "speculative-decoding metrics at /metrics" if info.metrics
                          else "none"),
                         ("prompt cache", "turned off per request" if data["cache_off"]
                          else "on, cannot be turned off by a client")):
        if value:
            print(f"  {label}: {value}")
    if len(info.models) > 1:
        print(f"  models: {', '.join(info.models)}")
    for note in info.notes:
        print(f"  note: {note}")
    return EXIT_OK


def cmd_check_flags(args: argparse.Namespace) -> int:
    from specdeck.core.cli import EXIT_NEGATIVE
    from specdeck.core.errors import InvalidInputError, NotFoundError
    from specdeck.core.servers.llama_server import binary_help, check_args

    info = binary_help(args.llama_server)
    if info is None:
        raise NotFoundError(f"{args.llama_server} did not answer --help like a llama-server.",
                            "Give the path of your llama-server binary.")
    from specdeck.core.servers.llama_server import LaunchProfile
    from specdeck.core.servers.probe import launched_drafting

    flags = tuple(shlex.split(args.flags))
    try:
        check_args(flags, info)
    except InvalidInputError as exc:
        if args.json:
            emit_json({"ok": False, "problems": exc.what})
        else:
            print(exc.what)
        return EXIT_NEGATIVE
    drafting = launched_drafting(LaunchProfile(args.llama_server, "", flags))
    from specdeck.core.servers.llama_server import unlisted_flags, unlisted_note

    hedge = unlisted_note(flags, info)
    if args.json:
        emit_json({"ok": True, "drafting": drafting.to_json(),
                   "not_in_help": unlisted_flags(flags, info)})
    else:
        print(f"This llama-server accepts these flags; {drafting.line}."
              + (f" Note: {hedge}." if hedge else ""))
    return EXIT_OK
