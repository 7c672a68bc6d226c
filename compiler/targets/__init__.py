"""fusec's targets: one package per target, each owning its pass lists and code generation."""


def tuning_pass_option(path: str, flag: str) -> str:
    """A target's `tuning` option (a tuning cache's path, "" for the default, or "off") as
    the pass option its tiling passes read; a path the pipeline syntax cannot carry is an
    error naming `flag`."""
    from fusec.compiler.diagnostics import FusecError
    from fusec.runtime import tuning

    try:
        return tuning.as_pass_option(path)
    except ValueError as e:
        raise FusecError(f"{flag}: {e}") from None
