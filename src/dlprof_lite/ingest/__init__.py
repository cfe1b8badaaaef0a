"""Stage 3, ingest: read an nsys SQLite export into one correlated :class:`Profile`."""
