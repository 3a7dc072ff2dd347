"""The demo fleet: a simulator of SPEC section 3 events and a loader through the real ingest path."""
