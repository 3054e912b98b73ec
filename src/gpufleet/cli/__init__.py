"""gpufleet.cli."""
