"""Service layer: run specs → engine runs, durable records and draw files, streams, settings, metrics."""
