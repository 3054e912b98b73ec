"""gpufleet.sim."""
