"""How long it takes: pure functions over ops and hardware specs. No I/O, no torch."""
