"""The `linalg` stage's passes: what torch-mlir gives, normalised for the planner (checks, guards, state, scalars)."""
