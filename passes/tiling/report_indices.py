"""--fusion-report-indices: insert the index-check reports `--fusion-guard-indices{defer}`
left out, once the tiles are formed.

`--fusion-guard-indices{defer=true}` makes every read at an index computed from data safe
(the index clamped to 0 when out of range) and tags the read with `fusion.index_check`,
without the report: the report is a call (`fusec_index_error`, an effect), and a payload
with an effect can be neither erased when dead nor merged with its copies, so tile-and-fuse
would leave each producer that reads a table (an embedding feeding a LayerNorm) computed
whole beside its tile loop. After tiling, this pass puts the report before each tagged read,
in the tile's own copy of the payload, and drops the tag.

Before:
    %safe = arith.select %ok, %i, %c0 : index
    %v = tensor.extract %table[%safe] {fusion.guarded, fusion.index_check = array<i64: 1, 0>}
After:
    %bad = arith.xori %ok, %true : i1
    scf.if %bad { func.call @fusec_index_error(%c0_i64, %i_i64) : (i64, i64) -> () }
    %v = tensor.extract %table[%safe] {fusion.guarded}

A read without the tag is left alone; the pass may run again (nothing is tagged twice).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.passes.linalg.guard_indices import insert_deferred_reports
from fusec.passes.registry import Pass, register
from mlir import ir


@register
@dataclass
class ReportIndicesPass(Pass):
    """Insert the reports of the index checks that --fusion-guard-indices deferred."""

    ARGUMENT = "fusion-report-indices"

    def run(self, module: ir.Operation) -> None:
        insert_deferred_reports(module)
