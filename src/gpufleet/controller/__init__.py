"""gpufleet.controller."""
