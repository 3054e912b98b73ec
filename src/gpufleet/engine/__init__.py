"""The engine: what both drivers share to carry out the cycle's plans.

``engine.book.JobBook`` holds the cluster state and the pending, running and
signalled jobs and applies plans to them; ``engine.ledger.UsageLedger``
charges fairshare usage between cycles. Like ``core/`` the engine is pure:
no I/O, no clock, no threads, no randomness; the drivers (``sim/`` and
``controller/``) bring time and the world.
"""
