"""The `cpu` stage over parts of a model's kernels, side by side in forked processes.

After the stage's module passes (`fusion-cpu-constant-args`: weights become kernel arguments
and identical kernels one; `fusion-cpu-plan`: the host function becomes the launch plan),
every pass of the stage acts on each kernel alone, and their time grows with the kernels
(ResNet-18 small, 23 kernels: 0.70 s of a 2.9 s compile here; a part of half the kernels
0.32-0.37 s, of none 0.05 s). Most of those passes are Python (`fusion-cpu-matmul`,
`fusion-cpu-vectorize`, ...): threads would take turns on the interpreter, so each part but
the first is lowered in a forked child, in a context of its own (the parent's context and
its thread pool are never touched there), and comes back as LLVM-dialect bytecode that the
parent moves into its module. The result is the module the serial stage gives, its ops in
another order: `emit_object` then compiles it in parts again, as before.

Any failure on the way (a child's error or crash, a symbol two parts define differently)
runs the whole stage again in this process from the module as it came, so that an error
reads as it always has and nothing is half done. `FUSEC_CPU_STAGE_PARTS=1` (or a machine of
one core, or no `fork`) runs it serially.
"""

from __future__ import annotations

import io
import os
import signal
import tempfile
from collections.abc import Callable

from fusec.passes.bufferized.outline_kernels import KERNEL_PREFIX
from mlir import ir

# A part is worth a child process from this many kernels on (a child's parse of its part
# and the parent's of its result cost ~0.05 s; a kernel's passes ~0.03 s).
MIN_KERNELS_PER_PART = 4
# A kernel's share of a part's time, in its ops: the stage's passes cost about as much per
# kernel as 48 ops do (fitted on the 54 kernels of LLaMA, ResNet-18 and BERT small, each
# lowered alone: 21.8 ms a kernel + 0.45 ms an op; a weak fit, R^2 0.34, but the per-kernel
# part dominates: the kernels took 0.02-0.07 s each, median 0.036).
PASSES_COST_IN_OPS = 48


def balanced_parts(sizes: dict[str, int], n: int) -> list[set[str]]:
    """`sizes`' names in `n` parts balanced by size (largest first, each to the lightest
    part so far); ties broken by name, so the cut is the same on every run."""
    parts: list[set[str]] = [set() for _ in range(n)]
    loads = [0] * n
    for name in sorted(sizes, key=lambda k: (-sizes[k], k)):
        lightest = loads.index(min(loads))
        parts[lightest].add(name)
        loads[lightest] += sizes[name]
    return parts


