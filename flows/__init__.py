"""Prefect flows: they orchestrate the DVC stages; the library (`acesql`) knows nothing of them."""
