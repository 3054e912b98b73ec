"""gpufleet.core."""
