"""Placement plugins: scorers and GPU pickers behind ``core.placement``'s extension points."""
