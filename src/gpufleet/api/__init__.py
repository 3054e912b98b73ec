"""gpufleet.api."""
