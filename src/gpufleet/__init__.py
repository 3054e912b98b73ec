"""gpufleet: a GPU cluster scheduler."""
