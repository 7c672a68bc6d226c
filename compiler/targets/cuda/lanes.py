"""CUDA target: indices over a thread's lanes, as the data-movement family (movement.py)
and the kernels built on its evaluator (transpose.py, attention.py) track them."""

from __future__ import annotations

from dataclasses import dataclass

BIG = 1 << 40  # the alignment of the constant 0


@dataclass(frozen=True)
class Ix:
    """An index over a thread's lanes: lane k is `name` + k * `step`, or `names[k]`."""

    name: str = ""
    step: int = 0
    align: int = 1
    const: int | None = None
    names: tuple = ()

    def key(self) -> tuple:
        return (self.name, self.step, self.names)
