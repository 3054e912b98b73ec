"""gpufleet.agent."""
