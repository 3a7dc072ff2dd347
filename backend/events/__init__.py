"""Raw-event storage, owned by the backend: ingest writes through it, the engine reads through it."""