def part_count(kernels: int, cores: int) -> int:
    """How many parts the stage runs in: one per core, each of MIN_KERNELS_PER_PART kernels
    or more (`FUSEC_CPU_STAGE_PARTS` caps it; 1 is serial)."""
    limit = os.environ.get("FUSEC_CPU_STAGE_PARTS")
    if limit is not None:
        cores = min(cores, max(1, int(limit)))
    if not hasattr(os, "fork"):
        return 1
    return max(1, min(cores, kernels // MIN_KERNELS_PER_PART))


def _symbol(op: ir.Operation) -> str | None:
    return ir.StringAttr(op.attributes["sym_name"]).value if "sym_name" in op.attributes \
        else None


def op_count(op: ir.Operation) -> int:
    """How many ops `op` is, itself and every op nested in it."""
    count = [0]

    def visit(_: ir.Operation) -> ir.WalkResult:
        count[0] += 1
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return count[0]


def _kernels(module: ir.Module) -> dict[str, ir.Operation]:
    """The module's kernel definitions (func.func `fusec_kernel_<n>`), by name; empty when
    any other function is defined (a module that cannot be cut)."""
    kernels = {}
    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func" or not op.regions[0].blocks:
            continue
        name = _symbol(op)
        if name is None or not name.startswith(KERNEL_PREFIX):
            return {}
        kernels[name] = op
    return kernels


def _part_module(module: ir.Module, keep: set[str]) -> bytes:
    """Bytecode of a module holding the kernels `keep` and every other top-level op but
    the other kernels (the globals: a child's part needs those its kernels read; the
    weights among them are not read by any kernel, being arguments, and cost the copy
    only)."""
    part = module.operation.clone()
    for op in list(part.regions[0].blocks[0].operations):
        op = op.operation
        if op.name != "func.func":
            if op.name == "memref.global" and "initial_value" in op.attributes and \
                    _is_weight(op):
                op.erase()
            continue
        name = _symbol(op)
        if name is not None and name.startswith(KERNEL_PREFIX) and name not in keep and \
                op.regions[0].blocks:
            op.erase()
    buffer = io.BytesIO()
    part.write_bytecode(buffer)
    part.erase()
    return buffer.getvalue()


def _is_weight(op: ir.Operation) -> bool:
    """A public constant global: a weight that the host code passes to the kernels
    (`fusion-cpu-constant-args` made it public), which no kernel names."""
    return "constant" in op.attributes and "sym_visibility" not in op.attributes


def run_in_parts(module: ir.Module, module_passes: list[str], part_passes: list[str],
                 serial_passes: list[str], run: Callable[[ir.Module, list[str]], None],
                 cores: int) -> None:
    """Run `module_passes` on `module`, then `part_passes` on parts of its kernels (the
    first here, the others in forked children), all in place. Where it cannot be cut, or if
    anything on the way fails, `serial_passes` (the whole stage) run on the module as it
    came instead."""
    before = module.operation.clone()
    try:
        run(module, module_passes)
        kernels = _kernels(module)
        n = part_count(len(kernels), cores)
        if n <= 1:
            run(module, serial_passes[len(module_passes):])
            before.erase()
            return
        parts = balanced_parts({k: PASSES_COST_IN_OPS + op_count(op)
                                for k, op in kernels.items()}, n)
        if _run_parts(module, parts, kernels, part_passes, run):
            before.erase()
            return
    except Exception:  # noqa: BLE001 - the serial run below raises it again, as it reads
        pass
    _replace_body(module, before)
    run(module, serial_passes)


def _replace_body(module: ir.Module, source: ir.Operation) -> None:
    """`module`'s ops and attributes replaced by `source`'s (a clone taken before)."""
    for op in list(module.body.operations):
        op.operation.erase()
    for op in list(source.regions[0].blocks[0].operations):
        module.body.append(op.operation)  # (moved out of `source`)
    for name in [_name(a) for a in module.operation.attributes]:
        del module.operation.attributes[name]
    for name in [_name(a) for a in source.attributes]:
        module.operation.attributes[name] = source.attributes[name]
    source.erase()


def _attribute_texts(module: ir.Module) -> dict[str, str]:
    """The module op's attributes, each name with its value as text."""
    attributes = module.operation.attributes
    return {_name(a): str(attributes[_name(a)]) for a in attributes}


def _name(attribute: object) -> str:
    """An attribute's name as iterating an op's attributes gives it (a name or a
    NamedAttribute, by the bindings' version)."""
    return attribute if isinstance(attribute, str) else attribute.name


def _run_parts(module: ir.Module, parts: list[set[str]], kernels: dict[str, ir.Operation],
               kernel_passes: list[str], run: Callable[[ir.Module, list[str]], None]) -> bool:
    """Parts 1.. in children, part 0 here; the children's results moved into `module`.
    False when a child failed (the caller redoes the stage)."""
    children: list[tuple[int, str]] = []
    try:
        for keep in parts[1:]:
            data = _part_module(module, keep)
            fd, path = tempfile.mkstemp(prefix="fusec-cpu-part-", suffix=".mlirbc")
            os.close(fd)
            children.append((_fork_child(data, path, kernel_passes, run), path))
        for name in set().union(*parts[1:]):
            kernels[name].erase()
        threaded = module.context.get_num_threads() > 1
        module.context.enable_multithreading(False)  # the children have the other cores
        try:
            run(module, kernel_passes)
        finally:
            module.context.enable_multithreading(threaded)
        results = []
        while children:
            pid, path = children[0]
            _, status = os.waitpid(pid, 0)
            with open(path, "rb") as f:
                data = f.read()
            os.unlink(path)
            children.pop(0)
            if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
                return False
            results.append(data)
        return all(_merge(module, ir.Module.parse(data, context=module.context))
                   for data in results)
    finally:  # (children left here: this part failed or was interrupted; theirs is moot)
        for pid, path in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            if os.path.exists(path):
                os.unlink(path)


def _fork_child(data: bytes, path: str, kernel_passes: list[str],
                run: Callable[[ir.Module, list[str]], None]) -> int:
    """Fork a child that lowers the part `data` in a fresh context and writes the result's
    bytecode to `path`; its pid. (`fork_frozen`: the parent's objects, its context among
    them, are out of the child's garbage collector.)"""
    from fusec.compiler.isolate import fork_frozen

    pid = fork_frozen()
    if pid != 0:
        return pid
    status = 1
    try:
        from fusec.dialects import make_context

        context = make_context()
        context.enable_multithreading(False)  # one core per part
        with context:
            part = ir.Module.parse(data)
            run(part, kernel_passes)
            with open(path, "wb") as f:
                part.operation.write_bytecode(f)
        status = 0
    except BaseException:  # noqa: BLE001 - the parent redoes the stage and reports it
        pass
    os._exit(status)


def _text(op: ir.Operation) -> str:
    """An op's generic form (the custom form falls back to it where a verifier fails, and
    a child's op, parsed apart, may verify where the parent's does not or the reverse)."""
    return op.get_asm(print_generic_op_form=True, assume_verified=True, use_local_scope=True)


def _merge(module: ir.Module, part: ir.Module) -> bool:
    """Move `part`'s top-level ops into `module`: a symbol `module` has already (a global
    both parts read, a library function's declaration) is left out where it is the same
    op, and the merge refused (False) where it is not, or where the part's module
    attributes differ from `module`'s (a pass that wrote one from its part's kernels)."""
    if _attribute_texts(module) != _attribute_texts(part):
        return False
    existing = {}
    for op in module.body.operations:
        name = _symbol(op.operation)
        if name is not None:
            existing[name] = op.operation
    for op in list(part.body.operations):
        op = op.operation
        name = _symbol(op)
        if name is not None and name in existing:
            if _text(existing[name]) != _text(op):
                return False
            continue
        module.body.append(op)  # (moved out of `part`)
    return True
