"""Shared test configuration: modest hypothesis settings so the suite stays fast.

Property tests run 150 examples each with no per-example deadline (the first
example of a test may pay for numba compilation). Set HYPOTHESIS_PROFILE=thorough
for a longer search before a release.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("default", max_examples=150, deadline=None)
settings.register_profile("thorough", max_examples=2_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
