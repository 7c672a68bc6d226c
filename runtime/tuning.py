"""The tuning cache: tiles measured on the device (`fusec --tune`), keyed by kernel and device.

A kernel's key names what its time depends on and nothing else (for our GEMM: M, N, K, the
element types, B's layout and the fused epilogue's steps; for attention: batch x heads, the
query and key lengths, the head dim, the mask; for the CPU's matmul kernels: the shape, the
prologue and the threads), so two models with the same kernel share the answer. The passes
that choose tiles read it (`--fusion-gpu-choose-tiles`, `--fusion-tile`); `fusec --tune`
(compiler/tuner.py) writes it. One JSON file:

    {"version": 1,
     "entries": {"nvidia-h200|tc_gemm m=8192 n=4096 k=4096 ...": {
         "tile": [128, 128, 64, 4],           the winner, what a compile uses
         "measured_us": 211.3,                its time
         "model_tile": [128, 128, 64, 3],     the cost model's choice
         "model_us": 228.9,                   its measured time
         "predicted_us": 205.0,               the cost model's prediction for its choice
         "candidates": [[[128, 128, 64, 3], 228.9], ...]}}}

`$FUSEC_TUNING_CACHE` names the file (default: `tuning.json` in the compile cache's
folder, `$FUSEC_CACHE_DIR` or ~/.cache/fusec); `off` uses none. Only `tile` changes code,
so a compile that reads an entry is the same, byte for byte, whoever measured it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

VERSION = 1


def default_path() -> str:
    """The cache file a compile reads when the options name none ("" : this; "off": none)."""
    named = os.environ.get("FUSEC_TUNING_CACHE")
    if named:
        return named
    from fusec.runtime.specs import cache_dir

    return os.path.join(cache_dir(), "tuning.json")


def resolve(path: str) -> str:
    """The options' `tuning` field as a file path ("" -> default_path(); "off" stays)."""
    return path or default_path()


def as_pass_option(path: str) -> str:
    """The options' `tuning` field as a pass option: the cache's path, which must have no
    character the pipeline syntax uses (a ValueError says so)."""
    path = resolve(path)
    if any(c in path for c in " ,{}()="):
        raise ValueError(f"the tuning cache's path '{path}' has a space, comma, brace, "
                         f"parenthesis or '=' (name another with FUSEC_TUNING_CACHE)")
    return path


def load(path: str) -> dict[str, Any]:
    """The entries of the cache at `path` ({} when there is none, or `path` is "off"). A file
    that is not a tuning cache is an error naming it, never silently ignored."""
    if path == "off" or not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a fusec tuning cache ({e})") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or \
            not isinstance(data.get("entries"), dict):
        raise ValueError(f"{path}: not a fusec tuning cache of version {VERSION}")
    return data["entries"]


def entry_key(device: str, kernel_key: str) -> str:
    return f"{device}|{kernel_key}"


def lookup(path: str, device: str, kernel_key: str) -> dict[str, Any] | None:
    return load(path).get(entry_key(device, kernel_key))


def store(path: str, entries: dict[str, dict[str, Any]]) -> None:
    """Merge `entries` (full keys) into the cache at `path`, written whole through a
    temporary file and a rename, so that a compile reading it never sees half of it."""
    if path == "off":
        raise ValueError("the tuning cache is off (FUSEC_TUNING_CACHE=off): nowhere to record")
    current = dict(load(path))
    current.update(entries)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".json", dir=folder)
    with os.fdopen(fd, "w") as f:
        json.dump({"version": VERSION, "entries": dict(sorted(current.items()))}, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def fingerprint(path: str) -> str:
    """What of the cache a compile depends on (the tiles only), for the artifact cache key."""
    tiles = {k: v.get("tile") for k, v in load(path).items()}
    return hashlib.sha256(json.dumps(tiles, sort_keys=True).encode()).hexdigest()[:16]

