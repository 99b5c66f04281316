"""``parbench data export DATASET DIR``: a built-in detection dataset written in the COCO layout
(parbench.contract.coco), so people can look at it and score it with their own tools, and
read it back with ``--dataset coco --data-dir DIR``."""

from __future__ import annotations

import argparse
from pathlib import Path

from parbench.base.files import check_new_folder, new_folder
from parbench.contract.coco import write_split
from parbench.contract.faces import SPLIT_SEEDS, draw_split

EXPORTABLE = ("faces",)


def add_data_parser(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="write a built-in dataset to files")
    actions = data.add_subparsers(dest="action", required=True)
    export = actions.add_parser("export", help="a detection dataset in the COCO layout "
                                "(DIR/<split>/instances.json and DIR/<split>/images/)")
    export.add_argument("dataset", choices=EXPORTABLE)
    export.add_argument("dir", help="a folder that does not exist yet, or an empty one")
    export.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """Every split into a folder beside DIR, moved into place when whole: a stopped export
    leaves no DIR half-written."""
    target = Path(args.dir)
    check_new_folder(target, "export")
    with new_folder(target) as staging:
        for split in SPLIT_SEEDS:
            images, boxes = draw_split(split)
            write_split(staging / split, images, boxes)
            print(f"{split}: {len(images)} images, {sum(map(len, boxes))} faces")
    print(f"wrote {target} (read it back with --dataset coco --data-dir {target})")
    return 0
