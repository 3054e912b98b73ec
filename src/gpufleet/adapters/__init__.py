"""gpufleet.adapters."""
