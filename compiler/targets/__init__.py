"""fusec's targets: one package per target, each owning its pass lists and code generation."""
