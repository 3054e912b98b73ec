from store.databases import db

__all__ = ["db"]
