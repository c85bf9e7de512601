#!/usr/bin/env python3
"""Checks that every #include between rooms of src/ and include/ points down the floor table.

A room is the first folder under src/ (or `gemmaserve`, the public headers), or a deeper folder
the table names (server/http). A file may include anything of its own room; another room only on
a lower floor. So no import runs back up and the
rooms have no cycle. docs/ARCHITECTURE.md shows the same table.
Usage: check_include_layers.py REPO_ROOT
"""
import pathlib
import re
import sys

# Lower floors are included by higher ones, never the other way round.
FLOORS = {
    "core": 0,
    "io": 1,
    "kernels": 1,
    "parallel": 1,
    "tokenizer": 2,
    "checkpoint": 2,
    "gemmaserve": 2,
    "model": 3,
    "engine": 4,
    "server": 5,
    # The server's rooms: pieces every API surface shares, the HTTP layer, the surfaces.
    "server/shared": 5.0,
    "server/http": 5.1,
    "server/openai": 5.2,
    "server/chat_page": 5.2,
    "cli": 6,
    "bench": 7,
    "main": 8,  # main.cpp, the entry point: dispatches every command
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def room_of(parts) -> str:
    """The deepest room of the table holding a path given as folder parts below src/."""
    for depth in range(len(parts), 0, -1):
        name = "/".join(parts[:depth])
        if name in FLOORS:
            return name
    return parts[0] if parts else ""


def room_of_file(root: pathlib.Path, path: pathlib.Path) -> str:
    rel = path.relative_to(root)
    if rel.parts[0] == "include":
        return rel.parts[1]
    return room_of(rel.parts[1:-1])


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    files = [p for d in ("src", "include") for p in (root / d).rglob("*")
             if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    problems = []
    for path in sorted(files):
        room = room_of_file(root, path)
        if room not in FLOORS:
            problems.append(f"{path.relative_to(root)}: room '{room}' has no floor in "
                            f"tools/check_include_layers.py")
            continue
        for target in INCLUDE.findall(path.read_text(errors="replace")):
            parts = target.split("/")
            if len(parts) < 2 or parts[0] not in FLOORS:
                continue  # a same-folder, system or generated header
            other = room_of(parts[:-1])
            if other == room:
                continue
            if FLOORS[other] >= FLOORS[room]:
                problems.append(f"{path.relative_to(root)}: includes {target}, but {other} "
                                f"(floor {FLOORS[other]}) is not below {room} "
                                f"(floor {FLOORS[room]})")
    for p in problems:
        print(p)
    print(f"{len(files)} files checked, {len(problems)} include(s) against the floors")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
