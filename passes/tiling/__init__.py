"""The `tiled` stage's passes: reshapes moved to group edges, tile-and-fuse (`--fusion-tile`), placement, capacity, the GPU's kernel formation, the index checks' reports."""
