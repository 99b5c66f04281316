"""``parbench convert CHECKPOINT --out DIR``: a framework's own checkpoint as a portable one,
which every backend's ``--resume-from`` reads (parbench.launch.convert)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from parbench.launch.convert import ConvertFailed, convert
from parbench.launch.options import OPTIONS
from parbench.run.checkpoint import MANIFEST


def add_convert_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("convert", help="a checkpoint of any framework as a portable one "
                            "(safetensors, canonical names and layouts) that every backend "
                            "resumes from")
    parser.add_argument("checkpoint", help="a checkpoint's step-N folder, or a --checkpoint-dir "
                        "for its latest")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="a folder that does not exist yet, or an empty one")
    OPTIONS["timeout"].add_to(parser)
    parser.set_defaults(func=cmd_convert)


def cmd_convert(args: argparse.Namespace) -> int:
    out = Path(args.out)
    timeout = OPTIONS["timeout"].default if args.timeout is None else args.timeout
    try:
        folder = convert(Path(args.checkpoint), out, timeout)
    except ConvertFailed as err:
        print(f"parbench: convert failed: {err}", file=sys.stderr)
        return 1
    manifest = json.loads((out / MANIFEST).read_text())
    size = sum(file["bytes"] for file in manifest["files"].values())
    print(f"wrote {out}: step {manifest['step']} of {manifest['total_steps']} of "
          f"{manifest['backend']}'s run {manifest['run_id'][:8]} ({folder}), "
          f"{len(manifest['tensors'])} tensors and their optimizer state, {size / 2**20:.2f} "
          f"MiB; any backend goes on from it with --resume-from {out}")
    return 0
